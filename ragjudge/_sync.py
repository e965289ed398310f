"""Run a coroutine to completion from synchronous code, with or without a running event loop.

Jupyter (and any async application) already runs an event loop in the calling thread, so
``asyncio.run`` refuses to start a second one there. Instead of patching the loop
(``nest_asyncio``), :func:`run_sync` runs the coroutine on a private event loop in a worker
thread and blocks until it finishes. Objects bound to a loop (the openai client's HTTP pool,
locks, futures) must therefore be created inside the coroutine, which is how the judge and
the LLM session are written.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result (or raise its exception).

    Without a running loop in this thread this is ``asyncio.run(coro)``. With one (Jupyter,
    an async web handler), the coroutine runs on a fresh loop in a worker thread; the caller's
    thread blocks until it is done. ``KeyboardInterrupt`` in the caller cancels the coroutine.
    """
    if _running_loop() is None:
        return asyncio.run(coro)

    result: dict[str, Any] = {}
    ctx = contextvars.copy_context()
    loop_box: dict[str, asyncio.AbstractEventLoop] = {}
    task_box: dict[str, asyncio.Task[T]] = {}
    started = threading.Event()

    async def _main() -> T:
        task = asyncio.current_task()
        assert task is not None
        task_box["task"] = task  # type: ignore[assignment]
        loop_box["loop"] = asyncio.get_running_loop()
        started.set()
        return await coro

    def _worker() -> None:
        try:
            result["value"] = ctx.run(asyncio.run, _main())
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc
        finally:
            started.set()

    thread = threading.Thread(target=_worker, name="ragjudge-run-sync", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except KeyboardInterrupt:
        started.wait()
        loop = loop_box.get("loop")
        task = task_box.get("task")
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        thread.join()
        raise
    if "error" in result:
        raise result["error"]
    return result["value"]
