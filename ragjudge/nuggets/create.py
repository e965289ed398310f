"""Nugget creation: the answer key of each query, from its relevant passages, then importance.

Creation reads a query's passages ``create_window`` at a time; each call sees the nuggets found
so far and returns only the *new* ones (with the passages stating them), so a reply never
repeats the list and creation stops once ``max_nuggets`` are kept. The passages are those graded
at least ``min_grade`` in the qrels (human, or an LLM judge's pool: the relevance judge feeds
creation), highest grade first, or passages given directly, or the passages the answers cite.
Importance then labels ``importance_window`` nuggets per call *vital* or *okay*.

A failed call is kept as data (the query's ``provenance["failures"]``; a nugget whose importance
failed has none, and assignment refuses it until it is labelled), every call is cached, and a run
resumed after a kill pays only for what is missing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._sync import run_sync
from ..errors import InputError, LLMError
from ..io.coerce import as_qrels
from ..render import ResultSurface
from .calls import (
    estimate_groups,
    failure_reason,
    load,
    numbered,
    provenance_of,
    sized,
    snapshot,
    usage_since,
)
from .data import (
    Answer,
    Nugget,
    NuggetSet,
    read_answers,
    read_nuggets,
    read_texts,
    write_nuggets,
)
from .options import NuggetOptions, resolve

__all__ = [
    "CreateResult",
    "create_nuggets",
    "create_nuggets_sync",
    "estimate_create",
    "label_importance",
    "label_importance_sync",
    "passages_for",
]

CREATE = "nugget_create.v1"
IMPORTANCE = "nugget_importance.v1"
_NONE_YET = "(none yet)"
_PROMPTS: dict[tuple[str, int, int], Any] = {}


@dataclass
class CreateResult(ResultSurface):
    """The nugget sets made (one per query), what they cost, and the failed calls per query.
    ``stopped``: the queries a run-stopping error (a spend limit, a revoked key) left unfinished:
    their creation (no set is written for them) or their importance (labelled in part)."""

    sets: list[NuggetSet]
    usage: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    calls: int = 0
    stopped: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(len(v) for v in self.failures.values())

    @property
    def mostly_failed(self) -> bool:
        return self.calls > 0 and self.failed * 2 > self.calls

    def write(self, path: str | Path) -> None:
        write_nuggets(self.sets, path)

    def to_dict(self) -> dict[str, Any]:
        return {"sets": [s.to_dict() for s in self.sets], "usage": self.usage,
                "failures": self.failures, "stopped": self.stopped}

    def describe(self) -> str:
        n = sum(len(s.nuggets) for s in self.sets)
        vital = sum(1 for s in self.sets for x in s.nuggets if x.importance == "vital")
        u = self.usage
        return (f"{n} nuggets ({vital} vital) for {len(self.sets)} queries; {u.get('calls', 0)} calls "
                f"({u.get('cache_hits', 0)} cached, {self.failed} failed), {u.get('total_tokens', 0)} tokens"
                + ("" if u.get("cost_usd") is None else f", ${u['cost_usd']:.4f}"))

    def __str__(self) -> str:
        return self.describe()


def _create_prompt(n_passages: int, room: int) -> Any:
    """The creation prompt with passage numbers bounded to the window and at most ``room`` nuggets."""
    p = load(CREATE)
    key = (p.sha256, n_passages, room)
    got = _PROMPTS.get(key)
    if got is None:
        schema = dict(p.output_schema)
        props = dict(schema["properties"])
        arr = dict(props["nuggets"])
        item = dict(arr["items"])
        iprops = dict(item["properties"])
        iprops["sources"] = {**iprops["sources"], "items": {"type": "integer", "minimum": 1,
                                                            "maximum": n_passages}}
        item["properties"] = iprops
        props["nuggets"] = {**arr, "items": item, "maxItems": room}
        schema["properties"] = props
        got = _PROMPTS[key] = replace(p, output_schema=schema)
    return got


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _texts(x: Any, what: str) -> dict[str, str]:
    if x is None:
        return {}
    if isinstance(x, (str, Path)):
        return read_texts(x)
    return {str(k): str(v) for k, v in dict(x).items()}


def passages_for(
    queries: Mapping[str, str],
    *,
    qrels: Any = None,
    corpus: Mapping[str, str] | str | Path | None = None,
    passages: Mapping[str, Sequence[tuple[str, str]] | Mapping[str, str]] | None = None,
    answers: Sequence[Answer] | None = None,
    options: NuggetOptions | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """``{qid: [(passage id, text), ...]}`` creation reads: given directly, else graded at least
    ``min_grade`` in ``qrels`` (highest first, ties by id), else cited by ``answers``; at most
    ``max_passages`` per query. A qrels passage missing from the corpus is an error naming it."""
    opts = options or NuggetOptions()
    docs = _texts(corpus, "corpus")
    out: dict[str, list[tuple[str, str]]] = {}
    if passages is not None:
        for q, ps in passages.items():
            items = list(ps.items()) if isinstance(ps, Mapping) else [tuple(p) for p in ps]
            out[str(q)] = [(str(i), str(t)) for i, t in items][: opts.max_passages]
        return out
    if qrels is not None:
        q = as_qrels(qrels)
        for qid in queries:
            graded = sorted(((g, d) for d, g in q.get(qid).items() if g >= opts.min_grade),
                            key=lambda t: (-t[0], t[1]))[: opts.max_passages]
            missing = [d for _, d in graded if d not in docs]
            if missing:
                raise InputError(f"passage {missing[0]!r} of query {qid} is not in the corpus",
                                 field="corpus")
            out[qid] = [(d, docs[d]) for _, d in graded]
        return out
    if answers is not None:
        for a in answers:
            if a.qid not in queries:
                continue
            have = out.setdefault(a.qid, [])
            seen = {i for i, _ in have}
            for ref in a.references:
                text = a.passages.get(ref, docs.get(ref))
                if ref not in seen and text is not None and len(have) < opts.max_passages:
                    have.append((ref, text))
                    seen.add(ref)
        return out
    raise InputError("give the passages: qrels (with a corpus), passages, or answers", field="passages")


async def _create_one(llm: Any, qid: str, query: str, ps: list[tuple[str, str]], opts: NuggetOptions,
                      outcomes: list[Any], failures: list[str], stop: list[LLMError]) -> list[Nugget] | None:
    """The query's nuggets; ``None`` when a run-stopping error (kept in ``stop``, shared by
    every query: the others start no further call) ended it first."""
    found: list[Nugget] = []
    seen: set[str] = set()
    for start in range(0, len(ps), opts.create_window):
        room = opts.max_nuggets - len(found)
        if room <= 0:
            break
        if stop:
            return None
        window = ps[start:start + opts.create_window]
        try:
            o = await llm.structured(_create_prompt(len(window), room), {
                "query": query, "passages": "\n".join(f"[{i}] {' '.join(t.split())}"
                                                      for i, (_, t) in enumerate(window, start=1)),
                "nuggets": numbered(n.text for n in found) or _NONE_YET, "room": str(room)})
        except LLMError as exc:
            stop.append(exc)
            return None
        outcomes.append(o)
        if o.error is not None:
            failures.append(f"passages {start + 1}-{start + len(window)}: {failure_reason(o)}")
            continue
        for item in o.value["nuggets"][:room]:
            text = " ".join(item["text"].split())
            key = _norm(text)
            if not key or key in seen:
                continue
            seen.add(key)
            sources = tuple(dict.fromkeys(window[s - 1][0] for s in item["sources"] if 1 <= s <= len(window)))
            found.append(Nugget(text, None, sources))
    return found


async def label_importance(sets: Sequence[NuggetSet] | str | Path, *, llm: Any,
                           options: NuggetOptions | None = None, only_missing: bool = True,
                           progress: bool = False, **kwargs: Any) -> CreateResult:
    """Label nuggets *vital* or *okay*, ``importance_window`` per call (with ``only_missing``,
    the sets whose nuggets all have an importance are left as they are)."""
    opts = resolve(options, kwargs)
    items = read_nuggets(sets) if isinstance(sets, (str, Path)) else list(sets)
    before = snapshot(llm)
    out, failures, outs, stop = await _importance(llm, items, opts, only_missing, progress)
    res = CreateResult(out, usage_since(llm, before), failures, len(outs),
                       _unlabelled(out, items, only_missing) if stop else [])
    if stop is not None:
        stop.partial = res  # the labels made before the stop; the rest left unlabelled
        raise stop
    return res


def _unlabelled(out: list[NuggetSet], before: list[NuggetSet], only_missing: bool) -> list[str]:
    """Queries the importance step left with a nugget unlabelled (it stopped first)."""
    return [s.qid for s, b in zip(out, before)
            if any(n.importance is None for n in s.nuggets)
            and not (only_missing and all(n.importance is not None for n in b.nuggets))]


async def _importance(llm: Any, sets: list[NuggetSet], opts: NuggetOptions, only_missing: bool,
                      progress: bool) -> tuple[list[NuggetSet], dict[str, list[str]], list[Any], LLMError | None]:
    slots: list[tuple[int, int]] = []
    calls: list[tuple[Any, dict[str, str]]] = []
    for i, s in enumerate(sets):
        if only_missing and all(n.importance is not None for n in s.nuggets):
            continue
        for start in range(0, len(s.nuggets), opts.importance_window):
            window = s.nuggets[start:start + opts.importance_window]
            slots.append((i, start))
            calls.append((sized(IMPORTANCE, ("labels",), len(window)),
                          {"query": s.query, "nuggets": numbered(n.text for n in window),
                           "count": str(len(window))}))
    outcomes, stop = await _many(llm, calls, progress, "nugget importance")
    new = [list(s.nuggets) for s in sets]
    failures: dict[str, list[str]] = {}
    per_set: dict[int, list[Any]] = {}
    for (i, start), o in zip(slots, outcomes):
        if o is None:  # never answered: the run stopped first
            failures.setdefault(sets[i].qid, []).append(
                f"importance of nuggets {start + 1}-: not labelled: the run stopped ({stop})")
            continue
        per_set.setdefault(i, []).append(o)
        if o.error is not None:
            failures.setdefault(sets[i].qid, []).append(f"importance of nuggets {start + 1}-: {failure_reason(o)}")
            continue
        for j, lab in enumerate(o.value["labels"]):
            new[i][start + j] = replace(new[i][start + j], importance=lab)
    out = []
    for i, s in enumerate(sets):
        prov = dict(s.provenance)
        if i in per_set:
            prov["importance"] = provenance_of(per_set[i])
        out.append(replace(s, nuggets=tuple(new[i]), provenance=prov))
    return out, failures, [o for o in outcomes if o is not None], stop


async def _many(llm: Any, calls: list[tuple[Any, dict[str, str]]], progress: bool,
                desc: str) -> tuple[list[Any], LLMError | None]:
    """Outcomes of ``(prompt, variables)`` calls in order: one ``structured_many`` per prompt.
    A run-stopping error ends it: the outcomes answered before it, ``None`` for the rest, and
    the error."""
    outcomes: list[Any] = [None] * len(calls)
    groups: dict[int, list[int]] = {}
    for j, (p, _) in enumerate(calls):
        groups.setdefault(id(p), []).append(j)
    for idx in groups.values():
        try:
            outs = await llm.structured_many(calls[idx[0]][0], [calls[j][1] for j in idx],
                                             progress=progress, desc=desc)
        except LLMError as exc:
            for j, o in zip(idx, exc.partial or []):
                outcomes[j] = o
            return outcomes, exc
        for j, o in zip(idx, outs):
            outcomes[j] = o
    return outcomes, None


async def create_nuggets(
    queries: Mapping[str, str] | str | Path,
    *,
    llm: Any,
    qrels: Any = None,
    corpus: Mapping[str, str] | str | Path | None = None,
    passages: Mapping[str, Any] | None = None,
    answers: Sequence[Answer] | str | Path | None = None,
    importance: bool = True,
    options: NuggetOptions | None = None,
    progress: bool = False,
    **kwargs: Any,
) -> CreateResult:
    """Nuggets of every query with passages (see :func:`passages_for`), then their importance.

    Queries run concurrently; the windows of one query run in order (each call sees the nuggets
    found so far). A run-stopping :class:`~ragjudge.errors.LLMError` (a spend limit, a revoked
    key) is raised with ``partial`` the result so far: the sets of the queries whose creation
    finished (importance labelled as far as it got), the others named in ``stopped``; every
    answered call is cached, so a rerun pays only for the rest."""
    opts = resolve(options, kwargs)
    qs = _texts(queries, "queries")
    ans = read_answers(answers) if isinstance(answers, (str, Path)) else answers
    ps = passages_for(qs, qrels=qrels, corpus=corpus, passages=passages, answers=ans, options=opts)
    before = snapshot(llm)
    order = [q for q in qs if ps.get(q)]
    outcomes: dict[str, list[Any]] = {q: [] for q in order}
    failures: dict[str, list[str]] = {q: [] for q in order}
    stop: list[LLMError] = []
    found = await asyncio.gather(*(_create_one(llm, q, qs[q], ps[q], opts, outcomes[q], failures[q], stop)
                                   for q in order))
    sets = []
    stopped: list[str] = []
    for q, nuggets in zip(order, found):
        if nuggets is None:
            stopped.append(q)
            failures[q].append(f"not created: the run stopped ({stop[0]})")
            continue
        prov = {"create": provenance_of(outcomes[q]), "passages": [i for i, _ in ps[q]],
                "window": opts.create_window, "max_nuggets": opts.max_nuggets}
        sets.append(NuggetSet(q, qs[q], tuple(nuggets), prov))
    n_calls = sum(len(v) for v in outcomes.values())
    if importance and not stop:
        created = sets
        sets, imp_fail, imp_outs, imp_stop = await _importance(llm, sets, opts, False, progress)
        for q, v in imp_fail.items():
            failures[q].extend(v)
        n_calls += len(imp_outs)
        if imp_stop is not None:
            stop.append(imp_stop)
            stopped = _unlabelled(sets, created, False)
    failures = {q: v for q, v in failures.items() if v}
    usage = usage_since(llm, before, queries=len(sets),
                        no_passages=[q for q in qs if not ps.get(q)])
    res = CreateResult(sets, usage, failures, n_calls, stopped)
    if stop:
        stop[0].partial = res
        raise stop[0]
    return res


def create_nuggets_sync(queries: Any, **kwargs: Any) -> CreateResult:
    """:func:`create_nuggets` from synchronous code (Jupyter included)."""
    return run_sync(create_nuggets(queries, **kwargs))


def label_importance_sync(sets: Any, **kwargs: Any) -> CreateResult:
    """:func:`label_importance` from synchronous code (Jupyter included)."""
    return run_sync(label_importance(sets, **kwargs))


def estimate_create(queries: Mapping[str, str] | str | Path, *, llm: Any, qrels: Any = None,
                    corpus: Any = None, passages: Mapping[str, Any] | None = None,
                    answers: Any = None, importance: bool = True,
                    options: NuggetOptions | None = None, **kwargs: Any) -> Any:
    """The dry run of :func:`create_nuggets`. The nuggets a call will see are not known before
    it runs: each later window is priced with the list it can hold at most (``max_nuggets``
    nuggets of 25 words), so the figure is an upper bound on calls and close on tokens."""
    opts = resolve(options, kwargs)
    qs = _texts(queries, "queries")
    ans = read_answers(answers) if isinstance(answers, (str, Path)) else answers
    ps = passages_for(qs, qrels=qrels, corpus=corpus, passages=passages, answers=ans, options=opts)
    filler = " ".join(["word"] * 25)
    groups: dict[int, tuple[Any, list[dict[str, str]]]] = {}
    for q, items in ps.items():
        for k, start in enumerate(range(0, len(items), opts.create_window)):
            window = items[start:start + opts.create_window]
            room = opts.max_nuggets
            p = _create_prompt(len(window), room)
            found = numbered([filler] * min(opts.max_nuggets, 8 * k)) or _NONE_YET
            groups.setdefault(id(p), (p, []))[1].append({
                "query": qs[q], "passages": "\n".join(f"[{i}] {t}" for i, (_, t) in enumerate(window, 1)),
                "nuggets": found, "room": str(room)})
        if importance and items:
            n = opts.max_nuggets
            for start in range(0, n, opts.importance_window):
                m = min(opts.importance_window, n - start)
                p = sized(IMPORTANCE, ("labels",), m)
                groups.setdefault(id(p), (p, []))[1].append(
                    {"query": qs[q], "nuggets": numbered([filler] * m), "count": str(m)})
    return estimate_groups(llm, groups.values(),
                           f"{opts.create_window} passages per creation call, later windows priced "
                           f"with {opts.max_nuggets} nuggets found at most; importance for "
                           f"{opts.max_nuggets} nuggets per query")
