"""Where the routes' CPU-bound work runs.

Evaluations and comparisons (text in, text out) run in worker processes, so the process that
speaks HTTP never shares its GIL with them: its event loop keeps reading bodies and answering
health checks while an evaluation runs at full speed on another core (measured with 8 clients
on 2 cores: one thread beside the event loop reached 0.56-0.79 of the library's rate, its
evaluations ~12% slower than alone; see docs/design.md). The rest of the CPU work (a job's
plan, the deterministic RAG metrics) is light and runs in a worker thread, one at a time per
process: a second thread would only fight over the GIL.

The processes are started with ``spawn``, which forks nothing of a server that already runs
threads, beside the server (not on its first request) and ended with it; a worker ignores
Ctrl-C (the server's stop ends it) and fresh processes replace one that died.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["CpuWork"]

log = logging.getLogger("ragjudge.server")
T = TypeVar("T")


def _worker_start(server: int) -> None:
    """A worker's start. Ctrl-C in the server's terminal reaches the whole process group: the
    worker ignores it (no traceback each). A worker ends when its server does, however the
    server ended (uvicorn leaves by the signal it stopped on, without exit handlers; kill -9):
    the pool's pipes stay open in the worker itself, so it would wait for work forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(server,), daemon=True).start()


def _end_with(server: int) -> None:
    while os.getppid() == server:
        time.sleep(0.5)
    os._exit(0)


def _ready() -> None:
    """A task that makes a worker start and load what an evaluation needs, before a request."""
    from . import service  # noqa: F401  (deferred: only a worker process runs this)


def _call(fn: Callable[..., T], args: tuple[Any, ...]) -> tuple[T, list[tuple[str, type[Warning]]]]:
    """``fn(*args)`` in a worker, with the warnings it raised, for the server to raise again
    under its own filters and format (the library's warnings say when a number may be wrong)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(*args)
        except Exception as exc:
            try:  # an exception the server could not rebuild would break the pool, not fail a request
                pickle.loads(pickle.dumps(exc))
            except Exception:  # noqa: BLE001 -- whatever made it unreadable, its text still is
                raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
            raise
    return result, [(str(w.message), w.category) for w in caught]


class CpuWork:
    """The CPU-bound work of one app: :meth:`compute` (evaluations, comparisons) in
    ``processes`` worker processes (0: in a worker thread of this process), :meth:`light` in a
    worker thread. The app's lifespan starts the processes (:meth:`warm`) and ends them
    (:meth:`close`)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._thread_slot = anyio.Semaphore(1)
        # Two requests in flight per process: while a worker computes one, the next already
        # waits in its pipe, so the worker never idles for a hand-off (with one, 8 clients on
        # 2 cores reached 0.45 of the library's rate; with two, 0.65-1.08, median 0.91).
        self._process_slots = anyio.Semaphore(2 * max(processes, 1))

    def pool(self) -> ProcessPoolExecutor:
        """The worker processes (made on first use; again after one died)."""
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_start, initargs=(os.getpid(),))
            return self._pool

    def warm(self) -> None:
        """Start the worker processes now, so the first request does not wait for them."""
        if self.processes:
            pool = self.pool()
            for _ in range(self.processes):
                pool.submit(_ready)

    async def close(self) -> None:
        """End the worker processes after the work they have (the server is stopping)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    async def light(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._thread_slot:
            return await anyio.to_thread.run_sync(fn, *args)

    async def compute(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker process; ``fn`` is a module-level function and ``args``
        and its result pickle. Its exceptions come back as raised (a library error stays a
        400); a worker that died (killed, out of memory) is one failed request, and the next
        gets fresh processes."""
        if not self.processes:
            return await self.light(fn, *args)
        async with self._process_slots:
            pool = self.pool()
            try:
                result, caught = await asyncio.wrap_future(pool.submit(_call, fn, args))
            except BrokenProcessPool:
                log.error("an evaluation's worker process died; new ones start with the next request")
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        for message, category in caught:
            warnings.warn(message, category, stacklevel=2)
        return result
