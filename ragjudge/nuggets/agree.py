"""How far LLM nugget assignments (and support labels) can stand in for human ones.

* **Item agreement**: the nuggets both the LLM and a person assigned in the same answer
  (matched by run, query and nugget text), as grades 0 (not_support), 1 (partial_support),
  2 (support), through :func:`ragjudge.trust.label_agreement` -- Cohen's kappa, weighted kappas,
  Krippendorff's alpha, the confusion matrix, leniency, each with a bootstrap interval resampling
  queries. Support labels (none / partial / full) the same way.
* **Run level**: each run scored under the LLM's and under the human assignments, on the answers
  people assessed; Kendall's tau-b between the two orderings of the runs (the statistic the
  TREC RAG track reports), tau-ap, Spearman's rho and RBO, with bootstrap intervals resampling
  queries.
* **PPI**: each run's score over *all* its answers, estimated from the LLM's scores corrected by
  the few answers people assessed (prediction-powered inference, :func:`ragjudge.trust.ppi_mean`),
  beside the LLM-only and human-only intervals.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data import Qrels
from ..errors import InputError
from ..render import ResultSurface, render_table
from ..trust.agreement import (
    AgreementReport,
    kendall_tau_b,
    label_agreement,
    rank_biased_overlap,
    spearman_rho,
    tau_ap,
)
from ..trust.ppi import PPIEstimate, ppi_mean
from ..trust.resample import Interval, percentile_interval
from .data import Assignment, read_assignments
from .score import METRICS, answer_scores

__all__ = ["GRADE", "NuggetAgreement", "nugget_agreement"]

#: Assignment labels as ordinal grades (support labels share the scale).
GRADE = {"not_support": 0, "partial_support": 1, "support": 2, "none": 0, "partial": 1, "full": 2}


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _qrels(labels: Mapping[tuple[str, str], int]) -> Qrels:
    """Labels keyed ``(query, item)`` as qrels (the query is the unit the bootstrap resamples)."""
    d: dict[str, dict[str, int]] = {}
    for (q, item), g in labels.items():
        d.setdefault(q, {})[item] = g
    return Qrels.from_dict(d)


def _assigned(items: Sequence[Assignment]) -> dict[tuple[str, str], int]:
    out = {}
    for a in items:
        for n in a.nuggets:
            if n.assignment is not None:
                out[(a.qid, f"{a.run_id}\x1f{_norm(n.text)}")] = GRADE[n.assignment]
    return out


@dataclass
class NuggetAgreement(ResultSurface):
    """Item agreement (``assignments``, ``support``: :class:`~ragjudge.trust.AgreementReport`
    or ``None``), run-level rank correlations of ``metric`` (in ``assignments.ranking``, the runs'
    two means in ``assignments.systems``) and a PPI estimate of each run's ``metric``."""

    metric: str
    assignments: AgreementReport | None
    support: AgreementReport | None = None
    ppi: dict[str, PPIEstimate] = field(default_factory=dict)
    #: rank correlations of the runs' ``metric`` under human and LLM assignments
    ranking: dict[str, Interval] = field(default_factory=dict)
    #: ``{run: {"human": mean, "llm": mean}}`` on the answers people assessed
    systems: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def kendall_tau(self) -> float | None:
        iv = self.ranking.get("kendall_tau_b")
        return None if iv is None else iv.value

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric,
                "assignments": None if self.assignments is None else self.assignments.to_dict(),
                "support": None if self.support is None else self.support.to_dict(),
                "kendall_tau": self.kendall_tau,
                "ranking": {k: v.to_dict() for k, v in self.ranking.items()},
                "systems": self.systems,
                "ppi": {r: e.to_dict() for r, e in self.ppi.items()}, "notes": self.notes}

    def ppi_table(self, digits: int = 4) -> tuple[list[str], list[list[Any]]]:
        heads = ["run", "ppi", "low", "high", "llm only", "human only", "n human", "n llm"]
        rows = [[r, e.mean, e.ci_low, e.ci_high,
                 f"{e.llm_only.value:.{digits}f} [{e.llm_only.ci_low:.{digits}f}, {e.llm_only.ci_high:.{digits}f}]",
                 f"{e.human_only.value:.{digits}f} [{e.human_only.ci_low:.{digits}f}, {e.human_only.ci_high:.{digits}f}]",
                 e.n_human, e.n_llm] for r, e in self.ppi.items()]
        return heads, rows

    def __str__(self) -> str:
        parts = []
        if self.assignments is not None:
            parts.append("nugget assignments (0 not_support, 1 partial_support, 2 support; "
                         "reference: human, candidate: LLM)\n" + str(self.assignments))
        if self.support is not None:
            parts.append("citation support (0 none, 1 partial, 2 full)\n" + str(self.support))
        if self.ranking:
            rows = [[k, v.value, v.ci_low, v.ci_high] for k, v in self.ranking.items()]
            parts.append(f"run ranking by {self.metric}, human vs LLM assignments, over "
                         f"{len(self.systems)} runs\n" + render_table(["statistic", "value", "low", "high"], rows, "table")
                         + "\n" + render_table(["run", "human", "llm"],
                                                [[r, v["human"], v["llm"]] for r, v in self.systems.items()], "table"))
        if self.ppi:
            h, r = self.ppi_table()
            parts.append(f"PPI estimate of each run's {self.metric} over all its answers\n"
                         + render_table(h, r, "table"))
        parts.extend(f"note: {n}" for n in self.notes)
        return "\n\n".join(parts)

    def render(self, fmt: str = "table", *, digits: int = 4) -> str:
        return self.to_json() if fmt == "json" else str(self)


