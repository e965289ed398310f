"""Plots: rendered with the Agg backend, checking what was drawn (heights, labels, counts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ragjudge import Qrels, Run, compare, evaluate  # noqa: E402
from ragjudge.errors import InputError  # noqa: E402
from ragjudge.plots import (  # noqa: E402
    MAX_PANELS,
    PR_LEVELS,
    PR_METRICS,
    plot_confusion,
    plot_differences,
    plot_panels,
    plot_rag,
    plot_sample_heatmap,
    plot_systems,
    save_figure,
)
from ragjudge.rag.report import RagReport, Score, undetermined  # noqa: E402

QRELS = Qrels.from_dict({f"q{i}": {"d1": 1} for i in range(6)})
BASE = Run.from_dict({f"q{i}": {"d1": 2.0, "d2": 1.0} for i in range(6)}, name="base")
# better on nothing, worse on q0..q2 (d1 at rank 2), equal on q3..q5
WORSE = Run.from_dict({f"q{i}": ({"d2": 2.0, "d1": 1.0} if i < 3 else {"d1": 2.0}) for i in range(6)},
                      name="worse")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_distribution_hist_heights_and_box_labels() -> None:
    report = evaluate(QRELS, WORSE, ["mrr"])
    ax = report.plot("mrr", kind="hist")
    heights = sorted(p.get_height() for p in ax.patches if p.get_height() > 0)
    assert heights == [3, 3]  # three queries at 0.5, three at 1.0
    assert ax.get_title() == "per-query mrr"
    cr = compare(QRELS, [BASE, WORSE], ["mrr"], n_resamples=200)
    ax = cr.plot("mrr", kind="box")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "worse"]


def test_differences_counts_and_bars() -> None:
    cr = compare(QRELS, [BASE, WORSE], ["mrr"], n_resamples=200)
    ax = cr.plot("mrr", kind="differences")
    assert ax.get_title() == "worse vs base (mrr)\n0 wins, 3 ties, 3 losses"
    assert sorted(round(p.get_height(), 6) for p in ax.patches) == [-0.5, -0.5, -0.5, 0, 0, 0]
    with pytest.raises(InputError, match="not a compared run"):
        cr.plot("mrr", kind="differences", run="base")


def test_means_forest_marks_significance() -> None:
    qrels = Qrels.from_dict({f"q{i}": {"d1": 1} for i in range(30)})
    base = Run.from_dict({f"q{i}": {"d1": 2.0, "d2": 1.0} for i in range(30)}, name="base")
    worse = Run.from_dict({f"q{i}": {"d2": 2.0, "d1": 1.0} for i in range(30)}, name="worse")
    same = Run.from_dict({f"q{i}": {"d1": 2.0} for i in range(30)}, name="same")
    cr = compare(qrels, [base, worse, same], ["mrr"], n_resamples=2000)
    ax = cr.plot("mrr")
    ticks = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())), reverse=True)
    assert [label for _, label in ticks] == ["base (baseline)", "worse", "same"]  # top to bottom
    stars = [t for t in ax.texts if t.get_text() == "*"]
    assert len(stars) == 1 and stars[0].xy[0] == pytest.approx(0.5)  # only "worse" is significant
    dots = [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "o"]
    assert sorted(dots) == pytest.approx([0.5, 1.0, 1.0])


def _rag_report() -> RagReport:
    scores = {
        "faithfulness": [Score(1.0), Score(0.5), undetermined("truncated")],
        "context_recall": [Score(0.0), Score(1.0), Score(0.25)],
    }
    return RagReport(["faithfulness", "context_recall"], ["s1", "s2", "s3"], scores)


def test_rag_plots_show_undetermined_counts() -> None:
    report = _rag_report()
    ax = plot_rag(report)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["faithfulness\n(1 undetermined)", "context_recall"]
    ax = plot_sample_heatmap(report)
    data = ax.images[0].get_array()
    assert data.mask[2, 0] and not data.mask[2, 1]  # the undetermined cell is blank, not 0
    assert data[1, 0] == 0.5 and [t.get_text() for t in ax.get_yticklabels()] == ["s1", "s2", "s3"]


def test_save_figure_formats(tmp_path: Path) -> None:
    ax = evaluate(QRELS, BASE, ["mrr"]).plot()
    for suffix in (".png", ".svg", ".pdf"):
        out = save_figure(ax, tmp_path / "sub" / f"fig{suffix}")
        assert out.stat().st_size > 100
    with pytest.raises(InputError, match="must end in"):
        save_figure(ax, tmp_path / "fig.gif")
    with pytest.raises(InputError, match="kind must be"):
        evaluate(QRELS, BASE, ["mrr"]).plot(kind="violin")
    with pytest.raises(InputError, match="not in the report"):
        evaluate(QRELS, BASE, ["mrr"]).plot("map")
    assert np.isfinite(evaluate(QRELS, BASE, ["mrr"]).mean["mrr"])


def test_pr_curves_read_the_iprec_means() -> None:
    # one relevant document at rank 2 (worse, q0..q2): IP(x) = 0.5 at every recall level.
    cr = compare(QRELS, [BASE, WORSE], list(PR_METRICS), n_resamples=50)
    ax = cr.plot(kind="pr")
    curves = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines}
    assert set(curves) == {"base (11-pt avg 1.000)", "worse (11-pt avg 0.750)"}
    xs, ys = curves["worse (11-pt avg 0.750)"]
    assert xs == pytest.approx(list(PR_LEVELS)) and ys == pytest.approx([0.75] * 11)
    # the 11-point average in the legend is trec_eval's 11pt_avg
    assert evaluate(QRELS, WORSE, ["11pt_avg"]).mean["11pt_avg"] == pytest.approx(0.75)
    # any spelling of the measure is found through the report's canonical specs
    report = evaluate(QRELS, WORSE, ["iprec(recall=0.0)", "iprec_at_recall(recall=1.0)", "mrr"])
    line = report.plot(kind="pr").lines[0]
    assert list(line.get_xdata()) == [0.0, 1.0] and line.get_label() == "worse"
    with pytest.raises(InputError, match="PR_METRICS"):
        evaluate(QRELS, WORSE, ["mrr"]).plot(kind="pr")


class _Agreement:
    """The public shape plots read from an AgreementReport (labels, confusion, systems,
    kendall_tau, cohen_kappa), independent of the trust branch's internals."""

    labels = (0, 1, 2)
    confusion = ((8, 2, 0), (1, 6, 3), (0, 0, 0))
    cohen_kappa = 0.5
    systems = {
        "a": {"ndcg@10": {"reference": 0.5, "candidate": 0.6}},
        "b": {"ndcg@10": {"reference": 0.4, "candidate": 0.45}},
        "c": {"ndcg@10": {"reference": 0.3, "candidate": None}},
    }
    kendall_tau = {"ndcg@10": 1.0}


