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
4. each measure's batch reduction (registered with it in :mod:`ragjudge.measures`) is a segment
   reduction (``np.bincount`` by target, integer ``cumsum`` over
   rank) -- mostly over the sparse rows that carry a positive grade.

The engine never names a measure: it asks each measure's spec how deep it reads the ranking
and calls its batch reduction. Semantics are those of the reference kernels beside them
(trec_eval 10.0), which the tests pin the reductions to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .data import Qrels, Run
from .errors import InputError, MetricError
from .ids import join_ids, locate, over_slices, target_ids
from .measures import Measure, canonical_measure, parse_measure, spec_of
from .measures.layout import Layout

__all__ = ["compute"]

# ----------------------------------------------------------------------------- layout
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
    pos = _positions(grp, off)
    return grp, pos, starts[grp] + pos


def _positions(grp: np.ndarray, toff: np.ndarray) -> np.ndarray:
    """Each row's 0-based position within its group (``grp`` ascending, ``toff`` the offsets),
    in slices: no second temporary as long as the rows (10M rows: 80 MB at the peak)."""
    pos = np.arange(len(grp), dtype=np.int64)

    def shift(lo: int, hi: int) -> None:
        pos[lo:hi] -= toff[grp[lo:hi]]

    over_slices(shift, len(grp))
    return pos


def _layout(qrels: Qrels, run: Run, targets: np.ndarray, depth: int | None,
            notes: dict[str, Any] | None = None, cutoff: int | None = None) -> Layout:
    qq, qoff, qdoc, qgr = qrels.arrays
    rq, roff, rdoc, rsc = run.arrays
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
    pos = _positions(grp, toff)
    # The common case is the whole run in its own order: then the ids need no gather.
    whole = (
        nt == len(rq)
        and bool(rfound.all())
        and bool((ri == np.arange(nt)).all())
        and bool((rlen == full).all())
    )
    gather = None if whole else (roff[:-1][ri] if len(roff) > 1 else ri)[grp] + pos
    r_ids = rdoc if gather is None else rdoc[gather]

    q_ids = qdoc if qrows is None else qdoc[qrows]
    q_lab = qgr if qrows is None else qgr[qrows]
    rows, qrow = join_ids(r_ids, grp, q_ids, qgrp, nt)
    jud = np.zeros(len(grp), dtype=bool)
    jud[rows] = True
    lab = np.zeros(len(grp), dtype=np.int64)
    lab[rows] = q_lab[qrow]
    if notes is not None:
        _diagnose(notes, run, ri, rfound, full, rlen, rsc if gather is None else rsc[gather],
                  grp, lab, rows, nt, cutoff)
        notes["ids_foreign_pct"], notes["id_example"], notes["qrels_id_example"] = \
            _foreign_ids(r_ids, q_ids)
    return Layout(
        nt=nt, grp=grp, pos=pos, toff=toff, nret=rlen.astype(np.int64), lab=lab, jud=jud,
        qgrp=qgrp, qlab=np.asarray(q_lab), qrels_max_grade=qrels.max_grade,
    )


