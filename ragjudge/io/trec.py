"""TREC qrels (``qid iter docid grade``), TREC runs (``qid Q0 docid rank score tag``) and MS MARCO
runs (``qid<TAB>docid<TAB>rank``).

TREC qrels have exactly 4 whitespace-separated columns; TREC runs at least 6 (text after the 6th
and the rank column are ignored, like trec_eval; a run with longer lines says so once, as a
warning naming the first such line, since a stray column before the score shifts every field). Lines whose first non-blank character is ``#``
are comments; blank lines are skipped; document ids may contain ``#``. An MS MARCO run has
exactly 3 columns and no score: the score is ``1 / rank``, so trec_eval's order (score
descending) is the file's rank order.

The reader is vectorized: the input is read in blocks of bytes, and each block is tokenized
without a Python object per line, by the compiled tokenizer (``ragjudge/io/scanner.c``, built at
install where a C compiler is at hand) or else with numpy (token boundaries from a whitespace
mask, tokens gathered into fixed-width ``S`` arrays, numbers parsed by ``astype``). Both give
the same columns. Any irregularity sends the block to an exact line-by-line parser whose only
job is to name the first bad file/line/field.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import deque
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..data import Dedup, Qrels, Run
from ..errors import InputError
from ..ids import LONG_ID, LOW_BYTES, long_key, thread_pool, worker_threads
from .numbers import parse_float, parse_int
from .streams import (
    BOM, Input, PathLike, as_bytes, blocks_from_bytes, check_utf8, is_fd_path, opened, source_name,
)

try:  # the compiled tokenizer, an optional extension: without it numpy does the same work
    from .scanner import scan as _native_scan
except ImportError:  # pragma: no cover - installed without a C compiler
    _native_scan = None

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import Future

__all__ = [
    "parse_trec_qrels",
    "read_trec_qrels",
    "parse_trec_run",
    "read_trec_run",
    "parse_msmarco_run",
    "read_msmarco_run",
    "scan_trec",
    "parse_trec_exact",
    "run_name",
    "BLOCK",
]

# Bytes per block of the vectorized reader: large enough to amortize numpy call overhead,
# small enough that the per-block temporaries (~10 bytes of scratch per input byte) stay in
# cache and below malloc's mmap threshold (so they are reused, not page-faulted in afresh; with
# 16 MiB blocks a third of the CPU time went to page faults).
BLOCK = 1 << 19

#: Blocks whose columns are joined into one segment while a read goes on: 64 blocks are 32 MiB
#: of text, 0.3-1M lines, a few MB a column.
SEGMENT_BLOCKS = 64

# kind -> (columns wanted, exactly that many?, qid column, docid column, value column,
#          value field name, integer values?)
_KINDS: dict[str, tuple[int, bool, int, int, int, str, bool]] = {
    "qrels": (4, True, 0, 2, 3, "grade", True),
    # Runs: the fast scans take exactly 6 columns, so a longer line reaches the exact path, which
    # reads it as trec_eval does and notes it (see ``_EXTRA_OK``).
    "run": (6, True, 0, 2, 4, "score", False),
    "msmarco": (3, True, 0, 1, 2, "rank", True),
}
#: Kinds whose lines may carry text after the wanted columns (ignored, and warned about once).
_EXTRA_OK = frozenset({"run"})
_HEADERS = {
    "qrels": "'qid iter docid grade'",
    "run": "'qid Q0 docid rank score tag'",
    "msmarco": "'qid docid rank' (MS MARCO run)",
}


# ============================================================================= fast path
class _Columns:
    """Per-block output of the TREC readers, concatenated at the end."""

    def __init__(self) -> None:
        self.qids: list[np.ndarray] = []
        self.docids: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        # Line numbers: an array for blocks that skipped lines, (first, count) otherwise, so a
        # file without comments needs no line-number array at all.
        self.lines: list[np.ndarray | tuple[int, int]] = []
        self.skipped = False
        self._pending = 0  # blocks added since the last segment

    def add(
        self, q: np.ndarray, d: np.ndarray, v: np.ndarray, lines: np.ndarray | tuple[int, int]
    ) -> None:
        self.qids.append(q)
        self.docids.append(d)
        self.values.append(v)
        self.lines.append(lines)
        self._pending += 1
        if self._pending == SEGMENT_BLOCKS:
            self._consolidate()

    def _consolidate(self) -> None:
        # The last SEGMENT_BLOCKS blocks' columns become one array each. Blocks' small arrays
        # live until the end of the read between the scan's short-lived scratch on the heap,
        # whose freed holes the allocator cannot return: a 10M-line read held about as much
        # again as its columns in such holes. Segments are large enough to be mapped on their own, and the blocks'
        # arrays they replace leave holes the next blocks fill.
        k = self._pending
        for parts in (self.qids, self.docids, self.values):
            if k > 1:
                parts[-k:] = [np.concatenate(parts[-k:])]
        self._pending = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self.values)

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        q = _concat_s(self.qids)
        self.qids.clear()
        d = _concat_s(self.docids)
        self.docids.clear()
        v = np.concatenate(self.values) if len(self.values) > 1 else self.values[0]
        self.values.clear()
        line_numbers: np.ndarray | None = None
        if self.skipped:
            parts = [
                p if isinstance(p, np.ndarray) else np.arange(p[0], p[0] + p[1], dtype=np.int64)
                for p in self.lines
            ]
            line_numbers = np.concatenate(parts)
        return q, d, v, line_numbers


def _concat_s(parts: list[np.ndarray]) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]  # contiguous already: the exact path's arrays, the scan's copies
    return np.concatenate(parts)  # numpy widens to the longest id


def _gather_words(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, int]:
    """Tokens ``buf[s:s+len]`` as rows of little-endian uint64 words, NUL-padded: ``(words,
    width)`` with ``words`` of shape ``(n, k)`` (``k = ceil(width / 8)``; shape ``(n,)`` when
    ``k == 1``), contiguous, row ``i`` holding token ``i`` from its first byte.

    ``buf`` must extend at least ``8 * ceil(max(lens) / 8)`` bytes past every start (the caller
    pads it). Tokens are read as unaligned words (one fancy-index per 8 bytes of width, several
    times faster than copying ``(n, width)`` byte rows) and the bytes past each token are masked
    to NUL (tokens never contain NUL).
    """
    if not len(starts):
        return np.zeros(0, dtype="<u8"), 1
    width = int(lens.max())
    k = -(-width // 8)
    words = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
    short = int(lens.min())
    if k == 1:
        out = words[starts]
        if short < 8:
            out &= LOW_BYTES[lens]
        return out, width
    out = np.empty((len(starts), k), dtype="<u8")
    for j in range(k):
        w = words[starts + 8 * j] if j else words[starts]
        if short < 8 * j + 8:
            m = lens - 8 * j
            np.clip(m, 0, 8, out=m)
            w &= LOW_BYTES[m]
        out[:, j] = w
    return out, width


def _gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Tokens ``buf[s:s+len]`` as a compact ``S`` array, without a Python object per token
    (:func:`_gather_words`' rows, NUL padding stripped as ``S`` arrays do).

    A copy, not a strided view of the words: a read holds its blocks' columns to the end, and
    a view would keep the words alive (8 bytes a row for a 6-byte query id, 16 for a 9-byte
    document id)."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype="S1")
    out, width = _gather_words(buf, starts, lens)
    return np.ascontiguousarray(_as_s(out, width))


def _as_s(out: np.ndarray, width: int) -> np.ndarray:
    k = out.shape[1] if out.ndim == 2 else 1
    return np.ndarray((len(out),), dtype=f"S{width}", buffer=out, strides=(8 * k,))


# Bytes a score token of the fast path may hold: a decimal number (digits, point, sign,
# exponent) and the NUL padding of the fixed-width column. Within that alphabet numpy's and
# Arrow's parsers accept the same tokens and both round correctly, so they give the same bits.
_DECIMAL = np.zeros(256, dtype=bool)
_DECIMAL[list(b"0123456789.+-eE\x00")] = True
#: Lines a read must have passed before score tokens go through Arrow (numpy's scan; the
#: compiled one reads nearly all scores itself and gives Arrow only the blocks it cannot read,
#: under the same rule). Loading it costs a
#: fixed ~0.13 s and ~35 MB of resident memory; it saves ~0.06 s per million lines after that
#: (a whole 10M-line read and evaluation: 6.1 against 6.4 s, medians of 4 interleaved pairs,
#: 33 MB more at the peak). Past 2M lines a file is likely to be large enough to win it back;
#: the most a read can lose is the fixed cost.
ARROW_AFTER_LINES = 2_000_000


_LITTLE_ENDIAN = sys.byteorder == "little"  # Arrow's string views are little-endian structs
_INT64_MIN = np.iinfo(np.int64).min
_LOW32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)


def _arrow_floats(words: np.ndarray, lens: np.ndarray) -> np.ndarray | None:
    """Score tokens (rows of :func:`_gather_words`) as float64 through Arrow's parser, or
    ``None`` (pyarrow missing, a byte outside :data:`_DECIMAL`, a token Arrow refuses): the
    caller then uses numpy, so the result never depends on pyarrow being installed.

    The tokens reach Arrow as a ``string_view`` array over the gathered words, built with a
    few vectorized operations: a view is 16 bytes, the length and the first 4 bytes, then
    either the next 8 bytes (a token of up to 12 bytes is stored inline) or the buffer index
    and the offset of the token's row. No copy of the text, no trimming of the padding: about
    twice as fast as numpy's ``astype`` from ``S`` per block (benchmarks/bench_parse.py).
    """
    if _pyarrow() is None or not _DECIMAL[words.view(np.uint8)].all():
        return None
    n = len(lens)
    first = words if words.ndim == 1 else words[:, 0]
    views = np.empty((n, 2), dtype="<u8")
    ln = lens.astype(np.uint64)
    np.left_shift(first & _LOW32, _SHIFT32, out=views[:, 0])
    views[:, 0] |= ln
    inline = first >> _SHIFT32
    if words.ndim == 2:  # bytes 8..11 of the token; the shift drops bytes 12..15
        inline |= words[:, 1] << _SHIFT32
    views[:, 1] = inline
    long = lens > 12
    if long.any():  # buffer 0, the offset of the token's row in it
        row = np.uint64(8 * (words.shape[1] if words.ndim == 2 else 1))
        views[long, 1] = (np.flatnonzero(long).astype(np.uint64) * row) << _SHIFT32
    return _view_floats(views, words, n)


def _pyarrow() -> Any:
    """pyarrow when it is installed and has ``string_view`` (16+), else ``None``: then numpy
    reads the scores. Not cached: a test removes pyarrow from a running process."""
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401
    except ImportError:
        return None
    return pa if hasattr(pa, "string_view") else None


def _view_floats(views: Any, data: Any, n: int) -> np.ndarray | None:
    """``n`` score tokens, given as Arrow ``string_view`` structs over ``data`` (buffer 0), as
    float64 through Arrow's parser, or ``None`` (pyarrow missing, a token Arrow refuses)."""
    pa = _pyarrow()
    if pa is None:
        return None
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    try:
        text = pa.Array.from_buffers(pa.string_view(), n,
                                     [None, pa.py_buffer(views), pa.py_buffer(data)])
        # The system allocator, as numpy uses: Arrow's default pool (jemalloc or mimalloc) keeps
        # freed pages, which on a 10M-line read held ~200 MB more at the peak.
        floats = pa.compute.cast(text, pa.float64(), memory_pool=pa.system_memory_pool())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    # A copy of the values buffer (no nulls: every token parsed): numpy-owned and writable like
    # numpy's own result. Array.to_numpy would import pandas on its first call (~0.3 s and
    # ~45 MB of a process that never uses it).
    return np.frombuffer(floats.buffers()[1], dtype=np.float64, count=n,
                         offset=8 * floats.offset).copy()