def test_confusion_heatmap_cells_and_labels() -> None:
    ax = plot_confusion(_Agreement())
    shown = ax.images[0].get_array()
    assert shown[0].tolist() == pytest.approx([80.0, 20.0, 0.0])
    assert shown[2].tolist() == [0.0, 0.0, 0.0]  # an empty row is 0%, not NaN
    texts = [t.get_text() for t in ax.texts]
    assert texts[:3] == ["8\n80%", "2\n20%", "0\n0%"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    assert ax.get_title() == "20 pairs judged by both; Cohen's kappa 0.500"
    counts = plot_confusion(_Agreement(), percent=False).images[0].get_array()
    assert counts[1].tolist() == [1, 6, 3]
    empty = _Agreement()
    empty.labels, empty.confusion = (), ()
    with pytest.raises(InputError, match="judged by both"):
        plot_confusion(empty)


def test_system_scatter_points_and_tau() -> None:
    ax = plot_systems(_Agreement())
    points = ax.collections[0].get_offsets()
    assert points.tolist() == [[0.5, 0.6], [0.4, 0.45]]
    assert ax.get_title() == "2 runs; Kendall's tau-b = 1.000 (1 undetermined left out)"
    assert [t.get_text() for t in ax.texts] == ["a", "b"]
    with pytest.raises(InputError, match="not in the report"):
        plot_systems(_Agreement(), "map")


def test_agreement_plots_on_a_real_report() -> None:
    from ragjudge.trust.agreement import ranking_agreement

    human = Qrels.from_dict({f"q{i}": {"d1": 2, "d2": 0} for i in range(6)})
    llm = Qrels.from_dict({f"q{i}": {"d1": 2, "d2": 1 if i < 2 else 0} for i in range(6)})
    report = ranking_agreement(human, llm, {"base": BASE, "worse": WORSE}, ["mrr"])
    ax = plot_confusion(report)
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(g) for g in report.labels]
    assert int(sum(sum(r) for r in report.confusion)) == 12
    ax = plot_systems(report, "mrr")
    # "worse" ranks d2 first on q0..q2; the LLM calls d2 relevant on q0, q1: mrr 0.75 -> 11/12
    points = sorted(map(tuple, ax.collections[0].get_offsets().tolist()))
    assert points == [(0.75, pytest.approx(11 / 12)), (1.0, 1.0)]


