"""The JSON dict-of-dicts shape of pytrec_eval and ranx: ``{qid: {docid: grade_or_score}}``."""

from __future__ import annotations

from typing import Any

from ..data import Qrels, Run
from ..errors import InputError
from .records import load_json
from .streams import Input, PathLike, opened

__all__ = ["parse_json_qrels", "read_json_qrels", "parse_json_run", "read_json_run"]


def _nested(data: str | bytes, source: str | None, what: str) -> dict[str, dict[str, Any]]:
    obj = load_json(data, source, unique_keys=True)
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


def parse_json_qrels(text: str | bytes, *, source: str | None = None) -> Qrels:
    """Qrels from ``{qid: {docid: grade}}`` JSON text."""
    qrels = Qrels.from_dict(_nested(text, source, "grade"), source=source)
    if not len(qrels):
        raise InputError("no judgments found: the JSON object is empty", source=source)
    return qrels


def read_json_qrels(path: PathLike | Input) -> Qrels:
    """Qrels from a ``{qid: {docid: grade}}`` JSON file (``.gz``, pipe or ``-`` too)."""
    with opened(path) as inp:
        return parse_json_qrels(inp.read(), source=inp.source)


def parse_json_run(text: str | bytes, *, source: str | None = None, name: str = "run") -> Run:
    """A run from ``{qid: {docid: score}}`` JSON text."""
    run = Run.from_dict(_nested(text, source, "score"), name=name, source=source)
    if not len(run):
        raise InputError("no ranked documents found: the JSON object is empty", source=source)
    return run


def read_json_run(path: PathLike | Input, *, name: str = "run") -> Run:
    """A run from a ``{qid: {docid: score}}`` JSON file (``.gz``, pipe or ``-`` too)."""
    with opened(path) as inp:
        return parse_json_run(inp.read(), source=inp.source, name=name)
