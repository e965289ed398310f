"""Vectorized batch evaluation of ranking measures over every query at once.

:func:`compute` works on the columnar arrays of :class:`~ragjudge.data.Qrels` and
:class:`~ragjudge.data.Run` without Python loops over queries and without Python strings:

1. the evaluated queries ("targets") are located in both inputs with ``searchsorted`` on the
   sorted query-id columns;
2. the ranked rows of every target are laid out flat (``grp`` = target, ``pos`` = 0-based rank);
3. every ranked row gets its qrels grade by a hash join: document ids are hashed to uint64
   (width-independent, 8 bytes at a time, read in place), the target index goes in the high
   bits, and the keys are looked up in the sorted qrels keys (behind a one-hash Bloom filter,
   since most retrieved documents are unjudged); every hit is then verified byte-for-byte, and
   a collision between two qrels keys makes the join retry with another seed, so the result
   is exact;
4. each measure is a segment reduction (``np.bincount`` by target, integer ``cumsum`` over
   rank) -- mostly over the sparse rows that carry a positive grade.

Semantics are those of :mod:`ragjudge.kernels` (trec_eval 10.0), which the tests pin this
module to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .data import Qrels, Run
from .errors import InputError, MetricError
from .ids import join_ids, locate, target_ids
from .measures import Measure, parse_measure

__all__ = ["compute"]

# ----------------------------------------------------------------------------- layout
@dataclass
class _Layout:
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
    cache: dict = field(default_factory=dict)

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


def _lengths(offsets: np.ndarray, i: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Segment length of each located key (0 where not found)."""
    if len(offsets) < 2:
        return np.zeros(len(i), dtype=np.int64)
    return np.where(found, np.diff(offsets)[i], 0)