def _scan_block(block: bytes, kind: str, arrow: bool = False) -> tuple | None:
    """Vectorized tokenization of one block of whole lines (runs in a worker thread).

    Returns ``(qids, docids, values, rows, nlines)`` or None when anything is irregular (then the
    exact parser re-reads the block to name the error). ``rows`` holds the 0-based line index of
    every data line in the block, or is None when no line was skipped.
    """
    if b"\x00" in block:
        return None
    if not block.isascii():
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if _native_scan is not None:
        return _scan_native(block, kind, arrow)
    buf = np.frombuffer(block, dtype=np.uint8)
    nlines = int(np.count_nonzero(buf == 10))
    # Token bytes are > 32; of the bytes < 32 only \t\n\v\f\r (9..13) are expected. Any other
    # control byte is left to the exact parser. Usually "\n" is the only byte < 32, which one
    # count settles; only files with tabs or CRs pay for the finer check.
    low = buf < 32
    if int(np.count_nonzero(low)) != nlines:
        vals = buf[low]
        if not bool(((vals >= 9) & (vals <= 13)).all()):
            return None
    del low
    # tok[i + 1] says whether byte i belongs to a token; tok[0] is a virtual whitespace byte
    # before the block, so the flips of tok are exactly the token starts and ends (interleaved;
    # the block ends with "\n", so every token that starts also ends inside it).
    tok = np.empty(len(buf) + 1, dtype=bool)
    tok[0] = False
    np.greater(buf, 32, out=tok[1:])
    flips = np.flatnonzero(tok[1:] != tok[:-1])
    del tok
    starts = flips[0::2]
    ends = flips[1::2]
    ntok = len(starts)
    want, exact_count, qcol, dcol, vcol, _, ints = _KINDS[kind]
    per = ntok // nlines
    f: np.ndarray | slice | None = None
    rows: np.ndarray | None = None
    if per >= want and per * nlines == ntok and (not exact_count or per == want):
        # Common case: every line has the same number of tokens. Verified without locating
        # the newlines: if the byte right after the last token of every group of `per` tokens
        # is "\n", those are nlines distinct newlines, i.e. all of them, so group i is exactly
        # line i (trailing blanks or CRLF go to the general case). A comment line, too.
        heads = starts[0::per]
        if bool((buf[ends[per - 1 :: per]] == 10).all()) and not bool((buf[heads] == 35).any()):
            f = slice(None)  # marker: column j of line i is token per * i + j
    if f is None:
        newlines = np.flatnonzero(buf == 10)
        starts = np.ascontiguousarray(starts)
        ends = np.ascontiguousarray(ends)
        # Tokens per line from the number of token starts before each newline.
        upto = np.searchsorted(starts, newlines)
        first = np.empty(nlines, dtype=np.int64)
        first[0] = 0
        first[1:] = upto[:-1]
        count = upto - first
        del upto
        has = count > 0
        comment = np.zeros(nlines, dtype=bool)
        comment[has] = buf[starts[first[has]]] == 35  # '#'
        data = has & ~comment
        rows = np.flatnonzero(data)
        c = count[rows]
        if (c != want).any() if exact_count else (c < want).any():
            return None
        f = first[rows]
        if len(rows) == nlines:
            rows = None
    if isinstance(f, slice):
        qs, qlen = starts[qcol::per], ends[qcol::per] - starts[qcol::per]
        ds, dlen = starts[dcol::per], ends[dcol::per] - starts[dcol::per]
        vs, vlen = starts[vcol::per], ends[vcol::per] - starts[vcol::per]
    else:
        qs = starts[f + qcol]
        qlen = ends[f + qcol] - qs
        ds = starts[f + dcol]
        dlen = ends[f + dcol] - ds
        vs = starts[f + vcol]
        vlen = ends[f + vcol] - vs
    del starts, ends, f, flips
    if len(dlen) and int(dlen.max()) > LONG_ID:
        return None  # a rare long document id: the exact path stores it as a key
    # _gather reads whole 8-byte words: pad to a multiple of 8 past the widest token.
    pad = (max(int(qlen.max()), int(dlen.max()), int(vlen.max())) if len(qs) else 1) + 15 & ~7
    padded = np.empty(len(buf) + pad, dtype=np.uint8)
    padded[: len(buf)] = buf
    padded[len(buf) :] = 0
    q = _gather(padded, qs, qlen)
    d = _gather(padded, ds, dlen)
    if ints and len(vs) and int(vlen.max()) == 1:
        # Single-digit grades (the usual case): the digit itself, ~10x cheaper than the cast.
        digits = padded[vs]
        digits -= 48
        if bool((digits <= 9).all()):  # uint8: bytes below '0' wrapped above 9
            return q, d, digits.astype(np.int64), rows, nlines
    vwords, vwidth = _gather_words(padded, vs, vlen)
    del padded
    if b"_" in vwords.tobytes():  # Python reads "1_0" as 10, trec_eval as 1: the exact path refuses
        return None
    try:
        if ints:
            values = _as_s(vwords, vwidth).astype(np.int64)
            if (values == _INT64_MIN).any():  # numpy reads it; the exact rules (|v| <= 2**63-1) refuse it
                return None
        else:
            values = _arrow_floats(vwords, vlen) if arrow else None
            if values is None:
                values = _as_s(vwords, vwidth).astype(np.float64)
            if not np.isfinite(values).all():
                return None
    except (ValueError, OverflowError):
        return None
    return q, d, values, rows, nlines


