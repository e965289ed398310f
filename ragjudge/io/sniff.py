"""Which format a qrels or run input is in, from its first bytes.

The content decides, the file name only breaks ties (an input with no data line):

* ``{`` or ``[`` first -> JSON;
* qrels: a first data line of 4 whitespace-separated columns ending in an integer is TREC
  (MS MARCO's ``qrels.dev.tsv`` and ``q1 0<TAB>d1<TAB>1`` alike); otherwise 3 tab-separated
  columns are BEIR (with or without its header row); anything else is read as TREC, whose
  reader names the bad line;
* runs: 6 or more columns are TREC; 3 columns ending in an integer are an MS MARCO run
  (``qid docid rank``); anything else is read as TREC.

:func:`sniff_kind` goes one step up, for a page handed any file: what the file *is* (qrels, a
run, queries, a corpus, judgments, an evaluation result, a to-label file of pairs or of nugget
answers, a labels log or LLM nugget assignments).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from .numbers import is_int
from .streams import BOM, WS_BYTES

__all__ = ["KINDS", "QRELS_FORMATS", "RUN_FORMATS", "NUGGET_TO_LABEL_FORMAT", "sniff_format",
           "sniff_kind", "first_data_line", "is_result"]

#: What :func:`sniff_kind` tells apart.
KINDS = ("result", "qrels", "run", "queries", "corpus", "judgments", "tolabel", "nugget_tolabel",
         "labels", "assignments")
#: The ``format`` of a nugget to-label file's meta line (``plan-labels --nuggets``).
NUGGET_TO_LABEL_FORMAT = "ragjudge-nugget-to-label/1"
_QUERY_NAMES = ("quer", "topic", "question")
_CORPUS_NAMES = ("corpus", "doc", "passage", "collection")

QRELS_FORMATS = ("trec", "beir", "json")
RUN_FORMATS = ("trec", "msmarco", "json")


def first_data_line(head: bytes) -> bytes | None:
    """The first line that is neither blank nor a ``#`` comment (without its line end)."""
    if head.startswith(BOM):
        head = head[len(BOM) :]
    for raw in head.split(b"\n"):
        stripped = raw.strip(WS_BYTES)
        if stripped and not stripped.startswith(b"#"):
            return raw.rstrip(b"\r")
    return None


def _by_name(name: str | None, allowed: tuple[str, ...]) -> str:
    lower = (name or "").lower().removesuffix(".gz")
    if lower.endswith(".json") and "json" in allowed:
        return "json"
    return "trec"


def sniff_format(head: bytes, name: str | None, allowed: tuple[str, ...]) -> str:
    """The format of an input starting with ``head`` (see the module docstring); ``allowed`` is
    :data:`QRELS_FORMATS` or :data:`RUN_FORMATS`."""
    if head.startswith(BOM):
        head = head[len(BOM) :]
    if head.lstrip(WS_BYTES)[:1] in (b"{", b"[") and "json" in allowed:
        return "json"
    line = first_data_line(head)
    if line is None:
        return _by_name(name, allowed)
    tokens = line.split()
    last = tokens[-1].decode("utf-8", "replace")
    if "beir" in allowed:
        if len(tokens) == 4 and is_int(last):
            return "trec"
        if len(line.split(b"\t")) == 3:
            return "beir"
    if "msmarco" in allowed and len(tokens) == 3 and is_int(last):
        return "msmarco"
    return "trec"


def is_result(obj: Any) -> bool:
    """Whether a JSON value is what ``evaluate``/``compare -f json`` write (runs with a
    ``run`` and a ``mean`` object)."""
    def one(d: Any) -> bool:
        return isinstance(d, dict) and "run" in d and isinstance(d.get("mean"), dict)

    if isinstance(obj, dict):
        return one(obj) or (isinstance(obj.get("runs"), list) and all(one(r) for r in obj["runs"]))
    return isinstance(obj, list) and bool(obj) and all(one(r) for r in obj)


