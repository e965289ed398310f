"""Human labels for PPI: a seeded random sample of queries to label, and the labels log.

PPI (:mod:`.ppi`) needs human labels on a *simple random sample* of the queries the LLM
labelled. :func:`sample_to_label` draws that sample (seeded) and lists the pooled top-``depth``
pairs of each sampled query, in the random query order: labelling the queries in that order
means every prefix of completed queries is itself a simple random sample, so an estimate can be
shown while labelling goes on. Within a query the pairs are shuffled too (no rank order for the
assessor to lean on).

The to-label file is JSONL: one ``{"kind": "meta", ...}`` line (seed, depth, sampled queries,
metric, grading scale from the prompt's front-matter) and one ``{"kind": "pair", "qid",
"docid", "query", "passage", "llm_grade"}`` line per pair. The labels log beside it is
append-only JSONL: ``{"op": "label", "qid", "docid", "grade", "who", "at", "llm_grade_shown"}``
(``grade`` null: skipped / unsure; ``llm_grade_shown``: the assessor had chosen to see the LLM's
grade of that pair, so the label may lean on it), ``{"op": "reveal", "qid", "docid", "who",
"at"}`` (that choice, recorded when the grade is shown) and ``{"op": "undo", "who", "at"}``
(takes back the latest label of the same assessor still in force); :func:`replay_labels` turns
it into the labels in force.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..data import Qrels, Run
from ..errors import InputError
from ..io.records import jsonl_objects

__all__ = ["ToLabel", "LabelKey", "pair_key", "sample_to_label", "parse_to_label", "read_to_label", "replay_labels",
           "undo_target", "shown_pairs", "shown_header", "shown_in_qrels", "labels_qrels",
           "complete_queries", "TO_LABEL_FORMAT"]

#: The ``format`` of a to-label file's meta line.
TO_LABEL_FORMAT = "ragjudge-to-label/1"


@dataclass
class ToLabel:
    """A sample of pairs to label: ``meta`` (the first line) and the pairs in labelling order."""

    meta: dict[str, Any]
    pairs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def queries(self) -> list[str]:
        """The sampled queries, in labelling order."""
        return list(self.meta.get("queries") or dict.fromkeys(p["qid"] for p in self.pairs))

    def to_jsonl(self) -> str:
        lines = [json.dumps({"kind": "meta", **self.meta}, ensure_ascii=False)]
        lines += [json.dumps({"kind": "pair", **p}, ensure_ascii=False) for p in self.pairs]
        return "\n".join(lines) + "\n"


def sample_to_label(
    runs: Sequence[Run],
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    n: int,
    *,
    depth: int = 10,
    seed: int = 0,
    llm_qrels: Qrels | None = None,
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ToLabel:
    """``n`` queries drawn uniformly without replacement (``random.Random(seed)``) from the
    queries the runs retrieve for (those of ``llm_qrels`` when given: PPI's human queries must
    be among the LLM-labelled ones), with their pooled top-``depth`` pairs.

    ``llm_grade`` of a pair is its grade in ``llm_qrels`` (``None`` when absent); ``labels`` is
    the grading scale (grade -> definition) shown to the assessor. Raises :class:`InputError`
    when ``n`` is not positive or a pair's query or document has no text.
    """
    if n < 1:
        raise InputError(f"must be a positive integer, got {n}", field="sample")
    if depth < 1:
        raise InputError(f"must be a positive integer, got {depth}", field="depth")
    if not runs:
        raise InputError("no runs given", field="runs")
    in_runs = sorted({q for r in runs for q in r.query_ids})
    frame = sorted(set(llm_qrels.query_ids) & set(in_runs)) if llm_qrels is not None else in_runs
    if not frame:
        raise InputError("no query is both in the runs and in the LLM qrels", field="qid")
    rng = random.Random(seed)
    chosen = rng.sample(frame, min(n, len(frame)))
    grades = llm_qrels.to_dict() if llm_qrels is not None else {}
    pairs: list[dict[str, Any]] = []
    for qid in chosen:
        text = queries.get(qid)
        if text is None or not str(text).strip():
            raise InputError(f"query {qid!r} has no text in the queries file", field="qid")
        docs: dict[str, None] = {}
        for r in runs:
            for docid, _ in r.ranked(qid, depth):
                docs.setdefault(docid)
        order = list(docs)
        rng.shuffle(order)
        for docid in order:
            passage = corpus.get(docid)
            if passage is None:
                raise InputError(f"document {docid!r} (query {qid!r}) is not in the corpus",
                                 field="docid")
            pairs.append({"qid": qid, "docid": docid, "query": str(text), "passage": str(passage),
                          "llm_grade": grades.get(qid, {}).get(docid)})
    meta = {"format": TO_LABEL_FORMAT, "seed": seed, "sample": len(chosen), "depth": depth,
            "frame": len(frame), "queries": chosen, "runs": [r.name for r in runs],
            "labels": dict(labels or {}), "pairs": len(pairs), **dict(extra or {})}
    return ToLabel(meta, pairs)


def parse_to_label(text: str, source: str = "<to-label>") -> ToLabel:
    """A to-label file's content (see the module docstring)."""
    meta: dict[str, Any] | None = None
    pairs: list[dict[str, Any]] = []
    for i, rec in jsonl_objects(text, source):
        kind = rec.pop("kind", None)
        if kind == "meta":
            meta = rec
        elif kind == "pair":
            if not isinstance(rec.get("qid"), str) or not isinstance(rec.get("docid"), str):
                raise InputError("a pair needs string qid and docid", source=source, line=i)
            rec.setdefault("query", "")
            rec.setdefault("passage", "")
            rec.setdefault("llm_grade", None)
            pairs.append(rec)
        else:
            raise InputError(f"unknown kind {kind!r} (expected meta or pair)", source=source, line=i)
    if meta is None or meta.get("format") != TO_LABEL_FORMAT:
        raise InputError(f"not a to-label file (no meta line of format {TO_LABEL_FORMAT})",
                         source=source)
    return ToLabel(meta, pairs)


