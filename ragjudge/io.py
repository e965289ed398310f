"""Reading and writing relevance judgments, runs, queries and corpora.

Formats (see :data:`QRELS_FORMATS`, :data:`RUN_FORMATS`):

* TREC qrels ``qid iter docid grade`` (exactly 4 whitespace-separated columns) and TREC runs
  ``qid Q0 docid rank score tag`` (at least 6 columns; text after the 6th is ignored and the
  rank column is ignored, like trec_eval). Lines whose first non-blank character is ``#`` are
  comments; blank lines are skipped. Document ids may contain ``#``.
* BEIR qrels TSV ``query-id<TAB>corpus-id<TAB>score`` (the header row is detected and skipped).
* JSON dict-of-dicts ``{qid: {docid: grade_or_score}}`` (the pytrec_eval / ranx shape).
* Queries and corpora for the LLM judge: BEIR JSONL (``_id``, ``title``, ``text``) or TSV
  ``id<TAB>text``.

Every reader has a ``parse_*`` twin taking text, so files are the only side effect. Files ending
in ``.gz`` (or starting with the gzip magic bytes) are decompressed transparently.

The TREC reader is vectorized: the file is read in blocks of bytes, tokenized with numpy (token
boundaries from a whitespace mask, tokens gathered into fixed-width ``S`` arrays, scores parsed by
``astype(float64)``) without creating a Python object per line. Any irregularity sends the block
to an exact line-by-line parser whose only job is to name the first bad file/line/field.
Writers print scores with ``repr(float)``, so reading a written file yields identical floats.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .data import Dedup, Qrels, Run
from .errors import InputError

__all__ = [
    "QRELS_FORMATS",
    "RUN_FORMATS",
    "parse_qrels",
    "read_qrels",
    "format_qrels",
    "write_qrels",
    "parse_run",
    "read_run",
    "format_run",
    "write_run",
    "parse_queries",
    "read_queries",
    "parse_corpus",
    "read_corpus",
]

PathLike = Union[str, "os.PathLike[str]"]
QrelsFormat = Literal["auto", "trec", "beir", "json"]
RunFormat = Literal["auto", "trec", "json"]
TextFormat = Literal["auto", "jsonl", "tsv"]

QRELS_FORMATS = ("trec", "beir", "json")
RUN_FORMATS = ("trec", "json")

# Bytes per block of the vectorized reader: large enough to amortize numpy call overhead,
# small enough that the per-block temporaries (~10 bytes of scratch per input byte) stay in
# cache and below malloc's mmap threshold (so they are reused, not page-faulted in afresh; with
# 16 MiB blocks a third of the CPU time went to page faults).
_BLOCK = 1 << 19

# bytes.split() whitespace: space, \t, \n, \v, \f, \r. The fast and the exact path agree on it.
_WS_BYTES = b" \t\n\x0b\x0c\r"
_BOM = b"\xef\xbb\xbf"
_INT64_MAX = 2**63 - 1


# ============================================================================= file access
def _source_name(path: PathLike) -> str:
    return os.fspath(path)


def _open_binary(path: PathLike) -> Any:
    """Open a file for binary reading, transparently gunzipping; errors become InputError."""
    src = _source_name(path)
    try:
        f = open(path, "rb")  # noqa: SIM115 -- returned to the caller, closed there
    except FileNotFoundError:
        raise InputError("file not found", source=src) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", source=src) from None
    except PermissionError:
        raise InputError("permission denied", source=src) from None
    except OSError as exc:
        raise InputError(f"cannot open file ({exc.strerror or exc})", source=src) from None
    magic = f.read(2)
    f.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")
    return f


def _read_all(path: PathLike) -> bytes:
    with _open_binary(path) as f:
        try:
            return f.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"cannot read file ({exc})", source=_source_name(path)) from None


def _blocks_from_file(path: PathLike, block: int | None = None) -> Iterator[bytes]:
    """Blocks of whole lines (each ends with ``\\n``; a missing final newline is added)."""
    block = block or _BLOCK
    src = _source_name(path)
    with _open_binary(path) as f:
        carry = b""
        while True:
            try:
                chunk = f.read(block)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(f"cannot read file ({exc})", source=src) from None
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1 :]
            yield data[: cut + 1]
        if carry:
            yield carry + b"\n"


def _blocks_from_bytes(data: bytes, block: int | None = None) -> Iterator[bytes]:
    block = block or _BLOCK
    n = len(data)
    pos = 0
    while pos < n:
        end = min(pos + block, n)
        if end < n:
            cut = data.rfind(b"\n", pos, end)
            if cut < 0:
                cut = data.find(b"\n", end)
                end = n if cut < 0 else cut + 1
            else:
                end = cut + 1
        piece = data[pos:end]
        yield piece if piece.endswith(b"\n") else piece + b"\n"
        pos = end


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _check_utf8(block: bytes, first_line: int, source: str | None) -> None:
    if block.isascii():
        return
    try:
        block.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + block.count(b"\n", 0, exc.start)
        column = exc.start - block.rfind(b"\n", 0, exc.start)
        raise InputError(
            f"invalid UTF-8 at byte {column} of the line",
            source=source,
            line=line,
        ) from None


# ============================================================================= TREC fast path
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

    def add(
        self, q: np.ndarray, d: np.ndarray, v: np.ndarray, lines: np.ndarray | tuple[int, int]
    ) -> None:
        self.qids.append(q)
        self.docids.append(d)
        self.values.append(v)
        self.lines.append(lines)

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
        return np.ascontiguousarray(parts[0])  # _gather returns strided views
    return np.concatenate(parts)  # numpy widens to the longest id


# _LOW_BYTES[m] keeps the first m bytes of a little-endian uint64 word (m = 0..8).
_LOW_BYTES = np.array([(1 << (8 * m)) - 1 for m in range(9)], dtype=np.uint64)


def _gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Tokens ``buf[s:s+len]`` as an ``S`` array, without a Python object per token.

    ``buf`` must extend at least ``8 * ceil(max(lens) / 8)`` bytes past every start (the caller
    pads it). Tokens are read as unaligned little-endian uint64 words (one fancy-index per 8
    bytes of width, several times faster than copying ``(n, width)`` byte rows), the bytes past
    each token are masked to NUL (``S`` arrays strip trailing NULs; tokens never contain NUL),
    and the result is a strided ``S<width>`` view of the words (callers concatenate or copy).
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype="S1")
    width = int(lens.max())
    k = -(-width // 8)
    words = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
    short = int(lens.min())
    if k == 1:
        out = words[starts]
        if short < 8:
            out &= _LOW_BYTES[lens]
    else:
        out = np.empty((n, k), dtype="<u8")
        for j in range(k):
            w = words[starts + 8 * j] if j else words[starts]
            if short < 8 * j + 8:
                m = lens - 8 * j
                np.clip(m, 0, 8, out=m)
                w &= _LOW_BYTES[m]
            out[:, j] = w
    return np.ndarray((n,), dtype=f"S{width}", buffer=out, strides=(8 * k,))


def _scan_block(block: bytes, kind: str) -> tuple | None:
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
    want = 4 if kind == "qrels" else 6
    per = ntok // nlines
    f: np.ndarray | slice | None = None
    rows: np.ndarray | None = None
    if per >= want and per * nlines == ntok and (kind == "run" or per == want):
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
        if (c != want).any() if kind == "qrels" else (c < want).any():
            return None
        f = first[rows]
        if len(rows) == nlines:
            rows = None
    qcol, dcol, vcol = (0, 2, 3) if kind == "qrels" else (0, 2, 4)
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
    # _gather reads whole 8-byte words: pad to a multiple of 8 past the widest token.
    pad = (max(int(qlen.max()), int(dlen.max()), int(vlen.max())) if len(qs) else 1) + 15 & ~7
    padded = np.empty(len(buf) + pad, dtype=np.uint8)
    padded[: len(buf)] = buf
    padded[len(buf) :] = 0
    q = _gather(padded, qs, qlen)
    d = _gather(padded, ds, dlen)
    if kind == "qrels" and len(vs) and int(vlen.max()) == 1:
        # Single-digit grades (the usual case): the digit itself, ~10x cheaper than the cast.
        digits = padded[vs]
        digits -= 48
        if bool((digits <= 9).all()):  # uint8: bytes below '0' wrapped above 9
            return q, d, digits.astype(np.int64), rows, nlines
    vtok = _gather(padded, vs, vlen)
    del padded
    try:
        if kind == "qrels":
            values = vtok.astype(np.int64)
        else:
            values = vtok.astype(np.float64)
            if not np.isfinite(values).all():
                return None
    except (ValueError, OverflowError):
        return None
    return q, d, values, rows, nlines


# ============================================================================= TREC exact path
def _scan_block_exact(block: bytes, first_line: int, kind: str, source: str | None) -> tuple:
    """Line-by-line parse of one block with the same result as :func:`_scan_block`.

    Raises :class:`InputError` naming the first bad line and field.
    """
    qs: list[bytes] = []
    ds: list[bytes] = []
    vs: list[Any] = []
    lines: list[int] = []
    for i, raw in enumerate(block.split(b"\n")[:-1] if block.endswith(b"\n") else block.split(b"\n")):
        lineno = first_line + i
        if b"\x00" in raw:
            raise InputError("NUL byte in line", source=source, line=lineno)
        if not raw.isascii():
            _check_utf8(raw, lineno, source)
        parts = raw.split()
        if not parts or parts[0].startswith(b"#"):
            continue
        if kind == "qrels":
            if len(parts) != 4:
                raise InputError(
                    f"expected 4 columns 'qid iter docid grade', got {len(parts)}",
                    source=source,
                    line=lineno,
                    field="columns",
                )
            value = _parse_int(parts[3], source, lineno, "grade")
            doc = parts[2]
        else:
            if len(parts) < 6:
                raise InputError(
                    f"expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}",
                    source=source,
                    line=lineno,
                    field="columns",
                )
            value = _parse_float(parts[4], source, lineno, "score")
            doc = parts[2]
        qs.append(parts[0])
        ds.append(doc)
        vs.append(value)
        lines.append(lineno)
    q = np.array(qs, dtype=bytes) if qs else np.zeros(0, dtype="S1")
    d = np.array(ds, dtype=bytes) if ds else np.zeros(0, dtype="S1")
    v = np.array(vs, dtype=np.int64 if kind == "qrels" else np.float64)
    return q, d, v, np.array(lines, dtype=np.int64)


def _token_text(tok: bytes) -> str:
    return tok.decode("utf-8", errors="replace")


def _parse_int(tok: bytes, source: str | None, line: int | None, field: str) -> int:
    try:
        if not tok.isascii():
            raise ValueError
        value = int(tok)
    except ValueError:
        raise InputError(
            f"must be an integer, got {_token_text(tok)!r}", source=source, line=line, field=field
        ) from None
    if abs(value) > _INT64_MAX:
        raise InputError(
            f"integer out of range, got {_token_text(tok)!r}", source=source, line=line, field=field
        )
    return value


def _parse_float(tok: bytes, source: str | None, line: int | None, field: str) -> float:
    try:
        if not tok.isascii():
            raise ValueError
        value = float(tok)
    except ValueError:
        raise InputError(
            f"must be a number, got {_token_text(tok)!r}", source=source, line=line, field=field
        ) from None
    if not math.isfinite(value):
        raise InputError(
            f"must be a finite number, got {_token_text(tok)!r}", source=source, line=line, field=field
        )
    return value


def _workers() -> int:
    # Scanning threads (numpy releases the GIL in the scan). RAGJUDGE_THREADS overrides the
    # default, which keeps one core's worth of headroom: min(4, cores // 2), at least 1.
    env = os.environ.get("RAGJUDGE_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = os.cpu_count() or 1
    return max(1, min(4, cores // 2))


def _parse_trec_blocks(
    blocks: Iterator[bytes], kind: str, source: str | None, *, exact: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Parse blocks in order; the vectorized scans run in a small thread pool (numpy releases
    the GIL), while line numbering and the exact fallback stay on this thread, in file order."""
    cols = _Columns()
    line = 1

    def take(block: bytes, res: tuple | None) -> None:
        nonlocal line
        if res is None:
            q, d, v, lines = _scan_block_exact(block, line, kind, source)
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
            if n == 0 and block.startswith(_BOM):
                block = block[len(_BOM) :]
            yield block

    workers = _workers()
    if exact:
        for block in stripped(blocks):
            take(block, None)
    elif workers == 1:
        for block in stripped(blocks):
            take(block, _scan_block(block, kind))
    else:
        pool = ThreadPoolExecutor(max_workers=workers)
        pending: deque[tuple[bytes, Future]] = deque()
        try:
            for block in stripped(blocks):
                pending.append((block, pool.submit(_scan_block, block, kind)))
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
    return cols.finish()