def _diagnose(notes: dict[str, Any], run: Run, ri: np.ndarray, found: np.ndarray,
              full: np.ndarray, rlen: np.ndarray, scores: np.ndarray, grp: np.ndarray,
              lab: np.ndarray, rows: np.ndarray, nt: int, cutoff: int | None) -> None:
    """Counts that say when a number may mislead, from the columns the layout already built:
    rankings that meet no judged document, rankings shorter than the deepest cutoff, and ties
    (equal scores are rare in most runs, so the work past one comparison is on few rows)."""
    _, roff, _, rsc = run.arrays
    notes["queries_ranked"] = int(np.count_nonzero(full))
    notes["rows_judged"] = len(rows)  # the ranked rows the join found in the qrels
    notes["queries_meeting_qrels"] = (int(np.count_nonzero(np.bincount(grp[rows], minlength=nt)))
                                      if len(rows) else 0)
    if cutoff is not None:
        notes["cutoff"] = cutoff
        notes["queries_short"] = int(np.count_nonzero(found & (full < cutoff)))
    # Queries with any tie in their whole ranking.
    at_run = at = np.flatnonzero(rsc[1:] == rsc[:-1])
    tied_any = np.zeros(0, dtype=np.int64)
    if len(at):
        q = np.searchsorted(roff, at, side="right") - 1
        q = q[roff[q + 1] > at + 1]  # both rows in one query
        evaluated = np.zeros(max(len(roff) - 1, 0), dtype=bool)
        evaluated[ri[found]] = True
        tied_any = np.unique(q[evaluated[q]])
    notes["queries_tied_any"] = len(tied_any)
    if not len(tied_any):
        notes["queries_tied"] = 0
        return
    # Ties whose order decides a value: within the evaluated ranks between different grades,
    # or across the deepest rank evaluated (which document is in decides).
    at = at_run if scores is rsc else np.flatnonzero(scores[1:] == scores[:-1])
    at = at[(grp[at] == grp[at + 1]) & (lab[at] != lab[at + 1])]
    cut = np.flatnonzero(found & (rlen < full) & (rlen > 0))
    if len(cut):
        last = roff[:-1][ri[cut]] + rlen[cut] - 1
        cut = cut[rsc[last] == rsc[last + 1]]
    notes["queries_tied"] = len(np.union1d(grp[at], cut))


def _kind_table() -> np.ndarray:
    """Byte -> kind of character: digit 1, lower 2, upper 3, non-ASCII 4, NUL (padding) 0,
    every other byte itself (punctuation is told apart: ``-`` in UUIDs, ``_`` in corpus ids)."""
    t = np.arange(256, dtype=np.int64)
    t[ord("0"):ord("9") + 1] = 1
    t[ord("a"):ord("z") + 1] = 2
    t[ord("A"):ord("Z") + 1] = 3
    t[128:] = 4
    return t


_KIND = _kind_table()
#: ranked ids looked at for their shape; a strided sample is as good as all of them for a share
_SHAPE_SAMPLE = 2048


