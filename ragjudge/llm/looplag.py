"""How late this process's event loop runs (:class:`LoopLag`): the part of an attempt's
latency that was our own, not the server's, for the adaptive concurrency limit
(:mod:`ragjudge.llm.concurrency`)."""

from __future__ import annotations

import asyncio
import time
from collections import deque

__all__ = ["LoopLag"]


class LoopLag:
    """How late this process's event loop runs a callback that is due: a timer every
    ``PERIOD`` s notes its own delay, while someone holds the probe (attempts in flight).

    A reply waits just as long between arriving on its socket and reaching our code, so on a
    busy machine (CPU-burning neighbours, a busy loop of our own) the latency a client measures
    grows though the server is as fast as before. :meth:`share` estimates that part of one
    attempt: ``WEIGHT`` x the mean delay the probe saw while the attempt was in flight. The
    weight counts the waits on an attempt's path (the send after admission, the reply's socket
    callback, the waiting task's wake-up: measured on the loopback simulator with 20 burners,
    the client-side excess latency was 2-3x the probe's mean delay; 2 keeps the estimate on the
    low side, so a server that really slowed down is never explained away as our own lag).
    """

    PERIOD = 0.025
    WEIGHT = 2.0
    KEEP = 512  # recent ticks kept (~13 s at one per PERIOD when the loop is idle)

    def __init__(self) -> None:
        self._ticks: deque[tuple[float, float]] = deque(maxlen=self.KEEP)  # (monotonic time, delay)
        self._users = 0
        self._running = False

    def hold(self) -> None:
        """Someone needs the probe running (call on the loop being probed)."""
        self._users += 1
        if not self._running:
            self._running = True
            loop = asyncio.get_running_loop()
            due = loop.time() + self.PERIOD
            loop.call_at(due, self._tick, loop, due)

    def release(self) -> None:
        """One holder less; the timer stops at its next tick when nobody holds it."""
        self._users = max(0, self._users - 1)

    def _tick(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        now = loop.time()
        self.note(time.monotonic(), max(0.0, now - due))
        if self._users > 0 and not loop.is_closed():
            due = now + self.PERIOD
            loop.call_at(due, self._tick, loop, due)
        else:
            self._running = False

    def note(self, now: float, delay: float) -> None:
        """One measured delay (the timer's; tests feed synthetic ones)."""
        self._ticks.append((now, delay))

    def mean(self, since: float, until: float) -> float:
        """Mean delay of the ticks in ``[since, until]``; the latest tick's when none fell in
        it (an attempt shorter than a period); 0 before any tick."""
        total = 0.0
        n = 0
        for t, delay in reversed(self._ticks):
            if t < since:
                break
            if t <= until:
                total += delay
                n += 1
        if n:
            return total / n
        return self._ticks[-1][1] if self._ticks else 0.0

    def share(self, since: float, until: float) -> float:
        """Seconds of an attempt in flight over ``[since, until]`` that were our own loop's."""
        return min(self.WEIGHT * self.mean(since, until), max(0.0, until - since))

    @property
    def recent(self) -> float:
        """Mean delay of the last ticks kept (diagnostics)."""
        return sum(d for _, d in self._ticks) / len(self._ticks) if self._ticks else 0.0