# ============================================================================= qrels
def _detect_text_format(head: bytes, path: str | None, allowed: tuple[str, ...]) -> str:
    """Format from the extension, else from the first data line."""
    if path is not None:
        name = path.lower()
        if name.endswith(".gz"):
            name = name[:-3]
        if name.endswith(".json") and "json" in allowed:
            return "json"
        if name.endswith(".tsv") and "beir" in allowed:
            return "beir"
    stripped = head.lstrip(_BOM + _WS_BYTES)
    if stripped.startswith(b"{") and "json" in allowed:
        return "json"
    if "beir" in allowed:
        for raw in head.split(b"\n"):
            if not raw.strip() or raw.lstrip().startswith(b"#"):
                continue
            fields = raw.rstrip(b"\r").split(b"\t")
            if len(fields) == 3:
                return "beir"
            break
    return "trec"


def _sniff_format(path: PathLike, src: str, allowed: tuple[str, ...]) -> str:
    """The format of a file, from its name and first 64 KiB (see :func:`_detect_text_format`)."""
    with _open_binary(path) as f:
        try:
            head = f.read(65536)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"cannot read file ({exc})", source=src) from None
    return _detect_text_format(head, src, allowed)


def _parse_beir_qrels(data: bytes, source: str | None, dedup: Dedup) -> Qrels:
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            "invalid UTF-8", source=source, line=data.count(b"\n", 0, exc.start) + 1
        ) from None
    qs: list[str] = []
    ds: list[str] = []
    gs: list[int] = []
    lines: list[int] = []
    seen_data = False
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise InputError(
                f"expected 3 tab-separated columns 'query-id corpus-id score', got {len(fields)}",
                source=source,
                line=lineno,
                field="columns",
            )
        if not seen_data:
            seen_data = True
            if not _is_int(fields[2].strip()):
                continue  # header row, e.g. "query-id\tcorpus-id\tscore"
        qid, docid, grade = fields[0].strip(), fields[1].strip(), fields[2].strip()
        for name, value in (("query-id", qid), ("corpus-id", docid)):
            if not value:
                raise InputError("empty id", source=source, line=lineno, field=name)
        qs.append(qid)
        ds.append(docid)
        gs.append(_parse_int(grade.encode("utf-8"), source, lineno, "score"))
        lines.append(lineno)
    if not qs:
        raise InputError(
            "no judgments found: the input is empty or has only a header", source=source
        )
    return Qrels.from_arrays(
        qs, ds, np.array(gs, dtype=np.int64), source=source,
        line_numbers=np.array(lines, dtype=np.int64), dedup=dedup,
    )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return text.isascii()