def _scan_native(block: bytes, kind: str, arrow: bool) -> tuple | None:
    """:func:`_scan_block`'s work done by the compiled tokenizer: the same columns, or
    ``None`` on the same blocks. Columns wrap the extension's buffers without a copy.

    Scores it reads itself where one exact IEEE operation does (a short significand, a small
    exponent: nearly every score a system writes); a block with any other score gets its
    tokens back, for Arrow (past :data:`ARROW_AFTER_LINES`, as string views over the block
    itself) or numpy to read. So a read loads Arrow only for such a block; once it is loaded,
    blocks ask for the views up front instead of being scanned again for them."""
    assert _native_scan is not None
    want, exact_count, qcol, dcol, vcol, _, ints = _KINDS[kind]
    arrow = arrow and not ints and _LITTLE_ENDIAN

    def scan(views: bool) -> tuple | None:
        return _native_scan(block, want, exact_count, qcol, dcol, vcol, ints, LONG_ID, views)

    res = scan(arrow and "pyarrow" in sys.modules and _pyarrow() is not None)
    if res is None:
        return None
    qb, qw, db, dw, vb, layout, rb, n, nlines = res
    q = np.frombuffer(qb, dtype=f"S{qw}", count=n)  # the buffers have a few spare bytes
    d = np.frombuffer(db, dtype=f"S{dw}", count=n)
    rows = None if rb is None else np.frombuffer(rb, dtype=np.int64)
    if layout in ("int64", "float64"):
        values = np.frombuffer(vb, dtype=layout, count=n)
    else:  # score tokens it did not read: fixed-width, or views over the block
        values = None
        if layout != "views" and arrow and _pyarrow() is not None:  # the first such block
            vb, layout = scan(True)[4:6]  # type: ignore[index]
        if layout == "views":
            values = _view_floats(vb, block, n)
            if values is None:  # pyarrow < 16, or a token Arrow refuses: numpy reads them
                vb, layout = scan(False)[4:6]  # type: ignore[index]
        if values is None:
            try:
                values = np.frombuffer(vb, dtype=layout, count=n).astype(np.float64)
            except (ValueError, OverflowError):
                return None
    if not ints and not np.isfinite(values).all():
        return None
    return q, d, values, rows, nlines


