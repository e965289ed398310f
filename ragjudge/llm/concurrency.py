"""How many HTTP attempts may be in flight (:class:`ConcurrencyLimit`): the adaptive limit the
runner (:mod:`ragjudge.llm.runner`) admits attempts under. Pure bookkeeping with the clock
passed in."""

from __future__ import annotations

import math
from collections import deque

__all__ = ["ConcurrencyLimit"]


class ConcurrencyLimit:
    """How many HTTP attempts may be in flight: a latency gradient on the *server's* time, a
    Little's-law floor when the server's rate limit is known, AIMD on drops.

    Pure bookkeeping with the clock passed in. A server whose latency grows with load (a
    single-slot llama.cpp or Ollama server queues requests: with ``n`` in flight each waits for
    ``n - 1`` others) must not be sent more than it serves, or every request waits longer than
    the timeout and is cancelled and retried -- a storm that serves nothing. OpenAI's latency
    does not grow with our load, so the limit there climbs to ``maximum`` in a few round trips.

    The algorithm is the gradient of Netflix's concurrency-limits (``GradientLimit``: the limit
    times ``TOLERANCE`` x no-load latency / latency, at most halving, plus slow start and
    additive increase), chosen over its ``Gradient2`` and ``Vegas``: Gradient2 compares a
    short- with a long-term average, so a standing queue on a single-slot server becomes its
    new normal -- the storm above -- and Vegas' queue thresholds (3-6 x log10 of the limit)
    are made for limits in the hundreds, not 1-16. (``aiolimiter`` and ``asyncio-throttle``
    limit a *rate*, which is the pacer's job, not concurrency.)

    *Whose latency.* A sample is the **server's** time: what it reports
    (``openai-processing-ms``) when it does, else the client's wall latency minus our own event
    loop's share (:class:`LoopLag`). On a busy machine the wall latency grows with our loop's
    starvation, not with the server's queue; cutting on it starved the run (measured with 20
    CPU-burning neighbours: 7-13 in flight where 16 were allowed, 65-75% of a 600 rpm ceiling).

    The server's *no-load latency* is the faster of the run's first two requests, each sent
    alone (a first reply is often slow: a connection or a local server's caches warming up),
    then the median of a round with one attempt in flight, else the smallest round median seen. A
    *round* is as many replies as the limit. At the end of each round:

    * median above ``TOLERANCE`` x the no-load latency: the server queues our requests. Cut
      the limit to what would keep latency at the tolerance, assuming latency proportional to
      requests in flight (``limit * TOLERANCE * base / median``), at most halving per round;
    * else, if the round used the whole limit (demand binds): double it until the first cut
      (slow start), then add one.

    *Drops* cut at once, one cut per episode (those of attempts started before the cut do not
    compound): a timeout or an "overloaded" reply (503, 529) halves the limit; a 429 of the
    account's limit takes 10% off (AIMD's backoff; the rate itself is the pacer's, which the
    429 also cuts).

    *Little's floor.* When the server's rate limit is known (its headers, or its 429s), the
    pacer spaces starts at that rate and holding ``rate x latency`` in flight is what it takes
    to use it: :meth:`allowed` never drops below ``FLOOR_MARGIN x rate x latency``, capped by
    ``maximum``, the latency being the 90th percentile of the last ``RECENT`` wall latencies,
    at least the no-load server latency plus our own share (a busy machine's latency has a long
    tail: the floor on the mean still let the limit bind, 89.5% of the ceiling). More in flight cannot buy the server more load
    than it stated: the pacer still spaces starts at its rate; it only keeps that rate when the
    replies come back late -- on a busy machine both our loop and a local server run late, and
    the server's own time cannot tell the two apart (measured with 20 CPU-burning neighbours:
    the floor on the no-load latency held 6 in flight and 70% of a 600 rpm ceiling). A server
    that cannot keep the rate it stated times out or says so (503, 529): the floor is then off
    for ``FLOOR_QUIET`` s.
    """

    TOLERANCE = 2.0
    INITIAL = 1  # the first requests go alone
    ALONE = 2  # how many go alone before slow start; the fastest is the no-load latency
    DROP = 0.9  # AIMD's multiplicative decrease on a 429
    FLOOR_MARGIN = 1.5  # latency varies: the pacer's rate needs a little more than the mean
    FLOOR_QUIET = 30.0
    SMOOTH = 0.2  # weight of a new sample in the own-share average
    RECENT = 64  # wall latencies kept for Little's floor

    def __init__(self, maximum: int) -> None:
        self.maximum = max(1, maximum)
        self.limit = min(self.INITIAL, self.maximum)
        self.base: float | None = None
        self.own = 0.0  # our own share of an attempt's latency (moving average)
        self._walls: deque[float] = deque(maxlen=self.RECENT)  # recent replies' wall latency
        self.cuts = 0
        self.drops = 0
        self._slow_start = True
        self._alone = 0  # requests answered alone so far, up to ALONE
        self._samples: list[float] = []
        self._peak = 0
        self._cut_at = -math.inf
        self._floor_off_until = -math.inf

    def on_success(self, now: float, latency: float, in_flight: int, *, own: float = 0.0) -> None:
        """A 2xx reply after ``latency`` s (wall) to an attempt that started with ``in_flight``
        attempts (itself included) in flight; ``own``: the part of it that was ours (the wall
        latency minus the server's reported time, or our loop's measured share)."""
        own = min(max(own, 0.0), max(latency, 0.0))
        self.own += self.SMOOTH * (own - self.own)
        self._walls.append(max(latency, 0.0))
        if now - latency < self._cut_at:
            return  # started under the old limit: says nothing about the new one
        sample = max(latency - own, 0.0)
        if self._alone < self.ALONE and in_flight <= 1:
            # The first requests go alone and the fastest is the no-load latency: a cold first
            # reply (connection, a local server's model or prompt cache warming up) taken alone
            # hid a single-slot server's queue until requests waited past the timeout.
            self._alone += 1
            self.base = sample if self.base is None else min(self.base, sample)
            if self._alone == self.ALONE:
                self._grow()
            return
        self._alone = self.ALONE  # past the start (or Little's floor sent more at once)
        self._samples.append(sample)
        self._peak = max(self._peak, in_flight)
        if len(self._samples) < self.limit:
            return
        samples = sorted(self._samples)
        median = samples[len(samples) // 2]
        peak = self._peak
        self._samples = []
        self._peak = 0
        if self.base is None or peak <= 1:
            self.base = median
        else:
            self.base = min(self.base, median)
        if median > self.TOLERANCE * self.base and self.base > 0:
            target = int(self.limit * self.TOLERANCE * self.base / median)
            self._cut(now, max(target, self.limit // 2, 1))
        elif peak >= self.limit:
            self._grow()

    def on_overload(self, now: float, started_at: float) -> None:
        """An attempt started at ``started_at`` timed out waiting for the server, or was told
        the server is overloaded (503, 529)."""
        self._floor_off_until = now + self.FLOOR_QUIET
        if started_at < self._cut_at:
            return  # part of an episode already answered by a cut
        self._cut(now, max(1, self.limit // 2))

    def on_drop(self, now: float, started_at: float) -> None:
        """A 429 of the account's limit to an attempt started at ``started_at``."""
        if started_at < self._cut_at:
            return
        self.drops += 1
        self._cut(now, max(1, int(self.limit * self.DROP)))

    def floor(self, rate: float | None, now: float) -> int:
        """In flight needed to keep ``rate`` starts per second going (Little's law), 0 when no
        rate is known, no latency is yet, or an overload switched it off."""
        if rate is None or rate <= 0 or self.base is None or now < self._floor_off_until:
            return 0
        latency = max(self.base + self.own, self.wall)
        return min(self.maximum, math.ceil(self.FLOOR_MARGIN * rate * latency))

    @property
    def wall(self) -> float:
        """The 90th percentile of the recent replies' wall latency (0 before any)."""
        if not self._walls:
            return 0.0
        ordered = sorted(self._walls)
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]

    def allowed(self, rate: float | None, now: float) -> int:
        """Attempts that may be in flight now: the limit, or Little's floor for ``rate``
        (the server's known rate limit, starts per second) when that is higher."""
        return max(self.limit, self.floor(rate, now))

    def _grow(self) -> None:
        """Demand used the whole limit: double it until the first cut (slow start), then add one."""
        self.limit = min(self.maximum, self.limit * 2 if self._slow_start else self.limit + 1)

    def _cut(self, now: float, limit: int) -> None:
        self._slow_start = False
        self._alone = self.ALONE
        if limit < self.limit:
            self.cuts += 1
        self.limit = min(limit, self.limit)
        self._cut_at = now
        self._samples = []
        self._peak = 0