def read_to_label(path: str) -> ToLabel:
    """:func:`parse_to_label` of a file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise InputError(exc.strerror or "cannot read", source=str(path)) from None
    return parse_to_label(text, source=str(path))


def pair_key(rec: Mapping[str, Any]) -> tuple[str, str]:
    """What a label record of a passage labels: ``(qid, docid)``."""
    return (str(rec["qid"]), str(rec["docid"]))


#: What a label record labels, from the record (a labels log of another kind of item keys its
#: records its own way; the undo and relabel rules are the same).
LabelKey = Callable[[Mapping[str, Any]], Hashable]


def _undone(stack: list[tuple[Any, dict[str, Any] | None, dict[str, Any]]],
            now: Mapping[Any, Any], who: Any) -> int | None:
    """Where in ``stack`` the latest label of ``who`` still in force is (``None``: none)."""
    for i in range(len(stack) - 1, -1, -1):
        key, _, rec = stack[i]
        if rec.get("who") == who and now.get(key) is rec:
            return i
    return None


def _replay(records: Iterable[Mapping[str, Any]], key_of: LabelKey = pair_key) -> tuple[
        dict[Any, dict[str, Any]], list[tuple[Any, dict[str, Any] | None, dict[str, Any]]]]:
    stack: list[tuple[Any, dict[str, Any] | None, dict[str, Any]]] = []
    now: dict[Any, dict[str, Any]] = {}
    for rec in records:
        op = rec.get("op", "label")
        if op == "reveal":
            continue
        if op == "undo":
            # An undo without an assessor (older logs) takes back the latest label of anyone.
            i = (_undone(stack, now, rec["who"]) if "who" in rec else
                 next((j for j in range(len(stack) - 1, -1, -1)
                       if now.get(stack[j][0]) is stack[j][2]), None))
            if i is not None:
                key, before, _ = stack.pop(i)
                now.pop(key, None)
                if before is not None:
                    now[key] = before
            continue
        key = key_of(rec)
        label = dict(rec)
        stack.append((key, now.get(key), label))
        now.pop(key, None)  # a relabelled pair moves to the end
        now[key] = label
    return now, stack


def replay_labels(records: Iterable[Mapping[str, Any]],
                  key: LabelKey = pair_key) -> dict[Any, dict[str, Any]]:
    """The labels in force after a labels log: ``{(qid, docid): record}`` in the order given
    (``grade`` ``None``: skipped). An ``undo`` takes back the latest label of the same
    assessor (``who``) still in force: the pair returns to what it had before that label, or to
    unlabelled; another assessor's labels are never touched. ``reveal`` records change nothing.
    ``key``: what a record labels (default :func:`pair_key`)."""
    return _replay(records, key)[0]


def undo_target(records: Iterable[Mapping[str, Any]], who: str,
                key: LabelKey = pair_key) -> Any:
    """The item an ``undo`` by ``who`` would take back after ``records`` (``None``: nothing)."""
    now, stack = _replay(records, key)
    i = _undone(stack, now, who)
    return None if i is None else stack[i][0]


def shown_pairs(records: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """``(qid, docid, who)`` of every pair whose LLM grade an assessor chose to see."""
    return {(str(r.get("qid")), str(r.get("docid")), str(r.get("who", "")))
            for r in records if r.get("op") == "reveal"}


#: The first line of exported labels some of which were given with the LLM's grade in view.
SHOWN_HEADER = "# {n} of these labels were given with the LLM's grade in view"


def shown_header(n: int) -> str:
    """The comment line that starts exported qrels when ``n`` labels saw the LLM's grade."""
    return (SHOWN_HEADER.format(n=n) + " (see the labels log's llm_grade_shown): PPI assumes "
            "labels independent of it\n")


def shown_in_qrels(path: str) -> int | None:
    """How many labels of a qrels file exported by the labelling page were given with the
    LLM's grade in view (its first line says so); ``None`` when it does not say."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    m = re.match(re.escape(SHOWN_HEADER).replace(re.escape("{n}"), r"(\d+)"), first)
    return int(m.group(1)) if m else None


def complete_queries(to_label: ToLabel, labels: Mapping[tuple[str, str], Any]) -> list[str]:
    """The sampled queries every pair of which has a label or a skip, in labelling order."""
    todo: dict[str, int] = {}
    for p in to_label.pairs:
        if (p["qid"], p["docid"]) not in labels:
            todo[p["qid"]] = todo.get(p["qid"], 0) + 1
    have = {p["qid"] for p in to_label.pairs}
    return [q for q in to_label.queries if q in have and not todo.get(q)]


def labels_qrels(labels: Mapping[tuple[str, str], Mapping[str, Any]],
                 qids: Iterable[str] | None = None, source: str | None = None) -> Qrels:
    """The graded labels (skips left out) as qrels, of ``qids`` only when given."""
    keep = None if qids is None else set(qids)
    data: dict[str, dict[str, int]] = {}
    for (q, d), rec in labels.items():
        if rec.get("grade") is None or (keep is not None and q not in keep):
            continue
        data.setdefault(q, {})[d] = int(rec["grade"])
    return Qrels.from_dict(data, source=source)