def test_rag_report_plot_delegates() -> None:
    report = _rag_report()
    ax = report.plot(kind="box")
    assert ax.get_xticklabels()[0].get_text() == "faithfulness\n(1 undetermined)"
    ax = report.plot(["context_recall"], kind="heatmap")
    assert ax.images[0].get_array().tolist() == [[0.0], [1.0], [0.25]]
    with pytest.raises(InputError, match="kind must be"):
        report.plot(kind="pie")


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _cli(*argv: str) -> int:
    from ragjudge.cli import main

    return main(list(argv))


def test_cli_plot_evaluate_compare_and_pr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = sorted(str(p) for p in (EXAMPLES / "runs").glob("*.run"))
    qrels = str(EXAMPLES / "qrels.txt")
    for kind in ("means", "differences", "box", "pr"):
        out = tmp_path / f"{kind}.svg"
        assert _cli("compare", qrels, *runs, "-m", "ndcg@10", "--resamples", "100",
                    "--plot", str(out), "--plot-kind", kind) == 0
        svg = out.read_text()
        assert "bm25_stemmed" in svg or kind == "differences"  # run names drawn as text
    assert "wrote" in capsys.readouterr().err
    # the table printed keeps only the metrics asked for; the PR points are evaluated aside
    assert _cli("evaluate", qrels, runs[0], "-m", "map", "-f", "json", "--plot",
                str(tmp_path / "pr.png"), "--plot-kind", "pr") == 0
    assert "iprec" not in capsys.readouterr().out and (tmp_path / "pr.png").stat().st_size > 1000
    # bad paths and kinds fail before any work, exit 2, one line
    assert _cli("evaluate", qrels, runs[0], "--plot", str(tmp_path / "x.gif")) == 2
    assert _cli("evaluate", qrels, runs[0], "--plot", str(tmp_path / "no" / "x.png")) == 2
    assert _cli("evaluate", qrels, runs[0], "--plot", str(tmp_path / "x.png"), "--plot-kind", "means") == 2
    err = capsys.readouterr().err
    assert "must end in" in err and "does not exist" in err and "several runs" in err
    assert "Traceback" not in err and not (tmp_path / "x.png").exists()


def test_cli_plot_rag_and_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rag.svg"
    assert _cli("rag", str(EXAMPLES / "rag_samples.jsonl"), "-m", "recall@5,containment",
                "--plot", str(out)) == 0
    svg = out.read_text()
    assert "recall@5" in svg and "37 undetermined" in svg  # containment: 37 samples lack answers
    human = tmp_path / "human.qrels"
    llm = tmp_path / "llm.qrels"
    human.write_text("".join(f"q{i} 0 d1 2\nq{i} 0 d2 0\n" for i in range(6)))
    llm.write_text("".join(f"q{i} 0 d1 2\nq{i} 0 d2 {1 if i < 2 else 0}\n" for i in range(6)))
    run = tmp_path / "a.run"
    run.write_text("".join(f"q{i} Q0 d2 1 2.0 a\nq{i} Q0 d1 2 1.0 a\n" for i in range(6)))
    run2 = tmp_path / "b.run"
    run2.write_text("".join(f"q{i} Q0 d1 1 2.0 b\n" for i in range(6)))
    assert _cli("agree", str(human), str(llm), "--plot", str(tmp_path / "c.svg")) == 0
    assert "Cohen" in (tmp_path / "c.svg").read_text()
    assert _cli("agree", str(human), str(llm), "--run", str(run), "--run", str(run2), "-m", "mrr",
                "--plot", str(tmp_path / "s.svg"), "--plot-kind", "systems") == 0
    assert "tau-b" in (tmp_path / "s.svg").read_text()
    assert _cli("agree", str(human), str(llm), "--plot", str(tmp_path / "s.png"),
                "--plot-kind", "systems") == 2
    assert "needs --run" in capsys.readouterr().err


def test_confusion_text_is_readable_on_light_cells() -> None:
    ax = plot_confusion(_Agreement())
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours["8\n80%"] == "white" and colours["2\n20%"] == "black"


def _three_runs() -> tuple[Qrels, list[Run]]:
    qrels = Qrels.from_dict({f"q{i}": {"d1": 1} for i in range(30)})
    base = Run.from_dict({f"q{i}": {"d1": 2.0, "d2": 1.0} for i in range(30)}, name="base")
    worse = Run.from_dict({f"q{i}": {"d2": 2.0, "d1": 1.0} for i in range(30)}, name="worse")
    same = Run.from_dict({f"q{i}": {"d1": 2.0} for i in range(30)}, name="same")
    return qrels, [base, worse, same]


