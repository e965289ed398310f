"""The values of nugget evaluation and the files they live in.

* :class:`Nugget` / :class:`NuggetSet` -- the atomic facts an answer to one query should hold,
  each *vital* or *okay*, with where it came from. A nuggets file is JSONL, one query per
  line: ``{"qid", "query", "nuggets": [{"text", "importance"}, ...]}`` -- the layout of the
  TREC RAG nugget files and of the reference implementation's creation output, read as they
  are (``topic_id``/``query_id`` for ``qid``, a nugget as a bare string, are accepted too).
* :class:`Answer` -- one run's answer to one query, as sentences with citations into its
  ``references``: the TREC RAG 2024 answer format (``run_id``, ``topic_id``, ``topic``,
  ``references``, ``answer: [{"text", "citations"}]``; the 2025 layout's ``metadata`` block
  too), plain ``{"query_id", "answer"}`` records, or the RAG samples :mod:`ragjudge.rag` reads.
* :class:`Assignment` -- the nuggets of one query assigned to one answer (``support``,
  ``partial_support``, ``not_support``), one JSON object per answer with ``qid``, ``run_id``
  and ``nuggets: [{"text", "importance", "assignment"}]``: the reference implementation's
  assignment layout, also the layout of human assignments.

Every reader names the file, line and field of bad input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io.records import jsonl_lines, jsonl_objects, load_json
from ..io.streams import decode_text, open_input
from ..io.texts import parse_corpus

__all__ = [
    "IMPORTANCE",
    "LABELS",
    "LABELS_2",
    "Answer",
    "AssignedNugget",
    "Assignment",
    "Nugget",
    "NuggetSet",
    "Sentence",
    "parse_answers",
    "parse_assignments",
    "parse_nuggets",
    "read_answers",
    "read_assignments",
    "read_nuggets",
    "read_texts",
    "write_assignments",
    "write_nuggets",
]

#: Importance of a nugget, highest first.
IMPORTANCE = ("vital", "okay")
#: Assignment labels (three grades), best first; :data:`LABELS_2` is the two-grade mode.
LABELS = ("support", "partial_support", "not_support")
LABELS_2 = ("support", "not_support")


@dataclass(frozen=True)
class Nugget:
    """One atomic fact. ``importance`` is ``"vital"``, ``"okay"`` or ``None`` (not labelled
    yet); ``sources`` are the ids of the passages it was drawn from; ``meta`` keeps any other
    field of its line (a human file's own columns) and, for a created nugget, its provenance."""

    text: str
    importance: str | None = None
    sources: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"text": self.text, "importance": self.importance}
        if self.sources:
            d["sources"] = list(self.sources)
        d.update({k: v for k, v in self.meta.items() if k not in d})
        return d


@dataclass(frozen=True)
class NuggetSet:
    """The nuggets of one query, in order. ``provenance``: how they were made (prompt ids and
    sha256, model, parameters, passages used), empty for a human file."""

    qid: str
    query: str
    nuggets: tuple[Nugget, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"qid": self.qid, "query": self.query,
                             "nuggets": [n.to_dict() for n in self.nuggets]}
        if self.provenance:
            d["provenance"] = dict(self.provenance)
        return d


@dataclass(frozen=True)
class Sentence:
    """One sentence of an answer and the indices into the answer's ``references`` it cites."""

    text: str
    citations: tuple[int, ...] = ()


@dataclass(frozen=True)
class Answer:
    """One run's answer to one query. ``references`` are the cited passages' ids (a sentence's
    citations index them); ``passages`` maps some of those ids to their text when the file
    carries it."""

    run_id: str
    qid: str
    query: str
    sentences: tuple[Sentence, ...]
    references: tuple[str, ...] = ()
    passages: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.sentences if s.text.strip())


