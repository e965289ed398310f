from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from ragjudge.errors import InputError
from ragjudge.evaluate import compare, evaluate
from ragjudge.report import (
    FORMATS,
    Report,
    format_value,
    render_reports,
    render_table,
    render_trec,
)

HEADERS = ["run", "map", "ndcg@10", "n"]
ROWS = [["bm25", 0.123456, 0.5, 3], ["dense_x|y&z", None, 0.25, 10]]


# ----------------------------------------------------------------------------- render_table
def test_plain_table_aligns_columns() -> None:
    text = render_table(HEADERS, ROWS, "table")
    lines = text.splitlines()
    assert lines[0].split() == HEADERS
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].split() == ["bm25", "0.1235", "0.5000", "3"]
    assert lines[3].split() == ["dense_x|y&z", "-", "0.2500", "10"]
    # Numbers are right-aligned: every numeric column ends at the same offset.
    assert lines[2].index("0.5000") + 6 == lines[3].index("0.2500") + 6
    assert len(lines[2].rstrip()) == len(lines[3].rstrip())
    assert render_table(HEADERS, ROWS, "table", title="T").startswith("T\n")
    assert "0.12" in render_table(HEADERS, ROWS, "table", digits=2)


def test_json_keeps_full_precision_and_nulls() -> None:
    data = json.loads(render_table(HEADERS, ROWS, "json"))
    assert data == [
        {"run": "bm25", "map": 0.123456, "ndcg@10": 0.5, "n": 3},
        {"run": "dense_x|y&z", "map": None, "ndcg@10": 0.25, "n": 10},
    ]
    # numpy scalars and non-finite floats never leak NaN into JSON.
    data = json.loads(render_table(["a", "b"], [[np.float64(0.5), float("nan")]], "json"))
    assert data == [{"a": 0.5, "b": None}]


def test_csv_round_trips() -> None:
    rows = list(csv.reader(io.StringIO(render_table(HEADERS, ROWS, "csv"))))
    assert rows[0] == HEADERS
    assert rows[1] == ["bm25", "0.123456", "0.5", "3"]
    assert rows[2] == ["dense_x|y&z", "", "0.25", "10"]


def test_markdown() -> None:
    lines = render_table(HEADERS, ROWS, "markdown").splitlines()
    assert lines[0] == "| run | map | ndcg@10 | n |"
    assert lines[1] == "|:---|---:|---:|---:|"
    assert lines[3] == "| dense_x\\|y&z | - | 0.2500 | 10 |"


def test_latex_escapes_specials() -> None:
    text = render_table(HEADERS, ROWS, "latex")
    assert text.startswith("\\begin{tabular}{lrrr}\n\\toprule\n")
    assert "dense\\_x|y\\&z & - & 0.2500 & 10 \\\\" in text
    assert text.rstrip().endswith("\\bottomrule\n\\end{tabular}")
    assert render_table(["a"], [["100%_#$"]], "latex").count("\\%\\_\\#\\$") == 1


def test_html_escapes_and_aligns() -> None:
    text = render_table(HEADERS, ROWS, "html", title="<b>")
    assert text.startswith('<table class="ragjudge">')
    assert "<caption>&lt;b&gt;</caption>" in text
    assert "dense_x|y&amp;z" in text
    assert '<td style="text-align:right">0.1235</td>' in text


def test_render_table_errors() -> None:
    with pytest.raises(InputError, match="unknown format"):
        render_table(HEADERS, ROWS, "xml")
    with pytest.raises(ValueError):
        render_table(["a", "b"], [[1]], "table")


def test_every_format_renders_an_empty_table() -> None:
    for fmt in FORMATS:
        assert render_table(["a"], [], fmt).endswith("\n")


def test_format_value() -> None:
    assert format_value(None) == "-"
    assert format_value(float("inf")) == "-"
    assert format_value(0.5, 2) == "0.50"
    assert format_value(np.float32(0.25)) == "0.2500"
    assert format_value(True) == "yes"
    assert format_value(7) == "7"