def _strided(ids: np.ndarray, n: int) -> np.ndarray:
    return np.ascontiguousarray(ids[:: max(len(ids) // n, 1)][:n])


def _foreign_ids(r_ids: np.ndarray, q_ids: np.ndarray) -> tuple[int, str, str]:
    """Percent of ranked ids shaped unlike every qrels id (a kind of character no qrels id has,
    or a length far outside theirs), with one example of each side: content hashes or UUIDs
    ranked against corpus ids meet few judged documents, but still some when the ranking mixes
    both, so the share of queries meeting the qrels does not show them."""
    rs, qs = _strided(r_ids, _SHAPE_SAMPLE), _strided(q_ids, 4 * _SHAPE_SAMPLE)
    if not len(rs) or not len(qs) or rs.dtype.kind != "S" or qs.dtype.kind != "S":
        return 0, "", ""
    rm = _KIND[rs.view(np.uint8).reshape(len(rs), -1)]
    qm = _KIND[qs.view(np.uint8).reshape(len(qs), -1)]
    allowed = np.zeros(256, dtype=bool)
    allowed[np.unique(qm)] = True
    allowed[0] = True
    rlen, qlen = (rm != 0).sum(axis=1), (qm != 0).sum(axis=1)
    foreign = (~allowed[rm]).any(axis=1) | (rlen > 2 * int(qlen.max()) + 2) | (2 * rlen < int(qlen.min()))
    if not foreign.any():
        return 0, "", ""
    first = int(np.flatnonzero(foreign)[0])
    return (round(100 * float(foreign.mean())), rs[first].decode("utf-8", "replace"),
            qs[0].decode("utf-8", "replace"))


# ----------------------------------------------------------------------------- API
def compute(
    qrels: Qrels,
    run: Run,
    measures: Iterable[Measure | str],
    *,
    qids: Iterable[str] | None = None,
    judged_only: bool = False,
    notes: dict[str, Any] | None = None,
) -> dict[Measure, np.ndarray]:
    """Per-query values of every measure: ``{Measure: float64 array aligned with the queries}``.

    The queries are ``qids`` if given, else every qrels query in qrels order (``Qrels.query_ids``).
    A query absent from the run gets the value of an empty ranking (trec_eval ``-c``); run queries
    outside the evaluated set are ignored. Measures may be given as specs (``"ndcg@10"``, parsed
    here) or as :class:`Measure` values (used as they are; one built by hand must be canonical).
    ``judged_only`` (trec_eval ``-J``) first removes from every ranking the documents without a
    qrels entry or with a negative label; the others move up. ``notes``, when given, is
    filled with counts that say when a value may mislead (see :func:`_diagnose`).
    """
    if not isinstance(qrels, Qrels) or not isinstance(run, Run):
        raise InputError("compute() needs a Qrels and a Run")
    ms: list[Measure] = []
    for m in measures:
        # A Measure travels as it is (checked, never parsed again); only a spec string is parsed.
        mm = canonical_measure(m) if isinstance(m, Measure) else parse_measure(m)
        if mm != m and isinstance(m, Measure):  # the result is keyed by the caller's Measure
            raise MetricError(
                f"{m!r} is not in canonical form ({mm!r}); build measures with parse_measure()"
            )
        if mm not in ms:
            ms.append(mm)
    targets = target_ids(qids, qrels.arrays[0])
    depth = _depth(qrels, ms)
    cutoffs = [m.k for m in ms if m.k is not None and spec_of(m).cutoff]
    cutoff = max(cutoffs) if cutoffs else None
    if judged_only:
        # Cutoffs count judged documents only: lay out everything, drop, then cut.
        L = _judged_only(_layout(qrels, run, targets, None, notes, cutoff), depth)
    else:
        L = _layout(qrels, run, targets, depth, notes, cutoff)
    return {m: spec_of(m).batch(L, m) for m in ms}


def _judged_only(L: Layout, depth: int | None) -> Layout:
    """The layout without the ranked documents that have no qrels entry or a negative label
    (trec_eval -J), the others moved up, and cut at ``depth``."""
    keep = L.jud & (L.lab >= 0)
    grp = L.grp[keep]
    nret = np.bincount(grp, minlength=L.nt).astype(np.int64)
    toff = np.zeros(L.nt + 1, dtype=np.int64)
    np.cumsum(nret, out=toff[1:])
    pos = _positions(grp, toff)
    lab, jud = L.lab[keep], L.jud[keep]
    if depth is not None and len(pos) and int(pos.max()) >= depth:
        cut = pos < depth
        grp, pos, lab, jud = grp[cut], pos[cut], lab[cut], jud[cut]
        nret = np.minimum(nret, depth)
        toff[1:] = np.cumsum(nret)
    return Layout(nt=L.nt, grp=grp, pos=pos, toff=toff, nret=nret, lab=lab, jud=jud,
                  qgrp=L.qgrp, qlab=L.qlab, qrels_max_grade=L.qrels_max_grade)


def _depth(qrels: Qrels, ms: Sequence[Measure]) -> int | None:
    """How many ranks to lay out: the deepest cutoff, the whole ranking (None) if a measure
    without one reads it all, and at least the largest R if a measure reads the top R."""
    depth = 0
    need_r = False
    for m in ms:
        need = spec_of(m).depth
        if need == "none":
            continue
        if need == "num_rel":
            need_r = True
        elif m.k is None:
            return None
        else:
            depth = max(depth, m.k)
    if need_r:
        rmax = int(np.diff(qrels.arrays[1]).max()) if qrels.num_queries else 0
        depth = max(depth, rmax)
    return depth or 1