# ============================================================================= exact path
def _scan_block_exact(block: bytes, first_line: int, kind: str, source: str | None,
                      longer: list[int] | None = None) -> tuple:
    """Line-by-line parse of one block with the same result as :func:`_scan_block`; the numbers
    of lines with more columns than wanted (where the kind allows them) go to ``longer``.

    Raises :class:`InputError` naming the first bad line and field.
    """
    qs: list[bytes] = []
    ds: list[bytes] = []
    vs: list[Any] = []
    lines: list[int] = []
    want, exact_count, qcol, dcol, vcol, field, ints = _KINDS[kind]
    for i, raw in enumerate(block.split(b"\n")[:-1] if block.endswith(b"\n") else block.split(b"\n")):
        lineno = first_line + i
        if b"\x00" in raw:
            raise InputError("NUL byte in line", source=source, line=lineno)
        if not raw.isascii():
            check_utf8(raw, lineno, source)
        parts = raw.split()
        if not parts or parts[0].startswith(b"#"):
            continue
        if len(parts) > want and kind in _EXTRA_OK:
            if longer is not None:
                longer.append(lineno)
        elif len(parts) != want if exact_count else len(parts) < want:
            raise InputError(
                f"expected {want} columns {_HEADERS[kind]}, got {len(parts)}",
                source=source,
                line=lineno,
                field="columns",
            )
        tok = parts[vcol]
        value = parse_int(tok, source, lineno, field) if ints else parse_float(tok, source, lineno, field)
        doc = parts[dcol]
        if len(doc) > LONG_ID:
            doc = long_key(doc)  # one long id must not widen the whole column
        qs.append(parts[qcol])
        ds.append(doc)
        vs.append(value)
        lines.append(lineno)
    q = np.array(qs, dtype=bytes) if qs else np.zeros(0, dtype="S1")
    d = np.array(ds, dtype=bytes) if ds else np.zeros(0, dtype="S1")
    v = np.array(vs, dtype=np.int64 if ints else np.float64)
    return q, d, v, np.array(lines, dtype=np.int64)


