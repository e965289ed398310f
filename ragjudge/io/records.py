"""Record readers shared by every JSON, JSONL and CSV input (samples, queries, corpora, qrels).

* :func:`load_json` parses one JSON document; nesting too deep for the parser is a one-line
  error, not a RecursionError.
* :func:`jsonl_lines` splits JSONL on ``\\n`` only: U+2028/U+2029 and other characters that
  ``str.splitlines`` treats as line breaks are valid inside JSON strings. A byte-order mark
  at the start is dropped.
* :func:`csv_dict_reader` reads CSV with no limit on a cell's size (the csv module's default
  refuses cells over 131,072 characters).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from typing import Any

from ..errors import InputError
from .streams import BOM

__all__ = ["load_json", "jsonl_lines", "jsonl_objects", "csv_dict_reader"]


def load_json(
    data: str | bytes, source: str | None, *, line: int | None = None, unique_keys: bool = False
) -> Any:
    """One JSON document; errors name ``source``, the line (``line`` for a JSONL record) and
    the column. ``unique_keys``: a key given twice in one object is an error (JSON parsers
    keep the last silently: a query's judgments, or a judgment, would be lost)."""
    if isinstance(data, bytes) and data.startswith(BOM):
        data = data[len(BOM) :]
    elif isinstance(data, str) and data.startswith("\ufeff"):
        data = data[1:]
    if not data.strip():
        raise InputError("empty input: expected a JSON object", source=source, line=line)
    try:
        return json.loads(data, object_pairs_hook=_unique if unique_keys else None)
    except _DuplicateKey as exc:
        raise InputError(f"{exc.key!r} is given twice in one JSON object (the second would replace "
                         "the first)", source=source, line=line, field="json") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"invalid UTF-8 ({exc.reason})", source=source, line=line,
                         field="json") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", source=source,
            line=line if line is not None else exc.lineno, field="json",
        ) from None
    except RecursionError:
        raise InputError("JSON nested too deeply", source=source, line=line, field="json") from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every non-blank line of JSONL text (``\\r\\n`` accepted)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if line.strip():
            yield lineno, line


def jsonl_objects(text: str, source: str | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of JSONL text; a line that is not
    valid JSON, or not a JSON object, is one error naming ``source`` and the line."""
    for lineno, line in jsonl_lines(text):
        obj = load_json(line, source, line=lineno)
        if not isinstance(obj, dict):
            raise InputError("expected a JSON object", source=source, line=lineno)
        yield lineno, obj


def csv_dict_reader(text: str) -> csv.DictReader:
    """``csv.DictReader`` over ``text`` accepting cells of any length."""
    if text.startswith("\ufeff"):
        text = text[1:]
    # The limit is process-wide; raising it only ever accepts more input.
    if csv.field_size_limit() < sys.maxsize:
        try:
            csv.field_size_limit(sys.maxsize)
        except OverflowError:  # a C long narrower than Py_ssize_t (Windows)
            csv.field_size_limit(2**31 - 1)
    return csv.DictReader(io.StringIO(text, newline=""))
