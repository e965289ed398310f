"""Id columns: the hashing, sorting and joining kernels of :mod:`ragjudge.data` and
:mod:`ragjudge.engine`.

Ids are numpy ``S`` arrays of UTF-8 bytes. Byte order is ``strcmp`` order, which is trec_eval's
query order and tie-breaking order, so sorting ids means sorting their bytes: as big-endian
uint64 words (:func:`sort_keys`), several times faster than sorting ``S`` values. Equality
tests go through one 64-bit hash (:func:`hash_ids`, read in place 8 bytes at a time, equal for
equal strings at any dtype width); every hash hit is verified byte for byte, so results are
exact whatever the hash does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "LONG_ID", "KEY_WIDTH", "SLICE_ROWS", "LOW_BYTES", "worker_threads", "thread_pool",
    "over_slices", "long_key", "full_id", "key_rows", "compact_ids", "to_bytes_array", "str_column",
    "joined_column", "decode_id", "decode_column", "group_sorted", "id_words", "sort_keys",
    "fmix", "hash_ids", "pair_hash", "join_ids", "target_ids", "locate", "qid_runs", "sized_runs",
    "reorder_runs", "row_codes", "sort_distinct", "sort_by_code_then_id", "first_duplicate",
    "break_ties", "df_column", "df_ids", "df_long",
]

#: Rows per slice of the column-long kernels (hashing, the pair hash, the join, reordering runs):
#: a slice's temporaries stay in the CPU cache (the same arithmetic over a whole 10M-row column
#: is memory-bound and ~3x slower), and none is as long as the column (10M rows: 80 MB each).
SLICE_ROWS = 1 << 17

_T = TypeVar("_T")


def worker_threads() -> int:
    """Threads for the column kernels and the reader's scan: ``RAGJUDGE_THREADS``, else one per
    core this process may use, up to 4 (numpy releases the GIL in these kernels; past 4 the
    one thread that orders their results is the limit)."""
    env = os.environ.get("RAGJUDGE_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may use (containers)
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def thread_pool(workers: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads for the column kernels and the reader's scan (the caller
    shuts it down); they start one only for an input of several slices or blocks."""
    # deferred: a small input starts no pool, and its start-up loads no concurrent.futures
    # (tests/test_startup.py)
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=workers)


def over_slices(fn: Callable[[int, int], _T], n: int) -> list[_T]:
    """``fn(lo, hi)`` for each :data:`SLICE_ROWS` slice of ``range(n)``, results in slice
    order; on :func:`worker_threads` threads when the column spans several slices. ``fn`` must
    only write its own slice of any shared output."""
    bounds = [(lo, min(lo + SLICE_ROWS, n)) for lo in range(0, n, SLICE_ROWS)]
    workers = worker_threads()
    if len(bounds) < 4 or workers == 1:
        return [fn(lo, hi) for lo, hi in bounds]
    with thread_pool(workers) as pool:
        return list(pool.map(lambda b: fn(*b), bounds))

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_K = np.uint64(0x9E3779B97F4A7C15)
_S33 = np.uint64(33)


# ----------------------------------------------------------------------------- long ids
#: Document ids longer than this many bytes are stored as a short key (:data:`KEY_WIDTH` bytes),
#: so one long id cannot widen a whole fixed-width column (numpy ``S`` arrays are as wide as
#: their longest value: one 1 KB id in a 2M-row column would cost 2 GB).
LONG_ID = 64
_PREFIX = 7
#: Width of a long-id key: the id's first 7 bytes, a NUL, a 128-bit BLAKE2b digest of the id.
KEY_WIDTH = _PREFIX + 1 + 16
# Process-wide intern table key -> full id. Keys are content-derived, so the same id gets the
# same key in every Qrels and Run, and joins and duplicate checks compare keys as they compare
# ids (a real id never holds a NUL: the readers refuse it). Only ids over LONG_ID bytes enter
# it, so it stays small.
_LONG: dict[bytes, bytes] = {}


