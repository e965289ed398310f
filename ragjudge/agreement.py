"""How far LLM labels can stand in for human ones: label agreement and system-ranking agreement.

Two questions matter when an LLM judge replaces assessors (Faggioli et al. 2023; Upadhyay et al.
2024, UMBRELA): do the labels agree pair by pair, and -- what evaluation actually needs -- do the
*systems* come out in the same order? :func:`label_agreement` answers the first on the pairs both
qrels judge; :func:`ranking_agreement` the second, by evaluating every run under both qrels.

All functions are pure. Statistics that cannot be computed (no common pairs, fewer than two
systems, a constant ranking) are reported as ``None`` with a reason, never NaN.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .data import Qrels, Run

__all__ = [
    "AgreementReport",
    "label_agreement",
    "ranking_agreement",
    "cohen_kappa",
    "kendall_tau_b",
]


def cohen_kappa(confusion: np.ndarray, *, weights: str | None = None) -> float | None:
    """Cohen's kappa of a square confusion matrix (rows: rater A, columns: rater B).

    kappa = 1 - sum(w * O) / sum(w * E), where O are observed proportions, E = outer product of
    the marginals, and w the disagreement weights: 0/1 (``weights=None``, Cohen 1960), |i-j|
    (``"linear"``) or (i-j)^2 (``"quadratic"``, Cohen 1968). ``None`` when undefined (no
    observations, or both raters constant on the same label so expected disagreement is 0).
    """
    c = np.asarray(confusion, dtype=np.float64)
    n = c.sum()
    if n == 0:
        return None
    m = c.shape[0]
    i, j = np.indices((m, m))
    if weights is None:
        w = (i != j).astype(np.float64)
    elif weights == "linear":
        w = np.abs(i - j).astype(np.float64)
    elif weights == "quadratic":
        w = ((i - j) ** 2).astype(np.float64)
    else:
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', not {weights!r}")
    observed = c / n
    expected = np.outer(c.sum(axis=1), c.sum(axis=0)) / (n * n)
    denom = float((w * expected).sum())
    if denom == 0.0:
        return None
    return 1.0 - float((w * observed).sum()) / denom


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b between two score lists over the same items (Kendall 1945).

    tau_b = (C - D) / sqrt((n0 - n1) * (n0 - n2)), with C/D the concordant/discordant pairs,
    n0 = n(n-1)/2 and n1, n2 the pairs tied in x and in y. ``None`` when fewer than two items or
    one list is constant. O(n^2), which is fine for the tens of systems compared in practice.
    """
    n = len(x)
    if n != len(y):
        raise ValueError(f"x has {n} items but y has {len(y)}")
    if n < 2:
        return None
    conc = disc = tie_x = tie_y = 0
    for a in range(n):
        for b in range(a + 1, n):
            dx = x[a] - x[b]
            dy = y[a] - y[b]
            if dx == 0:
                tie_x += 1
            if dy == 0:
                tie_y += 1
            s = dx * dy
            if s > 0:
                conc += 1
            elif s < 0:
                disc += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - tie_x) * (n0 - tie_y))
    if denom == 0:
        return None
    return (conc - disc) / denom


