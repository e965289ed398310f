"""Immutable columnar relevance judgments (:class:`Qrels`) and rankings (:class:`Run`).

Both store one flat array per column, grouped by query, so the batch engine can evaluate
every query in one vectorized pass:

* ``qids``    -- unique query ids, UTF-8 bytes (numpy ``S`` dtype), sorted ascending
  (byte order == ``strcmp`` order == trec_eval's query order);
* ``offsets`` -- int64, ``len(qids) + 1``; query ``i`` owns rows ``offsets[i]:offsets[i+1]``;
* ``docids``  -- UTF-8 bytes (``S`` dtype);
* ``grades`` (Qrels, int64, rows sorted by docid ascending within a query) or
  ``scores`` (Run, float64, rows in trec_eval rank order: score descending, ties broken by
  docid descending in ``strcmp`` order).

Ids are kept as UTF-8 bytes because byte order is exactly trec_eval's tie-breaking order and
because it costs a fraction of the memory of Python strings on 10-million-line runs.
All arrays are read-only; every operation returns a new object.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from .errors import InputError

__all__ = ["Qrels", "Run", "Dedup"]

Dedup = Literal["error", "first"]


# ----------------------------------------------------------------------------- helpers
def _to_bytes_array(values: Iterable[Any] | np.ndarray) -> np.ndarray:
    """Ids as a numpy ``S`` array of UTF-8 bytes."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "S":
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind == "U":
        return np.char.encode(values, "utf-8") if values.size else values.astype("S1")
    items = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in values]
    if not items:
        return np.zeros(0, dtype="S1")
    return np.array(items, dtype=bytes)


def _decode(b: bytes) -> str:
    return b.decode("utf-8")


