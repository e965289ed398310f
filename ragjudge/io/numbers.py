"""Reading grades, scores and ranks the way trec_eval does, with one-line errors.

Python's ``int()`` and ``float()`` accept more than C's ``atoi``/``atof`` read as the same
number: ``1_000`` is 1000 to Python but 1 to trec_eval. Such tokens, non-ASCII digits and
non-finite values are refused, naming the file, line and field.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InputError

__all__ = ["INT64_MAX", "parse_int", "parse_float", "is_int", "is_number"]

INT64_MAX = 2**63 - 1


def _text(tok: bytes) -> str:
    return tok.decode("utf-8", errors="replace")


def _plain(tok: bytes) -> bool:
    # "_" is Python-only digit grouping; non-ASCII digits ("١") are Python-only too.
    return tok.isascii() and b"_" not in tok


def _read(tok: bytes, conv: type, kind: str, source: str | None, line: int | None, field: str) -> Any:
    try:
        if not _plain(tok):
            raise ValueError
        value = conv(tok)
    except ValueError:
        raise InputError(f"must be {kind}, got {_text(tok)!r}", source=source, line=line,
                         field=field) from None
    return value


def parse_int(tok: bytes, source: str | None, line: int | None, field: str) -> int:
    """An integer token (``[+-]digits``) that fits in int64."""
    value = _read(tok, int, "an integer", source, line, field)
    if abs(value) > INT64_MAX:
        raise InputError(
            f"integer out of range, got {_text(tok)!r}", source=source, line=line, field=field
        )
    return value


def parse_float(tok: bytes, source: str | None, line: int | None, field: str) -> float:
    """A finite decimal number token."""
    value = _read(tok, float, "a number", source, line, field)
    if not math.isfinite(value):
        raise InputError(
            f"must be a finite number, got {_text(tok)!r}", source=source, line=line, field=field
        )
    return value


def is_int(text: str) -> bool:
    """Whether ``text`` reads as an integer token under :func:`parse_int`'s rules."""
    if not text.isascii() or "_" in text:
        return False
    try:
        int(text)
    except ValueError:
        return False
    return True


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a finite number under :func:`parse_float`'s rules."""
    if not text.isascii() or "_" in text:
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