def _load_json(data: bytes, source: str | None) -> Any:
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    if not data.strip():
        raise InputError("empty input: expected a JSON object", source=source)
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid UTF-8 ({exc.reason})", source=source, field="json") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", source=source, line=exc.lineno,
            field="json",
        ) from None


def _json_nested(obj: Any, source: str | None, what: str) -> dict[str, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise InputError(
            f"expected a JSON object {{query_id: {{doc_id: {what}}}}}, got {type(obj).__name__}",
            source=source,
            field="json",
        )
    for qid, docs in obj.items():
        if not isinstance(docs, dict):
            raise InputError(
                f"value of query {qid!r} must be an object {{doc_id: {what}}}, "
                f"got {type(docs).__name__}",
                source=source,
                field=what,
            )
    return obj


def _parse_qrels_bytes(
    data: bytes, source: str | None, fmt: str, dedup: Dedup, path: str | None = None
) -> Qrels:
    if fmt == "auto":
        fmt = _detect_text_format(data[:65536], path, QRELS_FORMATS)
    if fmt == "json":
        obj = _json_nested(_load_json(data, source), source, "grade")
        qrels = Qrels.from_dict(obj, source=source)
        if not len(qrels):
            raise InputError("no judgments found: the JSON object is empty", source=source)
        return qrels
    if fmt == "beir":
        return _parse_beir_qrels(data, source, dedup)
    if fmt == "trec":
        q, d, g, lines = _parse_trec_blocks(_blocks_from_bytes(data), "qrels", source)
        return Qrels._from_arrays(q, d, g, source=source, line_numbers=lines, dedup=dedup,
                                  copy=False)
    raise InputError(
        f"unknown qrels format {fmt!r}; expected one of auto, {', '.join(QRELS_FORMATS)}",
        field="format",
    )


def parse_qrels(
    text: str | bytes,
    *,
    source: str | None = None,
    format: QrelsFormat = "trec",
    dedup: Dedup = "error",
) -> Qrels:
    """Parse qrels text in ``format`` ("trec", "beir", "json" or "auto").

    ``source`` names the input in error messages. A duplicate (query, document) pair raises
    :class:`InputError` unless ``dedup="first"``.
    """
    return _parse_qrels_bytes(_as_bytes(text), source, format, dedup)


def read_qrels(path: PathLike, *, format: QrelsFormat = "auto", dedup: Dedup = "error") -> Qrels:
    """Read a qrels file (TREC, BEIR TSV or JSON; ``.gz`` is decompressed transparently).

    ``format="auto"`` picks JSON for ``.json``, BEIR for ``.tsv``, otherwise looks at the content.
    """
    src = _source_name(path)
    if format == "trec":
        q, d, g, lines = _parse_trec_blocks(_blocks_from_file(path), "qrels", src)
        return Qrels._from_arrays(q, d, g, source=src, line_numbers=lines, dedup=dedup, copy=False)
    if format == "auto":
        fmt = _sniff_format(path, src, QRELS_FORMATS)
        if fmt == "trec":
            return read_qrels(path, format="trec", dedup=dedup)
        format = fmt  # type: ignore[assignment]
    return _parse_qrels_bytes(_read_all(path), src, format, dedup, src)


# ============================================================================= runs
def _run_name(path: PathLike) -> str:
    name = Path(path).name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    stem = Path(name).stem
    return stem or name


def _parse_run_bytes(
    data: bytes, source: str | None, fmt: str, dedup: Dedup, name: str, path: str | None = None
) -> Run:
    if fmt == "auto":
        fmt = _detect_text_format(data[:65536], path, RUN_FORMATS)
    if fmt == "json":
        obj = _json_nested(_load_json(data, source), source, "score")
        run = Run.from_dict(obj, name=name, source=source)
        if not len(run):
            raise InputError("no ranked documents found: the JSON object is empty", source=source)
        return run
    if fmt == "trec":
        q, d, s, lines = _parse_trec_blocks(_blocks_from_bytes(data), "run", source)
        return Run._from_arrays(q, d, s, name=name, source=source, line_numbers=lines,
                                dedup=dedup, copy=False)
    raise InputError(
        f"unknown run format {fmt!r}; expected one of auto, {', '.join(RUN_FORMATS)}",
        field="format",
    )


def parse_run(
    text: str | bytes,
    *,
    source: str | None = None,
    format: RunFormat = "trec",
    name: str = "run",
    dedup: Dedup = "error",
) -> Run:
    """Parse a run in ``format`` ("trec", "json" or "auto").

    A document listed twice for one query raises :class:`InputError` naming the line, unless
    ``dedup="first"`` (keep the first line).
    """
    return _parse_run_bytes(_as_bytes(text), source, format, dedup, name)


def read_run(
    path: PathLike,
    *,
    name: str | None = None,
    format: RunFormat = "auto",
    dedup: Dedup = "error",
) -> Run:
    """Read a run file (TREC or JSON; ``.gz`` transparently). ``name`` defaults to the file stem."""
    src = _source_name(path)
    run_name = name if name is not None else _run_name(path)
    if format == "auto":
        format = _sniff_format(path, src, RUN_FORMATS)  # type: ignore[assignment]
    if format == "trec":
        q, d, s, lines = _parse_trec_blocks(_blocks_from_file(path), "run", src)
        return Run._from_arrays(q, d, s, name=run_name, source=src, line_numbers=lines,
                                dedup=dedup, copy=False)
    return _parse_run_bytes(_read_all(path), src, format, dedup, run_name, src)


# ============================================================================= writers
def _ws_mask(raw: np.ndarray, tabs_only: bool) -> np.ndarray:
    if tabs_only:
        return (raw == 9) | (raw == 10) | (raw == 13)
    return (raw == 32) | ((raw >= 9) & (raw <= 13))


def _check_ids(ids: np.ndarray, what: str, fmt: str, *, hash_ok: bool) -> None:
    """Refuse ids that ``fmt`` cannot hold without reading back differently (vectorized)."""
    n = len(ids)
    if not n:
        return
    width = ids.dtype.itemsize
    raw = ids.view(np.uint8).reshape(n, width)
    tabs_only = fmt == "BEIR TSV"
    bad = _ws_mask(raw, tabs_only).any(axis=1) | (raw[:, 0] == 0)
    if tabs_only:  # the BEIR reader strips spaces around fields
        lengths = np.char.str_len(ids)
        last = raw[np.arange(n), np.maximum(lengths - 1, 0)]
        bad |= (raw[:, 0] == 32) | (last == 32)
    if not hash_ok:
        bad |= raw[:, 0] == 35
    if bad.any():
        value = ids[int(np.flatnonzero(bad)[0])].decode("utf-8", "replace")
        raise InputError(
            f"{what} {value!r} cannot be written as {fmt} (it is empty, contains whitespace"
            f"{'' if hash_ok else ' or starts with #'}); write JSON instead",
            field=what,
        )


def _qrels_chunks(qrels: Qrels, format: str) -> Iterator[str]:
    qids, offsets, docids, grades = qrels.arrays
    if format == "json":
        yield json.dumps(qrels.to_dict(), ensure_ascii=False, indent=1) + "\n"
        return
    if format == "trec":
        fmt, mid, sep = "TREC", " 0 ", " "
    elif format == "beir":
        fmt, mid, sep = "BEIR TSV", "\t", "\t"
        yield "query-id\tcorpus-id\tscore\n"
    else:
        raise InputError(
            f"unknown qrels format {format!r}; expected one of {', '.join(QRELS_FORMATS)}",
            field="format",
        )
    _check_ids(qids, "query id", fmt, hash_ok=False)
    _check_ids(docids, "doc id", fmt, hash_ok=True)
    ol = offsets.tolist()
    for i, q in enumerate(qids.tolist()):
        qs = q.decode("utf-8")
        lo, hi = ol[i], ol[i + 1]
        yield "".join(
            f"{qs}{mid}{d.decode('utf-8')}{sep}{g}\n"
            for d, g in zip(docids[lo:hi].tolist(), grades[lo:hi].tolist())
        )


def _run_chunks(run: Run, format: str, tag: str | None) -> Iterator[str]:
    qids, offsets, docids, scores = run.arrays
    if format == "json":
        yield json.dumps(run.to_dict(), ensure_ascii=False, indent=1) + "\n"
        return
    if format != "trec":
        raise InputError(
            f"unknown run format {format!r}; expected one of {', '.join(RUN_FORMATS)}",
            field="format",
        )
    _check_ids(qids, "query id", "TREC", hash_ok=False)
    _check_ids(docids, "doc id", "TREC", hash_ok=True)
    words = (run.name if tag is None else tag).split()
    tag = words[0] if words else "run"  # the tag is one token; it is not read back
    ol = offsets.tolist()
    for i, q in enumerate(qids.tolist()):
        qs = q.decode("utf-8")
        lo, hi = ol[i], ol[i + 1]
        # repr(float) is the shortest text that reads back to the identical float.
        yield "".join(
            f"{qs} Q0 {d.decode('utf-8')} {r} {x!r} {tag}\n"
            for r, (d, x) in enumerate(zip(docids[lo:hi].tolist(), scores[lo:hi].tolist()), 1)
        )


def format_qrels(qrels: Qrels, format: str = "trec") -> str:
    """Qrels as text: ``trec`` (``qid 0 docid grade``), ``beir`` (TSV with header) or ``json``."""
    return "".join(_qrels_chunks(qrels, format))


def format_run(run: Run, format: str = "trec", *, tag: str | None = None) -> str:
    """A run as text: ``trec`` (``qid Q0 docid rank score tag``, rank from 1) or ``json``.

    Scores are written with ``repr`` so they read back identical; ``tag`` defaults to the run name.
    """
    return "".join(_run_chunks(run, format, tag))


def _write_chunks(path: PathLike, chunks: Iterator[str]) -> None:
    src = _source_name(path)
    first = next(chunks, "")  # format errors are raised before the file is created
    try:
        opener = gzip.open if src.lower().endswith(".gz") else open
        with opener(path, "wb") as f:  # type: ignore[operator]
            f.write(first.encode("utf-8"))
            batch: list[str] = []
            size = 0
            for chunk in chunks:
                batch.append(chunk)
                size += len(chunk)
                if size > 1 << 20:
                    f.write("".join(batch).encode("utf-8"))
                    batch, size = [], 0
            f.write("".join(batch).encode("utf-8"))
    except OSError as exc:
        raise InputError(f"cannot write file ({exc.strerror or exc})", source=src) from None


def _format_for_path(path: PathLike, default: str, allowed: tuple[str, ...]) -> str:
    name = _source_name(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".json") and "json" in allowed:
        return "json"
    if name.endswith(".tsv") and "beir" in allowed:
        return "beir"
    return default


def write_qrels(qrels: Qrels, path: PathLike, format: str = "auto") -> None:
    """Write qrels; ``format="auto"`` picks JSON for ``.json``, BEIR for ``.tsv``, else TREC.
    A ``.gz`` path is gzipped."""
    if format == "auto":
        format = _format_for_path(path, "trec", QRELS_FORMATS)
    _write_chunks(path, _qrels_chunks(qrels, format))


def write_run(run: Run, path: PathLike, format: str = "auto", *, tag: str | None = None) -> None:
    """Write a run; ``format="auto"`` picks JSON for ``.json``, else TREC. ``.gz`` is gzipped."""
    if format == "auto":
        format = _format_for_path(path, "trec", RUN_FORMATS)
    _write_chunks(path, _run_chunks(run, format, tag))


# ============================================================================= queries / corpus
def _decode_text(data: bytes, source: str | None) -> str:
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            "invalid UTF-8", source=source, line=data.count(b"\n", 0, exc.start) + 1
        ) from None