def _expand(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, position-in-group, source index) for contiguous segments ``starts + [0, len)``."""
    nt = len(lengths)
    off = np.zeros(nt + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    grp = np.repeat(np.arange(nt, dtype=np.int64), lengths)
    pos = np.arange(off[-1], dtype=np.int64) - off[grp]
    return grp, pos, starts[grp] + pos


def _layout(qrels: Qrels, run: Run, targets: np.ndarray, depth: int | None) -> _Layout:
    qq, qoff, qdoc, qgr = qrels.arrays
    rq, roff, rdoc, _ = run.arrays
    nt = len(targets)

    qi, qfound = locate(targets, qq)
    qlen = _lengths(qoff, qi, qfound)
    if targets is qq:  # the default: every qrels query, in qrels order -- no gather needed
        qgrp = np.repeat(np.arange(nt, dtype=np.int64), qlen)
        qrows = None
    else:
        qgrp, _, qrows = _expand(qoff[:-1][qi] if len(qoff) > 1 else qi, qlen)

    ri, rfound = locate(targets, rq)
    full = _lengths(roff, ri, rfound)
    rlen = full if depth is None else np.minimum(full, depth)
    toff = np.zeros(nt + 1, dtype=np.int64)
    np.cumsum(rlen, out=toff[1:])
    grp = np.repeat(np.arange(nt, dtype=np.int64), rlen)
    pos = np.arange(toff[-1], dtype=np.int64) - toff[grp]
    # The common case is the whole run in its own order: then the ids need no gather.
    whole = (
        nt == len(rq)
        and bool(rfound.all())
        and bool((ri == np.arange(nt)).all())
        and bool((rlen == full).all())
    )
    r_ids = rdoc if whole else rdoc[(roff[:-1][ri] if len(roff) > 1 else ri)[grp] + pos]

    q_ids = qdoc if qrows is None else qdoc[qrows]
    q_lab = qgr if qrows is None else qgr[qrows]
    rows, qrow = join_ids(r_ids, grp, q_ids, qgrp, nt)
    jud = np.zeros(len(grp), dtype=bool)
    jud[rows] = True
    lab = np.zeros(len(grp), dtype=np.int64)
    lab[rows] = q_lab[qrow]
    return _Layout(
        nt=nt, grp=grp, pos=pos, toff=toff, nret=rlen.astype(np.int64), lab=lab, jud=jud,
        qgrp=qgrp, qlab=np.asarray(q_lab), qrels_max_grade=qrels.max_grade,
    )


# ----------------------------------------------------------------------------- measures
def _count_in_cut(L: _Layout, rows: np.ndarray, g: np.ndarray, k: int | None) -> np.ndarray:
    if k is None:
        return L.seg_count(g)
    keep = L.pos[rows] < k
    return L.seg_count(g[keep])


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros(len(num), dtype=np.float64)
    nz = den != 0
    out[nz] = num[nz] / den[nz]
    return out


def _gain(lab: np.ndarray, kind: str) -> np.ndarray:
    g = lab.astype(np.float64)
    if kind == "exp":
        g = np.exp2(g) - 1.0
    return g


def _discount(pos: np.ndarray, kind: str) -> np.ndarray:
    if kind == "jarvelin":
        d = np.log2(pos.astype(np.float64) + 1.0)
        d[pos == 0] = 1.0  # rank 1 is not discounted
        return d
    return np.log2(pos.astype(np.float64) + 2.0)


def _within_group_pos(g: np.ndarray) -> np.ndarray:
    """0-based position of each element inside its run of equal (sorted) group values."""
    n = len(g)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(g[1:], g[:-1], out=first[1:])
    idx = np.arange(n, dtype=np.int64)
    return idx - np.maximum.accumulate(np.where(first, idx, 0))


def _ndcg(L: _Layout, m: Measure) -> np.ndarray:
    k, gain, ideal, disc = m.k, m.get("gain"), m.get("ideal"), m.get("discount")
    rows = np.flatnonzero(L.jud & (L.lab > 0))
    if k is not None:
        rows = rows[L.pos[rows] < k]
    g = L.grp[rows]
    gains = _gain(L.lab[rows], gain)
    dcg = L.seg_sum(gains / _discount(L.pos[rows], disc), g)
    if ideal == "all":
        sel = np.flatnonzero(L.qlab > 0)
        ig = _gain(L.qlab[sel], gain)
        igrp = L.qgrp[sel]
    else:
        ig, igrp = gains, g
    order = np.lexsort((-ig, igrp))
    ig, igrp = ig[order], igrp[order]
    ipos = _within_group_pos(igrp)
    if k is not None:
        keep = ipos < k
        ig, igrp, ipos = ig[keep], igrp[keep], ipos[keep]
    idcg = L.seg_sum(ig / _discount(ipos, disc), igrp)
    return _safe_div(dcg, idcg)


def _seg_exclusive_cumprod(values: np.ndarray, g: np.ndarray) -> np.ndarray:
    """prod of ``values`` over the earlier elements of the same (sorted) group; 1 for the first.

    A level-by-level scan: step j handles the j-th element of every group, so the products are
    formed left to right exactly as a per-query loop would.
    """
    n = len(values)
    out = np.ones(n, dtype=np.float64)
    if n == 0:
        return out
    j = _within_group_pos(g)
    order = np.argsort(j, kind="stable")
    bounds = np.searchsorted(j[order], np.arange(int(j.max()) + 2))
    for lev in range(1, int(j.max()) + 1):
        idx = order[bounds[lev]:bounds[lev + 1]]
        out[idx] = out[idx - 1] * values[idx - 1]
    return out


def _err(L: _Layout, m: Measure) -> np.ndarray:
    k, max_grade = m.k, m.get("max_grade")
    rows = np.flatnonzero(L.jud & (L.lab > 0))
    if k is not None:
        rows = rows[L.pos[rows] < k]
    lab = L.lab[rows]
    if len(lab) and int(lab.max()) > max_grade:
        raise MetricError(
            f"{m} met grade {int(lab.max())} above max_grade={max_grade}; "
            f"use err(max_grade={int(lab.max())})"
        )
    r = (np.exp2(lab.astype(np.float64)) - 1.0) / 2.0**max_grade
    g = L.grp[rows]
    stay = _seg_exclusive_cumprod(1.0 - r, g)
    return L.seg_sum(stay * r / (L.pos[rows] + 1.0), g)


def _rbp(L: _Layout, m: Measure) -> np.ndarray:
    k, p = m.k, float(m.get("p"))
    if m.get("gain") == "binary":
        rows = L.rel_rows(int(m.get("rel")))
    else:
        rows = np.flatnonzero(L.jud & (L.lab > 0))
    if k is not None:
        rows = rows[L.pos[rows] < k]
    if m.get("gain") == "binary":
        u = np.ones(len(rows))
    else:
        mg = m.get("max_grade")
        mg = L.qrels_max_grade if mg is None else int(mg)
        lab = L.lab[rows]
        if len(lab) and int(lab.max()) > mg:
            raise MetricError(
                f"{m} met grade {int(lab.max())} above max_grade={mg}; raise max_grade"
            )
        u = lab / mg
    w = np.power(p, L.pos[rows].astype(np.float64))
    return (1.0 - p) * L.seg_sum(u * w, L.grp[rows])


def _rbp_residual(L: _Layout, m: Measure) -> np.ndarray:
    k, p = m.k, float(m.get("p"))
    rows = np.flatnonzero(~L.jud | (L.lab < 0))  # negative grade: pooled but not judged
    if k is not None:
        rows = rows[L.pos[rows] < k]
    s = L.seg_sum(np.power(p, L.pos[rows].astype(np.float64)), L.grp[rows])
    return (1.0 - p) * s + np.power(p, L.cut(k).astype(np.float64))


def _bpref(L: _Layout, m: Measure) -> np.ndarray:
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
    return _safe_div(L.seg_sum(term, g), R)


def _judged(L: _Layout, m: Measure) -> np.ndarray:
    rows = np.flatnonzero(L.jud & (L.lab >= 0))  # negative grade: pooled but not judged
    if m.k is not None:
        rows = rows[L.pos[rows] < m.k]
    return _safe_div(L.seg_count(L.grp[rows]), L.cut(m.k).astype(np.float64))


def _measure(L: _Layout, m: Measure) -> np.ndarray:
    name, k = m.name, m.k
    if name == "num_ret":
        return L.cut(k).astype(np.float64)
    if name == "judged":
        return _judged(L, m)
    if name == "ndcg":
        return _ndcg(L, m)
    if name == "err":
        return _err(L, m)
    if name == "rbp":
        return _rbp(L, m)
    if name == "rbp_residual":
        return _rbp_residual(L, m)
    if name == "bpref":
        return _bpref(L, m)
    rel = int(m.get("rel"))
    R = L.num_rel(rel)
    if name == "num_rel":
        return R.copy()
    rows, g, cnt = L.rel_rank(rel)
    if name in ("num_rel_ret", "hit", "recall", "recall_all", "precision", "f1"):
        found = _count_in_cut(L, rows, g, k)
        if name == "num_rel_ret":
            return found
        if name == "hit":
            return (found > 0).astype(np.float64)
        if name == "recall":
            return _safe_div(found, R)
        if name == "recall_all":
            return ((R > 0) & (found == R)).astype(np.float64)
        prec = found / k if k is not None else _safe_div(found, L.nret.astype(np.float64))
        if name == "precision":
            return prec
        rec = _safe_div(found, R)
        return _safe_div(2.0 * prec * rec, prec + rec)
    if name == "rprec":
        keep = L.pos[rows] < R[g]
        return _safe_div(L.seg_count(g[keep]), R)
    if name == "mrr":
        frows, fg = L.first_rel(rel)
        rank = L.pos[frows] + 1.0
        if k is not None:
            keep = rank <= k
            frows, fg, rank = frows[keep], fg[keep], rank[keep]
        return L.seg_sum(1.0 / rank, fg)
    if name == "map":
        rank = L.pos[rows] + 1.0
        prec = cnt / rank
        if k is not None:
            keep = rank <= k
            prec, g = prec[keep], g[keep]
        return _safe_div(L.seg_sum(prec, g), R)
    raise MetricError(f"the engine has no implementation of {m}")  # pragma: no cover


# ----------------------------------------------------------------------------- API
def compute(
    qrels: Qrels,
    run: Run,
    measures: Iterable[Measure | str],
    *,
    qids: Iterable[str] | None = None,
) -> dict[Measure, np.ndarray]:
    """Per-query values of every measure: ``{Measure: float64 array aligned with the queries}``.

    The queries are ``qids`` if given, else every qrels query in qrels order (``Qrels.query_ids``).
    A query absent from the run gets the value of an empty ranking (trec_eval ``-c``); run queries
    outside the evaluated set are ignored. Measures may be given as specs (``"ndcg@10"``).
    """
    if not isinstance(qrels, Qrels) or not isinstance(run, Run):
        raise InputError("compute() needs a Qrels and a Run")
    ms: list[Measure] = []
    for m in measures:
        mm = parse_measure(m)  # validates a Measure built by hand, too
        if isinstance(m, Measure) and mm != m:
            raise MetricError(
                f"{m!r} is not in canonical form ({mm!r}); build measures with parse_measure()"
            )
        if mm not in ms:
            ms.append(mm)
    targets = target_ids(qids, qrels.arrays[0])
    # Only as deep as the deepest cutoff, unless a measure needs the whole ranking.
    depth: int | None = 0
    for m in ms:
        if m.k is None and m.name not in ("num_rel",):
            if m.name == "rprec":
                continue
            depth = None
            break
        if m.k is not None:
            depth = max(depth, m.k)  # type: ignore[type-var]
    if depth is not None and any(m.name == "rprec" for m in ms):
        rmax = int(np.diff(qrels.arrays[1]).max()) if qrels.num_queries else 0
        depth = max(depth, rmax)
    if depth == 0:
        depth = 1
    L = _layout(qrels, run, targets, depth)
    return {m: _measure(L, m) for m in ms}
