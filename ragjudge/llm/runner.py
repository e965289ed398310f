"""The runner: the one place that decides when a request may start.

Three limits, all optional, applied in this order:

1. **Concurrency** -- at most ``concurrency`` calls in flight (a semaphore held for the whole
   call, retries included).
2. **Tokens per minute** -- each call reserves an estimate (prompt + ``max_tokens``, what
   OpenAI's limiter counts at admission) in a sliding 60 s window before it starts, and the
   reservation is settled to the real ``usage`` when it ends.
3. **Requests per minute** -- every HTTP attempt (retries too) takes the next start time of
   an evenly spaced schedule (one start every ``60 / rpm`` seconds, reserved in FIFO order,
   no polling). Any sliding window of ``W`` seconds then holds at most ``W * rpm / 60 + 1``
   starts, so the server's window -- whatever its length -- is never overrun, and no
   throughput is lost to polling. (``asyncio-throttle`` was tried first: it admits clumps of
   ``n`` per period and polls every 10 ms; measured against a 600 rpm, 300 ms simulator it
   reached 94% of the ceiling with 2-14 429s per 300 requests, the pacer 96-97% with none.)

The rpm ceiling adapts (the effective rate is the smallest of the known limits):

* ``rpm=`` / ``tpm=`` given by the user are hard caps, never exceeded.
* The limits a reply's headers advertise (the provider reads them into a ``RateInfo``:
  OpenAI's ``x-ratelimit-limit-requests`` / ``-tokens``, Anthropic's
  ``anthropic-ratelimit-*``) set the ceiling to 98% of the advertised limit from the first
  reply on.
* ``x-ratelimit-remaining-tokens`` (and ``-requests`` while no request limit is known), minus
  what we started since the reporting request was admitted, must cover a new attempt, else it
  waits for ``x-ratelimit-reset-*``; when that report goes stale one attempt probes and the
  rest wait for its fresh report. This keeps windows shorter than a minute from being overrun
  (measured: 91-95% of a 60k tpm / 10 s-window ceiling, 0 429s).
* Slow start: the first request of a run goes alone; the others wait for its reply, so the
  limit headers are known before the first burst (with no rate known the second goes alone
  too: see :class:`ConcurrencyLimit`).
* A 429 that reflects the account's limit (its ``x-ratelimit-remaining-*`` is exhausted, or it
  carries no such headers and the limit is evident: below) pauses every new start for the
  server's ``Retry-After``. When no header told us the limit, :class:`RateLearner` sets the
  rate from the 429s alone (AIMD): cut to 90% of the capacity measured over the time actually
  observed (accepted starts over the observed span plus ``Retry-After``), at most halving per
  episode (a burst of 429s is one episode); then raise it every few seconds of quiet, binding
  pacing, halving the gap to the rate that last failed, and probe past that rate only after
  holding just below it for a while.
  A 429 whose headers show budget left (an overloaded replica, a spurious reply) only makes
  that request wait and retry: it must not throttle the whole run. So does a 429 without any
  header until the recent 429s are too many to be rejections at random (a fixed share of
  requests refused at any pace; :meth:`RateLearner.limit_evident`). The resend of a request
  refused by a 429 of the limit goes at the front of the schedule (the slots handed out since
  each move back one, so the spacing holds), not behind every request queued meanwhile.
* A run-stopping refusal (a spend limit, a bad key) ends the attempts waiting at the gate,
  and those coming to it within :data:`STOP_HOLD` s, with its reason: none goes out while the
  run's other tasks are being cancelled.

Its parts, each pure bookkeeping under a clock passed in, live in their own modules: the rate
learned from 429s (:mod:`.rate`), the endpoint's health -- circuit breaker and slowdown line --
(:mod:`.health`), the adaptive in-flight limit (:mod:`.concurrency`) and our own event loop's
lateness it discounts (:mod:`.looplag`). This module admits each call and each attempt through
them, in the order above, and feeds them every attempt's end.

Why these defaults: ``concurrency=64`` keeps ~200 requests/s possible at 300 ms latency, far
above common limits, so the rate limiter -- not the semaphore -- is what binds, even on a busy
machine whose loop answers late (:data:`~ragjudge.llm.defaults.DEFAULT_CONCURRENCY`); no default
rpm, because local servers (vLLM, llama.cpp) have none and a guess would only slow them down.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from ..errors import LLMError
from .client import LONG_WAIT, classify_failure
from .concurrency import ConcurrencyLimit
from .defaults import DEFAULT_CONCURRENCY, ENDPOINT_OPTIONS
from .health import CircuitBreaker, EndpointDown, Slowdown
from .looplag import LoopLag
from .providers.base import AttemptFailed, RateInfo
from .rate import WINDOW, RateLearner

__all__ = ["Runner", "Attempt", "Reservation", "HEADROOM"]

log = logging.getLogger("ragjudge.llm")


#: The share of an advertised limit the pacer keeps to (see the module docstring).
HEADROOM = 0.98
#: Seconds after a run-stopping refusal during which no new attempt starts (Runner._check_stop):
#: far longer than the loop turns a stopped run takes to cancel its other requests.
STOP_HOLD = 5.0
# The current task's HTTP attempt (see Attempt): lets observe() place a reply's remaining-budget
# headers on our own timeline, tell which start a 429 rejected, and record the reply's status.
_TICKET: contextvars.ContextVar["Attempt | None"] = contextvars.ContextVar("ragjudge_runner_ticket", default=None)


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass
class Reservation:
    """Tokens held in the TPM window for one call; :meth:`settle` replaces the estimate."""

    runner: Runner
    tokens: int
    entry: list[float] = field(default_factory=list)

    def settle(self, actual_tokens: int) -> None:
        if self.entry:
            self.entry[1] = float(actual_tokens)
        self.tokens = actual_tokens


class _LoopState:
    """Primitives bound to one event loop (sync wrappers run each call on a fresh loop)."""

    def __init__(self, concurrency: int) -> None:
        self.semaphore = asyncio.Semaphore(concurrency)
        self.next_start = 0.0  # monotonic time of the next free start slot
        self.first_reply = asyncio.Event()
        self.probing = False
        self.active = 0  # HTTP attempts in flight (the adaptive limit's count)
        self.waiters: list[asyncio.Future[None]] = []
        self.lag = LoopLag()
        self.entered = 0  # attempts that came to the gate, in order
        #: Tasks whose last attempt the server refused with a 429 of its limit: their next
        #: attempt takes the start slot that one held (see Runner._admit).
        self.refused: weakref.WeakSet[asyncio.Task[object]] = weakref.WeakSet()
        self.front = -math.inf  # the latest start time given to an attempt (the schedule's front)
        self.moved = 0  # slots given to resends ahead of those handed out (see Runner._pace)
        #: A run-stopping refusal (a spend limit, a bad key), how many attempts had come to the
        #: gate when it came and when (monotonic): see Runner._check_stop.
        self.stop: tuple[str, int, float] | None = None


@dataclass
class Attempt:
    """One admitted HTTP attempt, yielded by :meth:`Runner.attempt` to the client.

    ``probe``: the attempt probes a server the circuit breaker considers down. ``outage``: set
    when the attempt failed as part of an outage (a probe, or any failure while the breaker is
    open): the client must not count it against the pair's attempt budget."""

    started: float  # our started-counter when it was admitted
    started_tokens: float
    tokens: float
    entry: list[float]  # its RateLearner start record
    t0: float  # monotonic time it was let go
    probe: bool = False
    status: int | None = None  # the HTTP status it got, once observed
    in_flight: int = 1  # attempts in flight when it started, itself included
    outage: bool = False
    server_time: float | None = None  # seconds the server says it spent on it, if it says