def _detect_jsonl(text: str, path: str | None) -> str:
    if path is not None:
        name = path.lower()
        if name.endswith(".gz"):
            name = name[:-3]
        if name.endswith((".jsonl", ".json", ".ndjson")):
            return "jsonl"
        if name.endswith((".tsv", ".txt")):
            return "tsv"
    return "jsonl" if text.lstrip().startswith(("{", "[")) else "tsv"


def _parse_texts(
    text: str, source: str | None, fmt: str, kind: str, path: str | None = None
) -> dict[str, str]:
    if fmt == "auto":
        fmt = _detect_jsonl(text, path)
    if fmt not in ("jsonl", "tsv"):
        raise InputError(f"unknown {kind} format {fmt!r}; expected auto, jsonl or tsv", field="format")
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if fmt == "jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"invalid JSON: {exc.msg} (column {exc.colno})", source=source, line=lineno,
                    field="json",
                ) from None
            if not isinstance(obj, dict):
                raise InputError(
                    f"expected a JSON object, got {type(obj).__name__}", source=source,
                    line=lineno, field="json",
                )
            if "_id" not in obj:
                raise InputError("missing '_id'", source=source, line=lineno, field="_id")
            if "text" not in obj:
                raise InputError("missing 'text'", source=source, line=lineno, field="text")
            ident, body = obj["_id"], obj["text"]
            if isinstance(ident, bool) or not isinstance(ident, (str, int)):
                raise InputError(
                    f"must be a string, got {type(ident).__name__}", source=source, line=lineno,
                    field="_id",
                )
            if not isinstance(body, str):
                raise InputError(
                    f"must be a string, got {type(body).__name__}", source=source, line=lineno,
                    field="text",
                )
            title = obj.get("title") or ""
            if not isinstance(title, str):
                raise InputError(
                    f"must be a string, got {type(title).__name__}", source=source, line=lineno,
                    field="title",
                )
            ident = str(ident)
            if kind == "corpus" and title.strip():
                body = f"{title}\n{body}"
        else:
            ident, tab, body = line.partition("\t")
            if not tab:
                raise InputError(
                    "expected 'id<TAB>text' (no tab found)", source=source, line=lineno,
                    field="columns",
                )
            ident = ident.strip()
        if not ident:
            raise InputError("empty id", source=source, line=lineno, field="_id" if fmt == "jsonl" else "id")
        if ident in out:
            raise InputError(
                f"duplicate id {ident!r} (first seen at line {first_line[ident]})",
                source=source, line=lineno, field="_id" if fmt == "jsonl" else "id",
            )
        out[ident] = body
        first_line[ident] = lineno
    if not out:
        raise InputError(f"no {kind} found: the input is empty", source=source)
    return out


