"""Opening inputs: files, ``.gz`` (by magic bytes), pipes and standard input, read once.

Every reader goes through :func:`open_input`, which never seeks: named pipes, process
substitution (``<(zcat run.gz)``) and ``-`` / ``/dev/stdin`` work like regular files, and the
first bytes (for gzip detection and format sniffing) are kept and replayed rather than re-read.

Line breaks are universal: ``\r\n`` and a lone ``\r`` (old Mac files) read as ``\n``, so every
reader sees one kind. Input that is not text is refused instead of read forever: a NUL byte
near its start ("not a text file") or a line longer than :data:`MAX_LINE` bytes ("line too
long").
"""

from __future__ import annotations

import gzip
import os
import re
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Union

from ..errors import InputError

__all__ = [
    "PathLike",
    "STDIN",
    "BOM",
    "WS_BYTES",
    "Input",
    "open_input",
    "opened",
    "source_name",
    "is_fd_path",
    "as_bytes",
    "decode_text",
    "check_utf8",
    "blocks_from_bytes",
    "check_output_path",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Paths that mean standard input.
STDIN = ("-", "/dev/stdin")
BOM = b"\xef\xbb\xbf"
# bytes.split() whitespace: space, \t, \n, \v, \f, \r. The fast and the exact path agree on it.
WS_BYTES = b" \t\n\x0b\x0c\r"
#: Bytes kept at the front of an input for format sniffing.
HEAD = 1 << 16
#: The longest line any reader accepts: past this without a line break, the input is not a
#: line-based text file (``/dev/zero``, a binary blob), and reading on would never end.
MAX_LINE = 1 << 26
_CHUNK = 1 << 20
_READ_ERRORS = (OSError, EOFError, zlib.error)


def source_name(path: PathLike) -> str:
    """How an input is named in error messages (``<stdin>`` for standard input)."""
    name = os.fspath(path)
    return "<stdin>" if name in STDIN else name


_FD_PATH = re.compile(r"/(?:dev|proc/(?:self|[0-9]+))/fd/[0-9]+")


def is_fd_path(path: Any) -> bool:
    """Whether ``path`` names an open file descriptor, as bash's ``<(cmd)`` does
    (``/dev/fd/63``): a name that says nothing about its content."""
    try:
        return bool(_FD_PATH.fullmatch(os.fspath(path)))
    except TypeError:
        return False


def as_bytes(text: str | bytes) -> bytes:
    """In-memory input as bytes, with universal line breaks (as files are read)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data



#: Binary files people give by mistake, by their first bytes, and what to do instead.
_BINARY_KINDS = (
    (b"\x28\xb5\x2f\xfd", "zstd-compressed; decompress it first (zstd -d FILE, or <(zstd -dc FILE)): "
                          "plain and .gz files are read"),
    (b"BZh", "bzip2-compressed; decompress it first (bunzip2 -k FILE, or <(bzcat FILE)): plain and .gz "
             "files are read"),
    (b"\xfd7zXZ\x00", "xz-compressed; decompress it first (xz -dk FILE, or <(xzcat FILE)): plain and .gz "
                      "files are read"),
    (b"PK\x03\x04", "a zip archive; extract the file first"),
    (b"PAR1", "a Parquet file; write it as JSONL first (e.g. pandas.read_parquet(F).to_json(OUT, "
              "orient='records', lines=True))"),
    (b"SQLite format 3\x00", "an SQLite database (an LLM cache or job store?), not an input file"),
)


def _binary_kind(head: bytes) -> str | None:
    """What a binary input is, when its first bytes say so."""
    return next((what for magic, what in _BINARY_KINDS if head.startswith(magic)), None)


class _Prefixed:
    """A binary stream with bytes already read put back in front (no seek needed)."""

    def __init__(self, prefix: bytes, raw: Any) -> None:
        self._prefix = prefix
        self._raw = raw
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        if self._prefix:
            if n is None or n < 0:
                out, self._prefix = self._prefix + self._raw.read(), b""
                return out
            out, self._prefix = self._prefix[:n], self._prefix[n:]
            return out
        return self._raw.read(n)

    def close(self) -> None:
        pass  # the raw stream is closed by Input


class Input:
    """One opened input, decompressed, read front to back exactly once.

    :meth:`peek` returns the first bytes without consuming them (for sniffing); :meth:`blocks`
    and :meth:`read` then start from the beginning.
    """

    def __init__(self, path: PathLike) -> None:
        self.source = source_name(path)
        name = os.fspath(path)
        self._close_raw = True
        if name in STDIN:
            raw = getattr(sys.stdin, "buffer", None)
            if raw is None:
                raise InputError("standard input is not available", source=self.source)
            self._close_raw = False
        else:
            try:
                raw = open(path, "rb")  # noqa: SIM115 -- closed by close()
            except FileNotFoundError:
                raise InputError("file not found", source=self.source) from None
            except IsADirectoryError:
                raise InputError("is a directory, not a file", source=self.source) from None
            except PermissionError:
                raise InputError("permission denied", source=self.source) from None
            except OSError as exc:
                raise InputError(f"cannot open file ({exc.strerror or exc})", source=self.source) from None
        self._raw = raw
        try:
            magic = self._guard(lambda: raw.read(2))
            stream: Any = _Prefixed(magic, raw)
            if magic == b"\x1f\x8b":
                stream = gzip.GzipFile(fileobj=stream, mode="rb")
        except BaseException:
            self.close()
            raise
        self._stream = stream
        self._front = b""  # bytes peeked and not yet consumed
        self._cr = False  # a chunk ended with "\r": is it half of a "\r\n"?
        self._offset = 0  # decompressed bytes delivered so far
        self._head_lines = 0  # line breaks among the first HEAD bytes delivered
        self._start = b""  # the first bytes, to name a binary file by its magic

    def _guard(self, fn: Any) -> Any:
        try:
            return fn()
        except _READ_ERRORS as exc:
            raise InputError(f"cannot read file ({exc})", source=self.source) from None

    def _pull(self, n: int) -> bytes:
        """Up to ``n`` more bytes of text (``b""`` at the end): decompressed, line breaks made
        ``\n``, refused when they hold a NUL byte."""
        while True:
            chunk = self._guard(lambda: self._stream.read(n))
            if self._cr:
                self._cr = False
                chunk = b"\r" + chunk
            if not chunk:
                return b""
            if self._offset < HEAD:
                # Binary input shows at its start (a NUL byte never occurs in UTF-8 text); only
                # the head is checked, so reading stays one pass over the rest.
                head = chunk[: HEAD - self._offset]
                nul = head.find(b"\x00")
                if nul >= 0:
                    line = self._head_lines + head.count(b"\n", 0, nul) + 1
                    kind = _binary_kind(self._start + chunk)
                    if kind is not None:
                        raise InputError(f"not a text file: {kind}", source=self.source)
                    raise InputError("not a text file (a NUL byte)", source=self.source, line=line)
                self._head_lines += head.count(b"\n")
                if len(self._start) < 32:
                    self._start += chunk[: 32 - len(self._start)]
            if b"\r" in chunk:
                if chunk.endswith(b"\r") and len(chunk) > 1:
                    chunk, self._cr = chunk[:-1], True  # wait for the next byte: "\r\n" or not
                elif chunk == b"\r":
                    nxt = self._guard(lambda: self._stream.read(1))
                    if nxt:
                        chunk += nxt
                        if nxt == b"\r":
                            chunk, self._cr = chunk[:-1], True
                chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            self._offset += len(chunk)
            return chunk

    def peek(self, n: int = HEAD) -> bytes:
        """Up to ``n`` first bytes (decompressed), left in place for the next read."""
        while len(self._front) < n:
            chunk = self._pull(n - len(self._front))
            if not chunk:
                break
            self._front += chunk
        return self._front[:n]

    def read(self, n: int = -1) -> bytes:
        """The next ``n`` bytes (all the rest when ``n < 0``); ``b""`` at the end."""
        if n < 0:
            parts = [self._front]
            self._front = b""
            while chunk := self._pull(_CHUNK):
                parts.append(chunk)
            return b"".join(parts)
        if self._front:
            out, self._front = self._front[:n], self._front[n:]
            if len(out) < n:  # the sniffed head is short: a block should not end with it
                out += self._pull(n - len(out))
            return out
        return self._pull(n)

    def blocks(self, block: int) -> Iterator[bytes]:
        """Blocks of whole lines (each ends with ``\\n``; a missing final newline is added)."""
        carry = b""
        while True:
            chunk = self.read(block)
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > MAX_LINE:
                    raise InputError(f"line too long (no line break in {len(data) >> 20} MiB): "
                                     "not a line-based text file", source=self.source)
                carry = data
                continue
            carry = data[cut + 1 :]
            yield data[: cut + 1]
        if carry:
            yield carry + b"\n"

    def close(self) -> None:
        stream = getattr(self, "_stream", None)
        if isinstance(stream, gzip.GzipFile):
            stream.close()
        if self._close_raw:
            self._raw.close()

    def __enter__(self) -> Input:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_input(path: PathLike) -> Input:
    """Open ``path`` (a file, ``.gz``, a pipe, ``-`` or ``/dev/stdin``) for one pass of reading."""
    return Input(path)


@contextmanager
def opened(path: PathLike | Input) -> Iterator[Input]:
    """``path`` opened for reading, or an :class:`Input` a caller already opened (e.g. to sniff
    its format), which stays the caller's to close."""
    if isinstance(path, Input):
        yield path
        return
    with Input(path) as inp:
        yield inp


def decode_text(data: bytes, source: str | None) -> str:
    """UTF-8 text without a leading byte-order mark; invalid UTF-8 names the line."""
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            "invalid UTF-8", source=source, line=data.count(b"\n", 0, exc.start) + 1
        ) from None


def check_utf8(block: bytes, first_line: int, source: str | None) -> None:
    """Raise naming the line (counted from ``first_line``) of the first invalid UTF-8 byte."""
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


def blocks_from_bytes(data: bytes, block: int) -> Iterator[bytes]:
    """Blocks of whole lines of in-memory ``data`` (the twin of :meth:`Input.blocks`)."""
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


def check_output_path(path: PathLike) -> None:
    """Refuse, before any work, an output path that cannot be written as a file: a directory,
    or a file in a folder that does not exist (``-`` is standard output)."""
    name = os.fspath(path)
    if name == "-":
        return
    if os.path.isdir(name):
        raise InputError("cannot write output: it is a directory; give a file name", source=name)
    parent = os.path.dirname(os.path.abspath(name))
    if not os.path.isdir(parent):
        raise InputError(f"cannot write output: folder {parent} does not exist", source=name)
