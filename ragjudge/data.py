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
from itertools import chain
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from ._lazy import optional
from .errors import InputError
from .ids import (
    break_ties,
    decode_column,
    decode_id,
    df_long,
    first_duplicate,
    group_sorted,
    joined_column,
    pair_hash,
    qid_runs,
    row_codes,
    reorder_runs,
    sized_runs,
    sort_by_code_then_id,
    sort_distinct,
    sort_runs,
    to_bytes_array,
)

__all__ = ["Qrels", "Run", "Dedup"]

Dedup = Literal["error", "first"]


# ----------------------------------------------------------------------------- helpers
def _freeze(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def _line_of(index: int, line_numbers: np.ndarray | None) -> int:
    return int(line_numbers[index]) if line_numbers is not None else index + 1


def _dedup(
    qids: np.ndarray,
    codes: np.ndarray,
    docids: np.ndarray,
    dedup: Dedup,
    source: str | None,
    line_numbers: np.ndarray | None,
    kind: str,
) -> np.ndarray | None:
    """Exact duplicate check. Returns None when there are no duplicates, else the boolean
    mask of rows to keep (first occurrence wins), or raises for ``dedup="error"``."""
    order, dup = first_duplicate(codes, docids)
    if not dup.any():
        return None
    if dedup == "error":
        # Report the duplicate that comes first in the file, with the line of its first
        # occurrence (the stable sort keeps file order inside each group of equal pairs).
        later = np.flatnonzero(dup) + 1
        i = int(later[np.argmin(order[later])])
        head = i
        while head > 0 and dup[head - 1]:
            head -= 1
        first = _line_of(int(order[head]), line_numbers)
        row = int(order[i])
        raise InputError(
            f"duplicate {kind} entry for query {decode_id(qids[row])!r}, document "
            f"{decode_id(docids[row])!r} (first seen at line {first}; use dedup='first' / "
            "--dedup first to keep the first)",
            source=source,
            line=_line_of(row, line_numbers),
            field="docid",
        )
    keep = np.ones(len(docids), dtype=bool)
    keep[order[1:][dup]] = False
    return keep


def _check_dedup_arg(dedup: str) -> None:
    if dedup not in ("error", "first"):
        raise InputError(f"dedup must be 'error' or 'first', got {dedup!r}", field="dedup")


# ----------------------------------------------------------------------------- shared base

# ----------------------------------------------------------------------------- dicts of dicts
_NUMBER_TYPES = frozenset({int, float, np.float64, np.float32, np.int64, np.int32})


class _DictColumns(NamedTuple):
    """A ``{qid: {docid: value}}`` mapping as columns: one row per (query, document), the
    queries in the mapping's order, each query's rows contiguous."""

    qids: np.ndarray  # the mapping's keys (distinct), as UTF-8 bytes
    sizes: np.ndarray  # rows per query
    docids: np.ndarray
    values: np.ndarray  # float64, or int64 when integral


def _dict_columns(data: Mapping[Any, Mapping[Any, Any]], integral: bool) -> _DictColumns | None:
    """``{qid: {docid: value}}`` as columns without a Python loop per row; ``None`` when an id
    is not a plain ``str``, holds a newline or a NUL, or a value is not a plain finite number
    (whole when ``integral``): the caller's row loop then reads it, with its errors. Notebook
    users live on this path: it must not cost more than the evaluation."""
    qids = list(data.keys())
    if not all(type(q) is str for q in qids):
        return None
    groups = list(data.values())
    sizes = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    n = int(sizes.sum())
    try:
        # One join per query, then one of those (an empty query adds no id): no list of all ids.
        joined = "\n".join(map("\n".join, filter(None, groups)))
    except TypeError:  # an id that is not a str: the row loop spells it with str()
        return None
    # numpy's S arrays drop trailing NULs, so two distinct keys could become one id: the row
    # loop's duplicate check then names them.
    if "\x00" in joined:
        return None
    try:
        d = joined_column(joined, n)
        q = np.array([x.encode("utf-8") for x in qids], dtype=bytes) if qids else np.zeros(0, dtype="S1")
    except UnicodeEncodeError:  # a lone surrogate: the row loop names it
        return None
    if d is None:
        return None
    values = _numbers(groups, n, integral)
    if values is None:
        return None
    return _DictColumns(q, sizes, d, values)


def _numbers(groups: list[Mapping[Any, Any]], n: int, integral: bool) -> np.ndarray | None:
    """The groups' values as float64 (or int64 when ``integral``), or ``None`` when any is not a
    plain number of the allowed kind (booleans included), not finite, or (``integral``) not
    whole: the caller's row loop then names the row."""
    if not n:
        return np.zeros(0, dtype=np.int64 if integral else np.float64)
    types: set[type] = set()
    for g in groups:  # per query: cheaper than one chained iterator over every value
        types.update(map(type, g.values()))
    if not types <= _NUMBER_TYPES:
        return None
    arr = np.fromiter(chain.from_iterable(g.values() for g in groups), dtype=np.float64, count=n)
    if not np.isfinite(arr).all():
        return None
    if integral:
        whole = arr.astype(np.int64)
        if not (whole == arr).all():
            return None
        return whole
    return arr


class _Columnar:
    """What Qrels and Run share: one row per (query, document), grouped by query id.

    ``_values`` holds the grades (Qrels) or the scores (Run).
    """

    __slots__ = ("_qids", "_offsets", "_docids", "_values", "source")

    def __init__(
        self, qids: np.ndarray, offsets: np.ndarray, docids: np.ndarray, values: np.ndarray,
        source: str | None,
    ) -> None:
        # Internal constructor: callers pass already-canonical arrays (see from_arrays).
        self._qids = qids
        self._offsets = offsets
        self._docids = docids
        self._values = values
        self.source = source
        _freeze(qids, offsets, docids, values)

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(qids, offsets, docids, grades | scores)`` -- the read-only columnar view used by
        the engine (Run rows in rank order, Qrels rows by docid)."""
        return self._qids, self._offsets, self._docids, self._values

    @property
    def query_ids(self) -> list[str]:
        """Query ids in trec_eval order (byte-wise ascending)."""
        return [decode_id(q) for q in self._qids.tolist()]

    @property
    def num_queries(self) -> int:
        return len(self._qids)

    def __len__(self) -> int:
        """Number of (query, document) rows."""
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

    def _qid_column(self) -> np.ndarray:
        """The query id of every row (the grouped column expanded back)."""
        return np.repeat(self._qids, np.diff(self._offsets))

    def _frame(self, value_col: str) -> Any:
        pd = optional("pandas", extra="pandas", what="to_dataframe()")

        return pd.DataFrame(
            {
                "query_id": decode_column(self._qid_column()),
                "doc_id": decode_column(self._docids),
                value_col: self._values.copy(),
            }
        )

    def get(self, qid: str) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getitem__(self, qid: str) -> dict[str, Any]:
        if qid not in self:
            raise KeyError(qid)
        return self.get(qid)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Columnar)
        return (
            np.array_equal(self._qids, other._qids)
            and np.array_equal(self._offsets, other._offsets)
            and np.array_equal(self._docids, other._docids)
            and np.array_equal(self._values, other._values)
        )

    __hash__ = None  # type: ignore[assignment]


# ----------------------------------------------------------------------------- Qrels
class Qrels(_Columnar):
    """Relevance judgments: query id -> document id -> integer grade.

    Build with :meth:`from_dict`, :meth:`from_arrays`, :meth:`from_lists`, or the readers in
    :mod:`ragjudge.io` (TREC, BEIR, JSON, DataFrame). Negative grades are kept: like trec_eval,
    they mean "in the pool but not relevant".
    """

    __slots__ = ()

    def __init__(
        self,
        qids: np.ndarray,
        offsets: np.ndarray,
        docids: np.ndarray,
        grades: np.ndarray,
        *,
        source: str | None = None,
    ) -> None:
        super().__init__(qids, offsets, docids, grades, source)

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
        copy: bool = True,
    ) -> Qrels:
        """Build from three parallel columns (one row per judgment, any order).

        A duplicate (query, document) pair raises :class:`InputError` naming ``source`` and the
        line (``line_numbers[i]``, or ``i + 1``); ``dedup="first"`` keeps the first row instead.
        ``copy=False`` lets the result take (and freeze) fresh arrays nobody else holds, such as
        a reader's, saving two full copies.
        """
        return cls._from_arrays(qids, docids, grades, source=source, line_numbers=line_numbers,
                                dedup=dedup, copy=copy)

    @classmethod
    def _from_arrays(
        cls,
        qids: Sequence[Any] | np.ndarray,
        docids: Sequence[Any] | np.ndarray,
        grades: Sequence[Any] | np.ndarray,
        *,
        source: str | None,
        line_numbers: np.ndarray | None,
        dedup: Dedup,
        copy: bool,
        distinct: bool = False,
    ) -> Qrels:
        # copy=False only for arrays nobody else holds (the readers'): saves two full copies.
        # distinct=True: the caller knows no (query, doc) pair repeats (a mapping's keys).
        q = to_bytes_array(qids, field="qid")
        d = to_bytes_array(docids, compact=True, field="docid")
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
        _check_dedup_arg(dedup)
        n = len(q)
        if n == 0:
            uq, offsets = group_sorted(q)
            return cls(uq, offsets, d.copy(), g.copy(), source=source)
        uq, starts, lengths, run_codes = qid_runs(q)
        if len(uq) == len(starts):
            # Fast path: every query is one run; if its docids are strictly ascending there
            # can be no duplicate and only the runs need reordering.
            same = np.ones(n - 1, dtype=bool)
            same[starts[1:] - 1] = False
            ascending = d[1:] > d[:-1]
            if bool((ascending | ~same).all()):
                moved, offsets = reorder_runs([d, g], starts, lengths, run_codes)
                if moved is None:
                    d2, g2 = (d.copy(), g.copy()) if copy else (d, g)
                else:
                    d2, g2 = moved
                return cls(uq, offsets, d2, g2, source=source)
        codes = row_codes(lengths, run_codes)
        if not distinct:
            # Same duplicate screen as Run: hash sort first, exact (stable) check only on collision.
            h = pair_hash(codes, d)
            h.sort()  # in place: a fresh array, so no second 10M-element copy
            if bool((h[1:] == h[:-1]).any()):
                keep = _dedup(q, codes, d, dedup, source, line_numbers, "qrels")
                if keep is not None:
                    codes, d, g = codes[keep], d[keep], g[keep]
            del h
        order = sort_by_code_then_id(codes, d)
        d, g = d[order], g[order]
        counts = np.bincount(codes, minlength=len(uq))
        offsets = np.zeros(len(uq) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(uq, offsets, np.ascontiguousarray(d), np.ascontiguousarray(g), source=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, int]], *, source: str | None = None) -> Qrels:
        """From the pytrec_eval / ranx shape ``{qid: {docid: grade}}``."""
        cols = _dict_columns(data, integral=True)
        if cols is not None:
            # A mapping's keys are distinct: no duplicate screen.
            return cls._from_arrays(np.repeat(cols.qids, cols.sizes), cols.docids, cols.values, source=source,
                                    line_numbers=None, dedup="error", copy=False, distinct=True)
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
                if not -(1 << 63) <= int(grade) < 1 << 63:  # 1e20 in a JSON file: no int64
                    raise InputError(f"grade of query {qid!r}, document {docid!r} is out of range, "
                                     f"got {grade!r}", source=source, field="grade")
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
    def max_grade(self) -> int:
        """Largest grade present (0 when there are no judgments)."""
        return int(self._values.max()) if len(self._values) else 0

    def get(self, qid: str) -> dict[str, int]:
        """Judgments of one query as ``{docid: grade}`` (empty if the query is unknown)."""
        i = self._index(qid)
        if i is None:
            return {}
        s, e = int(self._offsets[i]), int(self._offsets[i + 1])
        return {
            decode_id(d): int(g)
            for d, g in zip(self._docids[s:e].tolist(), self._values[s:e].tolist())
        }

    def to_dict(self) -> dict[str, dict[str, int]]:
        """``{qid: {docid: grade}}`` (the pytrec_eval / ranx shape)."""
        out: dict[str, dict[str, int]] = {}
        docids = self._docids.tolist()
        grades = self._values.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            out[decode_id(q)] = {
                decode_id(docids[j]): grades[j] for j in range(offs[i], offs[i + 1])
            }
        return out

    def rows(self) -> Iterator[tuple[str, str, int]]:
        """``(qid, docid, grade)`` rows in canonical order."""
        docids = self._docids.tolist()
        grades = self._values.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            qs = decode_id(q)
            for j in range(offs[i], offs[i + 1]):
                yield qs, decode_id(docids[j]), grades[j]

    @classmethod
    def from_dataframe(
        cls,
        df: Any,
        *,
        qid_col: str = "query_id",
        docid_col: str = "doc_id",
        grade_col: str = "relevance",
        source: str | None = "DataFrame",
        dedup: Dedup = "error",
    ) -> Qrels:
        """From a long pandas DataFrame, one row per judgment (ir_measures column names by
        default). Errors name the column and the 1-based row position as the "line"."""
        q, d, g = df_long(df, qid_col, docid_col, grade_col, source, "grades must be integers")
        return cls.from_arrays(q, d, g, source=source, dedup=dedup)

    def to_dataframe(self) -> Any:
        """A long DataFrame with columns ``query_id``, ``doc_id``, ``relevance`` (needs pandas)."""
        return self._frame("relevance")

    def merge(self, other: Qrels) -> Qrels:
        """Union of two qrels; where both judge a pair, ``self`` (e.g. the human label) wins."""
        q = np.concatenate((self._qid_column(), other._qid_column()))
        d = np.concatenate((self._docids, other._docids))
        g = np.concatenate((self._values, other._values))
        return Qrels.from_arrays(q, d, g, source=self.source, dedup="first")

    def filter(self, qids: Iterable[str]) -> Qrels:
        """Only the given queries."""
        keep = {q.encode("utf-8") for q in qids}
        mask = np.array([q in keep for q in self._qids.tolist()], dtype=bool)
        counts = np.diff(self._offsets)
        rows = np.repeat(mask, counts)
        q = np.repeat(self._qids, counts)[rows]
        return Qrels.from_arrays(q, self._docids[rows], self._values[rows], source=self.source)

    def __repr__(self) -> str:
        src = f", source={self.source!r}" if self.source else ""
        return f"Qrels({self.num_queries} queries, {len(self)} judgments{src})"


# ----------------------------------------------------------------------------- Run
class Run(_Columnar):
    """A ranking: query id -> document id -> score, stored in trec_eval rank order.

    Rank order is score descending, ties broken by document id descending (``strcmp``), the
    input rank column ignored -- exactly trec_eval. Scores must be finite.
    """

    __slots__ = ("name",)

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
        super().__init__(qids, offsets, docids, scores, source)
        self.name = name

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
        copy: bool = True,
    ) -> Run:
        """Build from three parallel columns (one row per retrieved document, any order).

        Rows end up in trec_eval rank order; a duplicate (query, document) pair raises
        :class:`InputError` naming the line unless ``dedup="first"``. ``copy=False`` as in
        :meth:`Qrels.from_arrays`.
        """
        return cls._from_arrays(qids, docids, scores, name=name, source=source,
                                line_numbers=line_numbers, dedup=dedup, copy=copy)

    @classmethod
    def _from_arrays(
        cls,
        qids: Sequence[Any] | np.ndarray,
        docids: Sequence[Any] | np.ndarray,
        scores: Sequence[Any] | np.ndarray,
        *,
        name: str,
        source: str | None,
        line_numbers: np.ndarray | None,
        dedup: Dedup,
        copy: bool,
    ) -> Run:
        # copy=False only for arrays nobody else holds (the readers'): saves two full copies.
        q = to_bytes_array(qids, field="qid")
        d = to_bytes_array(docids, compact=True, field="docid")
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
        _check_dedup_arg(dedup)
        n = len(q)
        if n == 0:
            uq, offsets = group_sorted(q)
            return cls(uq, offsets, d.copy(), s.copy(), name=name, source=source)
        uq, starts, lengths, run_codes = qid_runs(q)
        # Duplicates: a 64-bit hash of every (query, doc) pair sorts fast; only if two hashes
        # collide do we pay for the exact check (which names the line).
        codes = row_codes(lengths, run_codes)
        h = pair_hash(codes, d)
        h.sort()  # in place: a fresh array, so no second 10M-element copy
        repeated = bool((h[1:] == h[:-1]).any())
        del h
        keep = _dedup(q, codes, d, dedup, source, line_numbers, "run") if repeated else None
        del codes
        if keep is not None:
            q, d, s = q[keep], d[keep], s[keep]
            uq, starts, lengths, run_codes = qid_runs(q)
            copy = False  # the masks made fresh arrays
        return cls._from_runs(uq, starts, lengths, run_codes, d, s, name=name, source=source, copy=copy)

    @classmethod
    def _from_runs(
        cls,
        uq: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
        run_codes: np.ndarray,
        d: np.ndarray,
        s: np.ndarray,
        *,
        name: str,
        source: str | None,
        copy: bool,
    ) -> Run:
        """The Run of checked rows (distinct pairs, finite scores, compact ids) given as runs of
        one query each (``qid_runs``' description): only the sort to rank order is left."""
        n = len(d)
        # The first run alone usually tells an unsorted input, without a pass over every row.
        m = int(lengths[0])
        nonincreasing = bool((s[1:m] <= s[: m - 1]).all())
        if nonincreasing and len(starts) > 1:
            same = np.ones(n - 1, dtype=bool)
            same[starts[1:] - 1] = False
            nonincreasing = bool(((s[1:] <= s[:-1]) | ~same).all())
        if len(uq) == len(starts) and nonincreasing:
            # Fast path (files in rank order): reorder whole runs only.
            moved, offsets = reorder_runs([d, s], starts, lengths, run_codes)
            if moved is None:
                if copy:  # never share (and freeze) the caller's arrays
                    d, s = d.copy(), s.copy()
            else:
                d, s = moved
        elif len(uq) == len(starts) and n >= 64 * len(starts):
            # Each query in one long run (a DataFrame, a file grouped by query): sort per run.
            # Rows of equal (query, score) may come out in any order: break_ties orders them.
            idx, offsets = sort_runs(s, starts, lengths, run_codes)
            d, s = d[idx], s[idx]
        else:
            codes = row_codes(lengths, run_codes)
            order = sort_distinct((-s, codes))
            d, s = d[order], s[order]
            counts = np.bincount(codes, minlength=len(uq))
            offsets = np.zeros(len(uq) + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            del codes
        d, s = break_ties(offsets, d, s)
        return cls(uq, offsets, np.ascontiguousarray(d), np.ascontiguousarray(s), name=name, source=source)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Mapping[str, float]], *, name: str = "run", source: str | None = None
    ) -> Run:
        """From the pytrec_eval / ranx shape ``{qid: {docid: score}}``."""
        cols = _dict_columns(data, integral=False)
        if cols is not None:
            if not len(cols.docids):
                return cls.from_arrays([], [], [], name=name, source=source)
            # The mapping gives the runs (one per query, its keys distinct): no qid column to
            # scan, no duplicate screen.
            d = to_bytes_array(cols.docids, compact=True, field="docid")
            return cls._from_runs(*sized_runs(cols.qids, cols.sizes), d, cols.values, name=name,
                                  source=source, copy=False)
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
    def ranked(self, qid: str, depth: int | None = None) -> list[tuple[str, float]]:
        """``[(docid, score), ...]`` of one query in rank order (empty if unknown)."""
        i = self._index(qid)
        if i is None:
            return []
        s, e = int(self._offsets[i]), int(self._offsets[i + 1])
        if depth is not None:
            e = min(e, s + depth)
        return [(decode_id(d), float(x)) for d, x in zip(self._docids[s:e].tolist(), self._values[s:e].tolist())]

    def get(self, qid: str) -> dict[str, float]:
        return dict(self.ranked(qid))

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {docid: score}}`` (insertion order = rank order)."""
        return {q: self.get(q) for q in self.query_ids}

    def rows(self) -> Iterator[tuple[str, str, int, float]]:
        """``(qid, docid, rank, score)`` rows in rank order (rank starts at 1)."""
        docids = self._docids.tolist()
        scores = self._values.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            qs = decode_id(q)
            for r, j in enumerate(range(offs[i], offs[i + 1]), start=1):
                yield qs, decode_id(docids[j]), r, scores[j]

    def top(self, depth: int) -> Run:
        """The first ``depth`` documents of every query."""
        if depth <= 0:
            raise InputError(f"depth must be a positive integer, got {depth}", field="depth")
        counts = np.minimum(np.diff(self._offsets), depth)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        grp = np.repeat(np.arange(len(counts)), counts)
        idx = self._offsets[grp] + (np.arange(offsets[-1]) - offsets[grp])
        return Run(self._qids.copy(), offsets, self._docids[idx], self._values[idx],
                   name=self.name, source=self.source)

    @classmethod
    def from_dataframe(
        cls,
        df: Any,
        *,
        qid_col: str = "query_id",
        docid_col: str = "doc_id",
        score_col: str = "score",
        name: str = "run",
        source: str | None = "DataFrame",
        dedup: Dedup = "error",
    ) -> Run:
        """From a long pandas DataFrame, one row per retrieved document (any row order)."""
        q, d, s = df_long(df, qid_col, docid_col, score_col, source, "scores must be numbers",
                           to_float=True)
        return cls.from_arrays(q, d, s, name=name, source=source, dedup=dedup)

    def to_dataframe(self) -> Any:
        """A long DataFrame ``query_id``, ``doc_id``, ``score`` in rank order (needs pandas)."""
        return self._frame("score")

    def with_name(self, name: str) -> Run:
        return Run(self._qids, self._offsets, self._docids, self._values, name=name, source=self.source)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {self.num_queries} queries, {len(self)} entries)"
