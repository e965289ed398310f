"""The two views a measure is computed on, and the helpers its reductions share.

* one query (reference kernels): ``ranked`` -- the grades of the retrieved documents in rank
  order, ``None`` where a document has no qrels entry (trec_eval's "not in pool") -- and
  ``judged`` -- the grades of every qrels entry of the query;
* every query at once (batch reductions): a :class:`Layout`, the flat ranked rows of all
  evaluated queries with their grades, built by :mod:`ragjudge.engine`.

Conventions (trec_eval 10.0): a document is relevant when its grade is ``>= rel``; a negative
grade means "in the pool but not judged"; a ratio whose denominator is 0 is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .grammar import Ranked

__all__ = [
    "Layout",
    "top",
    "is_rel",
    "safe_div",
    "count_in_cut",
    "within_group_pos",
    "seg_exclusive_cumprod",
    "seg_suffix_max",
]


# ----------------------------------------------------------------------------- one query
def top(ranked: Ranked, k: int | None) -> Ranked:
    """The first ``k`` ranks (all without a cutoff)."""
    return ranked if k is None else ranked[:k]


def is_rel(g: int | None, rel: int) -> bool:
    """Whether a retrieved grade counts as relevant at threshold ``rel``."""
    return g is not None and g >= rel


# ----------------------------------------------------------------------------- all queries
@dataclass
class Layout:
    """Flat ranked rows of every evaluated query ("target"), grouped by target in rank order."""

    nt: int
    grp: np.ndarray  # target of each ranked row
    pos: np.ndarray  # 0-based rank of each ranked row
    toff: np.ndarray  # offsets of the ranked rows per target (nt + 1)
    nret: np.ndarray  # ranked rows per target (after the depth limit)
    lab: np.ndarray  # grade of each ranked row (0 where unjudged)
    jud: np.ndarray  # ranked row has a qrels entry
    qgrp: np.ndarray  # target of each gathered qrels row
    qlab: np.ndarray  # grade of each gathered qrels row
    qrels_max_grade: int
    cache: dict[Any, Any] = field(default_factory=dict)

    def seg_sum(self, values: np.ndarray, grp: np.ndarray) -> np.ndarray:
        return np.bincount(grp, weights=values, minlength=self.nt).astype(np.float64, copy=False)

    def seg_count(self, grp: np.ndarray) -> np.ndarray:
        return np.bincount(grp, minlength=self.nt).astype(np.float64)

    # -- cached building blocks ------------------------------------------------------
    def rel_rows(self, rel: int) -> np.ndarray:
        key = ("rel_rows", rel)
        if key not in self.cache:
            self.cache[key] = np.flatnonzero(self.jud & (self.lab >= rel))
        return self.cache[key]

    def num_rel(self, rel: int) -> np.ndarray:
        key = ("num_rel", rel)
        if key not in self.cache:
            self.cache[key] = self.seg_count(self.qgrp[self.qlab >= rel])
        return self.cache[key]

    def rel_rank(self, rel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, target, 1-based count of relevant docs up to and including the row)."""
        key = ("rel_rank", rel)
        if key not in self.cache:
            rows = self.rel_rows(rel)
            g = self.grp[rows]
            first = np.empty(len(rows), dtype=bool)
            first[:1] = True
            np.not_equal(g[1:], g[:-1], out=first[1:])
            idx = np.arange(len(rows), dtype=np.int64)
            starts = np.maximum.accumulate(np.where(first, idx, 0))
            self.cache[key] = (rows, g, idx - starts + 1, first)
        return self.cache[key][:3]

    def first_rel(self, rel: int) -> tuple[np.ndarray, np.ndarray]:
        self.rel_rank(rel)
        rows, g, _, first = self.cache[("rel_rank", rel)]
        return rows[first], g[first]

    def cut(self, k: int | None) -> np.ndarray:
        """Ranked rows per target within the cutoff."""
        return self.nret if k is None else np.minimum(self.nret, k)

    def in_cut(self, rows: np.ndarray, k: int | None) -> np.ndarray:
        """The rows among ``rows`` ranked within the cutoff."""
        return rows if k is None else rows[self.pos[rows] < k]


def count_in_cut(L: Layout, rows: np.ndarray, g: np.ndarray, k: int | None) -> np.ndarray:
    """Per-target count of ``rows`` (targets ``g``) ranked within the cutoff."""
    if k is None:
        return L.seg_count(g)
    keep = L.pos[rows] < k
    return L.seg_count(g[keep])


def safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` with 0 where ``den`` is 0."""
    out = np.zeros(len(num), dtype=np.float64)
    nz = den != 0
    out[nz] = num[nz] / den[nz]
    return out


def within_group_pos(g: np.ndarray) -> np.ndarray:
    """0-based position of each element inside its run of equal (sorted) group values."""
    n = len(g)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(g[1:], g[:-1], out=first[1:])
    idx = np.arange(n, dtype=np.int64)
    return idx - np.maximum.accumulate(np.where(first, idx, 0))


def seg_exclusive_cumprod(values: np.ndarray, g: np.ndarray) -> np.ndarray:
    """prod of ``values`` over the earlier elements of the same (sorted) group; 1 for the first.

    A level-by-level scan: step j handles the j-th element of every group, so the products are
    formed left to right exactly as a per-query loop would.
    """
    n = len(values)
    out = np.ones(n, dtype=np.float64)
    if n == 0:
        return out
    j = within_group_pos(g)
    order = np.argsort(j, kind="stable")
    bounds = np.searchsorted(j[order], np.arange(int(j.max()) + 2))
    for lev in range(1, int(j.max()) + 1):
        idx = order[bounds[lev]:bounds[lev + 1]]
        out[idx] = out[idx - 1] * values[idx - 1]
    return out


def seg_suffix_max(values: np.ndarray, g: np.ndarray) -> np.ndarray:
    """max of ``values`` over each element and the later elements of the same (sorted) group.

    Exact: the values are replaced by their rank among all values, offset per group so that a
    running maximum over the reversed array restarts at every group.
    """
    n = len(values)
    if n == 0:
        return values.astype(np.float64)
    order = np.argsort(values, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    key = (g.astype(np.int64) * -n - n) + rank  # later groups lower: reversed, offsets rise
    run = np.maximum.accumulate(key[::-1])[::-1]
    return values[order[run - (g.astype(np.int64) * -n - n)]].astype(np.float64)
