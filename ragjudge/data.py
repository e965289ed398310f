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


def _id_words(ids: np.ndarray) -> np.ndarray:
    """``(n, k)`` native uint64 words of an ``S`` array, NUL-padded to a multiple of 8 bytes.

    Read big-endian, so comparing the rows word by word is ``strcmp`` order (shorter ids are
    NUL-padded and sort first, as in C). Sorting integer words is several times faster than
    sorting ``S`` values.
    """
    n = len(ids)
    width = ids.dtype.itemsize
    w8 = -(-width // 8) * 8
    raw = np.ascontiguousarray(ids).view(np.uint8).reshape(n, width)
    if w8 != width:
        padded = np.zeros((n, w8), dtype=np.uint8)
        padded[:, :width] = raw
        raw = padded
    return raw.view(">u8").astype(np.uint64)


def _words_keys(ids: np.ndarray, descending: bool = False) -> list[np.ndarray]:
    """Sort keys for ``np.lexsort`` (least significant first) ordering ids by ``strcmp``."""
    words = _id_words(ids)
    cols = [words[:, j] for j in range(words.shape[1] - 1, -1, -1)]
    if descending:
        cols = [~c for c in cols]
    return cols


_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)


def _pair_hash(codes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """A 64-bit hash of every (query code, id) pair; equal pairs always hash equal."""
    n = len(ids)
    width = ids.dtype.itemsize
    w8 = -(-width // 8) * 8
    out = np.empty(n, dtype=np.uint64)
    step = 1 << 20  # rows per slice: the NUL-padded copy of the ids stays small
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        raw = np.ascontiguousarray(ids[lo:hi]).view(np.uint8).reshape(hi - lo, width)
        if w8 != width:
            padded = np.zeros((hi - lo, w8), dtype=np.uint8)
            padded[:, :width] = raw
            raw = padded
        words = raw.view(np.uint64)
        # codes are int64 >= 0; spread them over all 64 bits before mixing in the id words.
        h = codes[lo:hi].view(np.uint64) * _M1
        for j in range(words.shape[1]):
            h ^= words[:, j]
            h *= _M2
        h ^= h >> np.uint64(32)
        out[lo:hi] = h
    return out


def _qid_runs(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Factorize a qid column by runs of equal neighbours (files are grouped by query).

    Returns ``(unique_qids_sorted, run_starts, run_lengths, run_codes)``; a query is contiguous
    iff it forms a single run.
    """
    n = len(q)
    change = np.flatnonzero(q[1:] != q[:-1])
    starts = np.empty(len(change) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = change + 1
    lengths = np.diff(np.append(starts, n))
    uq, codes = np.unique(q[starts], return_inverse=True)
    return uq, starts, lengths, codes.reshape(-1).astype(np.int64)


def _run_permutation(
    starts: np.ndarray, lengths: np.ndarray, run_codes: np.ndarray, n: int
) -> tuple[np.ndarray | None, np.ndarray]:
    """Row order putting contiguous runs in code order (None if already) and the offsets."""
    perm = np.argsort(run_codes, kind="stable")
    ordered_lengths = lengths[perm]
    offsets = np.zeros(len(perm) + 1, dtype=np.int64)
    np.cumsum(ordered_lengths, out=offsets[1:])
    if len(run_codes) < 2 or bool((np.diff(run_codes) > 0).all()):
        return None, offsets
    shift = starts[perm] - offsets[:-1]
    idx = np.repeat(shift, ordered_lengths)
    idx += np.arange(n, dtype=np.int64)
    return idx, offsets


def _row_codes(lengths: np.ndarray, run_codes: np.ndarray) -> np.ndarray:
    return np.repeat(run_codes, lengths)


def _sort_distinct(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` for rows that are distinct on all keys (or whose relative order does
    not matter when equal). The least significant key may then use numpy's fast unstable sort;
    the others are stable passes, cheap on the nearly sorted query codes."""
    order = np.argsort(keys[0])
    for key in keys[1:]:
        order = order[np.argsort(key[order], kind="stable")]
    return order


def _sort_by_code_then_id(codes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row order by (code, id) for rows distinct on (code, id): the ids' rank (any order among
    equal ids) combined with the code into one int64 key, so both passes are numpy's fast
    unstable sort (a stable pass over the codes costs twice as much)."""
    n = len(ids)
    if n >= 1 << 31:  # code * n + rank must fit in int64
        return _sort_distinct((*_words_keys(ids), codes))
    by_id = _sort_distinct(_words_keys(ids))
    key = np.empty(n, dtype=np.int64)
    key[by_id] = np.arange(n, dtype=np.int64)
    key += codes * n
    return np.argsort(key)


def _first_duplicate(
    codes: np.ndarray, docids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by (query, docid, position) and the mask of rows repeating their predecessor."""
    order = np.lexsort((*_words_keys(docids), codes))
    c = codes[order]
    d = docids[order]
    dup = (c[1:] == c[:-1]) & (d[1:] == d[:-1])
    return order, dup


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
    order, dup = _first_duplicate(codes, docids)
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
            f"duplicate {kind} entry for query {_decode(qids[row])!r}, document "
            f"{_decode(docids[row])!r} (first seen at line {first}; use dedup='first' / "
            "--dedup first to keep the first)",
            source=source,
            line=_line_of(row, line_numbers),
            field="docid",
        )
    keep = np.ones(len(docids), dtype=bool)
    keep[order[1:][dup]] = False
    return keep


def _break_ties(offsets: np.ndarray, d: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows already sorted by (query, score desc): order equal-score blocks by docid descending
    (trec_eval's tie-breaking). Only rows inside ties are touched; ``d`` and ``s`` must be
    arrays this module owns (they are permuted in place)."""
    n = len(d)
    if n < 2:
        return d, s
    tie = s[1:] == s[:-1]
    tie[offsets[1:-1] - 1] = False  # no tie across two queries
    pairs = np.flatnonzero(tie)
    if not len(pairs):
        return d, s
    left, right = d[pairs], d[pairs + 1]
    if bool((left > right).all()):
        return d, s
    reverse = bool((left < right).all())
    del left, right
    in_tie = np.zeros(n, dtype=bool)
    in_tie[pairs] = True
    in_tie[pairs + 1] = True
    rows = np.flatnonzero(in_tie)
    del in_tie
    # Block id: a new block starts at a tied row that does not continue the previous tie.
    cont = np.zeros(len(rows), dtype=bool)
    cont[1:] = (rows[1:] == rows[:-1] + 1) & tie[rows[:-1]]
    block = np.cumsum(~cont)
    if reverse:
        # Ties written docid-ascending (Anserini / Pyserini): reverse each block, no sort.
        bstart = np.flatnonzero(~cont)
        bend = np.append(bstart[1:], len(rows)) - 1
        pos = np.arange(len(rows), dtype=np.int64)
        b = block - 1
        order = bstart[b] + bend[b] - pos
    else:
        order = _sort_distinct((*_words_keys(d[rows], descending=True), block))
    d[rows] = d[rows][order]
    # Scores compare equal within a block, but 0.0 and -0.0 differ in bits: move them too.
    s[rows] = s[rows][order]
    return d, s


def _df_column(df: Any, col: str, source: str | None) -> np.ndarray:
    """One DataFrame column as a numpy array; a missing column or value is an InputError."""
    if col not in df.columns:
        raise InputError(
            f"column {col!r} not found; columns are {[str(c) for c in df.columns]}",
            source=source,
            field=col,
        )
    series = df[col]
    missing = series.isna().to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise InputError("missing value", source=source, line=row + 1, field=col)
    return series.to_numpy()


def _df_ids(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "iu":
        return values.astype("S")
    return _to_bytes_array(values)


def _df_long(
    df: Any, qid_col: str, docid_col: str, value_col: str, source: str | None, bad_values: str,
    *, to_float: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (query ids, doc ids, values) columns of a long DataFrame. Values are converted to
    float64 when ``to_float`` or when they are Python objects (``bad_values`` names the
    failure); integer grades stay integers so a fractional grade can still be named."""
    q = _df_ids(_df_column(df, qid_col, source))
    d = _df_ids(_df_column(df, docid_col, source))
    v = _df_column(df, value_col, source)
    if to_float or v.dtype == object:
        try:
            v = v.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(bad_values, source=source, field=value_col) from None
    return q, d, v


def _decode_column(ids: np.ndarray) -> np.ndarray:
    return np.char.decode(ids, "utf-8") if len(ids) else np.zeros(0, dtype="U1")


def _check_dedup_arg(dedup: str) -> None:
    if dedup not in ("error", "first"):
        raise InputError(f"dedup must be 'error' or 'first', got {dedup!r}", field="dedup")


# ----------------------------------------------------------------------------- shared base
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
        return [_decode(q) for q in self._qids.tolist()]

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
        import pandas as pd  # optional dependency, imported only here

        return pd.DataFrame(
            {
                "query_id": _decode_column(self._qid_column()),
                "doc_id": _decode_column(self._docids),
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
    ) -> Qrels:
        """Build from three parallel columns (one row per judgment, any order).

        A duplicate (query, document) pair raises :class:`InputError` naming ``source`` and the
        line (``line_numbers[i]``, or ``i + 1``); ``dedup="first"`` keeps the first row instead.
        """
        return cls._from_arrays(qids, docids, grades, source=source, line_numbers=line_numbers,
                                dedup=dedup, copy=True)

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
    ) -> Qrels:
        # copy=False only for arrays nobody else holds (the readers'): saves two full copies.
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
        _check_dedup_arg(dedup)
        n = len(q)
        if n == 0:
            uq, offsets = _group(q)
            return cls(uq, offsets, d.copy(), g.copy(), source=source)
        uq, starts, lengths, run_codes = _qid_runs(q)
        if len(uq) == len(starts):
            # Fast path: every query is one run; if its docids are strictly ascending there
            # can be no duplicate and only the runs need reordering.
            same = np.ones(n - 1, dtype=bool)
            same[starts[1:] - 1] = False
            ascending = d[1:] > d[:-1]
            if bool((ascending | ~same).all()):
                idx, offsets = _run_permutation(starts, lengths, run_codes, n)
                if idx is None:
                    d2, g2 = (d.copy(), g.copy()) if copy else (d, g)
                else:
                    d2, g2 = d[idx], g[idx]
                return cls(uq, offsets, d2, g2, source=source)
        codes = _row_codes(lengths, run_codes)
        # Same duplicate screen as Run: hash sort first, exact (stable) check only on collision.
        h = _pair_hash(codes, d)
        h.sort()  # in place: a fresh array, so no second 10M-element copy
        if bool((h[1:] == h[:-1]).any()):
            keep = _dedup(q, codes, d, dedup, source, line_numbers, "qrels")
            if keep is not None:
                codes, d, g = codes[keep], d[keep], g[keep]
        del h
        order = _sort_by_code_then_id(codes, d)
        d, g = d[order], g[order]
        counts = np.bincount(codes, minlength=len(uq))
        offsets = np.zeros(len(uq) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
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
            _decode(d): int(g)
            for d, g in zip(self._docids[s:e].tolist(), self._values[s:e].tolist())
        }

    def to_dict(self) -> dict[str, dict[str, int]]:
        """``{qid: {docid: grade}}`` (the pytrec_eval / ranx shape)."""
        out: dict[str, dict[str, int]] = {}
        docids = self._docids.tolist()
        grades = self._values.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            out[_decode(q)] = {
                _decode(docids[j]): grades[j] for j in range(offs[i], offs[i + 1])
            }
        return out

    def rows(self) -> Iterator[tuple[str, str, int]]:
        """``(qid, docid, grade)`` rows in canonical order."""
        docids = self._docids.tolist()
        grades = self._values.tolist()
        offs = self._offsets.tolist()
        for i, q in enumerate(self._qids.tolist()):
            qs = _decode(q)
            for j in range(offs[i], offs[i + 1]):
                yield qs, _decode(docids[j]), grades[j]

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
        q, d, g = _df_long(df, qid_col, docid_col, grade_col, source, "grades must be integers")
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
    ) -> Run:
        """Build from three parallel columns (one row per retrieved document, any order).

        Rows end up in trec_eval rank order; a duplicate (query, document) pair raises
        :class:`InputError` naming the line unless ``dedup="first"``.
        """
        return cls._from_arrays(qids, docids, scores, name=name, source=source,
                                line_numbers=line_numbers, dedup=dedup, copy=True)

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
        _check_dedup_arg(dedup)
        n = len(q)
        if n == 0:
            uq, offsets = _group(q)
            return cls(uq, offsets, d.copy(), s.copy(), name=name, source=source)
        uq, starts, lengths, run_codes = _qid_runs(q)
        codes = _row_codes(lengths, run_codes)
        # Duplicates: a 64-bit hash of every (query, doc) pair sorts fast; only if two hashes
        # collide do we pay for the exact check (which names the line).
        h = _pair_hash(codes, d)
        h.sort()  # in place: a fresh array, so no second 10M-element copy
        if bool((h[1:] == h[:-1]).any()):
            keep = _dedup(q, codes, d, dedup, source, line_numbers, "run")
            if keep is not None:
                q, d, s = q[keep], d[keep], s[keep]
                uq, starts, lengths, run_codes = _qid_runs(q)
                codes = _row_codes(lengths, run_codes)
                n = len(q)
        del h
        same = np.ones(n - 1, dtype=bool)
        same[starts[1:] - 1] = False
        nonincreasing = bool(((s[1:] <= s[:-1]) | ~same).all())
        if len(uq) == len(starts) and nonincreasing:
            # Fast path (files in rank order): reorder whole runs only.
            idx, offsets = _run_permutation(starts, lengths, run_codes, n)
            if idx is None:
                if copy:  # never share (and freeze) the caller's arrays
                    d, s = d.copy(), s.copy()
            else:
                d, s = d[idx], s[idx]
        else:
            # Rows of equal (query, score) may come out in any order: _break_ties orders them.
            order = _sort_distinct((-s, codes))
            d, s = d[order], s[order]
            counts = np.bincount(codes, minlength=len(uq))
            offsets = np.zeros(len(uq) + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
        del codes
        d, s = _break_ties(offsets, d, s)
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
    def ranked(self, qid: str, depth: int | None = None) -> list[tuple[str, float]]:
        """``[(docid, score), ...]`` of one query in rank order (empty if unknown)."""
        i = self._index(qid)
        if i is None:
            return []
        s, e = int(self._offsets[i]), int(self._offsets[i + 1])
        if depth is not None:
            e = min(e, s + depth)
        return [(_decode(d), float(x)) for d, x in zip(self._docids[s:e].tolist(), self._values[s:e].tolist())]

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
        q, d, s = _df_long(df, qid_col, docid_col, score_col, source, "scores must be numbers",
                           to_float=True)
        return cls.from_arrays(q, d, s, name=name, source=source, dedup=dedup)

    def to_dataframe(self) -> Any:
        """A long DataFrame ``query_id``, ``doc_id``, ``score`` in rank order (needs pandas)."""
        return self._frame("score")

    def with_name(self, name: str) -> Run:
        return Run(self._qids, self._offsets, self._docids, self._values, name=name, source=self.source)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {self.num_queries} queries, {len(self)} entries)"