def _matrix(per: Mapping[str, Mapping[str, float]], runs: list[str], topics: list[str]) -> np.ndarray:
    m = np.full((len(runs), len(topics)), np.nan)
    for i, r in enumerate(runs):
        for j, t in enumerate(topics):
            v = per.get(r, {}).get(t)
            if v is not None:
                m[i, j] = v
    return m


def _ranking(human: np.ndarray, llm: np.ndarray, n_resamples: int, confidence: float,
             seed: int | None) -> dict[str, Interval]:
    fns = {"kendall_tau_b": kendall_tau_b, "tau_ap": tau_ap, "spearman_rho": spearman_rho,
           "rbo": rank_biased_overlap}

    def stats(cols: np.ndarray) -> dict[str, float]:
        with np.errstate(all="ignore"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                h = np.nanmean(human[:, cols], axis=1)
                f = np.nanmean(llm[:, cols], axis=1)
        if not (np.isfinite(h).all() and np.isfinite(f).all()):
            return {k: np.nan for k in fns}
        out = {}
        for k, fn in fns.items():
            v = fn(list(h), list(f))
            out[k] = np.nan if v is None else v
        return out

    n = human.shape[1]
    point = stats(np.arange(n))
    rng = np.random.default_rng(seed)
    boot = [stats(rng.integers(0, n, n)) for _ in range(n_resamples)]
    return {k: percentile_interval(point[k], np.array([b[k] for b in boot]), confidence) for k in fns}


def nugget_agreement(
    llm: Sequence[Assignment] | str | Path,
    human: Sequence[Assignment] | str | Path,
    *,
    metric: str = "all",
    support_llm: Mapping[tuple[str, str, int, str], str] | None = None,
    support_human: Mapping[tuple[str, str, int, str], str] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> NuggetAgreement:
    """Agreement of LLM with human assignments (and support labels, when both are given), the
    run-level rank correlations of ``metric``, and a PPI interval for each run's ``metric``."""
    if metric not in METRICS:
        raise InputError(f"unknown nugget score {metric!r}; expected {', '.join(METRICS)}", field="metric")
    la = read_assignments(llm) if isinstance(llm, (str, Path)) else list(llm)
    ha = read_assignments(human) if isinstance(human, (str, Path)) else list(human)
    notes: list[str] = []
    l_items, h_items = _assigned(la), _assigned(ha)
    common = set(l_items) & set(h_items)
    rep: AgreementReport | None = None
    if common:
        rep = label_agreement(_qrels(h_items), _qrels(l_items), rel=1, scale=(0, 2),
                              n_resamples=n_resamples, confidence=confidence, seed=seed)
    else:
        notes.append("no nugget assigned by both (same run, query and nugget text): no item agreement")

    def scores(items: Sequence[Assignment]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for a in items:
            v = answer_scores(a)[0][metric]
            if v is not None:
                out.setdefault(a.run_id, {})[a.qid] = v
        return out

    ls, hs = scores(la), scores(ha)
    runs = [r for r in dict.fromkeys(a.run_id for a in la) if r in hs]
    # Run level: both scorings on the answers people assessed.
    assessed = sorted({t for r in runs for t in hs[r] if t in ls.get(r, {})})
    if len(runs) >= 2 and assessed:
        lm = _matrix({r: {t: v for t, v in ls[r].items() if t in hs[r]} for r in runs}, runs, assessed)
        hm = _matrix(hs, runs, assessed)
        ranking = _ranking(hm, lm, n_resamples, confidence, seed)
        systems = {r: {"human": float(np.nanmean(hm[i])), "llm": float(np.nanmean(lm[i]))}
                   for i, r in enumerate(runs)}
    else:
        ranking, systems = {}, {}
        notes.append("fewer than 2 runs with human assignments: no run-level correlation")
    # PPI: per run, human scores on the assessed answers, LLM scores on all answers.
    ppi: dict[str, PPIEstimate] = {}
    for r in dict.fromkeys(a.run_id for a in la):
        both = [t for t in hs.get(r, {}) if t in ls.get(r, {})]
        if len(both) < 2:
            notes.append(f"run {r}: {len(both)} answers with both scores; PPI needs 2")
            continue
        e = ppi[r] = ppi_mean([hs[r][t] for t in both], [ls[r][t] for t in both], list(ls[r].values()),
                              confidence=confidence)
        if e.small_sample():
            notes.append(f"run {r}: PPI on {e.small_sample().replace('queries', 'answers')}")
        if e.clipped:  # the estimate is unbiased and may leave [0, 1]; its interval may not
            notes.append(f"run {r}: PPI interval cut to the score's range [0, 1]"
                         + ("; the point estimate lies outside it" if not 0 <= e.mean <= 1 else ""))
    sup: AgreementReport | None = None
    if support_llm is not None and support_human is not None:
        def keyed(d: Mapping[tuple[str, str, int, str], str]) -> dict[tuple[str, str], int]:
            return {(q, f"{r}\x1f{s}\x1f{p}"): GRADE[lab] for (r, q, s, p), lab in d.items()}

        sl, sh = keyed(support_llm), keyed(support_human)
        if set(sl) & set(sh):
            sup = label_agreement(_qrels(sh), _qrels(sl), rel=1, scale=(0, 2), n_resamples=n_resamples,
                                  confidence=confidence, seed=seed)
        else:
            notes.append("no (sentence, passage) pair labelled by both: no support agreement")
    return NuggetAgreement(metric, rep, sup, ppi, ranking, systems, notes)