def long_key(raw: bytes) -> bytes:
    """The stored key of an id longer than :data:`LONG_ID` bytes (registered for decoding)."""
    # deferred: long ids are rare, and an evaluation's start-up loads no hashlib
    # (tests/test_startup.py)
    import hashlib

    # numpy S arrays drop trailing NULs, so the key is stored (and looked up) without them.
    key = (raw[:_PREFIX] + b"\x00" + hashlib.blake2b(raw, digest_size=16).digest()).rstrip(b"\x00")
    _LONG.setdefault(key, raw)
    return key


def full_id(b: bytes) -> bytes:
    """The id a stored value stands for (itself unless it is a long-id key)."""
    if len(b) > _PREFIX and _LONG:
        return _LONG.get(b, b)
    return b


def key_rows(ids: np.ndarray) -> np.ndarray:
    """Mask of the long-id keys in an ``S`` array (a NUL right after the kept prefix, digest bytes after it)."""
    if ids.dtype.itemsize <= _PREFIX + 1 or not _LONG:
        return np.zeros(len(ids), dtype=bool)
    raw = np.ascontiguousarray(ids).view(np.uint8).reshape(len(ids), ids.dtype.itemsize)
    return (raw[:, _PREFIX] == 0) & (raw[:, _PREFIX + 1 :] != 0).any(axis=1)


def compact_ids(ids: np.ndarray) -> np.ndarray:
    """``ids`` (an ``S`` array) with every id over :data:`LONG_ID` bytes replaced by its key;
    the array itself when none is that long."""
    if ids.dtype.itemsize <= LONG_ID or not len(ids):
        return ids
    lengths = np.char.str_len(ids)
    long = np.flatnonzero(lengths > LONG_ID)
    if not len(long):
        return ids
    short = lengths <= LONG_ID
    width = max(int(lengths[short].max()) if short.any() else 1, KEY_WIDTH)
    out = ids.astype(f"S{width}")  # truncates the long ones, replaced below
    out[long] = [long_key(b) for b in ids[long].tolist()]
    return out


# ----------------------------------------------------------------------------- conversion
def to_bytes_array(
    values: Iterable[Any] | np.ndarray, *, compact: bool = False, field: str = "id"
) -> np.ndarray:
    """Ids as a numpy ``S`` array of UTF-8 bytes; ``compact`` stores ids over :data:`LONG_ID`
    bytes as keys (document ids). An id that is not valid Unicode (a lone surrogate, as a
    careless decode leaves) raises :class:`InputError` naming ``field``."""
    try:
        return _to_bytes_array(values, compact)
    except UnicodeEncodeError as exc:
        bad = exc.object[max(exc.start - 20, 0) : exc.end + 20] if isinstance(exc.object, str) else ""
        raise InputError(
            f"not valid Unicode (a lone surrogate in {bad!r}); decode the source as UTF-8",
            field=field,
        ) from None


def str_column(ids: Sequence[Any] | np.ndarray, joined: str | None = None) -> np.ndarray | None:
    """``ids``, all ``str``, as an ``S`` array of UTF-8 bytes; ``None`` when one is not a
    ``str`` or holds ``"\\n"``. ``joined`` is ``"\\n".join(ids)`` when the caller has it."""
    if joined is None:
        try:
            joined = "\n".join(ids)
        except TypeError:
            return None
    return joined_column(joined, len(ids))


#: ``LOW_BYTES[k]``: the low ``k`` bytes of a uint64 (its first ``k`` bytes in little-endian
#: memory), the mask that cuts a word read at an id's start to the id.
LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype="<u8")