def _texts_kind(name: str, texts: list[str]) -> str:
    if any(k in name for k in _QUERY_NAMES):
        return "queries"
    if any(k in name for k in _CORPUS_NAMES):
        return "corpus"
    mean = sum(len(t) for t in texts) / max(1, len(texts))
    return "queries" if mean < 120 else "corpus"


def _first_record(stripped: str) -> Any:
    """The first line as JSON, ``None`` when it is none."""
    try:
        return json.loads(stripped.split("\n", 1)[0])
    except json.JSONDecodeError:
        return None


def _nugget_kind(first: Any) -> str | None:
    """``nugget_tolabel`` (its meta line's format), ``assignments`` (one object per answer: a
    query id and its ``nuggets`` list, no ``kind`` or ``docid``) or ``None``."""
    if not isinstance(first, dict):
        return None
    if first.get("format") == NUGGET_TO_LABEL_FORMAT:
        return "nugget_tolabel"
    if (isinstance(first.get("nuggets"), list) and "kind" not in first and "docid" not in first
            and any(k in first for k in ("qid", "topic_id", "query_id"))):
        return "assignments"
    return None


def sniff_kind(text: str, name: str | None = None) -> str:
    """Which of :data:`KINDS` a file holds, from its content (``name``, the file's name, breaks
    ties between queries and a corpus). Raises :class:`InputError` when it cannot tell."""
    lower = Path(name or "").name.lower()
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped[:1] == "{":
        nuggets = _nugget_kind(_first_record(stripped))
        if nuggets is not None:
            return nuggets
    if stripped[:1] in ("{", "["):
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError:
            whole = None
        if whole is not None:
            if is_result(whole):
                return "result"
            if isinstance(whole, dict) and whole and all(isinstance(v, dict) for v in whole.values()):
                values = [x for v in whole.values() for x in v.values()]
                return "qrels" if all(isinstance(x, int) for x in values) else "run"
        # one JSON document that is no JSONL record (a JSONL file of one line parses whole too)
        if whole is not None and (not isinstance(whole, dict)
                                  or not {"kind", "op", "qid", "_id"} & set(whole)):
            raise InputError("JSON that is neither a result of evaluate/compare -f json nor "
                             "qrels/run JSON", source=name)
        try:
            first = json.loads(stripped.splitlines()[0])
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", source=name, line=1, field="json") from None
        if not isinstance(first, dict):
            raise InputError("JSONL whose first line is not an object", source=name, line=1)
        if first.get("kind") == "meta":
            return "tolabel"
        if "op" in first and "qid" in first:
            return "labels"
        if "qid" in first and "docid" in first:
            return "judgments"
        if "_id" in first:
            texts = []
            for line in stripped.splitlines()[:50]:
                try:
                    rec = json.loads(line) if line.strip() else None
                except json.JSONDecodeError:
                    rec = None
                if isinstance(rec, dict):
                    texts.append(str(rec.get("text", "")))
            return _texts_kind(lower, texts)
        raise InputError("JSONL of an unknown kind (not judgments, a to-label file, queries or "
                         "a corpus)", source=name)
    lines = [ln for ln in stripped.splitlines() if ln.strip() and not ln.lstrip().startswith("#")][:50]
    if not lines:
        raise InputError("empty file", source=name)
    tokens = lines[0].split()
    if len(tokens) >= 6:
        return "run"
    if len(tokens) == 4 and is_int(tokens[-1]):
        return "qrels"
    if "\t" in lines[0]:
        return _texts_kind(lower, [ln.split("\t", 1)[1] for ln in lines if "\t" in ln])
    if len(tokens) == 3 and is_int(tokens[-1]):
        return "run"
    # the roles a page's ROLE=PATH names: tolabel names a nugget to-label file too
    raise InputError("cannot tell what this file is; name its role: ROLE=PATH with ROLE one of "
                     + ", ".join(k for k in KINDS if k != "nugget_tolabel"), source=name)