def scan_trec(
    blocks: Iterator[bytes], kind: str, source: str | None, *, exact: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Parse blocks in order; the vectorized scans run in a small thread pool (numpy releases
    the GIL), while line numbering and the exact fallback stay on this thread, in file order."""
    cols = _Columns()
    line = 1
    longer: list[int] = []

    def take(block: bytes, res: tuple | None) -> None:
        nonlocal line
        if res is None:
            q, d, v, lines = _scan_block_exact(block, line, kind, source, longer)
            nlines = block.count(b"\n")
            if len(lines) != nlines:
                cols.skipped = True
            cols.add(q, d, v, lines)
        else:
            q, d, v, rows, nlines = res
            if rows is None:
                cols.add(q, d, v, (line, nlines))
            else:
                cols.skipped = True
                lines = rows.astype(np.int64)
                lines += line
                cols.add(q, d, v, lines)
        line += nlines

    def stripped(it: Iterator[bytes]) -> Iterator[bytes]:
        for n, block in enumerate(it):
            if n == 0 and block.startswith(BOM):
                block = block[len(BOM) :]
            yield block

    workers = worker_threads()
    it = stripped(blocks)
    if exact:
        for block in it:
            take(block, None)
    else:
        head = [b for b in (next(it, None), next(it, None)) if b is not None]
        if len(head) < 2 or workers == 1:
            # One block (a small file) or one thread: no pool, nor its module (ids.thread_pool).
            for block in chain(head, it):
                take(block, _scan_block(block, kind, line > ARROW_AFTER_LINES))
        else:
            pool = thread_pool(workers)
            pending: deque[tuple[bytes, Future]] = deque()
            try:
                for block in chain(head, it):
                    pending.append((block, pool.submit(_scan_block, block, kind,
                                                       line > ARROW_AFTER_LINES)))
                    # Bounded look-ahead keeps memory at a few blocks however large the file.
                    while len(pending) > 2 * workers:
                        b, fut = pending.popleft()
                        take(b, fut.result())
                while pending:
                    b, fut = pending.popleft()
                    take(b, fut.result())
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
    if not len(cols):
        what = "judgments" if kind == "qrels" else "ranked documents"
        raise InputError(f"no {what} found: the input is empty or has only comments", source=source)
    if longer:
        where = f"{source}:{longer[0]}" if source else f"line {longer[0]}"
        warnings.warn(f"{where}: {len(longer)} line(s) with more than {_KINDS[kind][0]} columns; "
                      f"the text after column {_KINDS[kind][0]} is ignored, as trec_eval does",
                      stacklevel=2)
    return cols.finish()


# ============================================================================= public
def run_name(path: PathLike, head: bytes | None = None) -> str:
    """A run's default name: the file stem (``runs/bm25.trec.gz`` -> ``bm25.trec``; ``stdin``).
    A file descriptor's path (``/dev/fd/63`` from bash's ``<(zcat bm25.run.gz)``) has no
    meaningful stem: there the name is the run tag (sixth column) of the first line of
    ``head``, the TREC run's first bytes, when it has one."""
    if source_name(path) == "<stdin>":
        return "stdin"
    if head is not None and is_fd_path(path):
        tag = run_tag(head)
        if tag is not None:
            return tag
    name = Path(os.fspath(path)).name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    stem = Path(name).stem
    return stem or name