def joined_column(joined: str, n: int) -> np.ndarray | None:
    """The ``n`` ids of ``joined`` (``"\\n"``-separated) as an ``S`` array of UTF-8 bytes, as wide
    as the longest; ``None`` when the text does not hold exactly ``n - 1`` separators (an id
    holds ``"\\n"``).

    The column is filled 8 bytes at a time, every id's k-th word read in place from the encoded
    text (an unaligned uint64 view at every byte offset) and cut at the id's end. numpy adding
    the ids one by one (``np.fromiter``, the width given) costs more: 1M ASCII ids of 4-9 bytes,
    0.075 s against 0.045 s.
    """
    if not n:
        return np.zeros(0, dtype="S1")
    raw = joined.encode("utf-8")
    size = len(raw)
    sep = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    if len(sep) != n - 1:
        return None
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = sep
    starts[1:] += 1
    lengths = np.empty(n, dtype=np.int64)
    lengths[:-1] = sep
    lengths[-1] = size
    lengths -= starts
    del sep
    width = max(int(lengths.max()), 1)
    if width > LONG_ID:  # one long id would make every row pay for its words: copy id by id
        return np.fromiter(raw.split(b"\n"), dtype=f"S{width}", count=n)
    words = -(-width // 8)
    # Slack after the text: every word read (8 bytes from an id's start + 8k) stays inside.
    buf = np.zeros(size + 8 * words, dtype=np.uint8)
    buf[:size] = np.frombuffer(raw, dtype=np.uint8)
    at = np.ndarray((size + 8 * words - 7,), dtype="<u8", buffer=buf, strides=(1,))  # at every offset
    # Rows of ``width`` bytes written a word at a time, the last word first: it may run past its
    # row's end into the next row's first word (as zeros: past the id's end), which is written
    # after it. A single word per id has no earlier word to overwrite the spill: rows of 8 bytes.
    stride = width if words > 1 else 8
    cells = np.empty(n * stride + 8, dtype=np.uint8)
    step = 1 << 14  # ids per slice: the temporaries stay in the CPU cache (~20% faster)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        for k in range(words - 1, -1, -1):
            w = at[starts[lo:hi] + 8 * k]
            w &= LOW_BYTES[np.clip(lengths[lo:hi] - 8 * k, 0, 8)]
            np.ndarray((hi - lo,), dtype="<u8", buffer=cells, offset=lo * stride + 8 * k, strides=(stride,))[:] = w
    if stride != width:
        return np.ascontiguousarray(cells[: n * 8].reshape(n, 8)[:, :width]).view(f"S{width}").reshape(n)
    return cells[: n * width].view(f"S{width}")


def _to_bytes_array(values: Iterable[Any] | np.ndarray, compact: bool) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype.kind == "S":
        out = values
    elif isinstance(values, np.ndarray) and values.dtype.kind == "U":
        out = np.char.encode(values, "utf-8") if values.size else values.astype("S1")
    elif isinstance(values, (list, tuple, np.ndarray)) and (fast := str_column(values)) is not None:
        out = fast
    else:
        items = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in values]
        if not items:
            return np.zeros(0, dtype="S1")
        if compact:
            items = [long_key(b) if len(b) > LONG_ID else b for b in items]
        return np.array(items, dtype=bytes)
    return compact_ids(out) if compact else out


def decode_id(b: bytes) -> str:
    """A stored id as text (long-id keys resolved)."""
    return full_id(b).decode("utf-8")


def decode_column(ids: np.ndarray) -> np.ndarray:
    """Stored ids as a numpy ``U`` array (``object`` when long-id keys had to be resolved)."""
    if not len(ids):
        return np.zeros(0, dtype="U1")
    if ids.dtype.itemsize > _PREFIX and _LONG:
        if key_rows(ids).any():
            return np.array([decode_id(b) for b in ids.tolist()], dtype=object)
    return np.char.decode(ids, "utf-8")


# ----------------------------------------------------------------------------- sorting


