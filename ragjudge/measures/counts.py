"""Counts: num_ret, num_rel, num_rel_ret (trec_eval sums them over queries)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .common import REL
from .grammar import Measure, MeasureSpec, Ranked, register
from .layout import Layout, count_in_cut, is_rel, top

__all__ = ["num_ret", "num_rel", "num_rel_ret"]


def num_ret(ranked: Ranked, k: int | None = None) -> float:
    """Number of retrieved documents, ``min(n, k)`` (trec_eval ``num_ret``)."""
    return float(len(top(ranked, k)))


def _num_ret_batch(L: Layout, m: Measure) -> np.ndarray:
    return L.cut(m.k).astype(np.float64)


register(MeasureSpec(
    "num_ret", {}, cutoff=True, pool_free=True, aggregate="sum", unit=False,
    reference=num_ret,
    kernel=lambda m, ranked, judged, mg: num_ret(ranked, m.k),
    batch=_num_ret_batch, examples=("num_ret", "num_ret@2"),
))


def num_rel(judged: Sequence[int], rel: int = 1) -> float:
    """R = number of qrels entries with grade >= rel (trec_eval ``num_rel``)."""
    return float(sum(1 for g in judged if g >= rel))


def _num_rel_batch(L: Layout, m: Measure) -> np.ndarray:
    return L.num_rel(int(m.get("rel"))).copy()


register(MeasureSpec(
    "num_rel", {"rel": REL}, cutoff=False, aggregate="sum", unit=False, depth="none",
    reference=num_rel,
    kernel=lambda m, ranked, judged, mg: num_rel(judged, m.get("rel")),
    batch=_num_rel_batch, examples=("num_rel",),
))


def num_rel_ret(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """Relevant documents among the top k (trec_eval ``num_rel_ret``)."""
    return float(sum(1 for g in top(ranked, k) if is_rel(g, rel)))


def _num_rel_ret_batch(L: Layout, m: Measure) -> np.ndarray:
    rows, g, _ = L.rel_rank(int(m.get("rel")))
    return count_in_cut(L, rows, g, m.k)


register(MeasureSpec(
    "num_rel_ret", {"rel": REL}, cutoff=True, pool_free=True, aggregate="sum", unit=False,
    reference=num_rel_ret,
    kernel=lambda m, ranked, judged, mg: num_rel_ret(ranked, m.k, m.get("rel")),
    batch=_num_rel_ret_batch, examples=("num_rel_ret", "num_rel_ret@3"),
))
