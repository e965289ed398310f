"""Nugget assignment as a Ray Data pipeline: each answer graded against its query's nuggets by
:func:`~ragjudge.nuggets.assign_nuggets` in the workers, with the same prompts, windows,
parsing, cache, budget and provenance as ``ragjudge nuggets assign`` in one process.

    nuggets + answers (files or values)
      -> answers whose every call is in the cache: assigned in the driver, before anything is
         scheduled
      -> the rest, in batches, each with its query's nuggets, to workers running ragjudge's
         session (``max_cost`` split evenly between them)
      -> every answer's assignment, in the input order -> one
         :class:`~ragjudge.nuggets.AssignResult`

An answer's assignment depends only on its query's nuggets and the replies, so the result equals
one process's given the same replies.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._sync import run_sync
from ..errors import LLMError
from ..llm import LLM
from ..nuggets.assign import AssignResult, assign_nuggets, estimate_assign
from ..nuggets.data import Answer, Assignment, NuggetSet, read_answers, read_nuggets
from ..nuggets.options import NuggetOptions, resolve
from .cluster import (
    actors,
    check_counts,
    connect,
    key_env,
    recipe,
    sum_totals,
    totals,
    worker_llm,
)

__all__ = ["assign_nuggets_ray", "assign_nuggets_ray_sync"]


def _cost(llm: LLM) -> float | None:
    return llm.cost


def _add(total: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Sum a part's usage into ``total`` (counts add; the cost is ``None`` once one is unknown)."""
    for key, value in part.items():
        if key == "cost_usd":
            have = total.get(key, 0.0)
            total[key] = None if value is None or have is None else have + value
        elif isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


class _AssignWorker:
    """One Ray actor: the driver's session rebuilt, assigning a batch of answers per call."""

    def __init__(self, recipe: Mapping[str, Any]) -> None:
        self.llm = worker_llm(recipe["llm"])
        self.options: NuggetOptions = recipe["options"]
        self.uid = uuid.uuid4().hex  # a restarted worker counts apart from the one it replaces

    async def __call__(self, batch: Any) -> AsyncIterator[dict[str, list[Any]]]:
        # Async, as the judge's workers: one loop and session for the worker's life, and
        # BATCHES_IN_FLIGHT batches at once.
        rows = batch.to_pylist()
        answers: list[Answer] = [pickle.loads(r["answer"]) for r in rows]
        sets = {s.qid: s for s in (pickle.loads(r["nuggets"]) for r in rows)}
        stop = ""
        try:
            res = await assign_nuggets(list(sets.values()), answers, llm=self.llm, options=self.options)
        except LLMError as exc:
            # The run stopped here (a spend limit, a revoked key): the grades made before it
            # are paid for and go back to the driver, which stops the run with them.
            if not isinstance(exc.partial, AssignResult):
                raise
            res, stop = exc.partial, " ".join(str(exc).split())
        # the session's totals, not this batch's difference: another batch runs beside it
        usage = {"worker": self.uid, "totals": totals(self.llm), "failed": res.failed, "total": res.total,
                 "stopped": res.stopped, "stop": stop,
                 "requests_asked": res.usage.get("requests_asked", 0),
                 "requests_failed": res.usage.get("requests_failed", 0)}
        # every answer here has nuggets, so the assignments are the answers, in order
        yield {"index": [int(r["index"]) for r in rows],
                "assignment": [pickle.dumps(a) for a in res.assignments],
                "usage": [json.dumps(usage)] + [""] * (len(rows) - 1)}


def _scheduled(todo: Sequence[int], answers: Sequence[Answer], by_q: Mapping[str, NuggetSet], llm: LLM,
               options: NuggetOptions, *, workers: int, batch_size: int, address: str | None,
               ) -> tuple[dict[int, Assignment], list[dict[str, Any]]]:
    ray = connect(address)
    rows = [{"index": i, "answer": pickle.dumps(answers[i]), "nuggets": pickle.dumps(by_q[answers[i].qid])}
            for i in todo]
    out = ray.data.from_items(rows).map_batches(
        _AssignWorker, fn_constructor_kwargs={"recipe": {"llm": recipe(llm, workers), "options": options}},
        batch_format="pyarrow", batch_size=batch_size, num_cpus=0.25, **actors(workers),
        runtime_env={"env_vars": key_env(llm)})
    got: dict[int, Assignment] = {}
    parts: list[dict[str, Any]] = []
    for row in out.iter_rows():
        if row["usage"]:
            parts.append(json.loads(row["usage"]))
        got[int(row["index"])] = pickle.loads(row["assignment"])
    return got, parts