def group_sorted(sorted_qids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique query ids and offsets of a qid column that is already grouped and sorted."""
    n = len(sorted_qids)
    if n == 0:
        return np.zeros(0, dtype="S1"), np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], sorted_qids[1:] != sorted_qids[:-1])))
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = n
    return sorted_qids[starts], offsets


def id_words(ids: np.ndarray) -> np.ndarray:
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


def sort_keys(ids: np.ndarray, descending: bool = False) -> list[np.ndarray]:
    """Sort keys for ``np.lexsort`` (least significant first) ordering ids by ``strcmp``."""
    words = id_words(ids)
    cols = [words[:, j] for j in range(words.shape[1] - 1, -1, -1)]
    if descending:
        cols = [~c for c in cols]
    return cols


def qid_runs(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


def sized_runs(
    run_qids: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`qid_runs` of rows that come as consecutive runs of ``sizes[i]`` rows of the
    distinct query ids ``run_qids[i]`` (a mapping of mappings), without reading a qid column;
    empty runs are dropped."""
    filled = sizes > 0
    lengths = sizes[filled]
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    uq, codes = np.unique(run_qids[filled], return_inverse=True)
    return uq, starts, lengths.astype(np.int64), codes.reshape(-1).astype(np.int64)


def reorder_runs(
    columns: Sequence[np.ndarray], starts: np.ndarray, lengths: np.ndarray, run_codes: np.ndarray
) -> tuple[list[np.ndarray] | None, np.ndarray]:
    """``columns`` with their contiguous runs put in code order (``None`` if they are in it
    already) and the runs' offsets in the result.

    Rows are gathered a slice at a time into the new columns, so no row index as long as the
    columns is held beside the old and the new ones (10M rows: 80 MB less at a read's peak).
    """
    perm = np.argsort(run_codes, kind="stable")
    ordered_lengths = lengths[perm]
    offsets = np.zeros(len(perm) + 1, dtype=np.int64)
    np.cumsum(ordered_lengths, out=offsets[1:])
    if len(run_codes) < 2 or bool((np.diff(run_codes) > 0).all()):
        return None, offsets
    shift = starts[perm] - offsets[:-1]  # source row - destination row, per run
    n = int(offsets[-1])
    out = [np.empty(n, dtype=c.dtype) for c in columns]

    def gather(lo: int, hi: int) -> None:
        first = int(np.searchsorted(offsets, lo, side="right")) - 1  # the run holding row lo
        end = int(np.searchsorted(offsets, hi, side="left"))  # runs starting before hi
        bounds = offsets[first : end + 1].copy()
        bounds[0], bounds[-1] = lo, hi
        idx = np.repeat(shift[first:end], np.diff(bounds))
        idx += np.arange(lo, hi, dtype=np.int64)
        for column, new in zip(columns, out):
            np.take(column, idx, out=new[lo:hi], mode="clip")  # in range by construction

    over_slices(gather, n)
    return out, offsets


def sort_runs(
    scores: np.ndarray, starts: np.ndarray, lengths: np.ndarray, run_codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Row order putting contiguous runs (one per query) in code order, each run's rows by
    score descending (equal scores in any order), and the offsets. One small sort per run stays
    inside the CPU cache: for runs of a thousand rows this is ~4x faster than sorting all rows
    by (query, score) at once; callers use it when runs are long (many short runs pay the loop)."""
    perm = np.argsort(run_codes, kind="stable")
    offsets = np.zeros(len(perm) + 1, dtype=np.int64)
    np.cumsum(lengths[perm], out=offsets[1:])
    idx = np.empty(int(offsets[-1]), dtype=np.int64)
    neg = -scores  # ascending order of the negated scores: no reversed copy per run
    for lo, a, m in zip(offsets[:-1].tolist(), starts[perm].tolist(), lengths[perm].tolist()):
        order = neg[a : a + m].argsort()
        order += a
        idx[lo : lo + m] = order
    return idx, offsets


def row_codes(lengths: np.ndarray, run_codes: np.ndarray) -> np.ndarray:
    return np.repeat(run_codes, lengths)


def sort_distinct(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` for rows that are distinct on all keys (or whose relative order does
    not matter when equal). The least significant key may then use numpy's fast unstable sort;
    the others are stable passes, cheap on the nearly sorted query codes."""
    order = np.argsort(keys[0])
    for key in keys[1:]:
        order = order[np.argsort(key[order], kind="stable")]
    return order


def sort_by_code_then_id(codes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row order by (code, id) for rows distinct on (code, id): the ids' rank (any order among
    equal ids) combined with the code into one int64 key, so both passes are numpy's fast
    unstable sort (a stable pass over the codes costs twice as much)."""
    n = len(ids)
    if n >= 1 << 31:  # code * n + rank must fit in int64
        return sort_distinct((*sort_keys(ids), codes))
    by_id = sort_distinct(sort_keys(ids))
    key = np.empty(n, dtype=np.int64)
    key[by_id] = np.arange(n, dtype=np.int64)
    key += codes * n
    return np.argsort(key)


def first_duplicate(
    codes: np.ndarray, docids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by (query, docid, position) and the mask of rows repeating their predecessor."""
    order = np.lexsort((*sort_keys(docids), codes))
    c = codes[order]
    d = docids[order]
    dup = (c[1:] == c[:-1]) & (d[1:] == d[:-1])
    return order, dup


def break_ties(offsets: np.ndarray, d: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    # Long-id keys do not order like their ids: ties involving one are ordered exactly below.
    keyed = bool(_LONG) and bool(key_rows(d[np.union1d(pairs, pairs + 1)]).any())
    left, right = d[pairs], d[pairs + 1]
    if not keyed and bool((left > right).all()):
        return d, s
    reverse = not keyed and bool((left < right).all())
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
        order = sort_distinct((*sort_keys(d[rows], descending=True), block))
    if keyed:
        dr = d[rows].tolist()
        for b in np.unique(block[key_rows(d[rows])]).tolist():
            at = np.flatnonzero(block == b)  # a block's rows are contiguous, so is its order
            lo, hi = int(at[0]), int(at[-1]) + 1
            order[lo:hi] = sorted(range(lo, hi), key=lambda i: full_id(dr[i]), reverse=True)
    d[rows] = d[rows][order]
    # Scores compare equal within a block, but 0.0 and -0.0 differ in bits: move them too.
    s[rows] = s[rows][order]
    return d, s


# ----------------------------------------------------------------------------- hashing / join


def fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, in place (uint64 arithmetic wraps modulo 2^64)."""
    x ^= x >> _S33
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x


def _words(ids: np.ndarray, width: int) -> list[np.ndarray | None]:
    """The ids as ``width // 8`` little-endian uint64 words each, zero-padded (None = all zero).

    Read in place through strided views (no padded copy of the id bytes): the last partial
    word is read as the 8 bytes ending at the id's end and shifted down past the overlap.
    """
    w = ids.dtype.itemsize
    if w < 8:
        ids, w = ids.astype("S8"), 8
    ids = np.ascontiguousarray(ids)
    n = len(ids)
    out: list[np.ndarray | None] = [
        np.ndarray((n,), dtype="<u8", buffer=ids, offset=8 * j, strides=(w,)) for j in range(w // 8)
    ]
    if w % 8:
        tail = np.ndarray((n,), dtype="<u8", buffer=ids, offset=w - 8, strides=(w,))
        out.append(tail >> np.uint64(8 * (8 - w % 8)))
    out += [None] * (width // 8 - len(out))
    return out


def hash_ids(ids: np.ndarray, width: int, seed: int) -> np.ndarray:
    """uint64 hash of every id of an ``S`` array; equal strings hash equally at any dtype width.

    ``width`` (a multiple of 8, >= every id's length) is the common zero-padded width.
    """
    out = np.empty(len(ids), dtype=np.uint64)
    mult = np.uint64(seed * 2 + 1)

    def part(lo: int, hi: int) -> None:
        words = _words(ids[lo:hi], width)
        first = words[0]
        h = out[lo:hi]
        with np.errstate(over="ignore"):  # per thread: numpy's error state is not inherited
            if first is None:
                h[:] = 0
            else:
                np.multiply(first, mult, out=h)
            h += _K
            for wj in words[1:]:
                h *= _K  # a polynomial in the 8-byte words; hits are verified, so weakness is harmless
                if wj is not None:
                    h += wj
            fmix(h)

    over_slices(part, len(ids))
    return out


def pair_hash(codes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """A 64-bit hash of every (query code, id) pair; equal pairs always hash equal.

    The id hash of :func:`hash_ids` with the code (int64 >= 0) mixed in: one hashing scheme
    for the duplicate screen of :mod:`ragjudge.data` and the join of :mod:`ragjudge.engine`.
    """
    width = max(ids.dtype.itemsize, 1)
    h = hash_ids(ids, (width + 7) // 8 * 8, 0)
    k = codes.view(np.uint64)

    # A slice at a time: over whole columns, two temporaries as long as them.
    def mix(lo: int, hi: int) -> None:
        part = h[lo:hi]
        with np.errstate(over="ignore"):
            part += k[lo:hi] * _K
            fmix(part)

    over_slices(mix, len(h))
    return h


def _slots(keys: np.ndarray, hb: np.uint64, mask: np.uint64) -> np.ndarray:
    """Filter slot of every join key: its low hash bits XOR its group (the bits from ``hb``)."""
    out = keys >> hb
    out ^= keys
    out &= mask
    return out.view(np.int64)


def join_ids(
    r_ids: np.ndarray,
    r_grp: np.ndarray,
    q_ids: np.ndarray,
    q_grp: np.ndarray,
    n_groups: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Matching pairs ``(run rows, qrels rows)`` with the same (group, id), run rows ascending.

    Keys are ``group << hb | top hb bits of hash(id)``: sorted qrels keys stay grouped by
    target, and run rows come grouped by target too, so the binary searches of consecutive
    rows touch the same small part of the table (cache friendly).
    """
    if len(r_ids) == 0 or len(q_ids) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    width = max(r_ids.dtype.itemsize, q_ids.dtype.itemsize, 1)
    width = (width + 7) // 8 * 8
    gbits = max(int(n_groups - 1).bit_length(), 1)
    hb = np.uint64(64 - gbits)
    drop = np.uint64(gbits)
    for seed in range(8):
        qk = hash_ids(q_ids, width, seed)
        qk >>= drop
        qk |= q_grp.view(np.uint64) << hb
        order = np.argsort(qk, kind="stable")
        sk = qk[order]
        if len(sk) > 1 and bool((sk[1:] == sk[:-1]).any()):
            continue  # two qrels keys collide: an ambiguous lookup, so try another seed
        # Most run rows are unjudged: a direct-address filter on the low key bits (a one-hash
        # Bloom filter, false-positive rate <= 1/8) spares them the binary search. The group
        # is XORed into the slot: a document judged for another query must not pass the filter.
        bits = max(int(8 * len(sk) - 1).bit_length(), 10)
        mask = np.uint64((1 << bits) - 1)
        seen = np.zeros(1 << bits, dtype=bool)
        seen[_slots(sk, hb, mask)] = True
        # Run rows a slice at a time (hash, filter, search, verify): no array as long as the
        # run beyond the caller's (10M rows: ~165 MB less at an evaluation's peak).

        # (Called within this iteration only, so it reads this seed's tables.)
        def match(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
            ids_part, grp_part = r_ids[lo:hi], r_grp[lo:hi]
            rk = hash_ids(ids_part, width, seed)
            rk >>= drop
            rk |= grp_part.view(np.uint64) << hb
            maybe = np.flatnonzero(seen[_slots(rk, hb, mask)])
            rk = rk[maybe]
            pos = np.searchsorted(sk, rk)
            pos[pos == len(sk)] = 0
            hit = sk[pos] == rk
            cand = maybe[hit]
            qrow = order[pos[hit]]
            # Exactness: a hash hit is a match only if group and bytes agree.
            ok = (q_grp[qrow] == grp_part[cand]) & (q_ids[qrow] == ids_part[cand])
            cand = cand[ok]
            cand += lo
            return cand, qrow[ok]

        parts = over_slices(match, len(r_ids))
        return np.concatenate([c for c, _ in parts]), np.concatenate([q for _, q in parts])
    raise RuntimeError("hash join failed with 8 seeds")  # pragma: no cover - astronomically rare


def target_ids(qids: Iterable[Any] | None, default: np.ndarray) -> np.ndarray:
    """The evaluated query ids as an ``S`` array: ``default`` (the sorted qrels query ids,
    returned as is) when ``qids`` is None or lists exactly those ids in that order."""
    if qids is None:
        return default
    items = [q.encode("utf-8") if isinstance(q, str) else bytes(q) for q in qids]
    if not items:
        return np.zeros(0, dtype="S1")
    arr = np.array(items, dtype=bytes)
    if len(arr) == len(default) and np.array_equal(arr, default):
        return default  # the default order after all: keeps the gather-free path
    return arr


def locate(keys: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of each key in the sorted unique ``table`` and whether it was found."""
    if len(table) == 0:
        return np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
    i = np.searchsorted(table, keys)
    i[i == len(table)] = 0
    return i.astype(np.int64), table[i] == keys


# ----------------------------------------------------------------------------- DataFrame columns


def df_column(df: Any, col: str, source: str | None) -> np.ndarray:
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


def df_ids(df: Any, col: str, source: str | None) -> np.ndarray:
    """One id column of a DataFrame as an ``S`` array (integers spelled in decimal)."""
    fast = _arrow_ids(df[col]) if col in df.columns else None
    if fast is not None:
        return fast
    values = df_column(df, col, source)
    if values.dtype.kind in "iu":
        return values.astype("S")
    return to_bytes_array(values)


def _arrow_ids(series: Any) -> np.ndarray | None:
    """An ASCII string column that pandas keeps in Arrow memory (pandas 3's default) as an ``S``
    array straight from Arrow's buffers: pyarrow pads every id to the widest with NULs, which is
    numpy's fixed-width layout (1M ids: 0.03 s against 0.15 s through Python strings). ``None``
    for any other column (the caller's path then reads it)."""
    if not hasattr(series.array, "__arrow_array__") or series.isna().any():
        return None
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - pandas keeps no Arrow strings without pyarrow
        return None
    arr = pa.array(series.array)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or not len(arr):
        return None
    if not pc.all(pc.string_is_ascii(arr)).as_py():  # rpad counts characters, not bytes
        return None
    width = max(int(pc.max(pc.binary_length(arr)).as_py()), 1)
    padded = pc.utf8_rpad(arr, width=width, padding="\x00")
    _, offsets, data = padded.buffers()
    kind = np.int64 if pa.types.is_large_string(padded.type) else np.int32
    first = int(np.frombuffer(offsets, dtype=kind, count=1, offset=padded.offset * np.dtype(kind).itemsize)[0])
    raw = np.frombuffer(data, dtype=np.uint8, count=width * len(padded), offset=first)
    return raw.view(f"S{width}").copy()


def df_long(
    df: Any, qid_col: str, docid_col: str, value_col: str, source: str | None, bad_values: str,
    *, to_float: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (query ids, doc ids, values) columns of a long DataFrame. Values are converted to
    float64 when ``to_float`` or when they are Python objects (``bad_values`` names the
    failure); integer grades stay integers so a fractional grade can still be named."""
    q = df_ids(df, qid_col, source)
    d = df_ids(df, docid_col, source)
    v = df_column(df, value_col, source)
    if to_float or v.dtype == object:
        try:
            v = v.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(bad_values, source=source, field=value_col) from None
    return q, d, v