@dataclass(frozen=True)
class AgreementReport:
    """Label agreement between a reference (human) and a candidate (LLM) qrels, and optionally
    the agreement of the system rankings they induce."""

    common_pairs: int
    reference_only: int
    candidate_only: int
    labels: tuple[int, ...]
    confusion: tuple[tuple[int, ...], ...]
    exact_agreement: float | None
    cohen_kappa: float | None
    weighted_kappa_linear: float | None
    weighted_kappa_quadratic: float | None
    rel: int
    binary_kappa: float | None
    binary_precision: float | None
    binary_recall: float | None
    systems: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    kendall_tau: dict[str, float | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "common_pairs": self.common_pairs,
            "reference_only": self.reference_only,
            "candidate_only": self.candidate_only,
            "labels": list(self.labels),
            "confusion": [list(r) for r in self.confusion],
            "exact_agreement": self.exact_agreement,
            "cohen_kappa": self.cohen_kappa,
            "weighted_kappa_linear": self.weighted_kappa_linear,
            "weighted_kappa_quadratic": self.weighted_kappa_quadratic,
            "rel": self.rel,
            "binary_kappa": self.binary_kappa,
            "binary_precision": self.binary_precision,
            "binary_recall": self.binary_recall,
            "systems": self.systems,
            "kendall_tau": self.kendall_tau,
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        def f(v: float | None) -> str:
            return "undetermined" if v is None else f"{v:.4f}"

        lines = [
            f"pairs judged by both: {self.common_pairs} "
            f"(reference only: {self.reference_only}, candidate only: {self.candidate_only})",
            f"exact agreement:         {f(self.exact_agreement)}",
            f"Cohen's kappa:           {f(self.cohen_kappa)}",
            f"weighted kappa (linear): {f(self.weighted_kappa_linear)}",
            f"weighted kappa (quad.):  {f(self.weighted_kappa_quadratic)}",
            f"binary (grade >= {self.rel}): kappa {f(self.binary_kappa)}, "
            f"precision {f(self.binary_precision)}, recall {f(self.binary_recall)}",
        ]
        header = "reference \\ candidate " + " ".join(f"{lab:>6}" for lab in self.labels)
        lines.append(header)
        for lab, row in zip(self.labels, self.confusion):
            lines.append(f"{lab:>22} " + " ".join(f"{v:>6}" for v in row))
        for metric, tau in self.kendall_tau.items():
            lines.append(f"system ranking Kendall tau-b on {metric}: {f(tau)}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def label_agreement(reference: Qrels, candidate: Qrels, *, rel: int = 1) -> AgreementReport:
    """Agreement on the (query, document) pairs both qrels judge.

    Negative grades (trec_eval's "pooled but unjudged") are mapped to 0 before comparing, since
    both mean "not relevant" to every measure. ``rel`` is the binary relevance threshold for the
    binary kappa and for the candidate's precision/recall against the reference.
    """
    ref = reference.to_dict()
    cand = candidate.to_dict()
    pairs_ref = {(q, d): g for q, docs in ref.items() for d, g in docs.items()}
    pairs_cand = {(q, d): g for q, docs in cand.items() for d, g in docs.items()}
    common = [p for p in pairs_ref if p in pairs_cand]
    a = np.array([max(pairs_ref[p], 0) for p in common], dtype=np.int64)
    b = np.array([max(pairs_cand[p], 0) for p in common], dtype=np.int64)
    labels = tuple(sorted(set(a.tolist()) | set(b.tolist())))
    index = {lab: i for i, lab in enumerate(labels)}
    conf = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for x, y in zip(a.tolist(), b.tolist()):
        conf[index[x], index[y]] += 1
    notes: list[str] = []
    if not common:
        notes.append("the two qrels share no judged (query, document) pair")
    # Weighted kappas need the grade distance, not the label index: place labels on their values.
    full = np.zeros((0, 0), dtype=np.int64)
    if labels:
        lo, hi = labels[0], labels[-1]
        full = np.zeros((hi - lo + 1, hi - lo + 1), dtype=np.int64)
        for x, y in zip(a.tolist(), b.tolist()):
            full[x - lo, y - lo] += 1
    ra, rb = a >= rel, b >= rel
    bconf = np.array(
        [[np.sum(~ra & ~rb), np.sum(~ra & rb)], [np.sum(ra & ~rb), np.sum(ra & rb)]], dtype=np.int64
    )
    tp = int(bconf[1, 1])
    n_cand_rel = int(rb.sum())
    n_ref_rel = int(ra.sum())
    return AgreementReport(
        common_pairs=len(common),
        reference_only=len(pairs_ref) - len(common),
        candidate_only=len(pairs_cand) - len(common),
        labels=labels,
        confusion=tuple(tuple(int(v) for v in row) for row in conf),
        exact_agreement=float(np.mean(a == b)) if len(common) else None,
        cohen_kappa=cohen_kappa(conf),
        weighted_kappa_linear=cohen_kappa(full, weights="linear"),
        weighted_kappa_quadratic=cohen_kappa(full, weights="quadratic"),
        rel=rel,
        binary_kappa=cohen_kappa(bconf),
        binary_precision=tp / n_cand_rel if n_cand_rel else None,
        binary_recall=tp / n_ref_rel if n_ref_rel else None,
        notes=tuple(notes),
    )


def ranking_agreement(
    reference: Qrels,
    candidate: Qrels,
    runs: Mapping[str, Run] | Sequence[Run],
    metrics: Sequence[str],
    *,
    rel: int = 1,
) -> AgreementReport:
    """:func:`label_agreement` plus, per metric, Kendall's tau-b between the orderings of the
    runs by their mean under the reference qrels and under the candidate qrels."""
    from .evaluate import evaluate

    if not isinstance(runs, Mapping):
        runs = {r.name: r for r in runs}
    base = label_agreement(reference, candidate, rel=rel)
    systems: dict[str, dict[str, dict[str, float]]] = {}
    taus: dict[str, float | None] = {}
    notes = list(base.notes)
    for name, run in runs.items():
        ref_mean = evaluate(reference, run, list(metrics)).mean
        cand_mean = evaluate(candidate, run, list(metrics)).mean
        systems[name] = {
            m: {"reference": float(ref_mean[m]), "candidate": float(cand_mean[m])} for m in metrics
        }
    names = list(systems)
    for m in metrics:
        tau = kendall_tau_b(
            [systems[s][m]["reference"] for s in names], [systems[s][m]["candidate"] for s in names]
        )
        taus[m] = tau
        if tau is None:
            notes.append(f"Kendall tau on {m} is undetermined: fewer than two runs or a constant score")
    return AgreementReport(
        **{
            **{k: getattr(base, k) for k in base.__dataclass_fields__ if k not in ("systems", "kendall_tau", "notes")},
            "systems": systems,
            "kendall_tau": taus,
            "notes": tuple(notes),
        }
    )