# ----------------------------------------------------------------------------- trec
def test_render_trec_layout() -> None:
    text = render_trec(
        {"map": 0.1785, "num_rel_ret": 131.0},
        {"301": {"map": 0.0324, "num_rel_ret": 20.0}},
        runid="STANDARD",
        num_q=3,
        integer=["num_rel_ret"],
    )
    assert text.splitlines() == [
        "map                   \t301\t0.0324",
        "num_rel_ret           \t301\t20",
        "runid                 \tall\tSTANDARD",
        "num_q                 \tall\t3",
        "map                   \tall\t0.1785",
        "num_rel_ret           \tall\t131",
    ]
    assert render_trec({}) == ""


# ----------------------------------------------------------------------------- Report
QRELS = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 1}, "q10": {"d4": 1}}
RUN = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d9": 1.0, "d3": 0.5}, "q10": {"d4": 1.0}}


def test_report_renders_every_format() -> None:
    r = evaluate(QRELS, RUN, ["map", "p@1"])
    for fmt in (*FORMATS, "trec"):
        text = r.render(fmt)
        assert text.endswith("\n") and "p@1" in text
    csv_rows = list(csv.reader(io.StringIO(r.render("csv", per_query=True))))
    assert csv_rows[0] == ["run", "qid", "map", "p@1"]
    # qids in trec_eval (byte) order, then the mean row.
    assert [row[1] for row in csv_rows[1:]] == ["q1", "q10", "q2", "all"]
    trec = r.render("trec", per_query=True).splitlines()
    assert trec[0].startswith("map") and trec[0].split("\t")[1:] == ["q1", "1.0000"]
    assert trec[-1].split("\t")[1:] == ["all", f"{r.mean['p@1']:.4f}"]
    assert json.loads(r.render("json"))["run"] == "run"


def test_report_repr_str_html() -> None:
    r = evaluate(QRELS, {"q1": RUN["q1"], "zz": {"d": 1.0}}, ["map"], name="sys")
    s = str(r)
    assert s.splitlines()[0].split() == ["run", "map"]
    assert "2 qrels queries missing from the run (scored as empty rankings)" in s
    assert "1 run-only queries ignored" in s
    assert repr(r).startswith("<Report run='sys', 3 queries>")
    html = r._repr_html_()
    assert "<table" in html and "sys" in html and "missing" in html


def test_report_to_dataframe() -> None:
    pd = pytest.importorskip("pandas")
    r = evaluate(QRELS, RUN, ["map", "p@1"], name="sys")
    df = r.to_dataframe()
    assert list(df.columns) == ["map", "p@1"] and list(df.index) == ["sys"]
    assert df.loc["sys", "map"] == r.mean["map"]
    pq = r.to_dataframe(per_query=True)
    assert list(pq.index) == ["q1", "q10", "q2"] and pq.index.name == "qid"
    assert isinstance(pq, pd.DataFrame)


def test_report_undetermined_values_are_left_out_of_the_mean() -> None:
    r = Report("x", ["a", "b", "c"], {"m": np.array([1.0, np.nan, 0.0])})
    assert r.mean == {"m": 0.5}
    assert r.undetermined == {"m": 1} and r.meta["undetermined"] == {"m": 1}
    assert r.per_query["b"] == {"m": None}
    assert json.loads(r.to_json())["per_query"]["b"]["m"] is None
    assert "undetermined: m 1" in str(r)
    empty = Report("x", ["a"], {"m": np.array([np.nan])})
    assert empty.mean == {"m": None}
    with pytest.raises(ValueError):
        Report("x", ["a"], {"m": np.array([1.0, 2.0])})


def test_report_values_are_copies() -> None:
    v = np.array([1.0, 0.0])
    r = Report("x", ["a", "b"], {"m": v})
    v[0] = 5.0
    assert r.mean["m"] == 0.5
    assert not r.values["m"].flags.writeable


def test_render_reports_several_runs() -> None:
    a = evaluate(QRELS, RUN, ["map"], name="a")
    b = evaluate(QRELS, RUN, ["map"], name="b")
    lines = render_reports([a, b], "table").splitlines()
    assert [ln.split()[0] for ln in lines[2:]] == ["a", "b"]
    assert [d["run"] for d in json.loads(render_reports([a, b], "json"))] == ["a", "b"]
    trec = render_reports([a, b], "trec")
    assert trec.count("runid") == 2
    with pytest.raises(ValueError):
        render_reports([a, evaluate(QRELS, RUN, ["mrr"])], "table")


