"""Nugget assignment: each query's nuggets graded against each answer by an LLM.

One call grades up to ``assign_window`` nuggets (all of a query's, by default) against one
answer, so an answer costs ``ceil(N / window)`` calls whatever ``N``; the reply's arrays are
pinned to the window's size, so a reply with a missing or extra label is repaired or fails --
never read out of alignment. A failed call leaves its nuggets unassigned with the reason (the
answer's scores are then undetermined, never 0); an empty answer supports nothing without a
call. Calls go through the session: cached (a second run, or a run resumed after a kill, pays
only for what is missing), budgeted, and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._sync import run_sync
from ..errors import InputError, LLMError
from ..render import ResultSurface
from .calls import (
    estimate_groups,
    failure_reason,
    numbered,
    provenance_of,
    sized,
    snapshot,
    usage_since,
)
from .data import (
    LABELS,
    LABELS_2,
    Answer,
    AssignedNugget,
    Assignment,
    NuggetSet,
    read_answers,
    read_nuggets,
    write_assignments,
)
from .options import NuggetOptions, resolve
from .score import score_assignments

__all__ = ["AssignResult", "assign_nuggets", "assign_nuggets_sync", "assign_prompt", "estimate_assign"]

_D = NuggetOptions.default
#: Reply tokens one nugget may take: a reason of at most 80 characters and a label, quoted.
_PER_NUGGET = 100


def assign_prompt(grades: int) -> str:
    """The shipped prompt of a grading mode."""
    return "nugget_assign.v1" if grades == 3 else "nugget_assign_2grade.v1"


@dataclass
class AssignResult(ResultSurface):
    """Assignments of every answer that has nuggets, what they cost, and the answers left out.

    ``usage``: calls, cache hits, retries, failed calls, tokens and cost of this step;
    ``failed``: nuggets left unassigned by a failed call (``budget_cut`` of them because
    ``--max-cost`` was reached, ``stopped`` of them because a run-stopping error -- a spend
    limit, a revoked key -- ended the run first: either way the run is unfinished, and a rerun
    completes it from the cache); ``missing``: ``(run, qid)`` of answers whose query has no
    nuggets."""

    assignments: list[Assignment]
    usage: dict[str, Any] = field(default_factory=dict)
    failed: int = 0
    total: int = 0
    missing: list[tuple[str, str]] = field(default_factory=list)
    budget_cut: int = 0
    stopped: int = 0

    def write(self, path: str | Path) -> None:
        write_assignments(self.assignments, path)

    def score(self, **kwargs: Any) -> Any:
        """Per-run scores with intervals (:func:`ragjudge.nuggets.score_assignments`)."""
        return score_assignments(self.assignments, **kwargs)

    @property
    def mostly_failed(self) -> bool:
        return self.total > 0 and self.failed * 2 > self.total

    def to_dict(self) -> dict[str, Any]:
        return {"assignments": [a.to_dict() for a in self.assignments], "usage": self.usage,
                "failed": self.failed, "total": self.total, "budget_cut": self.budget_cut,
                "stopped": self.stopped,
                "missing": [list(m) for m in self.missing]}

    def describe(self) -> str:
        u = self.usage
        return (f"{len(self.assignments)} answers assigned, {self.total} nugget grades "
                f"({self.failed} failed); {u.get('calls', 0)} calls ({u.get('cache_hits', 0)} cached, "
                f"{u.get('failed_calls', 0)} failed), {u.get('total_tokens', 0)} tokens"
                + ("" if u.get("cost_usd") is None else f", ${u['cost_usd']:.4f}"))

    def __str__(self) -> str:
        return self.describe()


def _inputs(nuggets: Any, answers: Any) -> tuple[dict[str, NuggetSet], list[Answer]]:
    sets = read_nuggets(nuggets) if isinstance(nuggets, (str, Path)) else list(nuggets)
    ans = read_answers(answers) if isinstance(answers, (str, Path)) else list(answers)
    by_q = {s.qid: s for s in sets}
    for s in sets:
        if any(n.importance is None for n in s.nuggets):
            raise InputError(f"query {s.qid}: some nuggets have no importance (vital/okay); label "
                             "them (ragjudge nuggets create --importance-only) before assigning",
                             field="importance")
    return by_q, ans


def _plan(by_q: Mapping[str, NuggetSet], answers: Sequence[Answer], opts: NuggetOptions
          ) -> tuple[list[tuple[int, int, int]], list[tuple[Any, dict[str, Any]]], list[tuple[str, str]]]:
    """``(answer index, window start, window end)`` and the call of each, in order."""
    name = assign_prompt(opts.grades)
    slots: list[tuple[int, int, int]] = []
    calls: list[tuple[Any, dict[str, Any]]] = []
    missing = []
    for i, a in enumerate(answers):
        ns = by_q.get(a.qid)
        if ns is None:
            missing.append((a.run_id, a.qid))
            continue
        if not a.text.strip():
            continue
        texts = [n.text for n in ns.nuggets]
        for start in range(0, len(texts), opts.assign_window):
            window = texts[start:start + opts.assign_window]
            slots.append((i, start, start + len(window)))
            calls.append((sized(name, ("reasons", "labels"), len(window), per_item=_PER_NUGGET),
                          {"query": ns.query or a.query, "answer": a.text,
                           "nuggets": numbered(window), "count": str(len(window))}))
    return slots, calls, missing


async def assign_nuggets(
    nuggets: Sequence[NuggetSet] | str | Path,
    answers: Sequence[Answer] | str | Path,
    *,
    llm: Any,
    options: NuggetOptions | None = None,
    progress: bool = False,
    **kwargs: Any,
) -> AssignResult:
    """Assign each query's nuggets to every answer to that query (files or values).

    ``llm`` is a structured session (:class:`ragjudge.llm.LLM`, or
    :class:`~ragjudge.llm.fake.FakeLLM` in tests); options as :class:`NuggetOptions` or its
    field names as keywords.

    A run-stopping :class:`~ragjudge.errors.LLMError` (a spend limit, a revoked key) is raised
    with the assignments as ``partial``: the calls answered before it graded (they are cached,
    so a rerun does not pay for them again), the others failed with the stop as reason."""
    opts = resolve(options, kwargs)
    by_q, ans = _inputs(nuggets, answers)
    slots, calls, missing = _plan(by_q, ans, opts)
    before = snapshot(llm)
    outcomes: list[Any] = [None] * len(calls)
    # One structured_many per sized prompt: calls of every size run concurrently within it.
    groups: dict[int, list[int]] = {}
    for j, (p, _) in enumerate(calls):
        groups.setdefault(id(p), []).append(j)
    stop: LLMError | None = None
    for idx in groups.values():
        prompt = calls[idx[0]][0]
        try:
            outs = await llm.structured_many(prompt, [calls[j][1] for j in idx], progress=progress,
                                             desc="nugget assignment")
        except LLMError as exc:
            # Nothing more is sent; the calls answered before the stop are kept (paid for).
            stop, outs = exc, list(exc.partial or [])
        for j, o in zip(idx, outs):
            outcomes[j] = o
        if stop is not None:
            break
    labels_ok = LABELS if opts.grades == 3 else LABELS_2
    per_answer: dict[int, list[tuple[int, Any]]] = {}
    for (i, start, _end), o in zip(slots, outcomes):
        per_answer.setdefault(i, []).append((start, o))
    result: list[Assignment] = []
    failed = total = budget_cut = stopped = 0
    for i, a in enumerate(ans):
        ns = by_q.get(a.qid)
        if ns is None:
            continue
        grades: list[AssignedNugget] = []
        outs = sorted(per_answer.get(i, []), key=lambda t: t[0])
        if not outs:  # an empty answer: nothing to support, no call
            grades = [AssignedNugget(n.text, n.importance, "not_support", "empty answer")
                      for n in ns.nuggets]
        for start, o in outs:
            window = ns.nuggets[start:start + opts.assign_window]
            if o is None:  # never answered: the run stopped first
                grades.extend(AssignedNugget(n.text, n.importance, None, failure=f"{STOPPED} ({stop})")
                              for n in window)
                failed += len(window)
                stopped += len(window)
                continue
            if o.error is not None:
                why = failure_reason(o)
                grades.extend(AssignedNugget(n.text, n.importance, None, failure=why) for n in window)
                failed += len(window)
                if getattr(o.failure, "value", None) == "budget":  # FailureKind.BUDGET: not attempted
                    budget_cut += len(window)
                continue
            for n, lab, reason in zip(window, o.value["labels"], o.value["reasons"]):
                if lab not in labels_ok:  # the schema's enum already refuses it; kept as a guard
                    grades.append(AssignedNugget(n.text, n.importance, None, failure=f"label {lab!r}"))
                    failed += 1
                else:
                    grades.append(AssignedNugget(n.text, n.importance, lab, reason or None))
        total += len(grades)
        prov = provenance_of(o for _, o in outs) if outs else {}
        if prov:
            prov["grades"] = opts.grades
            prov["window"] = opts.assign_window
        result.append(Assignment(a.qid, a.run_id, tuple(grades), ns.query or a.query, a.text, prov))
    usage = usage_since(llm, before, answers=len(result), requests_asked=len(calls),
                        requests_failed=sum(1 for o in outcomes if o is None or o.error is not None))
    res = AssignResult(result, usage, failed, total, missing, budget_cut, stopped)
    if stop is not None:
        stop.partial = res
        raise stop
    return res


#: The failure of a nugget left unassigned because the run stopped (a spend limit, a revoked key).
STOPPED = "not assigned: the run stopped"


def assign_nuggets_sync(nuggets: Any, answers: Any, **kwargs: Any) -> AssignResult:
    """:func:`assign_nuggets` from synchronous code (Jupyter included)."""
    return run_sync(assign_nuggets(nuggets, answers, **kwargs))


def estimate_assign(nuggets: Any, answers: Any, *, llm: Any, options: NuggetOptions | None = None,
                    **kwargs: Any) -> Any:
    """The dry run of :func:`assign_nuggets`: calls, cached ones, tokens and cost; nothing sent."""
    opts = resolve(options, kwargs)
    by_q, ans = _inputs(nuggets, answers)
    _slots, calls, _missing = _plan(by_q, ans, opts)
    groups: dict[int, tuple[Any, list[dict[str, Any]]]] = {}
    for p, v in calls:
        groups.setdefault(id(p), (p, []))[1].append(v)
    return estimate_groups(llm, groups.values(),
                           f"one call per answer and {opts.assign_window} nuggets")
