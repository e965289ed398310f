"""Measures of judgment coverage: judged, rbp_residual.

Each measure is one unit: its reference kernel (formula + source), its batch reduction over a
:class:`~ragjudge.measures.layout.Layout`, and its registration.
"""

from __future__ import annotations

import numpy as np

from .common import P
from .grammar import Measure, MeasureSpec, Ranked, register
from .layout import Layout, safe_div, top

__all__ = ["judged", "rbp_residual"]


# ----------------------------------------------------------------------------- judged
def judged(ranked: Ranked, k: int | None = None) -> float:
    """Share of the top min(k, n) documents that are judged; 0 for an empty ranking.

    Judged = a qrels entry with a grade >= 0; a negative grade is trec_eval's "in the pool but
    not judged" (as in trec_eval ``unj_k``, which however divides by k, not min(k, n)).
    """
    tk = top(ranked, k)
    return sum(1 for g in tk if g is not None and g >= 0) / len(tk) if tk else 0.0


def _judged_batch(L: Layout, m: Measure) -> np.ndarray:
    rows = L.in_cut(np.flatnonzero(L.jud & (L.lab >= 0)), m.k)  # negative: pooled, not judged
    return safe_div(L.seg_count(L.grp[rows]), L.cut(m.k).astype(np.float64))


register(MeasureSpec(
    "judged", {}, cutoff=True,
    kernel=lambda m, ranked, judged_grades, mg: judged(ranked, m.k),
    batch=_judged_batch, examples=("judged@3", "judged"),
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
    "rbp_residual", {"p": P}, cutoff=True, aliases=("rbp_resid",),
    kernel=lambda m, ranked, judged_grades, mg: rbp_residual(ranked, m.k, p=m.get("p")),
    batch=_rbp_residual_batch, examples=("rbp_residual(p=0.5)", "rbp_residual(p=0.9)@3"),
))