async def assign_nuggets_ray(
    nuggets: Iterable[NuggetSet] | str | Path,
    answers: Iterable[Answer] | str | Path,
    *,
    llm: LLM,
    options: NuggetOptions | None = None,
    workers: int = 2,
    batch_size: int = 16,
    address: str | None = None,
    **kwargs: Any,
) -> AssignResult:
    """:func:`~ragjudge.nuggets.assign_nuggets` on a Ray cluster (same arguments, plus
    ``workers``, ``batch_size`` and ``address`` as for :func:`~ragjudge.ray.judge_ray`); the
    result equals one process's given the same replies."""
    check_counts(workers=workers, batch_size=batch_size)
    opts = resolve(options, kwargs)
    sets = read_nuggets(nuggets) if isinstance(nuggets, (str, Path)) else list(nuggets)
    ans = read_answers(answers) if isinstance(answers, (str, Path)) else list(answers)
    by_q = {s.qid: s for s in sets}
    todo = [i for i, a in enumerate(ans) if a.qid in by_q
            and estimate_assign([by_q[a.qid]], [a], llm=llm, options=opts).calls > 0]
    skip = set(todo)
    # the driver's part: checks the nuggets (importance labelled...), says which answers have
    # no nuggets, and assigns the cached answers without a request
    before = _cost(llm)
    here = await assign_nuggets(sets, [a for i, a in enumerate(ans) if i not in skip], llm=llm, options=opts)
    after = _cost(llm)
    usage: dict[str, Any] = {}
    _add(usage, {**here.usage, "cost_usd": None if after is None else after - (before or 0.0)})
    failed, total = here.failed, here.total
    stopped, stop = here.stopped, ""
    by_index: dict[int, Assignment] = {}
    mine = iter(here.assignments)
    for i, a in enumerate(ans):
        if i not in skip and a.qid in by_q:
            by_index[i] = next(mine)
    if todo:
        got, parts = await asyncio.to_thread(_scheduled, todo, ans, by_q, llm, opts, workers=workers,
                                             batch_size=batch_size, address=address)
        by_index.update(got)
        failed += sum(p["failed"] for p in parts)
        total += sum(p["total"] for p in parts)
        stopped += sum(p.get("stopped", 0) for p in parts)
        stop = next((p["stop"] for p in parts if p.get("stop")), "")
        spent = sum_totals((p["worker"], p["totals"]) for p in parts)
        _add(usage, {k: v for k, v in spent.items() if k in usage})  # the keys assign_nuggets reports
        _add(usage, {k: sum(p[k] for p in parts) for k in ("requests_asked", "requests_failed")})
    tail = ("cost_usd", "answers", "requests_asked", "requests_failed")
    usage = {**{k: v for k, v in usage.items() if k not in tail}, "model": llm.model,
             "cost_usd": usage.get("cost_usd"), "answers": len(by_index),
             "requests_asked": usage.get("requests_asked", 0), "requests_failed": usage.get("requests_failed", 0)}
    result = [by_index[i] for i in sorted(by_index)]
    cut = sum(1 for a in result for n in a.failed if (n.failure or "").startswith("budget"))  # FailureKind.BUDGET
    res = AssignResult(result, usage, failed, total, here.missing, cut, stopped)
    if stop:  # as one process: the run-stopping error, with everything made before it
        exc = LLMError(stop)
        exc.partial = res
        raise exc
    return res


def assign_nuggets_ray_sync(nuggets: Any, answers: Any, **kwargs: Any) -> AssignResult:
    """Blocking :func:`assign_nuggets_ray` (works inside Jupyter's running loop)."""
    return run_sync(assign_nuggets_ray(nuggets, answers, **kwargs))
