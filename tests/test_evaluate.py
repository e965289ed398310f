from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragjudge.data import Qrels, Run
from ragjudge.errors import InputError, MetricError
from ragjudge.evaluate import DEFAULT_METRICS, compare, evaluate, evaluate_lists
from ragjudge.measures import parse_measure
from ragjudge.report import CompareReport, Report

CONFORMANCE = Path(__file__).resolve().parents[1].parent / "shared" / "conformance" / "trec_eval"

# q3 is judged but missing from the run; q9 is only in the run.
QRELS = {"q1": {"d1": 1, "d2": 0, "d3": 2}, "q2": {"d4": 1}, "q3": {"d5": 1}}
RUN = {"q1": {"d1": 3.0, "d2": 2.0, "d9": 1.0}, "q2": {"d8": 1.0, "d4": 0.5}, "q9": {"d1": 1.0}}


def _conformance() -> Path:
    if not (CONFORMANCE / "qrels.test").exists():
        pytest.skip(f"trec_eval conformance data not found at {CONFORMANCE}")
    return CONFORMANCE


def _trec_all(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        name, qid, value = line.split("\t")
        if qid == "all":
            out[name.strip()] = value
    return out


# ----------------------------------------------------------------------------- semantics
def test_missing_queries_score_zero_by_default() -> None:
    r = evaluate(QRELS, RUN, ["P_1", "mrr"])
    assert r.qids == ["q1", "q2", "q3"]
    assert r.per_query["q1"] == {"P_1": 1.0, "mrr": 1.0}
    assert r.per_query["q2"] == {"P_1": 0.0, "mrr": 0.5}
    assert r.per_query["q3"] == {"P_1": 0.0, "mrr": 0.0}
    assert r.mean == pytest.approx({"P_1": 1 / 3, "mrr": 0.5})
    m = r.meta
    assert (m["num_q"], m["num_missing"], m["num_ignored"]) == (3, 1, 1)
    assert m["missing_queries"] == ["q3"] and m["ignored_queries"] == ["q9"]
    assert m["skip_missing"] is False and m["rel"] is None


def test_skip_missing_averages_over_run_queries() -> None:
    r = evaluate(QRELS, RUN, ["P_1", "mrr"], skip_missing=True)
    assert r.qids == ["q1", "q2"]
    assert r.mean == pytest.approx({"P_1": 0.5, "mrr": 0.75})
    assert r.meta["num_q"] == 2 and r.meta["num_missing"] == 1 and r.meta["skip_missing"] is True


def test_rel_threshold() -> None:
    r = evaluate(QRELS, RUN, ["P_1", "mrr", "map(rel=1)"], rel=2)
    # With rel=2 only d3 of q1 is relevant and it was not retrieved.
    assert r.per_query["q1"]["P_1"] == 0.0 and r.per_query["q1"]["mrr"] == 0.0
    # An explicit rel in the spec wins over the default.
    assert r.per_query["q1"]["map(rel=1)"] == pytest.approx(1 / 2)
    assert r.meta["rel"] == 2
    with pytest.raises(InputError):
        evaluate(QRELS, RUN, ["map"], rel=0)


def test_keys_are_the_specs_as_typed() -> None:
    r = evaluate(QRELS, RUN, ["P_1", "p@1", "ndcg@3", "MRR", parse_measure("recall@2")])
    assert r.metrics == ["P_1", "p@1", "ndcg@3", "MRR", "recall@2"]
    assert r.mean["P_1"] == r.mean["p@1"]
    assert r.meta["measures"]["P_1"] == "precision@1"
    # A string may be a comma-separated list; commas in parentheses belong to the params.
    r2 = evaluate(QRELS, RUN, "map, rbp(p=0.5,gain=binary)@5")
    assert r2.metrics == ["map", "rbp(p=0.5,gain=binary)@5"]


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The spec texts the measure parser reads from now on (every parse_measure goes through
    grammar._parse), in order."""
    from ragjudge.measures import grammar

    seen: list[str] = []
    real = grammar._parse

    def counting(spec: str, rel: int | None) -> object:
        seen.append(spec)
        return real(spec, rel)

    monkeypatch.setattr(grammar, "_parse", counting)
    return seen


def test_each_metric_name_is_parsed_once_and_travels_as_a_measure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _count_parses(monkeypatch)
    r = evaluate(QRELS, RUN, ["ndcg@10", "P@5"])
    assert sorted(seen) == ["P@5", "ndcg@10"]
    assert r.metrics == ["ndcg@10", "P@5"] and r.meta["measures"]["P@5"] == "precision@5"
    # Several runs: still once per name, not once per run.
    seen.clear()
    compare(QRELS, {"a": RUN, "b": RUN}, ["ndcg@10", "P@5"], n_resamples=10)
    assert sorted(seen) == ["P@5", "ndcg@10"]
    # Measures already made are not parsed again.
    ms = {"ndcg@10": parse_measure("ndcg@10"), "P@5": parse_measure("P@5")}
    seen.clear()
    evaluate(QRELS, RUN, ms)
    evaluate(QRELS, RUN, list(ms.values()))
    assert seen == []


def test_a_measure_is_used_as_it_is_and_rel_applies_to_strings() -> None:
    # P(rel=1)@1 parses to P@1 (rel at its default): rel=2 must not reach it a second time.
    parsed = {"P(rel=1)@1": parse_measure("P(rel=1)@1", rel=2), "P_1": parse_measure("P_1", rel=2)}
    r = evaluate(QRELS, RUN, parsed, rel=2)
    assert r.per_query["q1"] == {"P(rel=1)@1": 1.0, "P_1": 0.0}
    assert evaluate(QRELS, RUN, "P(rel=1)@1", rel=2).per_query["q1"]["P(rel=1)@1"] == 1.0


def test_hand_built_measures_are_checked_at_the_edge() -> None:
    from ragjudge.measures import Measure

    assert evaluate(QRELS, RUN, [Measure("ndcg", (), 3)]).metrics == ["ndcg@3"]
    # Not in canonical form: scored as its canonical equal, keyed as given.
    r = evaluate(QRELS, RUN, [Measure("ndcg", (("gain", "linear"),), 3), Measure("p", (), 1)])
    assert r.meta["measures"] == {"ndcg(gain=linear)@3": "ndcg@3", "p@1": "precision@1"}
    with pytest.raises(MetricError, match="unknown metric"):
        evaluate(QRELS, RUN, {"x": Measure("nope")})
    with pytest.raises(MetricError, match="bad value"):
        evaluate(QRELS, RUN, [Measure("ndcg", (("gain", "cubic"),), 3)])


def test_default_metrics() -> None:
    r = evaluate(QRELS, RUN)
    assert r.metrics == list(DEFAULT_METRICS)


def test_inputs_may_be_objects_dicts_or_paths(tmp_path: Path) -> None:
    qp = tmp_path / "qrels.txt"
    qp.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    rp = tmp_path / "mysys.run"
    rp.write_text("".join(
        f"{q} Q0 {d} {i} {s} tag\n" for q, docs in RUN.items() for i, (d, s) in enumerate(docs.items())
    ))
    a = evaluate(QRELS, RUN, ["map", "ndcg@3"])
    b = evaluate(Qrels.from_dict(QRELS), Run.from_dict(RUN, name="x"), ["map", "ndcg@3"])
    c = evaluate(str(qp), rp, ["map", "ndcg@3"])
    assert a.mean == b.mean == c.mean
    assert c.run == "mysys" and b.run == "x"
    assert c.meta["run_source"] == str(rp)
    assert evaluate(QRELS, RUN, ["map"], name="renamed").run == "renamed"


def test_errors() -> None:
    with pytest.raises(MetricError):
        evaluate(QRELS, RUN, ["nope@10"])
    with pytest.raises(MetricError):
        evaluate(QRELS, RUN, ["ndcg@0"])
    with pytest.raises(MetricError):
        evaluate(QRELS, RUN, [])
    with pytest.raises(InputError, match="no query"):
        evaluate(QRELS, {"zz": {"d1": 1.0}}, ["map"], skip_missing=True)
    with pytest.raises(InputError, match="no queries"):
        evaluate({}, RUN, ["map"])
    with pytest.raises(InputError):
        evaluate(42, RUN, ["map"])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="not found"):
        evaluate("/nonexistent/qrels.txt", RUN, ["map"])


def test_does_not_mutate_inputs() -> None:
    q = json.loads(json.dumps(QRELS))
    r = json.loads(json.dumps(RUN))
    evaluate(q, r, ["map"])
    assert q == QRELS and r == RUN


def test_counts_are_summed_like_trec_eval() -> None:
    r = evaluate(QRELS, RUN, ["num_rel_ret", "num_ret", "map"])
    assert r.mean["num_rel_ret"] == 2.0  # q1: d1 (+ d3 not retrieved), q2: d4
    assert r.mean["num_ret"] == 5.0
    assert r.summed == ["num_rel_ret", "num_ret"]


# ----------------------------------------------------------------------------- conformance
def test_matches_trec_eval_c_means() -> None:
    c = _conformance()
    expected = _trec_all(c / "out.test.aqc")  # trec_eval -c on results.trunc (a query missing)
    r = evaluate(c / "qrels.test", c / "results.trunc", ["map", "P_10", "recip_rank", "ndcg_cut_10",
                                                         "num_rel_ret", "Rprec", "bpref"])
    for key, value in r.mean.items():
        if key == "num_rel_ret":
            assert f"{value:.0f}" == expected[key]
        else:
            assert f"{value:.4f}" == expected[key], key
    assert r.meta["num_missing"] >= 1


@pytest.mark.slow  # peer cross-check (pytrec_eval in a subprocess)
def test_skip_missing_matches_pytrec_eval() -> None:
    pytest.importorskip("pytrec_eval")
    from _pytrec import pytrec_eval_isolated

    c = _conformance()
    from ragjudge.io import read_qrels, read_run

    qrels = read_qrels(c / "qrels.test")
    run = read_run(c / "results.trunc")
    measures = {"map": "map", "P_10": "P_10", "recip_rank": "recip_rank", "ndcg_cut_10": "ndcg_cut_10"}
    res = pytrec_eval_isolated(qrels.to_dict(), run.to_dict(), {"map", "P", "recip_rank", "ndcg_cut"})
    r = evaluate(qrels, run, list(measures), skip_missing=True)
    assert sorted(res) == r.qids
    for key, name in measures.items():
        expected = float(np.mean([res[q][name] for q in res]))
        assert r.mean[key] == pytest.approx(expected, abs=1e-12)
        for q in res:
            assert r.per_query[q][key] == pytest.approx(res[q][name], abs=1e-12)


# ----------------------------------------------------------------------------- compare
def _three_runs() -> tuple[dict, dict[str, dict]]:
    rng = np.random.default_rng(0)
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(0, 3)) for j in range(8)} for i in range(12)}
    runs = {}
    for name, noise in (("base", 1.0), ("good", 0.3), ("same", 1.0)):
        runs[name] = {
            q: {d: float(g + rng.normal(0, noise)) for d, g in docs.items()} for q, docs in qrels.items()
        }
    return qrels, runs


def test_compare_structure_and_holm_family() -> None:
    qrels, runs = _three_runs()
    cr = compare(qrels, runs, ["ndcg@5", "map"], n_resamples=2000, seed=3)
    assert isinstance(cr, CompareReport)
    assert cr.baseline == "base" and cr.runs == ["base", "good", "same"]
    assert len(cr.comparisons) == 4  # 2 metrics x 2 non-baseline runs
    for metric in ("ndcg@5", "map"):
        fam = [c for c in cr.comparisons if c.metric == metric]
        from ragjudge.stats import holm

        assert [c.p_adjusted for c in fam] == pytest.approx(holm([c.p_value for c in fam]))
        for c in fam:
            assert c.significant == (c.p_adjusted <= 0.05)
            a = cr.reports[c.run].values[metric]
            b = cr.reports["base"].values[metric]
            assert c.delta == pytest.approx(float(np.mean(a - b)))
            assert c.n == 12
            lo, hi = c.delta_ci
            assert lo <= c.delta <= hi
    for name in cr.runs:
        for metric in cr.metrics:
            lo, hi = cr.ci[name][metric]
            assert lo <= cr.reports[name].mean[metric] <= hi


def test_compare_t_test_matches_scipy() -> None:
    st = pytest.importorskip("scipy.stats")
    qrels, runs = _three_runs()
    cr = compare(qrels, runs, ["ndcg@5"], baseline="good", test="t", n_resamples=500)
    assert cr.runs[0] == "good"
    for c in cr.comparisons:
        a = cr.reports[c.run].values["ndcg@5"]
        b = cr.reports["good"].values["ndcg@5"]
        ref = st.ttest_rel(a, b)
        assert c.p_value == pytest.approx(float(ref.pvalue), rel=1e-9)
        assert c.statistic == pytest.approx(float(ref.statistic), rel=1e-9)


def test_compare_is_reproducible_by_seed() -> None:
    qrels, runs = _three_runs()
    a = compare(qrels, runs, ["map"], n_resamples=1000, seed=5)
    b = compare(qrels, runs, ["map"], n_resamples=1000, seed=5)
    c = compare(qrels, runs, ["map"], n_resamples=1000, seed=6)
    assert a.to_dict() == b.to_dict()
    assert a.ci != c.ci


def test_compare_errors() -> None:
    qrels, runs = _three_runs()
    with pytest.raises(InputError, match="baseline"):
        compare(qrels, runs, ["map"], baseline="nope")
    with pytest.raises(InputError, match="test"):
        compare(qrels, runs, ["map"], test="wilcoxon")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="named"):
        compare(qrels, [Run.from_dict(runs["base"]), Run.from_dict(runs["good"])], ["map"])
    with pytest.raises(InputError):
        compare(qrels, runs, ["map"], alpha=0)
    with pytest.raises(InputError):
        compare(qrels, runs, ["map"], n_resamples=0)


def test_compare_skip_missing_pairs_common_queries() -> None:
    qrels, runs = _three_runs()
    partial = {q: docs for q, docs in runs["good"].items() if q not in ("q0", "q1", "q2")}
    cr = compare(qrels, {"base": runs["base"], "partial": partial}, ["map"], skip_missing=True,
                 test="t")
    (c,) = cr.comparisons
    assert c.n == 9
    assert cr.reports["partial"].meta["num_q"] == 9
    # Default: every qrels query, the missing ones scored 0.
    cr2 = compare(qrels, {"base": runs["base"], "partial": partial}, ["map"], test="t")
    assert cr2.comparisons[0].n == 12


def test_compare_single_run_has_intervals_only() -> None:
    qrels, runs = _three_runs()
    cr = compare(qrels, {"base": runs["base"]}, ["map"], n_resamples=200)
    assert cr.comparisons == [] and cr.ci["base"]["map"] is not None


def test_compare_t_test_with_one_query_is_undetermined() -> None:
    cr = compare({"q": {"a": 1}}, {"x": {"q": {"a": 1.0}}, "y": {"q": {"b": 1.0}}}, ["map"], test="t",
                 n_resamples=100)
    (c,) = cr.comparisons
    assert c.p_value is None and c.significant is None and "at least 2" in (c.note or "")
    assert c.delta == -1.0


# ----------------------------------------------------------------------------- lists
def test_evaluate_lists_keeps_input_order_beyond_ten_examples() -> None:
    gold = [["a"] for _ in range(12)]
    retrieved = [["a"] if i != 10 else ["b", "a"] for i in range(12)]
    pooled, per = evaluate_lists(gold, retrieved, ["mrr"], k_list=None)
    assert [p["mrr"] for p in per] == [1.0] * 10 + [0.5, 1.0]
    assert pooled["mrr"] == pytest.approx(11.5 / 12)


def test_evaluate_lists_expands_peer_names_with_parameters() -> None:
    # ranx's rbp.80 has no "@k" spelling of its own: the expansion uses the canonical spec
    pooled, _ = evaluate_lists([["a"], ["b"]], [["x", "a"], ["b"]], ["rbp.80", "P"], k_list=(1, 2))
    assert set(pooled) == {"rbp(gain=raw,p=0.8)@1", "rbp(gain=raw,p=0.8)@2", "P@1", "P@2"}
    assert pooled["rbp(gain=raw,p=0.8)@1"] == pytest.approx(0.5 * 0.2)  # (0 + 0.2) / 2
    assert pooled["rbp(gain=raw,p=0.8)@2"] == pytest.approx(0.5 * (0.2 * 0.8 + 0.2))


def test_evaluate_lists_default_metrics_and_expansion() -> None:
    pooled, per = evaluate_lists([["a", "b"], ["c"]], [["b", "x", "a"], ["x", "y"]], k_list=(1, 3))
    assert list(pooled) == [f"{m}@{k}" for m in ("hit", "recall", "precision", "mrr", "ndcg")
                            for k in (1, 3)]
    assert per[0]["recall@1"] == 0.5 and per[0]["recall@3"] == 1.0 and per[1]["hit@3"] == 0.0
    assert pooled["hit@1"] == 0.5
    # Explicit cutoffs and measures without cutoffs are kept as given.
    pooled2, _ = evaluate_lists([["a"]], [["a"]], ["ndcg@2", "rprec", "P_1", "map"], k_list=(5,))
    assert list(pooled2) == ["ndcg@2", "rprec", "P_1", "map@5"]


def test_evaluate_lists_undetermined_and_graded_gold() -> None:
    pooled, per = evaluate_lists([[], ["a"], {"b": 2, "c": 1}], [["a"], ["a"], ["c", "b"]],
                                 ["ndcg@2", "hit@1"], k_list=None)
    assert per[0] == {"ndcg@2": None, "hit@1": None}
    assert per[1]["hit@1"] == 1.0
    assert 0 < per[2]["ndcg@2"] < 1
    assert pooled["hit@1"] == 1.0  # over the two examples that have gold
    assert evaluate_lists([[]], [["a"]], ["map"])[0] == {"map@1": None, "map@3": None, "map@5": None,
                                                           "map@10": None}
    assert evaluate_lists([], [], ["map"], k_list=None) == ({"map": None}, [])


def test_evaluate_lists_errors() -> None:
    with pytest.raises(InputError):
        evaluate_lists([["a"]], [["a"], ["b"]])
    with pytest.raises(MetricError):
        evaluate_lists([["a"]], [["a"]], k_list=(0,))
    with pytest.raises(InputError):
        evaluate_lists([["a"]], ["a"])  # a string instead of a list of ids
    with pytest.raises(MetricError):
        evaluate_lists([["a"]], [["a"]], ["bogus"])


# ----------------------------------------------------------------------------- report shape
def test_report_json_shape() -> None:
    r = evaluate(QRELS, RUN, ["map", "p@1"])
    assert isinstance(r, Report)
    d = json.loads(r.to_json())
    assert set(d) == {"run", "mean", "per_query", "meta"}
    assert d["run"] == "run" and list(d["mean"]) == ["map", "p@1"]
    assert list(d["per_query"]) == ["q1", "q2", "q3"]
    assert d["meta"]["num_missing"] == 1
    cr = compare(QRELS, {"a": RUN, "b": RUN}, ["map"], n_resamples=100)
    d = json.loads(cr.to_json())
    assert set(d) == {"runs", "comparisons", "meta"}
    assert [x["run"] for x in d["runs"]] == ["a", "b"]
    assert d["runs"][0]["ci"]["map"][0] <= d["runs"][0]["mean"]["map"]
    (c,) = d["comparisons"]
    assert c["run"] == "b" and c["baseline"] == "a" and c["delta"] == 0.0 and c["p_value"] == 1.0
    assert d["meta"]["correction"] == "holm"


# ----------------------------------------------------------------------------- no judging here
def test_judging_options_point_to_evaluate_with_judge() -> None:
    """evaluate() is a function of qrels and run: the judging options it once took raise a
    one-line TypeError naming the entry point that judges (ragjudge.evaluate_with_judge)."""
    for kw in ({"judge": object()}, {"queries": {"q": "x"}}, {"depth": 4}, {"pool": "p.pool"},
               {"judge_depth": 3, "corpus": {"d": "y"}}):
        with pytest.raises(TypeError, match="evaluate_with_judge") as exc:
            evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}}, "map", **kw)
        assert "\n" not in str(exc.value)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):
        evaluate({"q": {"d": 1}}, {"q": {"d": 1.0}}, "map", no_such=1)


# ----------------------------------------------------------------------------- several runs
def test_evaluate_takes_a_mapping_or_a_list_of_runs_as_the_cli_does(tmp_path: Path) -> None:
    from ragjudge.cli import main

    other = {"q1": {"d3": 2.0, "d1": 1.0}, "q2": {"d4": 1.0}}
    by_mapping = evaluate(QRELS, {"a": Run.from_dict(RUN), "b": other}, ["P_1", "mrr"])
    assert isinstance(by_mapping, CompareReport) and by_mapping.runs == ["a", "b"]
    by_list = evaluate(QRELS, [Run.from_dict(RUN, name="a"), Run.from_dict(other, name="b")],
                       ["P_1", "mrr"])
    assert by_list.to_dict()["comparisons"] == by_mapping.to_dict()["comparisons"]
    assert compare(QRELS, {"a": RUN, "b": other}, ["P_1", "mrr"]).mean == by_mapping.mean
    one = evaluate(QRELS, {"a": RUN}, ["P_1"])
    assert isinstance(one, Report) and one.run == "a"
    # the same numbers as the CLI with two files
    for name, data in (("a", RUN), ("b", other)):
        (tmp_path / f"{name}.run").write_text("".join(
            f"{q} Q0 {d} 0 {s} {name}\n" for q, docs in data.items() for d, s in docs.items()))
    (tmp_path / "qrels").write_text("".join(
        f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    out = tmp_path / "out.json"
    assert main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / "a.run"),
                 str(tmp_path / "b.run"), "-m", "P_1,mrr", "-f", "json", "-o", str(out)]) == 0
    cli = json.loads(out.read_text())
    assert cli["comparisons"] == by_mapping.to_dict()["comparisons"]


@pytest.mark.parametrize("bad", [42, {"q1": [("d1", 1.0)]}, {"q1": {"d1": "high"}},
                                 {"a": {"q1": {"d1": "high"}}}, [object()]])
def test_any_other_run_shape_is_a_one_line_input_error(bad: object) -> None:
    with pytest.raises(InputError) as info:
        evaluate(QRELS, bad)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- sanity checks
def test_ids_that_never_meet_the_qrels_warn_in_meta_and_on_stderr() -> None:
    hashed = {q: {f"sha-{d}": s for d, s in docs.items()} for q, docs in RUN.items()}
    with pytest.warns(UserWarning, match="none of its document ids is in the qrels"):
        r = evaluate(QRELS, hashed, ["ndcg@10"])
    assert r.mean["ndcg@10"] == 0.0
    assert any("none of its document ids" in w for w in r.to_dict()["meta"]["warnings"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean = evaluate(QRELS, RUN, ["mrr"])
    assert "warnings" not in clean.meta


def test_few_ids_meeting_the_qrels_warn() -> None:
    qrels = {f"q{i}": {"d1": 1} for i in range(20)}
    run = {f"q{i}": {("d1" if i == 0 else "x1"): 1.0} for i in range(20)}
    with pytest.warns(UserWarning, match="only 1 of 20 queries rank any judged document"):
        evaluate(qrels, run, ["mrr"])


def test_ranked_ids_shaped_unlike_the_qrels_warn_even_when_every_query_meets_one() -> None:
    import hashlib

    # Each query ranks its one judged document among nine content-hash ids: every query meets
    # the qrels, yet 90% of the ids cannot be in them.
    qrels = {f"q{i}": {f"D{i}": 1, f"D{i + 100}": 0} for i in range(30)}
    run = {f"q{i}": {f"D{i}": 1.0, **{hashlib.sha256(f"{i}-{j}".encode()).hexdigest(): 2.0 + j
                                       for j in range(9)}} for i in range(30)}
    with pytest.warns(UserWarning, match=r"about 90% of its ranked document ids are shaped unlike "
                                         r"any qrels id \(e.g. '[0-9a-f]{64}' against 'D"):
        r = evaluate(qrels, run, ["ndcg@10"])
    assert any("shaped unlike" in w for w in r.meta["warnings"])
    import warnings

    # Unjudged documents of the same corpus (the usual case in pooled qrels) are not foreign.
    same = {f"q{i}": {f"D{i}": 1.0, **{f"D{1000 + 10 * i + j}": 2.0 + j for j in range(9)}}
            for i in range(30)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate(qrels, same, ["ndcg@10"])


def test_rankings_shorter_than_the_deepest_cutoff_warn() -> None:
    qrels = {f"q{i}": {"d1": 1} for i in range(4)}
    run = {f"q{i}": {f"d{j}": float(-j) for j in range(1, 5)} for i in range(4)}
    with pytest.warns(UserWarning, match=r"4 of 4 queries have fewer than 100 documents \(recall@100"):
        r = evaluate(qrels, run, ["recall@100", "ndcg@10"])
    assert any("fewer than 100" in w for w in r.meta["warnings"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate(qrels, run, ["recall@4", "P_2"])  # deep enough: no warning


def test_ties_that_decide_a_value_are_counted_and_said() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"a": 1}, "q3": {"a": 1}}
    # q1: a relevant and an unjudged document tie (the order decides P_1); q2: a tie between
    # two unjudged documents (decides nothing); q3: no tie
    run = {"q1": {"a": 1.0, "b": 1.0}, "q2": {"a": 2.0, "b": 1.0, "c": 1.0},
           "q3": {"a": 2.0, "b": 1.0}}
    with pytest.warns(UserWarning, match="2 of 3 queries have tied scores, 1 between documents "
                                         "of different grades.*trec_eval"):
        r = evaluate(qrels, run, ["P_1"])
    assert r.per_query["q1"]["P_1"] == 0.0  # trec_eval's order: b before a
    assert len(r.meta["warnings"]) == 1
    cr = compare(qrels, {"x": run, "y": run}, ["P_1"])
    assert len(cr.to_dict()["meta"]["warnings"]) == 2


def test_ties_in_a_run_that_meets_no_judged_document_are_not_said() -> None:
    qrels = {f"q{i}": {"a": 1} for i in range(3)}
    run = {f"q{i}": {"x": 1.0, "y": 1.0, "z": 1.0} for i in range(3)}
    with pytest.warns(UserWarning) as seen:
        r = evaluate(qrels, run, ["P_1", "ndcg@2"])
    said = [str(w.message) for w in seen]
    assert len(said) == 1 and "none of its document ids" in said[0]
    assert r.meta["warnings"] == said


def test_the_cli_prints_each_warning_as_one_line(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    (tmp_path / "qrels").write_text("q1 0 d1 1\nq2 0 d1 1\n")
    (tmp_path / "r.run").write_text("q1 Q0 x 1 1.0 r\nq2 Q0 y 1 1.0 r\n")
    assert main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / "r.run"), "-m", "mrr"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ragjudge: warning: run r: none of its document ids")


@pytest.mark.parametrize("runs", ["one", "mapping", "list"])
def test_warnings_point_at_the_callers_line(runs: str) -> None:
    import warnings

    hashed = {q: {f"sha-{d}": s for d, s in docs.items()} for q, docs in RUN.items()}
    given = {"one": hashed, "mapping": {"a": hashed, "b": RUN},
             "list": [Run.from_dict(hashed, name="a"), Run.from_dict(RUN, name="b")]}[runs]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        evaluate(QRELS, given, ["ndcg@10"])
        compare(QRELS, {"a": hashed, "b": RUN}, ["ndcg@10"], n_resamples=10)
    said = [w for w in seen if "none of its document ids" in str(w.message)]
    assert len(said) == 2
    assert {w.filename for w in said} == {__file__}


def _mostly_unjudged(share_judged: int) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """30 queries with 50 judgments each; each run ranks 100 documents with corpus-shaped ids,
    ``share_judged`` of them judged for that query (the rest never judged for it)."""
    qrels = {f"q{i}": {f"D{i}-{j}": int(j < 5) for j in range(50)} for i in range(30)}
    run = {f"q{i}": {(f"D{i}-{j}" if j < share_judged else f"D{i}-{1000 + j}"): 100.0 - j
                     for j in range(100)} for i in range(30)}
    return qrels, run


def test_a_run_whose_top_rows_are_mostly_unjudged_is_told() -> None:
    qrels, run = _mostly_unjudged(3)  # 3 of 50 fillable rows judged per query: 6%
    with pytest.warns(UserWarning, match=r"run r: only 3% of its top-100 rows are judged \(90 of "
                                         r"3000, where its queries' judgments could fill 1500\); "
                                         r"unjudged documents count as non-relevant: check the ids "
                                         r"or the pool depth"):
        r = evaluate(qrels, Run.from_dict(run, name="r"), ["ndcg@10", "recall@100"])
    assert any("top-100 rows are judged" in w for w in r.meta["warnings"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate(qrels, _mostly_unjudged(10)[1], ["ndcg@10", "recall@100"])  # 20%: unjudged is normal
        evaluate(qrels, run, ["map"])  # no cutoff asked: nothing to say it of
        evaluate(qrels, run, ["ndcg@10", "recall@100"], judged_only=True)


def test_sparse_qrels_are_not_told_unjudged() -> None:
    import warnings

    # one judgment per query (MS MARCO's shape): 90% of each top 10 is unjudged by design
    qrels = {f"q{i}": {f"D{i}": 1} for i in range(30)}
    run = {f"q{i}": {f"D{i}" if i % 2 else f"D{100 + i}": 10.0,
                     **{f"D{1000 + 10 * i + j}": 9.0 - j for j in range(9)}} for i in range(30)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate(qrels, run, ["ndcg@10", "mrr@10"])


@pytest.mark.parametrize("qrels, runs", [
    ("examples/qrels.txt", "examples/runs"), ("examples/synth/qrels.txt", "examples/synth/runs")])
def test_the_bundled_runs_are_not_told_unjudged(qrels: str, runs: str) -> None:
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / runs).glob("*.run")):
        for metrics in (list(DEFAULT_METRICS), ["ndcg@5"], ["P@10"], ["ndcg@20"], ["recall@1000"]):
            r = evaluate(root / qrels, path, metrics)
            assert not [w for w in r.meta.get("warnings", ()) if "rows are judged" in w], (path, metrics)
