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
from ragjudge.plots import plot_rag, plot_sample_heatmap, save_figure  # noqa: E402
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