def parse_queries(
    text: str | bytes, *, source: str | None = None, format: TextFormat = "auto"
) -> dict[str, str]:
    """Queries ``{id: text}`` from BEIR JSONL (``_id``, ``text``) or TSV ``id<TAB>text``."""
    if isinstance(text, bytes):
        text = _decode_text(text, source)
    return _parse_texts(text, source, format, "queries")


def read_queries(path: PathLike, *, format: TextFormat = "auto") -> dict[str, str]:
    """Read queries (BEIR ``queries.jsonl`` or TSV ``id<TAB>text``; ``.gz`` transparently)."""
    src = _source_name(path)
    return _parse_texts(_decode_text(_read_all(path), src), src, format, "queries", src)


def parse_corpus(
    text: str | bytes, *, source: str | None = None, format: TextFormat = "auto"
) -> dict[str, str]:
    """Documents ``{id: text}``; for BEIR JSONL the text is ``title + "\\n" + text`` when a title
    is present."""
    if isinstance(text, bytes):
        text = _decode_text(text, source)
    return _parse_texts(text, source, format, "corpus")


def read_corpus(path: PathLike, *, format: TextFormat = "auto") -> dict[str, str]:
    """Read a corpus (BEIR ``corpus.jsonl`` or TSV ``id<TAB>text``; ``.gz`` transparently)."""
    src = _source_name(path)
    return _parse_texts(_decode_text(_read_all(path), src), src, format, "corpus", src)


# Re-exported for callers that want the exact (slow) parser, e.g. tests comparing both paths.
def _parse_trec_exact(text: str | bytes, kind: str, source: str | None = None) -> tuple:
    return _parse_trec_blocks(_blocks_from_bytes(_as_bytes(text)), kind, source, exact=True)

