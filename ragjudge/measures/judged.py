"""Measures of judgment coverage: judged, unj, rbp_residual.

Each measure is one unit: its reference kernel (formula + source), its batch reduction over a
:class:`~ragjudge.measures.layout.Layout`, and its registration.
"""

from __future__ import annotations

import numpy as np

from .common import P
from .grammar import Measure, MeasureSpec, Ranked, register
from .layout import Layout, safe_div, top

__all__ = ["judged", "unj", "rbp_residual"]


# ----------------------------------------------------------------------------- judged
def judged(ranked: Ranked, k: int | None = None) -> float:
    """Share of the top min(k, n) documents that have a qrels entry; 0 for an empty ranking.

    Any qrels entry counts as judged, negative labels included (junk/spam labels such as the
    web tracks' -2 were assessed). trec_eval's ``unj_k`` (:func:`unj`) differs: it counts a
    negative label as unjudged and divides by k, not min(k, n).
    """
    tk = top(ranked, k)
    return sum(1 for g in tk if g is not None) / len(tk) if tk else 0.0


def _judged_batch(L: Layout, m: Measure) -> np.ndarray:
    rows = L.in_cut(np.flatnonzero(L.jud), m.k)
    return safe_div(L.seg_count(L.grp[rows]), L.cut(m.k).astype(np.float64))


register(MeasureSpec(
    "judged", {}, cutoff=True, pool_free=True,
    reference=judged,
    kernel=lambda m, ranked, judged_grades, mg: judged(ranked, m.k),
    batch=_judged_batch, examples=("judged@3", "judged"),
))


# ----------------------------------------------------------------------------- unj
def unj(ranked: Ranked, k: int | None = None) -> float:
    """trec_eval ``unj_k``: unjudged documents in the top k, divided by k.

    Unjudged = no qrels entry or a negative label (trec_eval's "in the pool but not judged");
    ranks beyond the end of the ranking count as judged (trec_eval fills them with irrelevant
    documents). Without k: divided by the ranking's length (0 for an empty ranking).
    """
    tk = top(ranked, k)
    denom = k if k is not None else len(tk)
    return sum(1 for g in tk if g is None or g < 0) / denom if denom else 0.0


def _unj_batch(L: Layout, m: Measure) -> np.ndarray:
    rows = L.in_cut(np.flatnonzero(~L.jud | (L.lab < 0)), m.k)
    found = L.seg_count(L.grp[rows])
    return found / m.k if m.k is not None else safe_div(found, L.nret.astype(np.float64))


register(MeasureSpec(
    "unj", {}, cutoff=True, pool_free=True, cut_names=("unj",),
    reference=unj,
    kernel=lambda m, ranked, judged_grades, mg: unj(ranked, m.k),
    batch=_unj_batch, examples=("unj@3", "unj@20", "unj"),
))


# ----------------------------------------------------------------------------- rbp_residual
def rbp_residual(ranked: Ranked, k: int | None = None, *, p: float = 0.8) -> float:
    """RBP residual (Moffat & Zobel 2008): the RBP weight whose relevance is unknown.

    residual = (1 - p) * sum_{r<=n, doc r unjudged} p^(r-1) + p^n, n = min(k, ranking length):
    unjudged ranks plus the tail beyond the ranking. Unjudged = no qrels entry or a negative
    grade (trec_eval's "in the pool but not judged"), as trec_eval ``rbp_resid`` counts them.
    """
    tk = top(ranked, k)
    total = sum(p**i for i, g in enumerate(tk) if g is None or g < 0)
    return (1.0 - p) * total + p ** len(tk)


def _rbp_residual_batch(L: Layout, m: Measure) -> np.ndarray:
    k, p = m.k, float(m.get("p"))
    rows = L.in_cut(np.flatnonzero(~L.jud | (L.lab < 0)), k)  # negative: pooled, not judged
    s = L.seg_sum(np.power(p, L.pos[rows].astype(np.float64)), L.grp[rows])
    return (1.0 - p) * s + np.power(p, L.cut(k).astype(np.float64))


register(MeasureSpec(
    "rbp_residual", {"p": P}, cutoff=True, pool_free=True, aliases=("rbp_resid",),
    reference=rbp_residual,
    kernel=lambda m, ranked, judged_grades, mg: rbp_residual(ranked, m.k, p=m.get("p")),
    batch=_rbp_residual_batch, examples=("rbp_residual(p=0.5)", "rbp_residual(p=0.9)@3"),
))