def test_means_forest_all_pairs_marks_every_pair_not_the_baseline() -> None:
    qrels, runs = _three_runs()
    cr = compare(qrels, runs, ["mrr"], n_resamples=2000, all_pairs=True)
    ax = cr.plot("mrr")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["1  base", "2  worse", "3  same"] and "baseline" not in ax.get_title()
    marks = sorted((t.get_text(), round(t.xy[1])) for t in ax.texts)
    # base (y=2) and same (y=0) are each significantly better than worse (run 2); no stars
    assert marks == [("> 2", 0), ("> 2", 2)]
    assert "Holm over all pairs" in ax.get_title()


def test_differences_against_any_run_of_an_all_pairs_report() -> None:
    qrels, runs = _three_runs()
    cr = compare(qrels, runs, ["mrr"], n_resamples=200, all_pairs=True)
    ax = plot_differences(cr, "same", "mrr", vs="worse")
    assert ax.get_title() == "same vs worse (mrr)\n30 wins, 0 ties, 0 losses"
    with pytest.raises(InputError, match="not in the comparison"):
        plot_differences(cr, "same", "mrr", vs="nope")


def test_panels_one_per_item_and_bounded() -> None:
    qrels, runs = _three_runs()
    cr = compare(qrels, runs, ["mrr", "P_1", "ndcg"], n_resamples=100)
    ax = plot_panels(lambda m, a: cr.plot(m, ax=a), cr.metrics, ncols=2)
    shown = [a for a in ax.figure.axes if a.get_visible()]
    assert [a.get_title().split("\n")[0] for a in shown] == ["mrr", "P_1", "ndcg"]
    assert len(ax.figure.axes) == 4  # a 2x2 grid, the fourth cell hidden
    with pytest.raises(InputError, match="too many"):
        plot_panels(lambda m, a: None, range(MAX_PANELS + 1))


@pytest.mark.slow
def test_cli_plot_draws_every_metric_and_every_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = sorted(str(p) for p in (EXAMPLES / "runs").glob("*.run"))
    qrels = str(EXAMPLES / "qrels.txt")
    for kind in ("means", "box"):
        out = tmp_path / f"{kind}.svg"
        assert _cli("compare", qrels, *runs, "-m", "ndcg@10,map", "--resamples", "100",
                    "--plot", str(out), "--plot-kind", kind) == 0
        svg = out.read_text()
        assert "ndcg@10" in svg and "map" in svg, kind
    out = tmp_path / "diff.svg"
    assert _cli("compare", qrels, *runs, "-m", "ndcg@10,map", "--resamples", "100", "--all-pairs",
                "--plot", str(out), "--plot-kind", "differences") == 0
    svg = out.read_text()
    # 3 runs: every pair, for both metrics (titles are drawn as text in the SVG)
    for pair in ("bm25_stemmed vs bm25_raw", "term_overlap vs bm25_raw", "term_overlap vs bm25_stemmed"):
        assert svg.count(pair) == 2, pair
    assert "drew" not in capsys.readouterr().err  # everything fitted: no note
    # more than one figure holds: the first ones, and one stderr line says what was left out
    many = ",".join(f"P_{k}" for k in range(1, 14))
    assert _cli("evaluate", qrels, runs[0], "-m", many, "--plot", str(tmp_path / "many.svg"),
                "--plot-kind", "box") == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "--plot drew" in ln]
    assert notes == ["ragjudge: --plot drew 12 of 13 metrics (P_1 to P_12): one figure holds 24 "
                     "panels; pass fewer -m metrics or runs to draw the rest"]
    assert "P_12" in (tmp_path / "many.svg").read_text()


def test_cli_agree_systems_draws_every_metric(tmp_path: Path) -> None:
    human = tmp_path / "human.qrels"
    human.write_text("".join(f"q{i} 0 d1 2\nq{i} 0 d2 0\n" for i in range(6)))
    llm = tmp_path / "llm.qrels"
    llm.write_text("".join(f"q{i} 0 d1 2\nq{i} 0 d2 {1 if i < 2 else 0}\n" for i in range(6)))
    runs = []
    for name, first in (("a", "d2"), ("b", "d1")):
        p = tmp_path / f"{name}.run"
        other = "d1" if first == "d2" else "d2"
        p.write_text("".join(f"q{i} Q0 {first} 1 2.0 {name}\nq{i} Q0 {other} 2 1.0 {name}\n"
                             for i in range(6)))
        runs += ["--run", str(p)]
    out = tmp_path / "s.svg"
    assert _cli("agree", str(human), str(llm), *runs, "-m", "mrr,P_1", "--plot", str(out),
                "--plot-kind", "systems") == 0
    svg = out.read_text()
    assert "mrr under reference" in svg and "P_1 under reference" in svg
