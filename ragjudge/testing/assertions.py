"""Assertions for gating retrieval and RAG quality in a user's own test suite (pytest or any).

::

    from ragjudge.testing import assert_metric, assert_not_worse

    def test_retrieval_quality():
        assert_metric("qrels.txt", "candidate.run", "ndcg@10", at_least=0.42)
        assert_not_worse("qrels.txt", "candidate.run", baseline="production.run",
                         metrics=["ndcg@10", "recall@100"])

Each raises :class:`AssertionError` with a one-line message that names the metric, the value
and the bound (so a CI log says what regressed), and returns the measured value(s) otherwise.
A metric that could not be computed (a RAG metric undetermined for every sample) fails the
assertion: a gate never passes on a missing value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from ..evaluate import compare, evaluate

__all__ = ["assert_metric", "assert_not_worse"]


def _mean_of(report: Any, metric: str) -> float | None:
    mean = report.mean
    if callable(mean):  # RagReport.mean(metric)
        return mean(metric)  # type: ignore[no-any-return]
    if metric not in mean:
        raise KeyError(f"metric {metric!r} is not in the report (it has: {', '.join(mean)})")
    return mean[metric]  # type: ignore[no-any-return]


def assert_metric(
    qrels_or_report: Any,
    run: Any = None,
    metric: str = "ndcg@10",
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    **evaluate_options: Any,
) -> float:
    """Assert ``at_least <= mean(metric) <= at_most`` and return the mean.

    Pass ``(qrels, run, metric)`` (anything :func:`ragjudge.evaluate` accepts: objects, dicts,
    paths), or an already computed report (``Report`` or ``RagReport``) as the first argument
    with ``run=None``. ``evaluate_options`` go to :func:`ragjudge.evaluate` (``rel=``,
    ``skip_missing=``).
    """
    if at_least is None and at_most is None:
        raise ValueError("assert_metric needs at_least= and/or at_most=")
    for name, bound in (("at_least", at_least), ("at_most", at_most)):
        if bound is not None and not math.isfinite(bound):
            raise ValueError(f"{name} must be a finite number, got {bound!r}")
    if run is None:
        report = qrels_or_report
    else:

        report = evaluate(qrels_or_report, run, [metric], **evaluate_options)
    value = _mean_of(report, metric)
    if value is None:
        raise AssertionError(f"{metric} could not be computed (undetermined for every query/sample)")
    if at_least is not None and value < at_least:
        raise AssertionError(f"{metric} = {value:.4f} is below the required minimum {at_least:g}")
    if at_most is not None and value > at_most:
        raise AssertionError(f"{metric} = {value:.4f} is above the allowed maximum {at_most:g}")
    return float(value)


def assert_not_worse(
    qrels: Any,
    run: Any,
    *,
    baseline: Any,
    metrics: Sequence[str] | str = ("ndcg@10",),
    alpha: float = 0.05,
    **compare_options: Any,
) -> dict[str, float | None]:
    """Assert that ``run`` is not significantly worse than ``baseline`` on any of ``metrics``.

    Uses :func:`ragjudge.compare` (paired randomization test by default, Holm-adjusted,
    ``seed=0``): fails when the mean difference is negative and the adjusted p-value is at most
    ``alpha``. Returns ``{metric: mean difference run - baseline}``.
    """

    metric_list = [metrics] if isinstance(metrics, str) else list(metrics)
    report = compare(qrels, {"baseline": baseline, "candidate": run}, metric_list,
                     baseline="baseline", alpha=alpha, **compare_options)
    deltas: dict[str, float | None] = {}
    worse = []
    for metric in metric_list:
        c = report.comparison("candidate", metric)
        deltas[metric] = c.delta
        if c.significant and c.delta is not None and c.delta < 0:
            worse.append(f"{metric} {c.delta:+.4f} (adjusted p = {c.p_adjusted:.3g})")
    if worse:
        raise AssertionError("significantly worse than the baseline: " + "; ".join(worse))
    return deltas
