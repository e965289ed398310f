"""Figures for reports (matplotlib, the optional ``plot`` extra, imported on first use).

Every function takes report values (never files), draws on ``ax=`` when given (else a new
figure), and returns the ``Axes`` it drew on, so a figure can be composed and saved by the
caller. Values that could not be computed are left out of a drawing and counted in its title
or legend, never drawn as 0.

* :func:`plot_means` -- forest plot of each run's mean with its 95% interval; runs that differ
  significantly from the baseline (Holm-adjusted) are filled and starred; in an all-pairs
  comparison each run is numbered and marked with the runs it is significantly better than.
* :func:`plot_differences` -- per-query differences of a run against the baseline (or any run
  it was tested against), sorted, with win/tie/loss counts (the plot IR papers use).
* :func:`plot_distribution` -- per-query values of one metric for one or more runs, as a
  histogram or box plot.
* :func:`plot_rag` -- RAG metrics: per-metric distributions with undetermined counts.
* :func:`plot_sample_heatmap` -- RAG per-sample heatmap for a few metrics.
* :func:`plot_pr` -- interpolated precision-recall curves (trec_eval's 11 points) per run, from
  reports evaluated with :data:`PR_METRICS`.
* :func:`plot_confusion` -- agreement: confusion-matrix heatmap (reference/human rows vs
  candidate/LLM columns), counts and row percentages in the cells.
* :func:`plot_systems` -- agreement: each run's metric under the reference vs the candidate
  qrels, Kendall's tau-b in the title.
* :func:`plot_panels` -- small multiples: one panel per item (metric, pair of runs...) in one
  figure, each drawn by any of the functions above.
* :func:`save_figure` -- write the figure of an ``Axes`` to ``.png`` / ``.svg`` / ``.pdf``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._lazy import optional
from .errors import InputError, MetricError
from .measures import parse_measure

__all__ = [
    "plot_means",
    "plot_differences",
    "plot_distribution",
    "plot_rag",
    "plot_sample_heatmap",
    "plot_pr",
    "plot_confusion",
    "plot_systems",
    "plot_panels",
    "MAX_PANELS",
    "PR_LEVELS",
    "PR_METRICS",
    "save_figure",
    "PLOT_FORMATS",
]

PLOT_FORMATS = (".png", ".svg", ".pdf")
#: trec_eval's 11 recall levels of interpolated precision.
PR_LEVELS: tuple[float, ...] = tuple(i / 10 for i in range(11))
#: The metrics :func:`plot_pr` reads: pass them to ``evaluate``/``compare``.
PR_METRICS: tuple[str, ...] = tuple(f"iprec_at_recall(recall={x:.1f})" for x in PR_LEVELS)
_WIN, _LOSS, _TIE = "#2a9d8f", "#e76f51", "#8d99ae"
#: At most this many panels in one figure of small multiples (callers say what they left out).
MAX_PANELS = 24


def _pyplot() -> Any:
    return optional("matplotlib.pyplot", extra="plot", what="plotting")


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    if ax is not None:
        return ax
    fig, new_ax = _pyplot().subplots(figsize=figsize)
    return new_ax


def _check_metric(metric: str, metrics: Sequence[str]) -> None:
    if metric not in metrics:
        raise InputError(f"metric {metric!r} is not in the report (it has: {', '.join(metrics)})")


def plot_means(report: Any, metric: str | None = None, *, ax: Any = None) -> Any:
    """Forest plot of one metric of a ``CompareReport``: a dot per run at its mean, a bar for its
    bootstrap interval; runs significantly different from the baseline are filled and starred.
    In an all-pairs comparison there is no baseline: runs are numbered, and ``> 2,3`` beside a
    run says it is significantly better than runs 2 and 3 (Holm over all pairs); a run that
    differs significantly from any other is filled.
    """
    metric = metric or report.metrics[0]
    _check_metric(metric, report.metrics)
    runs = report.runs
    pairs = bool(getattr(report, "all_pairs", False))
    number = {r: i + 1 for i, r in enumerate(runs)}
    ax = _axes(ax, (6.0, 0.5 * len(runs) + 1.5))
    ys = np.arange(len(runs))[::-1]
    for y, run in zip(ys, runs):
        mean = report.reports[run].mean[metric]
        if mean is None:
            continue
        ci = report.ci.get(run, {}).get(metric)
        sig, better = False, []
        if pairs:
            for other in runs:
                if other != run:
                    c = report.comparison(run, metric, vs=other)
                    if c.significant:
                        sig = True
                        if c.delta is not None and c.delta > 0:
                            better.append(number[other])
        elif run != report.baseline:
            c = report.comparison(run, metric)
            sig = bool(c.significant)
        if ci is not None:
            ax.hlines(y, ci[0], ci[1], color="#264653", linewidth=2)
        ax.plot([mean], [y], "o", color="#264653", markersize=7,
                markerfacecolor="#264653" if sig or (run == report.baseline and not pairs)
                else "white")
        if better:
            right = ci[1] if ci is not None else mean
            ax.annotate("> " + ",".join(str(k) for k in better), (right, y),
                        textcoords="offset points", xytext=(6, 0), ha="left", va="center",
                        fontsize=8)
        elif sig and not pairs:
            ax.annotate("*", (mean, y), textcoords="offset points", xytext=(0, 6), ha="center")
    base = report.reports[report.baseline].mean[metric]
    if base is not None and not pairs:
        ax.axvline(base, color=_TIE, linestyle="--", linewidth=1)
    ax.set_yticks(ys)
    if pairs:
        ax.set_yticklabels([f"{number[r]}  {r}" for r in runs])
    else:
        ax.set_yticklabels([f"{r} (baseline)" if r == report.baseline else r for r in runs])
    conf = int(round(100 * report.meta.get("confidence", 0.95)))
    ax.set_xlabel(f"{metric} (mean, {conf}% bootstrap interval)")
    if pairs:
        ax.set_title(f"{metric}\n> k: significantly better than run k (Holm over all pairs)",
                     fontsize=10)
    else:
        ax.set_title(f"{metric}\n* significantly different from {report.baseline} (Holm)",
                     fontsize=10)
    return ax


def plot_differences(report: Any, run: str, metric: str | None = None, *, vs: str | None = None,
                     ax: Any = None) -> Any:
    """Per-query ``run - vs`` differences of a ``CompareReport`` (``vs``: the baseline unless
    given; any other run in an all-pairs comparison), sorted, coloured as wins, ties and
    losses, with the counts in the title. Queries where either value is undetermined are left
    out and counted."""
    metric = metric or report.metrics[0]
    _check_metric(metric, report.metrics)
    vs = report.baseline if vs is None else vs
    if vs not in report.reports:
        raise InputError(f"run {vs!r} is not in the comparison (it has: {', '.join(report.runs)})")
    if run not in report.reports or run == vs:
        others = [r for r in report.runs if r != vs]
        raise InputError(f"run {run!r} is not a compared run (choose one of: {', '.join(others)})")
    a = report.reports[run]
    b = report.reports[vs]
    index = {q: i for i, q in enumerate(b.qids)}
    pairs = [(a.values[metric][i], b.values[metric][index[q]]) for i, q in enumerate(a.qids) if q in index]
    d = np.array([x - y for x, y in pairs], dtype=np.float64)
    missing = int((~np.isfinite(d)).sum())
    d = np.sort(d[np.isfinite(d)])[::-1]
    ax = _axes(ax, (8.0, 3.5))
    colors = [_WIN if v > 0 else _LOSS if v < 0 else _TIE for v in d]
    ax.bar(np.arange(len(d)), d, color=colors, width=1.0)
    ax.axhline(0, color="black", linewidth=0.8)
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    ties = len(d) - wins - losses
    title = f"{run} vs {vs} ({metric})\n{wins} wins, {ties} ties, {losses} losses"
    if missing:
        title += f" ({missing} undetermined left out)"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("queries, sorted by difference")
    ax.set_ylabel(f"{metric} difference")
    ax.set_xticks([])
    return ax


def plot_distribution(
    reports: Any, metric: str | None = None, *, kind: str = "hist", bins: int = 20, ax: Any = None
) -> Any:
    """Per-query values of ``metric`` for one ``Report``, a list of them, or a ``CompareReport``:
    overlaid histograms (``kind="hist"``) or side-by-side box plots (``kind="box"``)."""
    if kind not in ("hist", "box"):
        raise InputError(f"kind must be 'hist' or 'box', got {kind!r}")
    group = _group(reports)
    metric = metric or group[0].metrics[0]
    for r in group:
        _check_metric(metric, r.metrics)
    data = [np.asarray(r.values[metric], dtype=np.float64) for r in group]
    missing = sum(int((~np.isfinite(x)).sum()) for x in data)
    data = [x[np.isfinite(x)] for x in data]
    names = [r.run for r in group]
    ax = _axes(ax, (6.0, 4.0))
    if kind == "hist":
        lo = min((float(x.min()) for x in data if len(x)), default=0.0)
        hi = max((float(x.max()) for x in data if len(x)), default=1.0)
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
        for x, name in zip(data, names):
            ax.hist(x, bins=edges, alpha=0.5 if len(data) > 1 else 0.9, label=f"{name} (n={len(x)})")
        ax.set_xlabel(metric)
        ax.set_ylabel("queries")
        if len(data) > 1:
            ax.legend()
    else:
        ax.boxplot(data)
        ax.set_xticks(np.arange(1, len(names) + 1))
        ax.set_xticklabels(names)
        ax.set_ylabel(metric)
    title = f"per-query {metric}"
    if missing:
        title += f" ({missing} undetermined left out)"
    ax.set_title(title)
    return ax


def _rag_values(report: Any, metric: str) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in report.values(metric)], dtype=np.float64)


def plot_rag(report: Any, metrics: Sequence[str] | None = None, *, ax: Any = None) -> Any:
    """Box plots of RAG metrics (one per metric) over the samples; each tick label carries how
    many samples were undetermined for that metric."""
    metrics = list(metrics or report.metrics)
    for m in metrics:
        _check_metric(m, report.metrics)
    values = [_rag_values(report, m) for m in metrics]
    ax = _axes(ax, (1.6 * len(metrics) + 2.0, 4.0))
    ax.boxplot([v[np.isfinite(v)] for v in values])
    ax.set_xticks(np.arange(1, len(metrics) + 1))
    labels = []
    for m, v in zip(metrics, values):
        und = int((~np.isfinite(v)).sum())
        labels.append(f"{m}\n({und} undetermined)" if und else m)
    ax.set_xticklabels(labels, rotation=0, fontsize=8)
    ax.set_ylabel("score")
    ax.set_title(f"RAG metrics over {len(values[0]) if values else 0} samples")
    return ax


def plot_sample_heatmap(
    report: Any, metrics: Sequence[str] | None = None, *, max_samples: int = 50, ax: Any = None
) -> Any:
    """Heatmap of per-sample scores (rows: samples, columns: metrics); undetermined cells are
    blank (masked), never coloured as 0."""
    metrics = list(metrics or report.metrics)[:8]
    for m in metrics:
        _check_metric(m, report.metrics)
    grid = np.column_stack([_rag_values(report, m) for m in metrics])[:max_samples]
    ax = _axes(ax, (1.2 * len(metrics) + 2.0, 0.25 * len(grid) + 1.5))
    masked = np.ma.masked_invalid(grid)
    image = ax.imshow(masked, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.figure.colorbar(image, ax=ax)
    ax.set_xticks(np.arange(len(metrics)))
    ax.set_xticklabels(metrics, rotation=30, ha="right", fontsize=8)
    ids = list(getattr(report, "sample_ids", None) or range(len(grid)))[: len(grid)]
    ax.set_yticks(np.arange(len(grid)))
    ax.set_yticklabels([str(i) for i in ids], fontsize=7)
    ax.set_title("per-sample scores (blank = undetermined)")
    return ax


def _group(reports: Any) -> list[Any]:
    """One ``Report``, a list of them, or a ``CompareReport`` -> a list of ``Report``."""
    if hasattr(reports, "reports"):
        return list(reports.reports.values())
    if isinstance(reports, (list, tuple)):
        return list(reports)
    return [reports]


def _pr_points(report: Any, rel: int | None) -> dict[float, str]:
    """``{recall level: metric key}`` of the report's ``iprec_at_recall`` columns (any spelling:
    the canonical spec of each key is in ``meta["measures"]``)."""
    specs = report.meta.get("measures", {})
    out: dict[float, str] = {}
    for key in report.metrics:
        try:
            m = parse_measure(specs.get(key, key))
        except MetricError:
            continue
        if m.name == "iprec_at_recall" and (rel is None or int(m.get("rel")) == rel):
            out.setdefault(float(m.get("recall")), key)
    return out


def plot_pr(reports: Any, *, rel: int | None = None, ax: Any = None) -> Any:
    """Interpolated precision-recall curves, one per run (a ``Report``, a list of them or a
    ``CompareReport``), from the means of its ``iprec_at_recall(recall=x)`` metrics -- evaluate
    with :data:`PR_METRICS` for trec_eval's 11 points. The legend gives each run's 11-point
    average (trec_eval ``11pt_avg``: the mean of the 11 points) when all 11 are present."""
    group = _group(reports)
    curves = []
    for r in group:
        points = _pr_points(r, rel)
        if len(points) < 2:
            raise InputError(
                f"run {r.run}: a precision-recall curve needs iprec_at_recall metrics at 2 or more "
                "recall levels; evaluate with ragjudge.plots.PR_METRICS", field="metrics")
        levels = sorted(points)
        means = [r.mean[points[x]] for x in levels]
        curves.append((r.run, levels, means))
    ax = _axes(ax, (5.5, 4.5))
    for name, levels, means in curves:
        xs = [x for x, v in zip(levels, means) if v is not None]
        ys = [v for v in means if v is not None]
        label = name
        if all(any(abs(x - lv) < 1e-9 for x in levels) for lv in PR_LEVELS) and len(ys) == len(means):
            eleven = [v for x, v in zip(levels, means) if any(abs(x - lv) < 1e-9 for lv in PR_LEVELS)]
            label = f"{name} (11-pt avg {sum(eleven) / len(eleven):.3f})"
        ax.plot(xs, ys, marker="o", markersize=4, label=label)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("recall")
    ax.set_ylabel("interpolated precision")
    ax.set_title("interpolated precision-recall (mean over queries)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_confusion(report: Any, *, percent: bool = True, ax: Any = None) -> Any:
    """Confusion-matrix heatmap of an ``AgreementReport``: rows are the reference (human)
    grades, columns the candidate (LLM) grades; colour is the row percentage (with
    ``percent``) or the count, and each cell shows its count (and row %)."""
    labels = [str(g) for g in report.labels]
    if not labels:
        raise InputError("no (query, document) pair is judged by both qrels: nothing to draw",
                         field="confusion")
    counts = np.array(report.confusion, dtype=np.float64).reshape(len(labels), len(labels))
    totals = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    ax = _axes(ax, (1.0 * len(labels) + 2.5, 0.9 * len(labels) + 1.8))
    shown = share * 100 if percent else counts
    image = ax.imshow(shown, cmap="Blues", vmin=0.0, vmax=100.0 if percent else None)
    ax.figure.colorbar(image, ax=ax, label="row %" if percent else "pairs")
    for i in range(len(labels)):
        for j in range(len(labels)):
            text = f"{int(counts[i, j])}" + (f"\n{100 * share[i, j]:.0f}%" if percent else "")
            dark = float(image.norm(shown[i, j])) > 0.6  # white text only on the dark end of the scale
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if dark else "black")
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_yticks(np.arange(len(labels)))
    ax.set_yticklabels(labels)
    ax.set_xlabel("candidate (LLM) grade")
    ax.set_ylabel("reference (human) grade")
    kappa = getattr(report, "cohen_kappa", None)
    title = f"{int(counts.sum())} pairs judged by both"
    if kappa is not None:
        title += f"; Cohen's kappa {kappa:.3f}"
    ax.set_title(title, fontsize=10)
    return ax


def plot_systems(report: Any, metric: str | None = None, *, ax: Any = None) -> Any:
    """System scatter of an ``AgreementReport`` made with runs: one point per run at (metric
    under the reference qrels, metric under the candidate qrels), the diagonal, and Kendall's
    tau-b of the two orderings in the title. Runs whose metric is undetermined under either
    qrels are left out and counted."""
    systems = report.systems
    if not systems:
        raise InputError("the agreement report has no runs: give runs to compare system orderings",
                         field="runs")
    metrics = list(next(iter(systems.values())))
    metric = metric or metrics[0]
    _check_metric(metric, metrics)
    names, xs, ys, missing = [], [], [], 0
    for name, per_metric in systems.items():
        ref, cand = per_metric[metric].get("reference"), per_metric[metric].get("candidate")
        if ref is None or cand is None:
            missing += 1
            continue
        names.append(name)
        xs.append(float(ref))
        ys.append(float(cand))
    ax = _axes(ax, (5.0, 5.0))
    ax.scatter(xs, ys, color="#264653", zorder=3)
    for name, x, y in zip(names, xs, ys):
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if xs:
        lo, hi = min(xs + ys), max(xs + ys)
        pad = 0.05 * (hi - lo or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color=_TIE, linestyle="--", linewidth=1)
    ax.set_xlabel(f"{metric} under reference (human) qrels")
    ax.set_ylabel(f"{metric} under candidate (LLM) qrels")
    tau = report.kendall_tau.get(metric)
    title = f"{len(xs)} runs; Kendall's tau-b = " + ("-" if tau is None else f"{tau:.3f}")
    if missing:
        title += f" ({missing} undetermined left out)"
    ax.set_title(title, fontsize=10)
    return ax


def plot_panels(draw: Callable[[Any, Any], Any], items: Sequence[Any], *, ncols: int = 1,
                panel: tuple[float, float] = (6.0, 3.5)) -> Any:
    """Small multiples: one panel per item of ``items`` in a grid of ``ncols`` columns (row by
    row), each drawn by ``draw(item, ax)`` (e.g. ``lambda m, ax: plot_means(report, m, ax=ax)``
    over the metrics); ``panel`` is the size of one panel in inches. Returns the first Axes:
    ``ax.figure`` holds them all (pass it to :func:`save_figure`)."""
    items = list(items)
    if not items:
        raise InputError("nothing to draw: no panel")
    if len(items) > MAX_PANELS:
        raise InputError(f"{len(items)} panels are too many for one figure (at most {MAX_PANELS})")
    ncols = max(1, min(ncols, len(items)))
    nrows = -(-len(items) // ncols)
    _, grid = _pyplot().subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows),
                                 squeeze=False)
    axes = list(grid.flat)
    for item, ax in zip(items, axes):
        draw(item, ax)
    for ax in axes[len(items):]:
        ax.set_visible(False)
    return axes[0]


def save_figure(ax: Any, path: str | Path) -> Path:
    """Save the figure ``ax`` belongs to; the suffix picks the format (png, svg or pdf)."""
    p = Path(path)
    if p.suffix.lower() not in PLOT_FORMATS:
        raise InputError(f"{p}: plot file must end in {', '.join(PLOT_FORMATS)}")
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give a file name for the plot")
    p.parent.mkdir(parents=True, exist_ok=True)
    fig = ax.figure
    fig.tight_layout()
    fig.savefig(p, dpi=150)
    return p
