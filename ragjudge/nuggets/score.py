"""Nugget scores of an answer and of a run.

For an answer with nuggets :math:`n_1..n_N` (vital set :math:`V`), each assigned ``support``,
``partial_support`` or ``not_support``, let :math:`s_i` be 1 for support and 0 otherwise, and
:math:`c_i` be 1, 0.5 and 0 (half credit for partial support). Then

* ``strict_vital`` = :math:`\\sum_{i \\in V} s_i / |V|`
* ``vital``        = :math:`\\sum_{i \\in V} c_i / |V|`
* ``strict_all``   = :math:`\\sum_i s_i / N`
* ``all``          = :math:`\\sum_i c_i / N`
* ``weighted``     = :math:`\\sum_i w_i c_i / \\sum_i w_i` with :math:`w_i` = 1 for a vital and
  0.5 for an okay nugget

(Pradeep et al., "Initial Nugget Evaluation Results for the TREC 2024 RAG Track", 2024).
A run's score is the mean over the queries it answered. A score whose denominator is empty (no
vital nugget) or whose nuggets were not all assigned is undetermined with its reason -- never a
silent 0 -- and left out of the mean, counted beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..evaluate import compare_reports
from ..report import CompareReport, Report
from .data import Assignment

__all__ = ["CREDIT", "METRICS", "WEIGHT", "answer_scores", "per_run", "score_assignments"]

#: The scores, in the order they are reported.
METRICS = ("strict_vital", "vital", "strict_all", "all", "weighted")
#: Credit of each assignment (partial support counts half; the strict scores count support only).
CREDIT = {"support": 1.0, "partial_support": 0.5, "not_support": 0.0}
#: Weight of each importance in the weighted score.
WEIGHT = {"vital": 1.0, "okay": 0.5}


def answer_scores(a: Assignment) -> tuple[dict[str, float | None], str | None]:
    """The five scores of one answer, and the reason when some are undetermined."""
    failed = a.failed
    if failed:
        why = failed[0].failure or "not assigned"
        return dict.fromkeys(METRICS), f"{len(failed)} of {len(a.nuggets)} nuggets not assigned: {why}"
    if not a.nuggets:
        return dict.fromkeys(METRICS), "no nuggets for this query"
    strict = [1.0 if n.assignment == "support" else 0.0 for n in a.nuggets]
    credit = [CREDIT[n.assignment] for n in a.nuggets]  # type: ignore[index]
    vital = [i for i, n in enumerate(a.nuggets) if n.importance == "vital"]
    weights = [WEIGHT[n.importance] for n in a.nuggets]  # type: ignore[index]
    out: dict[str, float | None] = {
        "strict_vital": sum(strict[i] for i in vital) / len(vital) if vital else None,
        "vital": sum(credit[i] for i in vital) / len(vital) if vital else None,
        "strict_all": sum(strict) / len(strict),
        "all": sum(credit) / len(credit),
        "weighted": sum(w * c for w, c in zip(weights, credit)) / sum(weights),
    }
    return out, None if vital else "no vital nugget for this query (vital scores undetermined)"


def per_run(assignments: Iterable[Assignment]) -> dict[str, Report]:
    """One :class:`~ragjudge.report.Report` per run: per-query scores (undetermined ones NaN,
    their reasons in ``meta["reasons"]``), queries in first-seen order."""
    by_run: dict[str, list[Assignment]] = {}
    for a in assignments:
        by_run.setdefault(a.run_id, []).append(a)
    reports: dict[str, Report] = {}
    for run, items in by_run.items():
        values = {m: np.full(len(items), np.nan) for m in METRICS}
        reasons: dict[str, str] = {}
        for i, a in enumerate(items):
            scores, why = answer_scores(a)
            for m, v in scores.items():
                if v is not None:
                    values[m][i] = v
            if why:
                reasons[a.qid] = why
        meta: dict[str, Any] = {"source": "nugget assignments"}
        if reasons:
            meta["reasons"] = reasons
        reports[run] = Report(run, [a.qid for a in items], values, meta)
    return reports


def score_assignments(
    assignments: Iterable[Assignment],
    *,
    baseline: str | None = None,
    metrics: Sequence[str] = METRICS,
    test: str = "randomization",
    n_resamples: int = 10_000,
    seed: int | None = 0,
    alpha: float = 0.05,
    confidence: float = 0.95,
    all_pairs: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> CompareReport:
    """Per-run means of the nugget scores with bootstrap intervals, and paired tests of each
    run against ``baseline`` (default: the first run) over the queries both answered -- the
    report :func:`ragjudge.compare` returns, so every renderer, plot and CI gate applies."""
    reports = per_run(assignments)
    if not reports:
        raise InputError("no assignments to score", field="assignments")
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise InputError(f"unknown nugget score {bad[0]!r}; expected {', '.join(METRICS)}",
                         field="metrics")
    if list(metrics) != list(METRICS):
        reports = {r: Report(r, rep.qids, {m: rep.values[m] for m in metrics}, rep.meta)
                   for r, rep in reports.items()}
    if baseline is None:
        baseline = next(iter(reports))
    if baseline not in reports:
        raise InputError(f"baseline {baseline!r} is not one of the runs: {', '.join(reports)}",
                         field="baseline")
    extra = {"scores": "nugget scores (strict_vital, vital, strict_all, all, weighted)",
             "partial_credit": CREDIT["partial_support"], "weights": dict(WEIGHT), **(meta or {})}
    return compare_reports(reports, baseline, list(metrics), test=test,  # type: ignore[arg-type]
                           n_resamples=n_resamples, seed=seed, alpha=alpha,
                           confidence=confidence, all_pairs=all_pairs, meta=extra)