# ----------------------------------------------------------------------------- CompareReport
def test_compare_report_outputs() -> None:
    other = {q: dict(reversed(list(d.items()))) for q, d in RUN.items()}
    cr = compare(QRELS, {"a": RUN, "b": other}, ["map", "mrr"], n_resamples=200)
    headers, rows = cr.table()
    # The baseline-mode columns are pinned: later columns (d_z, win/tie/loss) were only appended.
    assert headers == ["run", "metric", "mean", "ci_low", "ci_high", "delta", "delta_low",
                       "delta_high", "p", "p_holm", "sig", "d_z", "wins", "ties", "losses"]
    assert len(rows) == 4
    assert rows[0][headers.index("sig")] == "baseline"
    assert rows[0][-4:] == [None, None, None, None]
    assert sum(rows[2][-3:]) == len(QRELS)
    for fmt in FORMATS:
        text = cr.render(fmt)
        assert "mrr" in text
    data = json.loads(cr.render("json"))
    assert len(data["comparisons"]) == 2
    assert all(not math.isnan(float(c["delta"])) for c in data["comparisons"])
    assert cr.render("trec").count("runid") == 2
    assert "Holm" in str(cr) and "baseline a" in str(cr)
    assert "<table" in cr._repr_html_()
    assert repr(cr).startswith("<CompareReport runs=['a', 'b']")
    assert cr.mean["b"]["map"] == cr.reports["b"].mean["map"]
    with pytest.raises(KeyError):
        cr.comparison("a", "map")


def test_compare_report_dataframe() -> None:
    pytest.importorskip("pandas")
    cr = compare(QRELS, {"a": RUN, "b": RUN}, ["map"], n_resamples=100)
    df = cr.to_dataframe()
    assert list(df["run"]) == ["a", "b"] and df.loc[1, "p"] == 1.0


def test_machine_formats_round_trip_any_text() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.given(
        st.lists(st.tuples(st.text(max_size=12), st.floats(allow_nan=False, allow_infinity=False)),
                 max_size=5)
    )
    @hypothesis.settings(max_examples=100, deadline=None, derandomize=True)
    def check(rows: list[tuple[str, float]]) -> None:
        table = [[name, value] for name, value in rows]
        assert json.loads(render_table(["name", "v"], table, "json")) == [
            {"name": n, "v": v} for n, v in rows
        ]
        back = list(csv.reader(io.StringIO(render_table(["name", "v"], table, "csv"), newline="")))
        assert [(r[0], float(r[1])) for r in back[1:]] == [(n, v) for n, v in rows]
        html = render_table(["name", "v"], table, "html")
        assert "<script" not in html.replace("&lt;script", "")

    check()


def test_compare_to_latex_paper_style() -> None:
    from ragjudge import Qrels, Run, compare

    qrels = Qrels.from_dict({f"q{i}": {"d1": 1} for i in range(30)})
    base = Run.from_dict({f"q{i}": {"d1": 2.0, "d2": 1.0} for i in range(30)}, name="base_line")
    better = Run.from_dict({f"q{i}": {"d1": 2.0} for i in range(30)}, name="better")
    worse = Run.from_dict({f"q{i}": {"d2": 2.0, "d1": 1.0} for i in range(30)}, name="worse")
    cr = compare(qrels, [base, better, worse], ["mrr", "precision@1"], n_resamples=2000)
    tex = cr.to_latex(caption="Results", label="tab:res")
    lines = tex.splitlines()
    assert lines[0] == "\\begin{table}[t]" and "\\toprule" in lines and "\\bottomrule" in lines
    assert "\\caption{Results}" in lines and "\\label{tab:res}" in lines
    assert "Run & mrr & precision@1 \\\\" in lines
    assert "base\\_line (baseline) & \\textbf{1.000} & \\textbf{1.000} \\\\" in lines
    assert "better & \\textbf{1.000} & \\textbf{1.000} \\\\" in lines  # equal to baseline: no mark
    assert "worse & 0.500$^{\\dagger\\downarrow}$ & 0.000$^{\\dagger\\downarrow}$ \\\\" in lines
    assert cr.render("latex") == cr.to_latex(digits=4)
    with pytest.raises(InputError, match="not in the report"):
        cr.to_latex(["map"])


