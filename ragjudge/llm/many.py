"""Many structured calls at once: the fan-out behind :meth:`LLM.structured_many`.

Each item is one call of the session's ``structured`` (cache, de-duplication, the repair
policy: all of it per item); this module only decides which worker takes which item. With
several endpoints each has its own queue and workers (:class:`.routing.WorkQueues`): an
endpoint takes a query only when it can start it soon (:func:`.routing.room`), and one whose
queue is empty takes queued queries from the busiest other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .caller import Accounts
from .dispatch import Dispatcher
from .progress import Progress
from .prompts import Prompt
from .routing import PREFER, WorkQueues, check_any_live, room
from .values import Outcome, Validator, gather_or_stop

__all__ = ["fan_out"]


class Structured(Protocol):
    """One structured call of the session (its ``structured`` method)."""

    async def __call__(self, prompt: Prompt, variables: Mapping[str, Any], *,
                       validate: Validator | None = None) -> Outcome: ...


async def fan_out(structured: Structured, prompt: Prompt, items: Sequence[Mapping[str, Any]], *,
                  dispatcher: Dispatcher, accounts: Accounts, validate: Validator | None = None,
                  desc: str, progress: bool = True) -> list[Outcome]:
    """``structured(prompt, item)`` for every item, results in input order, with progress
    (``desc``; the status line reads ``accounts``). A failure that is raised (an
    :class:`ragjudge.errors.LLMError`) cancels the rest: see :func:`.values.gather_or_stop`."""
    results: list[Outcome | None] = [None] * len(items)
    # Items, not calls: a cache hit is no call (the status line counts hits apart).
    bar = Progress(len(items), desc, unit="item", enabled=progress)
    failed = cached = 0
    await dispatcher.check_models()
    callers = dispatcher.callers
    n = len(callers)
    work = WorkQueues(n)
    index = {id(c): k for k, c in enumerate(callers)}
    for i, item in enumerate(items):
        k = 0
        if n > 1:
            key = next(iter(item.values()), "") if isinstance(item, Mapping) else ""
            k = index[id(dispatcher.route(str(key)))]
        work.put(k, i)
    held = [0] * n
    changed = asyncio.Event()
    gates = [asyncio.Lock() for _ in callers]

    async def worker(k: int) -> None:
        nonlocal failed, cached, changed
        caller = callers[k]
        if n > 1:
            PREFER.set(caller)  # this task's own context: its requests go to its endpoint
        while True:
            async with gates[k]:  # one worker per endpoint waits for room, the others queue
                while n > 1 and (held[k] >= room(caller) or not caller.healthy()) and work:
                    # A drained endpoint's workers wait while the others take its queue;
                    # when every endpoint is drained nothing would ever take it.
                    check_any_live(callers)
                    wake = changed
                    try:
                        await asyncio.wait_for(wake.wait(), 0.25)
                    except asyncio.TimeoutError:
                        pass
                i = work.take(k)
                if i is None:
                    return
                held[k] += 1
            try:
                out = await structured(prompt, items[i], validate=validate)
            finally:
                held[k] -= 1
                changed.set()
                changed = asyncio.Event()
            results[i] = out
            failed += not out.ok
            cached += out.cached
            cost = accounts.cost
            bar.update(1, status=f"cached={cached} failed={failed} tokens={accounts.usage.total_tokens} "
                                 + ("cost=?" if cost is None else f"cost=${cost:.4f}"))

    # More workers than slots: cache hits and deduplicated waits must not idle the runner.
    tasks = [asyncio.create_task(worker(k))
             for k, c in enumerate(callers)
             for _ in range(min(len(items), c.runner.concurrency * 2 + 8))]
    try:
        await gather_or_stop(tasks, results)
    finally:
        bar.close()
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]
