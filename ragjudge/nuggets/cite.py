"""Citation support: does each answer sentence's cited passage support it?

One call per answer labels every (sentence, cited passage) pair *full*, *partial* or *none*
(the passage alone), and every cited sentence (all its cited passages together). From these,
the ALCE citation scores (Gao et al., "Enabling Large Language Models to Generate Text with
Citations", EMNLP 2023):

* **citation recall** of an answer = the share of its sentences whose cited passages together
  fully support them; a sentence that cites nothing counts as unsupported.
* **citation precision** = the share of its citations that are relevant: a citation of a
  sentence its citations together fully support, which supports the sentence fully alone or
  partly (ALCE's test of a partial citation -- does removing it break the support of the rest?
  -- is read here as "it supports part of the sentence", which one call can answer); every
  citation of a sentence not fully supported is irrelevant.

An answer that cites nothing has recall 0 and no precision (undetermined, with its reason); one
whose call failed, or whose cited passage text is unknown, is undetermined with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._sync import run_sync
from ..errors import InputError
from ..evaluate import compare_reports
from ..io.records import jsonl_objects
from ..io.streams import decode_text, open_input
from ..render import ResultSurface
from ..report import Report
from .calls import (
    estimate_groups,
    failure_reason,
    numbered,
    provenance_of,
    sized,
    snapshot,
    usage_since,
)
from .data import Answer, read_answers, read_texts

__all__ = [
    "CITE_METRICS",
    "SUPPORT",
    "CiteResult",
    "CitedAnswer",
    "citation_scores",
    "cite_support",
    "cite_support_sync",
    "estimate_cite",
    "read_support",
    "support_pairs",
]

SUPPORT = ("full", "partial", "none")
CITE_METRICS = ("citation_precision", "citation_recall")
PROMPT = "citation_support.v1"


@dataclass(frozen=True)
class CitedAnswer:
    """One answer's citation labels: ``pairs[i]`` lists ``(passage id, label)`` of sentence
    ``i``'s citations, ``joint[i]`` the label of all of them together (``None``: cites
    nothing). ``reason`` is set when the answer could not be checked."""

    run_id: str
    qid: str
    sentences: tuple[str, ...]
    pairs: tuple[tuple[tuple[str, str | None], ...], ...]
    joint: tuple[str | None, ...]
    reason: str | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        p, r = citation_scores(self)
        d: dict[str, Any] = {"run_id": self.run_id, "topic_id": self.qid, "sentences": [
            {"text": t, "citations": [pid for pid, _ in ps], "support": [lab for _, lab in ps],
             "joint": j} for t, ps, j in zip(self.sentences, self.pairs, self.joint)],
            "citation_precision": p, "citation_recall": r}
        if self.reason:
            d["reason"] = self.reason
        if self.provenance:
            d["provenance"] = dict(self.provenance)
        return d


def citation_scores(a: CitedAnswer) -> tuple[float | None, float | None]:
    """ALCE citation precision and recall of one answer (``None`` when undetermined)."""
    if a.reason is not None or not a.sentences:
        return None, None
    recall = sum(1 for j in a.joint if j == "full") / len(a.sentences)
    cites = [(j, lab) for ps, j in zip(a.pairs, a.joint) for _, lab in ps]
    if not cites:
        return None, recall
    relevant = sum(1 for j, lab in cites if j == "full" and lab in ("full", "partial"))
    return relevant / len(cites), recall


@dataclass
class CiteResult(ResultSurface):
    """Citation labels of every answer, what they cost."""

    answers: list[CitedAnswer]
    usage: dict[str, Any] = field(default_factory=dict)
    #: answers whose call failed
    failed: int = 0
    calls: int = 0

    @property
    def mostly_failed(self) -> bool:
        return self.calls > 0 and self.failed * 2 > self.calls

    def reports(self) -> dict[str, Report]:
        """Per-run :class:`~ragjudge.report.Report` of citation precision and recall."""
        by_run: dict[str, list[CitedAnswer]] = {}
        for a in self.answers:
            by_run.setdefault(a.run_id, []).append(a)
        out = {}
        for run, items in by_run.items():
            vals = {m: np.full(len(items), np.nan) for m in CITE_METRICS}
            reasons = {}
            for i, a in enumerate(items):
                p, r = citation_scores(a)
                if p is not None:
                    vals["citation_precision"][i] = p
                if r is not None:
                    vals["citation_recall"][i] = r
                if a.reason:
                    reasons[a.qid] = a.reason
            meta: dict[str, Any] = {"source": "citation support"}
            if reasons:
                meta["reasons"] = reasons
            out[run] = Report(run, [a.qid for a in items], vals, meta)
        return out

    def score(self, *, baseline: str | None = None, **kwargs: Any) -> Any:
        """Per-run means with intervals and paired tests (a :class:`~ragjudge.report.CompareReport`)."""
        reps = self.reports()
        if not reps:
            raise InputError("no answers to score", field="answers")
        return compare_reports(reps, baseline or next(iter(reps)), list(CITE_METRICS),
                               meta={"scores": "ALCE citation precision and recall"}, **kwargs)

    def write(self, path: str | Path) -> None:
        Path(path).write_text("".join(json.dumps(a.to_dict(), ensure_ascii=False) + "\n"
                                      for a in self.answers), encoding="utf-8")

    def to_dict(self) -> dict[str, Any]:
        return {"answers": [a.to_dict() for a in self.answers], "usage": self.usage}

    def describe(self) -> str:
        u = self.usage
        return (f"{len(self.answers)} answers checked ({self.failed} failed); {u.get('calls', 0)} calls "
                f"({u.get('cache_hits', 0)} cached), {u.get('total_tokens', 0)} tokens"
                + ("" if u.get("cost_usd") is None else f", ${u['cost_usd']:.4f}"))

    def __str__(self) -> str:
        return self.describe()


def _plan(answers: Sequence[Answer], corpus: Mapping[str, str]
          ) -> tuple[list[CitedAnswer | None], list[tuple[int, Any, dict[str, str]]]]:
    """The answers settled without a call, and the call of each other one."""
    settled: list[CitedAnswer | None] = []
    calls = []
    for i, a in enumerate(answers):
        sents = tuple(s.text for s in a.sentences)
        refs = [[a.references[c] if c < len(a.references) else None for c in s.citations]
                for s in a.sentences]
        empty = CitedAnswer(a.run_id, a.qid, sents, tuple(tuple((r or "?", None) for r in rs) for rs in refs),
                            tuple(None for _ in sents))
        cited = sorted({r for rs in refs for r in rs if r is not None})
        if not a.sentences:
            settled.append(CitedAnswer(a.run_id, a.qid, (), (), (), "empty answer"))
            continue
        if not cited:
            settled.append(CitedAnswer(a.run_id, a.qid, sents, empty.pairs, empty.joint, None))
            continue
        unknown = [r for r in cited if a.passages.get(r, corpus.get(r)) is None]
        if unknown:
            settled.append(CitedAnswer(a.run_id, a.qid, sents, empty.pairs, empty.joint,
                                       f"text of cited passage {unknown[0]!r} unknown (pass the corpus)"))
            continue
        num = {r: k for k, r in enumerate(cited, start=1)}
        cited_sents = [k for k, rs in enumerate(refs) if rs]
        pair_lines = [f"sentence {si + 1} / passage [{num[r]}]"
                      for si in cited_sents for r in refs[si]]
        variables = {
            "passages": "\n".join(f"[{num[r]}] {' '.join(a.passages.get(r, corpus.get(r, '')).split())}"
                                  for r in cited),
            "sentences": numbered(f"{sents[si]} (cites {', '.join(f'[{num[r]}]' for r in refs[si])})"
                                  for si in cited_sents),
            "pairs": numbered(pair_lines), "pair_count": str(len(pair_lines)),
            "sentence_count": str(len(cited_sents))}
        # sentence numbers in the pairs refer to the cited sentences' own numbering
        renum = {si: k for k, si in enumerate(cited_sents, start=1)}
        variables["pairs"] = numbered(f"sentence {renum[si]} / passage [{num[r]}]"
                                      for si in cited_sents for r in refs[si])
        prompt = _sized(len(pair_lines), len(cited_sents))
        settled.append(None)
        calls.append((i, prompt, variables))
    return settled, calls


def _sized(pairs: int, sentences: int) -> Any:
    p = sized(PROMPT, ("pairs",), pairs)
    schema = dict(p.output_schema)
    props = dict(schema["properties"])
    props["sentences"] = {**props["sentences"], "minItems": sentences, "maxItems": sentences}
    schema["properties"] = props
    return replace(p, output_schema=schema)


async def cite_support(answers: Sequence[Answer] | str | Path, *, llm: Any,
                       corpus: Mapping[str, str] | str | Path | None = None,
                       progress: bool = False) -> CiteResult:
    """Citation support of every answer (one call each; texts of cited passages from the
    answer file or ``corpus``)."""
    ans = read_answers(answers) if isinstance(answers, (str, Path)) else list(answers)
    docs = _corpus(corpus)
    settled, calls = _plan(ans, docs)
    before = snapshot(llm)
    outcomes = await _many(llm, calls, progress)
    out: list[CitedAnswer] = []
    by_i = {i: o for (i, _, _), o in zip(calls, outcomes)}
    for i, a in enumerate(ans):
        done = settled[i]
        if done is not None:
            out.append(done)
            continue
        o = by_i[i]
        sents = tuple(s.text for s in a.sentences)
        refs = [[a.references[c] for c in s.citations] for s in a.sentences]
        prov = provenance_of([o])
        if o.error is not None:
            out.append(CitedAnswer(a.run_id, a.qid, sents, tuple(tuple((r, None) for r in rs) for rs in refs),
                                   tuple(None for _ in sents), failure_reason(o), prov))
            continue
        labels = iter(o.value["pairs"])
        joints = iter(o.value["sentences"])
        pairs = tuple(tuple((r, next(labels)) for r in rs) for rs in refs)
        joint = tuple(next(joints) if rs else None for rs in refs)
        out.append(CitedAnswer(a.run_id, a.qid, sents, pairs, joint, None, prov))
    failed = sum(1 for o in outcomes if o.error is not None)
    return CiteResult(out, usage_since(llm, before, answers=len(out), requests_asked=len(calls),
                                       requests_failed=failed), failed, len(calls))


def _corpus(corpus: Any) -> dict[str, str]:
    if corpus is None:
        return {}
    if isinstance(corpus, (str, Path)):
        return read_texts(corpus)
    return dict(corpus)


async def _many(llm: Any, calls: list[tuple[int, Any, dict[str, str]]], progress: bool) -> list[Any]:
    outcomes: list[Any] = [None] * len(calls)
    groups: dict[int, list[int]] = {}
    for j, (_, p, _) in enumerate(calls):
        groups.setdefault(id(p), []).append(j)
    for idx in groups.values():
        outs = await llm.structured_many(calls[idx[0]][1], [calls[j][2] for j in idx],
                                         progress=progress, desc="citation support")
        for j, o in zip(idx, outs):
            outcomes[j] = o
    return outcomes


def cite_support_sync(answers: Any, **kwargs: Any) -> CiteResult:
    """:func:`cite_support` from synchronous code (Jupyter included)."""
    return run_sync(cite_support(answers, **kwargs))


def estimate_cite(answers: Any, *, llm: Any, corpus: Any = None) -> Any:
    """The dry run of :func:`cite_support`."""
    ans = read_answers(answers) if isinstance(answers, (str, Path)) else list(answers)
    _settled, calls = _plan(ans, _corpus(corpus))
    groups: dict[int, tuple[Any, list[dict[str, str]]]] = {}
    for _, p, v in calls:
        groups.setdefault(id(p), (p, []))[1].append(v)
    return estimate_groups(llm, groups.values(), "one call per answer that cites something")


# ----------------------------------------------------------------------------- labels files
def support_pairs(answers: Sequence[CitedAnswer]) -> dict[tuple[str, str, int, str], str]:
    """``{(run, qid, sentence index, passage id): label}`` of the labelled pairs."""
    out = {}
    for a in answers:
        for si, ps in enumerate(a.pairs):
            for pid, lab in ps:
                if lab is not None:
                    out[(a.run_id, a.qid, si, pid)] = lab
    return out


def read_support(path: str | Path) -> dict[tuple[str, str, int, str], str]:
    """Support labels, human or written by :meth:`CiteResult.write`: one line per pair
    (``run_id``, ``topic_id``, ``sentence`` index from 0, ``docid``, ``support``) or one line
    per answer (``sentences`` with ``citations`` and ``support``)."""
    with open_input(path) as stream:
        source = stream.source
        text = decode_text(stream.read(), source)
    out: dict[tuple[str, str, int, str], str] = {}
    for line, obj in jsonl_objects(text, source):
        run, qid = obj.get("run_id"), obj.get("topic_id", obj.get("qid"))
        if run is None or qid is None:
            raise InputError("needs run_id and topic_id", source=source, line=line, field="run_id")
        if "sentences" in obj:
            for si, s in enumerate(obj["sentences"]):
                for pid, lab in zip(s.get("citations", []), s.get("support", [])):
                    if lab is not None:
                        out[(str(run), str(qid), si, str(pid))] = _label(lab, source, line)
            continue
        si = obj.get("sentence")
        if isinstance(si, bool) or not isinstance(si, int) or si < 0:
            raise InputError("expected a sentence index from 0", source=source, line=line, field="sentence")
        pid = obj.get("docid", obj.get("passage_id"))
        if pid is None:
            raise InputError("missing the passage id", source=source, line=line, field="docid")
        out[(str(run), str(qid), si, str(pid))] = _label(obj.get("support"), source, line)
    return out


def _label(value: Any, source: str, line: int) -> str:
    if value not in SUPPORT:
        raise InputError(f"support must be one of {', '.join(SUPPORT)}, got {value!r}", source=source,
                         line=line, field="support")
    return str(value)