class Runner:
    """Concurrency cap, rpm throttle and tpm budget, adapting to the server's signals."""

    def __init__(self, concurrency: int = DEFAULT_CONCURRENCY, rpm: float | None = None, tpm: float | None = None, *,
                 adaptive: bool = True, patience: float = ENDPOINT_OPTIONS["patience"].default,
                 startup: float = 5.0) -> None:
        """``concurrency``: calls in flight at most; ``adaptive``: fewer HTTP attempts in flight
        while the server's latency grows with load (:class:`ConcurrencyLimit`); ``patience``:
        seconds of outage before the run stops, ``startup``: the same for a server that never
        answered (:class:`CircuitBreaker`)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if rpm is not None and rpm <= 0:
            raise ValueError("rpm must be positive")
        if tpm is not None and tpm <= 0:
            raise ValueError("tpm must be positive")
        self.concurrency = concurrency
        self.max_rpm = rpm
        self.max_tpm = tpm
        self.header_rpm: float | None = None
        self.header_tpm: float | None = None
        self.learner = RateLearner()
        self.breaker = CircuitBreaker(patience=patience, startup=startup)
        self.slowdown = Slowdown()
        self.limiter = ConcurrencyLimit(concurrency) if adaptive else None
        self.last_event = ""
        self._cooldown_until = 0.0
        self._tpm_window: deque[list[float]] = deque()
        # Last remaining budget the server reported, per kind: (remaining, value of our
        # started-counter when the reporting attempt started, monotonic reset time, whether it
        # is only a probe's placeholder).
        self._budget: dict[str, tuple[float, float, float, bool] | None] = {}
        self._started_tokens = 0.0
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self.started = 0
        self.rate_limited = 0
        self.isolated_429 = 0
        self.refused_waits = 0  # 429s asking to wait longer than the patience
        #: the server as printed in wait lines (a redacted URL, set by whoever owns the client)
        #: Raise EndpointDown instead of waiting out an outage (the session has other endpoints).
        self.fail_fast = False
        self.where = "the server"
        self._said_pause_at = -math.inf
        self.in_flight = 0
        self.pace_missed = 0.0  # seconds of start slots that passed with no attempt ready
        self._lag: LoopLag | None = None  # the probe of the loop that last had a reply

    # -- limits ----------------------------------------------------------------------
    @property
    def adaptive_rpm(self) -> float | None:
        """The rate learned from 429s when no header gives the limit (``None``: none yet)."""
        return self.learner.rpm

    @property
    def rpm(self) -> float | None:
        """The requests-per-minute rate currently enforced (``None``: unthrottled)."""
        caps = [c for c in (self.max_rpm,
                            None if self.header_rpm is None else self.header_rpm * HEADROOM,
                            self.adaptive_rpm) if c is not None]
        return min(caps) if caps else None

    @property
    def tpm(self) -> float | None:
        caps = [c for c in (self.max_tpm,
                            None if self.header_tpm is None else self.header_tpm * HEADROOM)
                if c is not None]
        return min(caps) if caps else None

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        st = self._states.get(loop)
        if st is None:
            st = _LoopState(self.concurrency)
            self._states[loop] = st
        return st

    async def _pace(self, st: _LoopState) -> None:
        """Wait for this attempt's slot in the evenly spaced start schedule."""
        now = time.monotonic()
        self.learner.maybe_raise(now)
        rpm = self.rpm
        if rpm is None:
            st.next_start = now
            return
        at = max(now, st.next_start, self.learner.next_release(now))
        if now > st.next_start:
            self.pace_missed += now - st.next_start  # diagnostics: slots nobody was ready for
        st.next_start = at + 60.0 / rpm
        moved = st.moved
        while at > now:
            await asyncio.sleep(at - now)
            now = time.monotonic()
            if st.moved != moved:
                # Resends took slots ahead of this one (_pace_resend): it moves back as many.
                at += (st.moved - moved) * 60.0 / (self.rpm or rpm)
                moved = st.moved

    async def _pace_resend(self, st: _LoopState) -> None:
        """The next slot of the schedule for a resend of a refused attempt (see _admit): at the
        front, every slot already handed out moving back one, so the spacing holds for all."""
        now = time.monotonic()
        rpm = self.rpm
        if rpm is None:
            return
        gap = 60.0 / rpm
        at = max(now, st.front + gap, self.learner.next_release(now))
        st.front = at
        if st.next_start > at:  # attempts wait for later slots: each moves back one
            st.moved += 1
            st.next_start += gap
        else:
            st.next_start = at + gap
        if at > now:
            await asyncio.sleep(at - now)

    def _refund(self, st: _LoopState) -> None:
        """Give one pacing slot back (an attempt that did not start, or was not counted)."""
        rpm = self.rpm
        if rpm is not None:
            st.next_start = max(time.monotonic(), st.next_start - 60.0 / rpm)

    # -- admission -------------------------------------------------------------------
    @asynccontextmanager
    async def slot(self, tokens: int = 0) -> AsyncIterator[Reservation]:
        """Hold one concurrency slot and a TPM reservation for one call (all its attempts)."""
        st = self._state()
        async with st.semaphore:
            reservation = await self._reserve(st, tokens)
            self.in_flight += 1
            try:
                yield reservation
            finally:
                self.in_flight -= 1

    async def _reserve(self, st: _LoopState, tokens: int) -> Reservation:
        res = Reservation(self, tokens)
        while True:
            limit = self.tpm
            now = time.monotonic()
            while self._tpm_window and now - self._tpm_window[0][0] > WINDOW:
                self._tpm_window.popleft()
            # A call larger than the whole budget may start once the window is empty.
            if limit is None or not self._tpm_window or sum(e[1] for e in self._tpm_window) + tokens <= limit:
                entry = [now, float(tokens)]
                self._tpm_window.append(entry)
                res.entry = entry
                return res
            wait = WINDOW - (now - self._tpm_window[0][0]) + 0.01
            await asyncio.sleep(min(max(wait, 0.01), 1.0))

    @property
    def loop_lag(self) -> float:
        """The recent mean delay of the event loop that last had a reply, as its probe saw it,
        in seconds (diagnostics; read after the run too, when that loop is gone)."""
        return 0.0 if self._lag is None else self._lag.recent

    @property
    def concurrency_limit(self) -> int:
        """HTTP attempts allowed in flight now (the adaptive limit, at most ``concurrency``)."""
        if self.limiter is None:
            return self.concurrency
        return self.limiter.allowed(self._server_rate(), time.monotonic())

    def _server_rate(self) -> float | None:
        """Starts per second the pacer keeps when the *server's* rate limit is known (its
        headers or its 429s said it): what Little's floor of the adaptive limit must carry. A
        user's own ``rpm=`` alone says nothing about the server (a local one may queue)."""
        if self.header_rpm is None and self.learner.rpm is None:
            return None
        rpm = self.rpm
        return None if rpm is None else rpm / 60.0

    @asynccontextmanager
    async def attempt(self, tokens: int = 0, *, wait: bool = False,
                      may_probe: bool = True) -> AsyncIterator[Attempt]:
        """Admission of one HTTP attempt (``tokens``: its estimated size): wait out an outage
        (circuit breaker), the adaptive in-flight limit, a cooldown, the server's remaining
        budget, then the rpm pacing. Yields the :class:`Attempt`; raises
        :class:`ragjudge.errors.LLMError` when the server stayed unreachable too long."""
        st = self._state()
        entry = st.entered
        st.entered += 1
        if not st.first_reply.is_set() and self.header_rpm is None and self.adaptive_rpm is None:
            if st.probing:
                await st.first_reply.wait()
            else:
                # Slow start: the first request goes alone, so its reply's rate-limit headers
                # set the pace before a burst of `concurrency` requests can overrun the window.
                st.probing = True
                try:
                    async with self._admit(st, tokens, wait, may_probe, entry) as ticket:
                        yield ticket
                finally:
                    st.first_reply.set()
                return
        async with self._admit(st, tokens, wait, may_probe, entry) as ticket:
            yield ticket

    @staticmethod
    def _check_stop(st: _LoopState, entry: int) -> None:
        """Raise the run-stopping refusal (a spend limit, a bad key) instead of starting this
        attempt, if it was waiting at the gate when the refusal came or came to the gate within
        :data:`STOP_HOLD` s after it. Checked after the last wait, with no await before the
        start: the refusal's task and the cancellation of the run's other tasks are a few
        loop turns apart, and an attempt let go in between is one more request to a server
        that has refused the run. After the hold, a new call on the same session is sent (the
        user may have raised the limit), and meets its own refusal if not."""
        if st.stop is None:
            return
        reason, mark, at = st.stop
        if entry < mark or time.monotonic() - at < STOP_HOLD:
            raise LLMError(reason)

    async def _await_breaker(self, wait: bool = False, may_probe: bool = True) -> bool:
        """Wait while the circuit breaker is open; True when this attempt is its probe. With
        ``fail_fast`` (the session has other endpoints) and not ``wait``, an open breaker
        raises :class:`EndpointDown` unless this attempt may probe (``may_probe``: a request's
        first attempt; a retry never probes, so a request whose probe failed moves on): nothing
        is sent, the work moves elsewhere, and the endpoint is tried again when a probe is due."""
        while True:
            now = time.monotonic()
            if self.fail_fast and not wait and self.breaker.open:
                if may_probe and self.breaker.admit(now) == (0.0, True):
                    return True
                raise EndpointDown(f"{self.breaker.state}: {self.breaker.reason or 'no reply'}")
            reason = self.breaker.dead(now)
            if reason is not None:
                raise LLMError(reason)
            delay, probe = self.breaker.admit(now)
            if delay <= 0:
                return probe
            await asyncio.sleep(delay)

    async def _acquire_active(self, st: _LoopState, probe: bool) -> None:
        """One of the adaptive limit's in-flight places (a probe goes regardless)."""
        while not probe and self.limiter is not None and st.active >= self.concurrency_limit:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            st.waiters.append(fut)
            try:
                await fut
            finally:
                if fut in st.waiters:
                    st.waiters.remove(fut)
        st.active += 1

    @staticmethod
    def _release_active(st: _LoopState) -> None:
        st.active -= 1
        waiters, st.waiters = st.waiters, []
        for fut in waiters:  # all re-check: the limit may have changed too
            if not fut.done():
                fut.set_result(None)

    @asynccontextmanager
    async def _admit(self, st: _LoopState, tokens: int, wait: bool = False,
                     may_probe: bool = True, entry: int = -1) -> AsyncIterator[Attempt]:
        self._check_stop(st, entry)
        task = asyncio.current_task()
        # A resend of an attempt the server refused with a 429 of its limit (a request it did no
        # work for, a start its window did not count) goes at the front of the schedule, the
        # slots handed out since each moving back one, and takes an in-flight place at once:
        # it still waits out the cooldown and keeps the spacing, but does not queue behind the
        # whole schedule again (which, at a pace cut by the 429s, outlasted the patience of
        # the requests at its back).
        resend = task is not None and task in st.refused
        if resend:
            st.refused.discard(task)  # type: ignore[arg-type]
        while True:
            probe = await self._await_breaker(wait, may_probe)
            await self._acquire_active(st, probe or resend)
            if probe or not self.breaker.open:
                break
            self._release_active(st)  # the breaker opened while we waited: back to its gate
        try:
            while True:
                delay = self._cooldown_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(min(delay, 1.0))
                    continue
                paced = not resend
                if paced:
                    await self._pace(st)
                else:
                    await self._pace_resend(st)
                # Checked after pacing, with no await before the counters move: check-and-start
                # is atomic, so concurrent attempts cannot all spend the same reported budget.
                wait = self._budget_wait(tokens)
                if wait <= 0 and self._cooldown_until <= time.monotonic():
                    break
                if paced:
                    self._refund(st)  # not starting now: the slot goes back to the schedule
                if wait >= LONG_WAIT:
                    self._say_pause(wait)
                # Re-check at least every second: a fresher reply may have brought better news.
                await asyncio.sleep(min(max(wait, 0.01), 1.0))
            self._check_stop(st, entry)
        except BaseException:
            self._release_active(st)
            if probe:
                self.breaker.on_probe_done()
            raise
        self.started += 1
        self._started_tokens += tokens
        now = time.monotonic()
        st.front = max(st.front, now)
        ticket = Attempt(float(self.started), self._started_tokens, float(tokens),
                         self.learner.on_start(now), now, probe)
        if self.limiter is not None:
            ticket.in_flight = st.active
            st.lag.hold()
        token = _TICKET.set(ticket)
        try:
            yield ticket
        except BaseException as exc:
            self._ended(ticket, exc, st)
            raise
        else:
            self._ended(ticket, None, st)
        finally:
            _TICKET.reset(token)
            if self.limiter is not None:
                st.lag.release()
            self._release_active(st)

    def _ended(self, ticket: Attempt, exc: BaseException | None, st: _LoopState) -> None:
        """Feed an attempt's end to the circuit breaker, the adaptive limit and the slowdown
        line."""
        now = time.monotonic()
        if isinstance(exc, AttemptFailed) and not exc.verdict.retry and isinstance(exc.verdict.final, LLMError):
            # The server refused the run (a spend limit, a bad key): the attempts waiting at
            # the gate now must not go out (see _check_stop).
            st.stop = (str(exc.verdict.final), st.entered, now)
        failure = classify_failure(exc) if exc is not None else None
        if failure is not None and failure.url != "the server" and self.where == "the server":
            self.where = failure.url  # redacted; the wait lines name the server from now on
        status = ticket.status if ticket.status is not None else (failure.status if failure else None)
        message = None
        fault: str | None = None
        where = failure.url if failure is not None and failure.url != "the server" else self.where
        if exc is None or status is not None:
            # A reply (without observe(), e.g. embeddings, a clean exit is one too).
            status = status or 200
            fault = "5xx" if status >= 500 else "429" if status == 429 else None
            message = self.breaker.on_reply(now, status, probe=ticket.probe, started_at=ticket.t0,
                                            where=where)
            if self.limiter is not None and exc is None and 200 <= status < 300:
                wall = now - ticket.t0
                # The server's own time when it states it; else our loop's measured share.
                own = (wall - ticket.server_time if ticket.server_time is not None
                       else st.lag.share(ticket.t0, now))
                self._lag = st.lag
                self.limiter.on_success(now, wall, ticket.in_flight, own=own)
            elif self.limiter is not None and status in (503, 529):
                self.limiter.on_overload(now, ticket.t0)
        elif failure is not None and failure.kind == "unreachable":
            fault = "unreachable"
            message = self.breaker.on_failure(now, failure.reason, where, probe=ticket.probe)
        elif failure is not None and failure.kind in ("timeout", "broken"):
            # No reply in time, or a 2xx that stalled or broke after its headers: a server that
            # does this on every call is as down as one that refuses connections.
            fault = "stall"
            if failure.kind == "timeout" and self.limiter is not None:
                self.limiter.on_overload(now, ticket.t0)
            if failure.kind == "broken":
                self.breaker.reached = True  # its headers came: the server is there
            message = self.breaker.on_failure(now, failure.reason, where, probe=ticket.probe, kind="stall")
        elif ticket.probe:
            self.breaker.on_probe_done()
        if exc is not None and (ticket.probe or self.breaker.open):
            ticket.outage = True
        if message:
            self.last_event = message
            log.warning(message)
        self.slowdown.note(now, fault)
        line = self.slowdown.line(now, self.where)
        if line:
            log.warning(line)

    def _say_pause(self, wait: float) -> None:
        """One stderr line when the server's reported window holds every start for a while
        (at most one per :data:`LONG_WAIT` s): no 429 is involved, so the client says nothing."""
        now = time.monotonic()
        if now - self._said_pause_at < LONG_WAIT:
            return
        self._said_pause_at = now
        log.warning("rate limited by %s: waiting %.0f s (x-ratelimit-reset)", self.where, wait)

    def _budget_wait(self, tokens: int) -> float:
        """Seconds until the server's last reported remaining budget covers this attempt.

        ``x-ratelimit-remaining-*`` describes the server's window when the reporting request
        was admitted; attempts started after it have used part of it since.
        """
        now = time.monotonic()
        wait = 0.0
        for kind, need, counter in (("requests", 1, self.started), ("tokens", tokens, self._started_tokens)):
            info = self._budget.get(kind)
            if info is None:
                continue
            if kind == "requests" and self.header_rpm is not None:
                # Pacing at 98% of the advertised rpm already keeps any window safe; the
                # remaining count, pessimistic for sliding windows, would only slow it down.
                continue
            remaining, snapshot, reset_at, _ = info
            if now >= reset_at:
                # The report is stale. What a sliding window has freed by now is unknown: let
                # this one attempt probe it, and the others wait (up to 1 s) for its reply's
                # fresh report, instead of all rushing in at once.
                self._budget[kind] = (float(need), counter, now + 1.0, True)
                continue
            if remaining - (counter - snapshot) < need:
                wait = max(wait, reset_at - now)
        return wait

    # -- signals ---------------------------------------------------------------------
    def observe(self, rate: RateInfo, status: int) -> None:
        """Learn from a reply's status and the rate-limit state its headers stated (read by the
        provider: ``x-ratelimit-*``, ``anthropic-ratelimit-*``...)."""
        now = time.monotonic()
        limit_req = rate.limit_requests
        if limit_req and limit_req > 0:
            self.header_rpm = float(limit_req)
        limit_tok = rate.limit_tokens
        if limit_tok and limit_tok > 0:
            self.header_tpm = float(limit_tok)
        ticket = _TICKET.get()
        for i, kind in enumerate(("requests", "tokens")):
            remaining = rate.remaining_requests if i == 0 else rate.remaining_tokens
            reset = rate.reset_requests if i == 0 else rate.reset_tokens
            if remaining is None or reset is None or ticket is None:
                continue
            snapshot = ticket.started if i == 0 else ticket.started_tokens
            info = self._budget.get(kind)
            # The freshest report wins; any real report beats a probe's placeholder.
            if info is None or info[3] or snapshot >= info[1]:
                self._budget[kind] = (float(remaining), snapshot, now + min(reset, 60.0), False)
        if ticket is not None:
            ticket.status = status
            ticket.server_time = rate.server_time
        if 200 <= status < 300:
            self.learner.on_success(now, None if ticket is None else ticket.entry)
            return
        if status != 429:
            return
        self.rate_limited += 1
        if ticket is not None:
            self.learner.on_rejected(ticket.entry)  # the server did not count this start
        # Is this the account's limit (slow everyone down) or an isolated 429 (an overloaded
        # replica, a spurious reply: only this request waits its Retry-After, in the client)?
        rem_req = rate.remaining_requests
        rem_tok = rate.remaining_tokens
        after = rate.retry_after
        wait = min(after if after is not None else 1.0, 60.0)
        started_at = None if ticket is None else ticket.entry[0]
        if rem_req is not None or rem_tok is not None:
            need = ticket.tokens if ticket is not None else 1.0
            limited = (rem_req is not None and rem_req <= 0) or (rem_tok is not None and rem_tok < need)
        elif limit_req is not None or self.header_rpm is not None:
            limited = True  # a limit the headers stated, and no count of what is left of it
        else:
            # No header at all: the limit once the recent 429s are too many for rejections at
            # random, or once one is known; before, only this request waits (see RateLearner).
            limited = self.learner.limit_evident(None if ticket is None else ticket.entry)
            if not limited:
                self.learner.on_unexplained(now, retry_after=wait, started_at=started_at)
        if not limited:
            self.isolated_429 += 1
            # A rejected request does not count against the server's window: give its start
            # slot back, or every such 429 would cost a pacing interval on top of its retry.
            st = self._states.get(asyncio.get_running_loop()) if _in_loop() else None
            if st is not None:
                self._refund(st)
            return
        if after is not None and after > self.breaker.patience:
            # The client ends this request at once (a wait beyond the patience is refused):
            # pausing every start for it, or learning a rate from it, would stall the pairs
            # the server still serves (a spurious "come back in an hour" froze whole runs).
            self.refused_waits += 1
            return
        task = asyncio.current_task() if _in_loop() else None
        if task is not None:
            self._state().refused.add(task)
        self.slowdown.pause(max(0.0, now + wait - max(self._cooldown_until, now)))
        self._cooldown_until = max(self._cooldown_until, now + wait)
        if self.limiter is not None:
            self.limiter.on_drop(now, now if ticket is None else ticket.t0)
        if limit_req is None and self.header_rpm is None:
            # No header says the limit: learn it from this 429 (see RateLearner).
            self.learner.on_limit(now, retry_after=wait, current=self.rpm, started_at=started_at)
