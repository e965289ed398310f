"""Rank-based binary measures: mrr, map, gm_map, bpref, infap, iprec_at_recall, 11pt_avg.

Each measure is one unit: its reference kernel (formula + source), its batch reduction over a
:class:`~ragjudge.measures.layout.Layout`, and its registration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .common import REL
from .counts import num_rel
from .grammar import Measure, MeasureSpec, Param, Ranked, choice, register, unit_number
from .layout import Layout, is_rel, safe_div, seg_suffix_max, top

__all__ = ["mrr", "average_precision", "gm_average_precision", "bpref", "infap",
           "iprec_at_recall", "eleven_pt_avg"]


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
    "mrr", {"rel": REL}, cutoff=True, pool_free=True, aliases=("recip_rank",),
    reference=mrr,
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
    reference=average_precision,
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
    reference=bpref,
    kernel=lambda m, ranked, judged, mg: bpref(ranked, judged, m.get("rel")),
    batch=_bpref_batch, examples=("bpref", "bpref(rel=2)"),
))


# ----------------------------------------------------------------------------- gm_map
def gm_average_precision(ranked: Ranked, judged: Sequence[int], rel: int = 1) -> float:
    """trec_eval ``gm_map``: per query AP (see ``map``); over queries the geometric mean
    exp(mean log max(AP, 1e-5)) (Robertson, "On GMAP", CIKM 2006), which rewards consistency."""
    return average_precision(ranked, judged, None, rel)


register(MeasureSpec(
    "gm_map", {"rel": REL}, cutoff=False, aggregate="gmean",
    reference=gm_average_precision,
    kernel=lambda m, ranked, judged, mg: gm_average_precision(ranked, judged, m.get("rel")),
    batch=_map_batch, examples=("gm_map",),
))


# ----------------------------------------------------------------------------- infAP
INFAP_EPSILON = 1e-5


def infap(ranked: Ranked, judged: Sequence[int], rel: int = 1) -> float:
    """Inferred AP (Yilmaz & Aslam, CIKM 2006), exactly as trec_eval ``infAP`` computes it.

    Over the ranking, for each judged relevant document at 0-based rank j > 0, with r, n, u
    the relevant, judged non-relevant and pooled-but-unjudged (negative label) documents above
    it: 1/(j+1) + j/(j+1) * ((r + n + u)/j) * ((r + e)/(r + n + 2e)), e = 1e-5; 1 at j = 0.
    Documents without a qrels entry count only through j. The sum is divided by R (0 if R = 0).
    """
    nonrel = found = unjudged = 0
    total = 0.0
    for j, g in enumerate(ranked):
        if g is None:
            continue
        if g < 0:
            unjudged += 1
        elif g < rel:
            nonrel += 1
        else:
            found += 1
            if j == 0:
                total += 1.0
            else:
                fj = float(j)
                total += 1.0 / (fj + 1.0) + (fj / (fj + 1.0)) * (
                    (found - 1 + nonrel + unjudged) / fj) * (
                    (found - 1 + INFAP_EPSILON) / (found - 1 + nonrel + 2 * INFAP_EPSILON))
    r = num_rel(judged, rel)
    return total / r if r else total


def _infap_batch(L: Layout, m: Measure) -> np.ndarray:
    rel = int(m.get("rel"))
    rows, g, cnt = L.rel_rank(rel)

    def above(flags: np.ndarray) -> np.ndarray:  # flagged rows above each relevant row
        cs = np.cumsum(flags.astype(np.int64))
        base = np.concatenate(([0], cs))[L.toff[:-1]]
        return cs[rows] - base[g]

    nonrel = above(L.jud & (L.lab >= 0) & (L.lab < rel))
    unjudged = above(L.jud & (L.lab < 0))
    before = cnt - 1
    fj = L.pos[rows].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        term = 1.0 / (fj + 1.0) + (fj / (fj + 1.0)) * ((before + nonrel + unjudged) / fj) * (
            (before + INFAP_EPSILON) / ((before + nonrel) + 2 * INFAP_EPSILON))
    term[fj == 0] = 1.0
    return safe_div(L.seg_sum(term, g), L.num_rel(rel))  # no relevant document: sum 0


register(MeasureSpec(
    "infap", {"rel": REL}, cutoff=False,
    reference=infap,
    kernel=lambda m, ranked, judged, mg: infap(ranked, judged, m.get("rel")),
    batch=_infap_batch, examples=("infap", "infap(rel=2)"),
))


# ----------------------------------------------------------------------------- interpolated precision
#: How a recall level x becomes a number of relevant documents c: trec_eval 10.0 rounds x * R
#: (``round``); trec_eval 9 -- embedded in pytrec_eval, so ir_measures' IPrec -- truncated
#: x * R + 0.9 (``trec9``).
_ROUNDING = {"round": 0.5, "trec9": 0.9}


def _level_count(x: float, R: int, rounding: str) -> int:
    return int(math.floor(x * R + _ROUNDING[rounding]))


def _iprec_levels(ranked: Ranked, judged: Sequence[int], levels: Sequence[float],
                  rel: int, rounding: str = "round") -> list[float]:
    # trec_eval's loop, read from the bottom of the ranking up: the interpolated precision at
    # recall level x is the best precision at or below the rank where round(x * R) relevant
    # documents have been seen; levels beyond the relevant retrieved stay 0.
    R = int(num_rel(judged, rel))
    n = len(ranked)
    found = sum(1 for g in ranked if is_rel(g, rel))
    cuts = [_level_count(x, R, rounding) for x in levels]
    out = [0.0] * len(levels)
    if n == 0:
        return out
    cur = len(levels) - 1
    while cur >= 0 and cuts[cur] > found:
        cur -= 1
    best = found / n
    so_far = found
    i = n
    while i > 0 and so_far > 0:
        best = max(best, so_far / i)
        if is_rel(ranked[i - 1], rel):
            while cur >= 0 and so_far == cuts[cur]:
                out[cur] = best
                cur -= 1
            so_far -= 1
        i -= 1
    while cur >= 0:
        out[cur] = best
        cur -= 1
    return out


def iprec_at_recall(ranked: Ranked, judged: Sequence[int], recall: float = 0.0,
                    rel: int = 1, rounding: str = "round") -> float:
    """Interpolated precision at a recall level, trec_eval ``iprec_at_recall_x``.

    IP(x) = max precision at any rank at or after the rank of the c-th relevant document,
    c = round(x * R) (halves up; c = 0 means from the first relevant one); 0 when fewer than c
    relevant documents are retrieved (Salton & McGill 1983; the TREC recall-precision graph).
    ``rounding="trec9"``: c = floor(x * R + 0.9), as trec_eval 9 / pytrec_eval.
    """
    return _iprec_levels(ranked, judged, [recall], rel, rounding)[0]


ELEVEN_POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def eleven_pt_avg(ranked: Ranked, judged: Sequence[int], rel: int = 1,
                  rounding: str = "round") -> float:
    """trec_eval ``11pt_avg``: mean of IP(x) at x = 0.0, 0.1, ..., 1.0 (summed from 1.0 down)."""
    vals = _iprec_levels(ranked, judged, ELEVEN_POINTS, rel, rounding)
    total = 0.0
    for v in reversed(vals):
        total += v
    return total / len(ELEVEN_POINTS)


def _iprec_batch_levels(L: Layout, m: Measure, levels: Sequence[float]) -> list[np.ndarray]:
    rel = int(m.get("rel"))
    add = _ROUNDING[m.get("rounding")]
    rows, g, cnt = L.rel_rank(rel)
    ip = seg_suffix_max(cnt / (L.pos[rows] + 1.0), g)
    found = L.seg_count(g).astype(np.int64)
    start = np.searchsorted(g, np.arange(L.nt))
    R = L.num_rel(rel)
    out = []
    for x in levels:
        c = np.floor(x * R + add).astype(np.int64)
        ok = (found > 0) & (c <= found)
        v = np.zeros(L.nt, dtype=np.float64)
        v[ok] = ip[start[ok] + np.maximum(c[ok], 1) - 1]
        out.append(v)
    return out


_ROUNDING_PARAM = Param("round", choice(*_ROUNDING), "round (trec_eval 10) or trec9")


def _iprec_batch(L: Layout, m: Measure) -> np.ndarray:
    return _iprec_batch_levels(L, m, [float(m.get("recall"))])[0]


register(MeasureSpec(
    "iprec_at_recall",
    {"recall": Param(0.0, unit_number, "a number between 0 and 1 (recall level)",
                     always_show=True), "rel": REL, "rounding": _ROUNDING_PARAM},
    cutoff=False, aliases=("iprec",),
    reference=iprec_at_recall,
    kernel=lambda m, ranked, judged, mg: iprec_at_recall(ranked, judged, m.get("recall"),
                                                         m.get("rel"), m.get("rounding")),
    batch=_iprec_batch,
    examples=("iprec_at_recall(recall=0.0)", "iprec_at_recall(recall=0.5)",
              "iprec_at_recall(recall=1.0,rel=2)", "iprec(recall=0.25)",
              "iprec(recall=0.3,rounding=trec9)"),
))


def _eleven_batch(L: Layout, m: Measure) -> np.ndarray:
    total = np.zeros(L.nt, dtype=np.float64)
    for v in reversed(_iprec_batch_levels(L, m, ELEVEN_POINTS)):
        total += v
    return total / len(ELEVEN_POINTS)


register(MeasureSpec(
    "11pt_avg", {"rel": REL, "rounding": _ROUNDING_PARAM}, cutoff=False, aliases=("11pt",),
    reference=eleven_pt_avg,
    kernel=lambda m, ranked, judged, mg: eleven_pt_avg(ranked, judged, m.get("rel"),
                                                       m.get("rounding")),
    batch=_eleven_batch, examples=("11pt_avg", "11pt_avg(rel=2)", "11pt_avg(rounding=trec9)"),
))