def run_tag(head: bytes) -> str | None:
    """The run tag (sixth column) of the first complete data line of a TREC run's first bytes;
    ``None`` when that line has no sixth column."""
    for raw in head.split(b"\n")[:-1]:  # complete lines only: the last one may be cut short
        fields = raw.split()
        if not fields or fields[0].startswith(b"#"):
            continue
        if len(fields) != 6:
            return None
        try:
            return fields[5].decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _blocks(text: str | bytes) -> Iterator[bytes]:
    return blocks_from_bytes(as_bytes(text), BLOCK)


def _qrels(cols: tuple, source: str | None, dedup: Dedup) -> Qrels:
    q, d, g, lines = cols
    return Qrels.from_arrays(q, d, g, source=source, line_numbers=lines, dedup=dedup, copy=False)


def _run(cols: tuple, source: str | None, name: str, dedup: Dedup, kind: str) -> Run:
    q, d, v, lines = cols
    if kind == "msmarco":
        bad = v < 1
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"rank must be a positive integer, got {int(v[i])}", source=source,
                line=int(lines[i]) if lines is not None else i + 1, field="rank",
            )
        v = 1.0 / v  # strictly decreasing in the rank: trec_eval's order is the file's
    return Run.from_arrays(q, d, v, name=name, source=source, line_numbers=lines, dedup=dedup,
                           copy=False)


