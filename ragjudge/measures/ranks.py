"""Rank-based binary measures: mrr, map, bpref.

Each measure is one unit: its reference kernel (formula + source), its batch reduction over a
:class:`~ragjudge.measures.layout.Layout`, and its registration.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .common import REL
from .counts import num_rel
from .grammar import Measure, MeasureSpec, Ranked, register
from .layout import Layout, is_rel, safe_div, top

__all__ = ["mrr", "average_precision", "bpref"]


# ----------------------------------------------------------------------------- mrr
def mrr(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """1 / rank of the first relevant document in the top k, else 0 (trec_eval ``recip_rank``)."""
    for i, g in enumerate(top(ranked, k)):
        if is_rel(g, rel):
            return 1.0 / (i + 1)
    return 0.0


def _mrr_batch(L: Layout, m: Measure) -> np.ndarray:
    frows, fg = L.first_rel(int(m.get("rel")))
    rank = L.pos[frows] + 1.0
    if m.k is not None:
        keep = rank <= m.k
        frows, fg, rank = frows[keep], fg[keep], rank[keep]
    return L.seg_sum(1.0 / rank, fg)


register(MeasureSpec(
    "mrr", {"rel": REL}, cutoff=True, aliases=("recip_rank",),
    kernel=lambda m, ranked, judged, mg: mrr(ranked, m.k, m.get("rel")),
    batch=_mrr_batch, examples=("mrr", "mrr@2", "mrr(rel=3)"),
))


# ----------------------------------------------------------------------------- map
def average_precision(
    ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1
) -> float:
    """AP@k = (1/R) * sum over relevant ranks r <= k of precision@r; 0 when R = 0.

    Divides by all R relevant documents, not by min(R, k): trec_eval ``map`` / ``map_cut_k``.
    """
    r = num_rel(judged, rel)
    if not r:
        return 0.0
    found = 0
    total = 0.0
    for i, g in enumerate(top(ranked, k)):
        if is_rel(g, rel):
            found += 1
            total += found / (i + 1)
    return total / r


def _map_batch(L: Layout, m: Measure) -> np.ndarray:
    rel = int(m.get("rel"))
    rows, g, cnt = L.rel_rank(rel)
    rank = L.pos[rows] + 1.0
    prec = cnt / rank
    if m.k is not None:
        keep = rank <= m.k
        prec, g = prec[keep], g[keep]
    return safe_div(L.seg_sum(prec, g), L.num_rel(rel))


register(MeasureSpec(
    "map", {"rel": REL}, cutoff=True, cut_names=("map_cut",),
    kernel=lambda m, ranked, judged, mg: average_precision(ranked, judged, m.k, m.get("rel")),
    batch=_map_batch, examples=("map", "map@3", "map(rel=2)"),
))


# ----------------------------------------------------------------------------- bpref
def bpref(ranked: Ranked, judged: Sequence[int], rel: int = 1) -> float:
    """bpref (Buckley & Voorhees, SIGIR 2004), as trec_eval computes it.

    bpref = (1/R) * sum over retrieved relevant d of (1 - min(n_d, R) / min(N, R)), n_d =
    judged non-relevant (0 <= grade < rel) documents ranked above d, N = judged non-relevant
    in the qrels; a term is 1 when n_d = 0; unjudged and negative grades are skipped; 0 if R = 0.
    """
    r = int(num_rel(judged, rel))
    if not r:
        return 0.0
    n_nonrel = sum(1 for g in judged if 0 <= g < rel)
    above = 0
    total = 0.0
    for g in ranked:
        if g is None or g < 0:
            continue
        if g < rel:
            above += 1
        elif above:
            total += 1.0 - min(above, r) / min(n_nonrel, r)
        else:
            total += 1.0
    return total / r


def _bpref_batch(L: Layout, m: Measure) -> np.ndarray:
    rel = int(m.get("rel"))
    R = L.num_rel(rel)
    N = L.seg_count(L.qgrp[(L.qlab >= 0) & (L.qlab < rel)])
    nonrel = (L.jud & (L.lab >= 0) & (L.lab < rel)).astype(np.int64)
    cs = np.cumsum(nonrel)
    base = np.concatenate(([0], cs))[L.toff[:-1]]
    rows = L.rel_rows(rel)
    g = L.grp[rows]
    above = (cs[rows] - base[g]).astype(np.float64)
    Rg, Ng = R[g], N[g]
    term = np.ones(len(rows))
    has = above > 0
    term[has] = 1.0 - np.minimum(above[has], Rg[has]) / np.minimum(Ng[has], Rg[has])
    return safe_div(L.seg_sum(term, g), R)


register(MeasureSpec(
    "bpref", {"rel": REL}, cutoff=False,
    kernel=lambda m, ranked, judged, mg: bpref(ranked, judged, m.get("rel")),
    batch=_bpref_batch, examples=("bpref", "bpref(rel=2)"),
))