def test_compare_per_query_csv_is_one_table() -> None:
    import csv as _csv
    import io as _io

    from ragjudge import Qrels, Run, compare

    qrels = Qrels.from_dict({"q1": {"d1": 1}, "q2": {"d2": 1}})
    a = Run.from_dict({"q1": {"d1": 1.0}, "q2": {"d1": 1.0}}, name="a")
    b = Run.from_dict({"q1": {"d2": 1.0}, "q2": {"d2": 1.0}}, name="b")
    text = compare(qrels, [a, b], ["mrr"], n_resamples=100).render("csv", per_query=True)
    rows = list(_csv.reader(_io.StringIO(text)))
    assert rows[0] == ["run", "qid", "mrr"]
    assert all(len(r) == 3 for r in rows) and len(rows) == 1 + 2 * 3
    assert ["a", "all", "0.5"] in rows and ["b", "q2", "1.0"] in rows


# ----------------------------------------------------------------------------- tables as values
def test_pairs_and_means_tables_are_table_values() -> None:
    from ragjudge.evaluate import compare
    from ragjudge.render import Table

    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"a": 1}}
    runs = {"x": {"q1": {"a": 1.0}, "q2": {"a": 1.0}, "q3": {"a": 1.0}},
            "y": {"q1": {"b": 1.0}, "q2": {"b": 1.0}, "q3": {"b": 1.0}},
            "z": {"q1": {"a": 1.0}, "q2": {"b": 1.0}, "q3": {"c": 1.0}}}
    cr = compare(qrels, runs, ["P_1"], all_pairs=True, n_resamples=200)
    pairs = cr.pairs_table()
    assert isinstance(pairs, Table) and len(pairs.rows) == 3
    assert pairs.records()[0]["metric"] == "P_1" and set(pairs.records()[0]) == set(pairs.headers)
    headers, rows = pairs  # still unpacks as the pair it replaced
    assert headers == pairs.headers and rows == pairs.rows and pairs == (headers, rows)
    assert "vs" in str(pairs) and pairs.render("csv").startswith("metric,run,vs,")
    assert isinstance(cr.means_table(), Table) and cr.means_table().headers[:2] == ["run", "metric"]


def test_a_wide_table_is_a_metric_per_line() -> None:
    from ragjudge.evaluate import evaluate

    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"b": 2}}
    run = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"b": 1.0, "c": 0.5}}
    r = evaluate(qrels, run, ["all_trec"])
    text = r.render("table")
    assert max(map(len, text.splitlines())) < 80
    assert text.splitlines()[0].split() == ["metric", "run"] and len(text.splitlines()) > 50
    pq = r.render("table", per_query=True)
    assert max(map(len, pq.splitlines())) < 80 and pq.splitlines()[0].split() == ["run", "qid", "metric", "value"]
    narrow = evaluate(qrels, run, ["map", "P_1"]).render("table")
    assert narrow.splitlines()[0].split() == ["run", "map", "P_1"]


def test_json_through_orjson_or_the_standard_library_is_the_same_data(monkeypatch) -> None:
    import sys

    from ragjudge.evaluate import evaluate

    orjson = pytest.importorskip("orjson")
    r = evaluate({"q1": {"a": 1}, "q2": {"b": 1}}, {"q1": {"a": 1.0}, "q2": {"c": 1.0}},
                 ["map", "P_1", "num_ret"])
    used = []
    real = orjson.dumps
    monkeypatch.setattr(orjson, "dumps", lambda *a, **k: used.append(1) or real(*a, **k))
    fast = r.render("json")
    assert used  # the encoder made for large documents wrote it
    monkeypatch.setitem(sys.modules, "orjson", None)  # as if not installed
    slow = r.render("json")
    assert json.loads(fast) == json.loads(slow) and fast.endswith("\n")