def parse_trec_qrels(text: str | bytes, *, source: str | None = None, dedup: Dedup = "error") -> Qrels:
    """TREC qrels from text (``qid iter docid grade``)."""
    return _qrels(scan_trec(_blocks(text), "qrels", source), source, dedup)


def read_trec_qrels(path: PathLike | Input, *, dedup: Dedup = "error") -> Qrels:
    """TREC qrels from a file, ``.gz``, pipe or ``-``."""
    with opened(path) as inp:
        return _qrels(scan_trec(inp.blocks(BLOCK), "qrels", inp.source), inp.source, dedup)


def parse_trec_run(
    text: str | bytes, *, source: str | None = None, name: str = "run", dedup: Dedup = "error"
) -> Run:
    """A TREC run from text (``qid Q0 docid rank score tag``)."""
    return _run(scan_trec(_blocks(text), "run", source), source, name, dedup, "run")


def _read_run(path: PathLike | Input, name: str | None, dedup: Dedup, kind: str) -> Run:
    with opened(path) as inp:
        if name is None:
            name = run_name(inp.source, inp.peek() if kind == "run" else None)
        cols = scan_trec(inp.blocks(BLOCK), kind, inp.source)
        return _run(cols, inp.source, name, dedup, kind)


def read_trec_run(path: PathLike | Input, *, name: str | None = None, dedup: Dedup = "error") -> Run:
    """A TREC run from a file, ``.gz``, pipe or ``-``; ``name`` defaults to the file stem."""
    return _read_run(path, name, dedup, "run")


def parse_msmarco_run(
    text: str | bytes, *, source: str | None = None, name: str = "run", dedup: Dedup = "error"
) -> Run:
    """An MS MARCO run from text (``qid<TAB>docid<TAB>rank``; score = 1 / rank)."""
    return _run(scan_trec(_blocks(text), "msmarco", source), source, name, dedup, "msmarco")


def read_msmarco_run(path: PathLike | Input, *, name: str | None = None, dedup: Dedup = "error") -> Run:
    """An MS MARCO run from a file (``qid<TAB>docid<TAB>rank``; score = 1 / rank)."""
    return _read_run(path, name, dedup, "msmarco")


def parse_trec_exact(text: str | bytes, kind: str, source: str | None = None) -> tuple:
    """The exact (slow) line parser over ``text``: ``(qids, docids, values, lines)``; for tests
    comparing it with the vectorized path."""
    return scan_trec(_blocks(text), kind, source, exact=True)
