"""Opening inputs: files, ``.gz`` (by magic bytes), pipes and standard input, read once.

Every reader goes through :func:`open_input`, which never seeks: named pipes, process
substitution (``<(zcat run.gz)``) and ``-`` / ``/dev/stdin`` work like regular files, and the
first bytes (for gzip detection and format sniffing) are kept and replayed rather than re-read.
"""

from __future__ import annotations

import gzip
import os
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
_READ_ERRORS = (OSError, EOFError, zlib.error)


def source_name(path: PathLike) -> str:
    """How an input is named in error messages (``<stdin>`` for standard input)."""
    name = os.fspath(path)
    return "<stdin>" if name in STDIN else name


def as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


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

    def _guard(self, fn: Any) -> Any:
        try:
            return fn()
        except _READ_ERRORS as exc:
            raise InputError(f"cannot read file ({exc})", source=self.source) from None

    def peek(self, n: int = HEAD) -> bytes:
        """Up to ``n`` first bytes (decompressed), left in place for the next read."""
        while len(self._front) < n:
            chunk = self._guard(lambda: self._stream.read(n - len(self._front)))
            if not chunk:
                break
            self._front += chunk
        return self._front[:n]

    def read(self, n: int = -1) -> bytes:
        """The next ``n`` bytes (all the rest when ``n < 0``); ``b""`` at the end."""
        if self._front:
            if n < 0:
                out, self._front = self._front + self._guard(self._stream.read), b""
                return out
            out, self._front = self._front[:n], self._front[n:]
            return out
        return self._guard(lambda: self._stream.read(n))

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