def _freeze(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def _group(sorted_qids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique query ids and offsets of a qid column that is already grouped and sorted."""
    n = len(sorted_qids)
    if n == 0:
        return np.zeros(0, dtype="S1"), np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], sorted_qids[1:] != sorted_qids[:-1])))
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = n
    return sorted_qids[starts], offsets


def _line_of(index: int, line_numbers: np.ndarray | None) -> int:
    return int(line_numbers[index]) if line_numbers is not None else index + 1


def _dedup_sorted(
    qids: np.ndarray,
    docids: np.ndarray,
    order: np.ndarray,
    dedup: Dedup,
    source: str | None,
    line_numbers: np.ndarray | None,
    kind: str,
) -> np.ndarray:
    """Check rows ``order`` (sorted by qid, docid, original position) for duplicate pairs.

    Returns the order with duplicates removed (first occurrence wins) or raises.
    """
    q = qids[order]
    d = docids[order]
    dup = (q[1:] == q[:-1]) & (d[1:] == d[:-1])
    if not dup.any():
        return order
    if dedup == "error":
        i = int(np.flatnonzero(dup)[0]) + 1
        first = _line_of(int(order[i - 1]), line_numbers)
        raise InputError(
            f"duplicate {kind} entry for query {_decode(q[i])!r}, document {_decode(d[i])!r} "
            f"(first seen at line {first}; use dedup='first' / --dedup first to keep the first)",
            source=source,
            line=_line_of(int(order[i]), line_numbers),
            field="docid",
        )
    keep = np.concatenate(([True], ~dup))
    return order[keep]


# ----------------------------------------------------------------------------- Qrels
class Qrels:
    """Relevance judgments: query id -> document id -> integer grade.

    Build with :meth:`from_dict`, :meth:`from_arrays`, :meth:`from_lists`, or the readers in
    :mod:`ragjudge.io` (TREC, BEIR, JSON, DataFrame). Negative grades are kept: like trec_eval,
    they mean "in the pool but not relevant".
    """

    __slots__ = ("_qids", "_offsets", "_docids", "_grades", "source")

    def __init__(
        self,
        qids: np.ndarray,
        offsets: np.ndarray,
        docids: np.ndarray,
        grades: np.ndarray,
        *,
        source: str | None = None,
    ) -> None:
        # Internal constructor: callers pass already-canonical arrays (see from_arrays).
        self._qids = qids
        self._offsets = offsets
        self._docids = docids
        self._grades = grades
        self.source = source
        _freeze(qids, offsets, docids, grades)

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        qids: Sequence[Any] | np.ndarray,
        docids: Sequence[Any] | np.ndarray,
        grades: Sequence[Any] | np.ndarray,
        *,
        source: str | None = None,
        line_numbers: np.ndarray | None = None,
        dedup: Dedup = "error",
    ) -> Qrels:
        """Build from three parallel columns (one row per judgment, any order).

        A duplicate (query, document) pair raises :class:`InputError` naming ``source`` and the
        line (``line_numbers[i]``, or ``i + 1``); ``dedup="first"`` keeps the first row instead.
        """
        q = _to_bytes_array(qids)
        d = _to_bytes_array(docids)
        g = np.asarray(grades)
        if not (len(q) == len(d) == len(g)):
            raise InputError(
                f"column lengths differ: {len(q)} query ids, {len(d)} doc ids, {len(g)} grades",
                source=source,
            )
        if g.dtype.kind == "f":
            bad = ~np.isfinite(g) | (g != np.round(g))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputError(
                    f"grade must be an integer, got {g[i]!r}",
                    source=source,
                    line=_line_of(i, line_numbers),
                    field="grade",
                )
        elif g.dtype.kind not in "iub" and len(g):
            raise InputError(f"grades must be integers, got dtype {g.dtype}", source=source)
        g = g.astype(np.int64, copy=False)
        # Stable sort on (qid, docid): the original position breaks ties, so "first" is first.
        order = np.lexsort((d, q)) if len(q) else np.zeros(0, dtype=np.int64)
        order = _dedup_sorted(q, d, order, dedup, source, line_numbers, "qrels")
        q, d, g = q[order], d[order], g[order]
        uq, offsets = _group(q)
        return cls(uq, offsets, np.ascontiguousarray(d), np.ascontiguousarray(g), source=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, int]], *, source: str | None = None) -> Qrels:
        """From the pytrec_eval / ranx shape ``{qid: {docid: grade}}``."""
        qs: list[str] = []
        ds: list[str] = []
        gs: list[Any] = []
        for qid, docs in data.items():
            for docid, grade in docs.items():
                qs.append(str(qid))
                ds.append(str(docid))
                if isinstance(grade, bool) or not isinstance(grade, (int, np.integer)):
                    if isinstance(grade, float) and math.isfinite(grade) and grade == int(grade):
                        grade = int(grade)
                    else:
                        raise InputError(
                            f"grade of query {qid!r}, document {docid!r} must be an integer, "
                            f"got {grade!r}",
                            source=source,
                            field="grade",
                        )
                gs.append(int(grade))
        return cls.from_arrays(qs, ds, np.array(gs, dtype=np.int64), source=source)

    @classmethod
    def from_lists(
        cls,
        gold: Sequence[Sequence[str] | Mapping[str, int]],
        qids: Sequence[str] | None = None,
        *,
        grade: int = 1,
    ) -> Qrels:
        """One entry per example: a list of relevant ids (each gets ``grade``) or ``{id: grade}``.

        ``qids`` defaults to ``"0", "1", ...``. Repeated ids in one list count once.
        """
        if qids is None:
            qids = [str(i) for i in range(len(gold))]
        if len(qids) != len(gold):
            raise InputError(f"{len(gold)} gold lists but {len(qids)} query ids", field="qids")
        qs: list[str] = []
        ds: list[str] = []
        gs: list[int] = []
        for qid, entry in zip(qids, gold):
            if isinstance(entry, Mapping):
                items = [(str(k), v) for k, v in entry.items()]
            elif isinstance(entry, (str, bytes)):
                raise InputError(
                    f"gold entry of query {qid!r} must be a list of ids, not a string", field="gold"
                )
            else:
                items = [(str(k), grade) for k in entry]
            for docid, g in items:
                qs.append(str(qid))
                ds.append(docid)
                gs.append(int(g))
        return cls.from_arrays(qs, ds, np.array(gs, dtype=np.int64), dedup="first")

    # -- access --------------------------------------------------------------------
    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(qids, offsets, docids, grades)`` -- the read-only columnar view used by the engine."""
        return self._qids, self._offsets, self._docids, self._grades

    @property
    def query_ids(self) -> list[str]:
        """Query ids in trec_eval order (byte-wise ascending)."""
        return [_decode(q) for q in self._qids.tolist()]

    @property
    def num_queries(self) -> int:
        return len(self._qids)

    @property
    def max_grade(self) -> int:
        """Largest grade present (0 when there are no judgments)."""
        return int(self._grades.max()) if len(self._grades) else 0

    def __len__(self) -> int:
        """Number of judgments (query, document) pairs."""
        return len(self._docids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.query_ids)

    def _index(self, qid: str) -> int | None:
        key = qid.encode("utf-8")
        i = int(np.searchsorted(self._qids, key))
        if i < len(self._qids) and self._qids[i] == key:
            return i
        return None

    def __contains__(self, qid: object) -> bool:
        return isinstance(qid, str) and self._index(qid) is not None

    def get(self, qid: str) -> dict[str, int]:
        """Judgments of one query as ``{docid: grade}`` (empty if the query is unknown)."""
        i = self._index(qid)
        if i is None:
            return {}
        s, e = int(self._offsets[i]), int(self._offsets[i + 1])
        return {
            _decode(d): int(g)
            for d, g in zip(self._docids[s:e].tolist(), self._grades[s:e].tolist())
        }

    def __getitem__(self, qid: str) -> dict[str, int]:
        if qid not in self:
            raise KeyError(qid)
        return self.get(qid)

    def to_dict(self) -> dict[str, dict[str, int]]:
        """``{qid: {docid: grade}}`` (the pytrec_eval / ranx shape)."""
        out: dict[str, dict[str, int]] = {}
        docids = self._docids.tolist()
        grades = self._grades.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            out[_decode(q)] = {
                _decode(docids[j]): grades[j] for j in range(offs[i], offs[i + 1])
            }
        return out

    def rows(self) -> Iterator[tuple[str, str, int]]:
        """``(qid, docid, grade)`` rows in canonical order."""
        docids = self._docids.tolist()
        grades = self._grades.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            qs = _decode(q)
            for j in range(offs[i], offs[i + 1]):
                yield qs, _decode(docids[j]), grades[j]

    def merge(self, other: Qrels) -> Qrels:
        """Union of two qrels; where both judge a pair, ``self`` (e.g. the human label) wins."""
        q = np.concatenate((np.repeat(self._qids, np.diff(self._offsets)),
                            np.repeat(other._qids, np.diff(other._offsets))))
        d = np.concatenate((self._docids, other._docids))
        g = np.concatenate((self._grades, other._grades))
        return Qrels.from_arrays(q, d, g, source=self.source, dedup="first")

    def filter(self, qids: Iterable[str]) -> Qrels:
        """Only the given queries."""
        keep = {q.encode("utf-8") for q in qids}
        mask = np.array([q in keep for q in self._qids.tolist()], dtype=bool)
        counts = np.diff(self._offsets)
        rows = np.repeat(mask, counts)
        q = np.repeat(self._qids, counts)[rows]
        return Qrels.from_arrays(q, self._docids[rows], self._grades[rows], source=self.source)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Qrels):
            return NotImplemented
        return (
            np.array_equal(self._qids, other._qids)
            and np.array_equal(self._offsets, other._offsets)
            and np.array_equal(self._docids, other._docids)
            and np.array_equal(self._grades, other._grades)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        src = f", source={self.source!r}" if self.source else ""
        return f"Qrels({self.num_queries} queries, {len(self)} judgments{src})"


# ----------------------------------------------------------------------------- Run
class Run:
    """A ranking: query id -> document id -> score, stored in trec_eval rank order.

    Rank order is score descending, ties broken by document id descending (``strcmp``), the
    input rank column ignored -- exactly trec_eval. Scores must be finite.
    """

    __slots__ = ("_qids", "_offsets", "_docids", "_scores", "name", "source")

    def __init__(
        self,
        qids: np.ndarray,
        offsets: np.ndarray,
        docids: np.ndarray,
        scores: np.ndarray,
        *,
        name: str = "run",
        source: str | None = None,
    ) -> None:
        # Internal constructor: arrays must already be in canonical rank order.
        self._qids = qids
        self._offsets = offsets
        self._docids = docids
        self._scores = scores
        self.name = name
        self.source = source
        _freeze(qids, offsets, docids, scores)

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        qids: Sequence[Any] | np.ndarray,
        docids: Sequence[Any] | np.ndarray,
        scores: Sequence[Any] | np.ndarray,
        *,
        name: str = "run",
        source: str | None = None,
        line_numbers: np.ndarray | None = None,
        dedup: Dedup = "error",
    ) -> Run:
        """Build from three parallel columns (one row per retrieved document, any order)."""
        q = _to_bytes_array(qids)
        d = _to_bytes_array(docids)
        try:
            s = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"scores must be numbers ({exc})", source=source, field="score") from None
        if not (len(q) == len(d) == len(s)):
            raise InputError(
                f"column lengths differ: {len(q)} query ids, {len(d)} doc ids, {len(s)} scores",
                source=source,
            )
        bad = ~np.isfinite(s)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"score must be a finite number, got {s[i]!r}",
                source=source,
                line=_line_of(i, line_numbers),
                field="score",
            )
        n = len(q)
        if n:
            by_doc = np.lexsort((d, q))
            kept = _dedup_sorted(q, d, by_doc, dedup, source, line_numbers, "run")
            if len(kept) != n:
                keep_mask = np.zeros(n, dtype=bool)
                keep_mask[kept] = True
                q, d, s = q[keep_mask], d[keep_mask], s[keep_mask]
            # Ascending (qid, score, docid), then reverse inside each query: that yields
            # score descending with ties by docid descending, trec_eval's order.
            order = np.lexsort((d, s, q))
            qs = q[order]
            uq, offsets = _group(qs)
            pos = np.arange(len(order), dtype=np.int64)
            grp = np.repeat(np.arange(len(uq)), np.diff(offsets))
            rev = offsets[grp] + offsets[grp + 1] - 1 - pos
            order = order[rev]
            d, s = d[order], s[order]
        else:
            uq, offsets = _group(q)
        return cls(uq, offsets, np.ascontiguousarray(d), np.ascontiguousarray(s), name=name, source=source)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Mapping[str, float]], *, name: str = "run", source: str | None = None
    ) -> Run:
        """From the pytrec_eval / ranx shape ``{qid: {docid: score}}``."""
        qs: list[str] = []
        ds: list[str] = []
        ss: list[float] = []
        for qid, docs in data.items():
            for docid, score in docs.items():
                qs.append(str(qid))
                ds.append(str(docid))
                if isinstance(score, bool) or not isinstance(score, (int, float, np.number)):
                    raise InputError(
                        f"score of query {qid!r}, document {docid!r} must be a number, got {score!r}",
                        source=source,
                        field="score",
                    )
                if not math.isfinite(float(score)):
                    raise InputError(
                        f"score of query {qid!r}, document {docid!r} must be finite, got {score!r}",
                        source=source,
                        field="score",
                    )
                ss.append(float(score))
        return cls.from_arrays(qs, ds, np.array(ss, dtype=np.float64), name=name, source=source)

    @classmethod
    def from_lists(
        cls,
        retrieved: Sequence[Sequence[str]],
        qids: Sequence[str] | None = None,
        *,
        name: str = "run",
    ) -> Run:
        """One ranked id list per example (best first). A repeated id keeps its first rank."""
        if qids is None:
            qids = [str(i) for i in range(len(retrieved))]
        if len(qids) != len(retrieved):
            raise InputError(
                f"{len(retrieved)} retrieved lists but {len(qids)} query ids", field="qids"
            )
        qs: list[str] = []
        ds: list[str] = []
        ss: list[float] = []
        for qid, ranked in zip(qids, retrieved):
            if isinstance(ranked, (str, bytes)):
                raise InputError(
                    f"retrieved entry of query {qid!r} must be a list of ids, not a string",
                    field="retrieved",
                )
            n = len(ranked)
            for r, docid in enumerate(ranked):
                qs.append(str(qid))
                ds.append(str(docid))
                ss.append(float(n - r))
        return cls.from_arrays(qs, ds, np.array(ss, dtype=np.float64), name=name, dedup="first")

    # -- access --------------------------------------------------------------------
    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(qids, offsets, docids, scores)`` in rank order -- the engine's read-only view."""
        return self._qids, self._offsets, self._docids, self._scores

    @property
    def query_ids(self) -> list[str]:
        return [_decode(q) for q in self._qids.tolist()]

    @property
    def num_queries(self) -> int:
        return len(self._qids)

    def __len__(self) -> int:
        return len(self._docids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.query_ids)

    def _index(self, qid: str) -> int | None:
        key = qid.encode("utf-8")
        i = int(np.searchsorted(self._qids, key))
        if i < len(self._qids) and self._qids[i] == key:
            return i
        return None

    def __contains__(self, qid: object) -> bool:
        return isinstance(qid, str) and self._index(qid) is not None

    def ranked(self, qid: str, depth: int | None = None) -> list[tuple[str, float]]:
        """``[(docid, score), ...]`` of one query in rank order (empty if unknown)."""
        i = self._index(qid)
        if i is None:
            return []
        s, e = int(self._offsets[i]), int(self._offsets[i + 1])
        if depth is not None:
            e = min(e, s + depth)
        return [(_decode(d), float(x)) for d, x in zip(self._docids[s:e].tolist(), self._scores[s:e].tolist())]

    def get(self, qid: str) -> dict[str, float]:
        return dict(self.ranked(qid))

    def __getitem__(self, qid: str) -> dict[str, float]:
        if qid not in self:
            raise KeyError(qid)
        return self.get(qid)

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {docid: score}}`` (insertion order = rank order)."""
        return {q: self.get(q) for q in self.query_ids}

    def rows(self) -> Iterator[tuple[str, str, int, float]]:
        """``(qid, docid, rank, score)`` rows in rank order (rank starts at 1)."""
        docids = self._docids.tolist()
        scores = self._scores.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            qs = _decode(q)
            for r, j in enumerate(range(offs[i], offs[i + 1]), start=1):
                yield qs, _decode(docids[j]), r, scores[j]

    def top(self, depth: int) -> Run:
        """The first ``depth`` documents of every query."""
        if depth <= 0:
            raise InputError(f"depth must be a positive integer, got {depth}", field="depth")
        counts = np.minimum(np.diff(self._offsets), depth)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        grp = np.repeat(np.arange(len(counts)), counts)
        idx = self._offsets[grp] + (np.arange(offsets[-1]) - offsets[grp])
        return Run(self._qids.copy(), offsets, self._docids[idx], self._scores[idx],
                   name=self.name, source=self.source)

    def with_name(self, name: str) -> Run:
        return Run(self._qids, self._offsets, self._docids, self._scores, name=name, source=self.source)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Run):
            return NotImplemented
        return (
            np.array_equal(self._qids, other._qids)
            and np.array_equal(self._offsets, other._offsets)
            and np.array_equal(self._docids, other._docids)
            and np.array_equal(self._scores, other._scores)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {self.num_queries} queries, {len(self)} entries)"
