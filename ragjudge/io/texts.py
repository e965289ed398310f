"""Queries and corpora for the LLM judge: ``{id: text}`` from BEIR JSONL (``_id``, ``title``,
``text``) or TSV ``id<TAB>text``."""

from __future__ import annotations

import os
from typing import Literal

from ..errors import InputError
from .records import jsonl_lines, load_json
from .streams import Input, PathLike, decode_text, opened

__all__ = ["TextFormat", "parse_queries", "read_queries", "parse_corpus", "read_corpus"]

TextFormat = Literal["auto", "jsonl", "tsv"]


def _detect(text: str, path: str | None) -> str:
    """JSONL or TSV: from the file name, else from the content (a first line opening JSON)."""
    if path is not None:
        name = path.lower().removesuffix(".gz")
        if name.endswith((".jsonl", ".json", ".ndjson")):
            return "jsonl"
        if name.endswith((".tsv", ".txt")):
            return "tsv"
    return "jsonl" if text.lstrip("\ufeff \t\r\n").startswith(("{", "[")) else "tsv"


def _jsonl_entry(line: str, lineno: int, source: str | None, kind: str) -> tuple[str, str]:
    obj = load_json(line, source, line=lineno)
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
    title = obj.get("title") or ""
    for field, value, types in (("_id", ident, (str, int)), ("text", body, str), ("title", title, str)):
        if isinstance(value, bool) or not isinstance(value, types):
            raise InputError(
                f"must be a string, got {type(value).__name__}", source=source, line=lineno,
                field=field,
            )
    if kind == "corpus" and title.strip():
        body = f"{title}\n{body}"
    return str(ident), body


def _parse_texts(
    text: str, source: str | None, fmt: str, kind: str, path: str | None = None
) -> dict[str, str]:
    if fmt == "auto":
        fmt = _detect(text, path)
    if fmt not in ("jsonl", "tsv"):
        raise InputError(f"unknown {kind} format {fmt!r}; expected auto, jsonl or tsv", field="format")
    id_field = "_id" if fmt == "jsonl" else "id"
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, line in jsonl_lines(text):
        if fmt == "jsonl":
            ident, body = _jsonl_entry(line, lineno, source, kind)
        else:
            ident, tab, body = line.partition("\t")
            if not tab:
                raise InputError(
                    "expected 'id<TAB>text' (no tab found)", source=source, line=lineno,
                    field="columns",
                )
            ident = ident.strip()
        if not ident:
            raise InputError("empty id", source=source, line=lineno, field=id_field)
        if ident in out:
            raise InputError(
                f"duplicate id {ident!r} (first seen at line {first_line[ident]})",
                source=source, line=lineno, field=id_field,
            )
        out[ident] = body
        first_line[ident] = lineno
    if not out:
        raise InputError(f"no {kind} found: the input is empty", source=source)
    return out


def _read(path: PathLike | Input, format: str, kind: str) -> dict[str, str]:
    with opened(path) as inp:
        name = None if isinstance(path, Input) else os.fspath(path)
        return _parse_texts(decode_text(inp.read(), inp.source), inp.source, format, kind, name)


def parse_queries(
    text: str | bytes, *, source: str | None = None, format: TextFormat = "auto"
) -> dict[str, str]:
    """Queries ``{id: text}`` from BEIR JSONL (``_id``, ``text``) or TSV ``id<TAB>text``."""
    if isinstance(text, bytes):
        text = decode_text(text, source)
    return _parse_texts(text, source, format, "queries")


def read_queries(path: PathLike | Input, *, format: TextFormat = "auto") -> dict[str, str]:
    """Read queries (BEIR ``queries.jsonl`` or TSV ``id<TAB>text``; ``.gz``, pipes, ``-``)."""
    return _read(path, format, "queries")


def parse_corpus(
    text: str | bytes, *, source: str | None = None, format: TextFormat = "auto"
) -> dict[str, str]:
    """Documents ``{id: text}``; for BEIR JSONL the text is ``title + "\\n" + text`` when a title
    is present."""
    if isinstance(text, bytes):
        text = decode_text(text, source)
    return _parse_texts(text, source, format, "corpus")


def read_corpus(path: PathLike | Input, *, format: TextFormat = "auto") -> dict[str, str]:
    """Read a corpus (BEIR ``corpus.jsonl`` or TSV ``id<TAB>text``; ``.gz``, pipes, ``-``)."""
    return _read(path, format, "corpus")