@dataclass(frozen=True)
class AssignedNugget:
    """A nugget's grade in one answer. ``assignment`` is ``None`` when it could not be
    assigned (``failure`` says why); ``reason`` is the assessor's short justification."""

    text: str
    importance: str | None
    assignment: str | None
    reason: str | None = None
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"text": self.text, "importance": self.importance,
                             "assignment": self.assignment}
        if self.reason:
            d["reason"] = self.reason
        if self.failure:
            d["failure"] = self.failure
        return d


@dataclass(frozen=True)
class Assignment:
    """The nuggets of query ``qid`` assigned to run ``run_id``'s answer."""

    qid: str
    run_id: str
    nuggets: tuple[AssignedNugget, ...]
    query: str = ""
    answer_text: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def failed(self) -> list[AssignedNugget]:
        return [n for n in self.nuggets if n.assignment is None]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"qid": self.qid, "run_id": self.run_id, "query": self.query,
                             "answer_text": self.answer_text,
                             "nuggets": [n.to_dict() for n in self.nuggets]}
        if self.provenance:
            d["provenance"] = dict(self.provenance)
        return d


# ----------------------------------------------------------------------------- helpers
def _records(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """``(line, object)`` of a JSONL file, or of a JSON array (each element at line 1)."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("["):
        data = load_json(text, source)
        for obj in data:
            yield 1, obj
        return
    for lineno, line in jsonl_lines(text):
        yield lineno, load_json(line, source, line=lineno)


def _read_text(path: str | Path) -> tuple[str, str]:
    with open_input(path) as stream:
        source = stream.source
        return decode_text(stream.read(), source), source


def _first(obj: Mapping[str, Any], names: Sequence[str]) -> Any:
    for n in names:
        if n in obj and obj[n] is not None:
            return obj[n]
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        for n in names:
            if n in meta and meta[n] is not None:
                return meta[n]
    return None


def _id(value: Any, source: str, line: int, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise InputError(f"expected a non-empty id, got {value!r}", source=source, line=line,
                         field=what)
    return str(value).strip()


_QID = ("qid", "topic_id", "query_id", "narrative_id", "id")
_QUERY = ("query", "topic", "question", "narrative", "text")


def _importance(value: Any, source: str, line: int, where: str, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    v = value.strip().lower() if isinstance(value, str) else value
    if v not in IMPORTANCE:
        raise InputError(f"importance must be one of {', '.join(IMPORTANCE)}, got {value!r}",
                         source=source, line=line, field=where)
    return str(v)


# ----------------------------------------------------------------------------- nuggets
def parse_nuggets(text: str, *, source: str = "<nuggets>") -> list[NuggetSet]:
    """Nugget sets from JSONL text (one query per line); a query given twice is an error."""
    out: list[NuggetSet] = []
    seen: set[str] = set()
    for line, obj in _records(text, source):
        if not isinstance(obj, Mapping):
            raise InputError("expected a JSON object", source=source, line=line)
        qid = _id(_first(obj, _QID), source, line, "qid")
        if qid in seen:
            raise InputError(f"query {qid!r} given twice", source=source, line=line, field="qid")
        seen.add(qid)
        query = _first(obj, _QUERY[:-1])
        raw = obj.get("nuggets")
        if not isinstance(raw, list):
            raise InputError("expected a list of nuggets", source=source, line=line, field="nuggets")
        nuggets = []
        for i, n in enumerate(raw):
            where = f"nuggets[{i}]"
            if isinstance(n, str):
                n = {"text": n}
            if not isinstance(n, Mapping):
                raise InputError("expected an object or a string", source=source, line=line, field=where)
            t = n.get("text")
            if not isinstance(t, str) or not t.strip():
                raise InputError("a nugget needs a non-empty text", source=source, line=line,
                                 field=f"{where}.text")
            imp = _importance(n.get("importance"), source, line, f"{where}.importance", required=False)
            sources = n.get("sources") or ()
            if not isinstance(sources, (list, tuple)):
                raise InputError("expected a list of passage ids", source=source, line=line,
                                 field=f"{where}.sources")
            meta = {k: v for k, v in n.items() if k not in ("text", "importance", "sources")}
            nuggets.append(Nugget(t.strip(), imp, tuple(str(s) for s in sources), meta))
        prov = obj.get("provenance")
        out.append(NuggetSet(qid, str(query) if query is not None else "", tuple(nuggets),
                             dict(prov) if isinstance(prov, Mapping) else {}))
    return out


def read_nuggets(path: str | Path) -> list[NuggetSet]:
    """Nugget sets from a JSONL file (``.gz``, ``-`` and pipes too)."""
    text, source = _read_text(path)
    return parse_nuggets(text, source=source)


def write_nuggets(sets: Iterable[NuggetSet], path: str | Path) -> None:
    """One query per line, in the layout :func:`read_nuggets` reads (a person can edit it)."""
    Path(path).write_text("".join(json.dumps(s.to_dict(), ensure_ascii=False) + "\n" for s in sets),
                          encoding="utf-8")


# ----------------------------------------------------------------------------- answers
def _sentences(value: Any, n_refs: int | None, source: str, line: int) -> tuple[Sentence, ...]:
    if isinstance(value, str):
        return (Sentence(value),) if value.strip() else ()
    if not isinstance(value, list):
        raise InputError("expected a string or a list of {text, citations}", source=source,
                         line=line, field="answer")
    out = []
    for i, s in enumerate(value):
        where = f"answer[{i}]"
        if isinstance(s, str):
            s = {"text": s}
        if not isinstance(s, Mapping) or not isinstance(s.get("text"), str):
            raise InputError("expected an object with a text", source=source, line=line, field=where)
        cites = s.get("citations") or []
        if not isinstance(cites, list) or any(isinstance(c, bool) or not isinstance(c, int) for c in cites):
            raise InputError("citations must be a list of integer indices into references",
                             source=source, line=line, field=f"{where}.citations")
        if n_refs is not None:
            bad = [c for c in cites if not 0 <= c < n_refs]
            if bad:
                raise InputError(f"citation {bad[0]} is outside the {n_refs} references",
                                 source=source, line=line, field=f"{where}.citations")
        out.append(Sentence(s["text"], tuple(dict.fromkeys(cites))))
    return tuple(out)


def _answer(obj: Mapping[str, Any], default_run: str, source: str, line: int) -> Answer:
    run = _first(obj, ("run_id", "run", "system"))
    run_id = default_run if run is None else _id(run, source, line, "run_id")
    qid = _id(_first(obj, _QID[:-1] + ("id",)), source, line, "topic_id")
    query = _first(obj, ("topic", "query", "question", "narrative"))
    refs_raw = obj.get("references")
    refs: tuple[str, ...] = ()
    passages: dict[str, str] = {}
    if refs_raw is not None:
        if not isinstance(refs_raw, list):
            raise InputError("expected a list of passage ids", source=source, line=line,
                             field="references")
        ids = []
        for i, r in enumerate(refs_raw):
            if isinstance(r, Mapping):  # {docid, text} / {segment_id, segment}
                rid = _first(r, ("docid", "segment_id", "id"))
                body = _first(r, ("text", "segment", "contents"))
                rid = _id(rid, source, line, f"references[{i}]")
                if isinstance(body, str):
                    passages[rid] = body
                ids.append(rid)
            else:
                ids.append(_id(r, source, line, f"references[{i}]"))
        refs = tuple(ids)
    answer = obj.get("answer", obj.get("responses", obj.get("response")))
    if answer is None:
        raise InputError("missing the answer", source=source, line=line, field="answer")
    sentences = _sentences(answer, len(refs) if refs_raw is not None else None, source, line)
    return Answer(run_id, qid, "" if query is None else str(query), sentences, refs, passages)


def parse_answers(text: str, *, source: str = "<answers>", run_id: str | None = None) -> list[Answer]:
    """Answers from JSONL (or a JSON array): TREC RAG 2024/2025 records or plain
    ``{query_id, answer}`` ones (``run_id`` names the run of records without one; default: the
    file's stem). Records with neither (RAGAS / DeepEval samples) are read as
    :func:`ragjudge.rag.read_samples` reads them, each sample an answer without citations."""
    default_run = run_id or _stem(source)
    records = list(_records(text, source))
    if records and isinstance(records[0][1], Mapping) and not any(
            k in records[0][1] for k in ("answer", "responses")):
        return _from_samples(text, source, default_run)
    out = []
    seen: set[tuple[str, str]] = set()
    for line, obj in records:
        if not isinstance(obj, Mapping):
            raise InputError("expected a JSON object", source=source, line=line)
        a = _answer(obj, default_run, source, line)
        if (a.run_id, a.qid) in seen:
            raise InputError(f"run {a.run_id!r} answers query {a.qid!r} twice", source=source,
                             line=line, field="topic_id")
        seen.add((a.run_id, a.qid))
        out.append(a)
    return out


def _from_samples(text: str, source: str, run_id: str) -> list[Answer]:
    # Deferred: `evaluate` loads this module (plan-labels' nugget options) and must not load
    # the RAG wing; only a samples file given as answers needs it.
    from ..rag.samples import parse_samples

    fmt = "json" if text.lstrip("\ufeff \t\r\n").startswith("[") else "jsonl"
    out = []
    for s in parse_samples(text, format=fmt, source=source):
        if s.response is None:
            raise InputError(f"sample {s.id!r} has no response", source=source, field="response")
        refs = tuple(c.id for c in s.contexts or () if c.id is not None)
        passages = {c.id: c.text for c in s.contexts or () if c.id is not None and c.text is not None}
        out.append(Answer(run_id, s.id, s.question or "", (Sentence(s.response),), refs, passages))
    return out


def read_answers(path: str | Path, *, run_id: str | None = None) -> list[Answer]:
    """Answers from a file (see :func:`parse_answers`)."""
    text, source = _read_text(path)
    return parse_answers(text, source=source, run_id=run_id)


def _stem(source: str) -> str:
    name = Path(source).name
    for ext in (".gz", ".jsonl", ".json", ".txt"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
    return name or "run"


# ----------------------------------------------------------------------------- assignments
def parse_assignments(text: str, *, source: str = "<assignments>", run_id: str | None = None,
                      labels: Sequence[str] = LABELS) -> list[Assignment]:
    """Assignments, one JSON object per answer (``qid``, ``run_id``, ``nuggets`` with ``text``,
    ``importance`` and ``assignment``); a record without ``run_id`` belongs to ``run_id`` (default:
    the file's stem). ``assignment: null`` (a failed call, with ``failure``) is kept as such."""
    default_run = run_id or _stem(source)
    out = []
    seen: set[tuple[str, str]] = set()
    for line, obj in _records(text, source):
        if not isinstance(obj, Mapping):
            raise InputError("expected a JSON object", source=source, line=line)
        qid = _id(_first(obj, _QID[:-1]), source, line, "qid")
        run = _first(obj, ("run_id", "run"))
        run = default_run if run is None else _id(run, source, line, "run_id")
        if (run, qid) in seen:
            raise InputError(f"run {run!r} has two assignments for query {qid!r}", source=source,
                             line=line, field="qid")
        seen.add((run, qid))
        raw = obj.get("nuggets")
        if not isinstance(raw, list):
            raise InputError("expected a list of nuggets", source=source, line=line, field="nuggets")
        nuggets = []
        for i, n in enumerate(raw):
            where = f"nuggets[{i}]"
            if not isinstance(n, Mapping) or not isinstance(n.get("text"), str):
                raise InputError("expected an object with a text", source=source, line=line, field=where)
            imp = _importance(n.get("importance"), source, line, f"{where}.importance", required=True)
            a = n.get("assignment")
            failure = n.get("failure")
            if a is None and not failure:
                raise InputError("missing assignment", source=source, line=line,
                                 field=f"{where}.assignment")
            if a is not None:
                a = a.strip().lower() if isinstance(a, str) else a
                if a not in labels:
                    raise InputError(f"assignment must be one of {', '.join(labels)}, got "
                                     f"{n.get('assignment')!r}", source=source, line=line,
                                     field=f"{where}.assignment")
            reason = n.get("reason")
            nuggets.append(AssignedNugget(n["text"], imp, a, reason if isinstance(reason, str) else None,
                                          str(failure) if failure else None))
        prov = obj.get("provenance")
        answer_text = obj.get("answer_text")
        query = obj.get("query")
        out.append(Assignment(qid, run, tuple(nuggets), query if isinstance(query, str) else "",
                              answer_text if isinstance(answer_text, str) else "",
                              dict(prov) if isinstance(prov, Mapping) else {}))
    return out


def read_assignments(path: str | Path, *, run_id: str | None = None,
                     labels: Sequence[str] = LABELS) -> list[Assignment]:
    """Assignments from a file (see :func:`parse_assignments`)."""
    text, source = _read_text(path)
    return parse_assignments(text, source=source, run_id=run_id, labels=labels)


def write_assignments(assignments: Iterable[Assignment], path: str | Path) -> None:
    """One JSON object per answer, in the reference implementation's layout (plus ``reason``,
    ``failure`` and ``provenance``, which its readers ignore)."""
    Path(path).write_text("".join(json.dumps(a.to_dict(), ensure_ascii=False) + "\n"
                                  for a in assignments), encoding="utf-8")


# ----------------------------------------------------------------------------- texts
_TEXT_ID = ("_id", "docid", "segment_id", "id", "qid", "topic_id", "query_id", "narrative_id")
_TEXT_BODY = ("text", "segment", "contents", "body", "query", "title", "narrative", "question")


def read_texts(path: str | Path, *, wanted: Iterable[str] | None = None) -> dict[str, str]:
    """``{id: text}`` of queries or passages: JSONL in the BEIR layout (``_id``, ``text``,
    ``title``), the MS MARCO v2.1 segmented layout of the TREC RAG corpus (``docid``,
    ``title``, ``headings``, ``segment``), TREC RAG topics (``qid``/``topic_id``/``narrative_id``
    with ``query``/``topic``/``narrative``), or TSV ``id<TAB>text``. With ``wanted``, only
    those ids are kept."""
    keep = None if wanted is None else set(wanted)
    text, source = _read_text(path)
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped.startswith("{"):
        rows = parse_corpus(text, source=source, format="tsv")
        return {k: v for k, v in rows.items() if keep is None or k in keep}
    out: dict[str, str] = {}
    for line, obj in jsonl_objects(text, source):
        ident = next((obj[k] for k in _TEXT_ID if obj.get(k) is not None), None)
        if ident is None:
            raise InputError("missing an id (_id, docid, qid...)", source=source, line=line, field="_id")
        ident = _id(ident, source, line, "_id")
        if keep is not None and ident not in keep:
            continue
        if isinstance(obj.get("segment"), str):  # MS MARCO v2.1 segments: title, headings, segment
            parts = [obj.get("title"), obj.get("headings"), obj["segment"]]
        else:
            body = next((obj[k] for k in _TEXT_BODY if isinstance(obj.get(k), str)), None)
            if body is None:
                raise InputError("missing the text (text, segment, contents...)", source=source,
                                 line=line, field="text")
            title = obj.get("title") if body is not obj.get("title") else None
            parts = [title, body]
        out[ident] = "\n".join(p for p in parts if isinstance(p, str) and p.strip())
    return out
