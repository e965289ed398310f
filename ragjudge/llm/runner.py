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
* ``x-ratelimit-limit-requests`` / ``-tokens`` headers (OpenAI, Azure, many proxies) set the
  ceiling to 98% of the advertised limit from the first reply on.
* ``x-ratelimit-remaining-tokens`` (and ``-requests`` while no request limit is known), minus
  what we started since the reporting request was admitted, must cover a new attempt, else it
  waits for ``x-ratelimit-reset-*``; when that report goes stale one attempt probes and the
  rest wait for its fresh report. This keeps windows shorter than a minute from being overrun
  (measured: 91-95% of a 60k tpm / 10 s-window ceiling, 0 429s).
* Slow start: the first request of a run goes alone; the others wait for its reply, so the
  limit headers are known before the first burst.
* A 429 that reflects the account's limit (its ``x-ratelimit-remaining-*`` is exhausted, or it
  carries no such headers) pauses every new start for the server's ``Retry-After`` and, when
  no header told us the limit, sets the rate to 95% of the successes of the last minute (at
  most one cut per two seconds, so one burst of 429s is one decrease); 20 s without such a 429
  raises it by 5%. A 429 whose headers show budget left (an overloaded replica, a spurious
  reply) only makes that request wait and retry: it must not throttle the whole run.

Why these defaults: ``concurrency=16`` keeps ~50 requests/s possible at 300 ms latency, far
above common limits, so the rate limiter -- not the semaphore -- is what binds; no default
rpm, because local servers (vLLM, llama.cpp) have none and a guess would only slow them down.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import re
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from .client import retry_after_seconds

__all__ = ["Runner", "Reservation", "parse_duration"]

HEADROOM = 0.98
# (requests started, tokens started, this attempt's tokens) when the current task's HTTP attempt
# was admitted; lets observe() place a reply's remaining-budget headers on our own timeline.
_TICKET: contextvars.ContextVar[tuple[float, float, float] | None] = contextvars.ContextVar(
    "ragjudge_runner_ticket", default=None)
_WINDOW = 60.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str | None) -> float | None:
    """``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"`` or plain seconds -> seconds."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    total = 0.0
    pos = 0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        value, unit = float(m.group(1)), m.group(2)
        total += value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
        pos = m.end()
    return total if pos == len(text) and pos > 0 else None


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


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


class Runner:
    """Concurrency cap, rpm throttle and tpm budget, adapting to the server's signals."""

    def __init__(self, concurrency: int = 16, rpm: float | None = None, tpm: float | None = None) -> None:
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
        self.adaptive_rpm: float | None = None
        self._cooldown_until = 0.0
        self._last_cut = -math.inf
        self._last_429 = -math.inf
        self._last_raise = time.monotonic()
        self._ok_times: deque[float] = deque()
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
        self.in_flight = 0

    # -- limits ----------------------------------------------------------------------
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
        self._maybe_raise()
        rpm = self.rpm
        now = time.monotonic()
        if rpm is None:
            st.next_start = now
            return
        at = max(now, st.next_start)
        st.next_start = at + 60.0 / rpm
        if at > now:
            await asyncio.sleep(at - now)

    def _refund(self, st: _LoopState) -> None:
        """Give one pacing slot back (an attempt that did not start, or was not counted)."""
        rpm = self.rpm
        if rpm is not None:
            st.next_start = max(time.monotonic(), st.next_start - 60.0 / rpm)

    def _maybe_raise(self) -> None:
        # Additive-ish increase of a 429-learned rate after a quiet spell.
        if self.adaptive_rpm is None:
            return
        now = time.monotonic()
        if now - self._last_429 >= 20.0 and now - self._last_raise >= 20.0:
            self.adaptive_rpm *= 1.05
            self._last_raise = now

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
            while self._tpm_window and now - self._tpm_window[0][0] > _WINDOW:
                self._tpm_window.popleft()
            used = sum(e[1] for e in self._tpm_window)
            # A call larger than the whole budget may start once the window is empty.
            if limit is None or used + tokens <= limit or not self._tpm_window:
                entry = [now, float(tokens)]
                self._tpm_window.append(entry)
                res.entry = entry
                return res
            wait = _WINDOW - (now - self._tpm_window[0][0]) + 0.01
            await asyncio.sleep(min(max(wait, 0.01), 1.0))

    @asynccontextmanager
    async def attempt(self, tokens: int = 0) -> AsyncIterator[None]:
        """Admission of one HTTP attempt (``tokens``: its estimated size): wait out a cooldown,
        the server's remaining budget, then the rpm pacing."""
        st = self._state()
        if not st.first_reply.is_set() and self.header_rpm is None and self.adaptive_rpm is None:
            if st.probing:
                await st.first_reply.wait()
            else:
                # Slow start: the first request goes alone, so its reply's rate-limit headers
                # set the pace before a burst of `concurrency` requests can overrun the window.
                st.probing = True
                async with self._admit(st, tokens):
                    try:
                        yield
                    finally:
                        st.first_reply.set()
                return
        async with self._admit(st, tokens):
            yield

    @asynccontextmanager
    async def _admit(self, st: _LoopState, tokens: int) -> AsyncIterator[None]:
        while True:
            delay = self._cooldown_until - time.monotonic()
            if delay > 0:
                await asyncio.sleep(min(delay, 1.0))
                continue
            await self._pace(st)
            # Checked after pacing, with no await before the counters move: check-and-start is
            # atomic, so concurrent attempts cannot all spend the same reported budget.
            wait = self._budget_wait(tokens)
            if wait <= 0 and self._cooldown_until <= time.monotonic():
                break
            self._refund(st)  # not starting now: the slot goes back to the schedule
            # Re-check at least every second: a fresher reply may have brought better news.
            await asyncio.sleep(min(max(wait, 0.01), 1.0))
        self.started += 1
        self._started_tokens += tokens
        token = _TICKET.set((self.started, self._started_tokens, float(tokens)))
        try:
            yield
        finally:
            _TICKET.reset(token)

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
    def observe(self, headers: Mapping[str, str], status: int) -> None:
        """Learn from a reply's status and ``x-ratelimit-*`` headers."""
        now = time.monotonic()
        limit_req = _int_header(headers, "x-ratelimit-limit-requests")
        if limit_req and limit_req > 0:
            self.header_rpm = float(limit_req)
        limit_tok = _int_header(headers, "x-ratelimit-limit-tokens")
        if limit_tok and limit_tok > 0:
            self.header_tpm = float(limit_tok)
        ticket = _TICKET.get()
        for i, kind in enumerate(("requests", "tokens")):
            remaining = _int_header(headers, f"x-ratelimit-remaining-{kind}")
            reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}"))
            if remaining is None or reset is None or ticket is None:
                continue
            snapshot = ticket[i]
            info = self._budget.get(kind)
            # The freshest report wins; any real report beats a probe's placeholder.
            if info is None or info[3] or snapshot >= info[1]:
                self._budget[kind] = (float(remaining), snapshot, now + min(reset, 60.0), False)
        if 200 <= status < 300:
            self._ok_times.append(now)
            while self._ok_times and now - self._ok_times[0] > _WINDOW:
                self._ok_times.popleft()
            return
        if status != 429:
            return
        self.rate_limited += 1
        # Is this the account's limit (slow everyone down) or an isolated 429 (an overloaded
        # replica, a spurious reply: only this request waits its Retry-After, in the client)?
        rem_req = _int_header(headers, "x-ratelimit-remaining-requests")
        rem_tok = _int_header(headers, "x-ratelimit-remaining-tokens")
        if rem_req is not None or rem_tok is not None:
            need = ticket[2] if ticket is not None else 1.0
            limited = (rem_req is not None and rem_req <= 0) or (rem_tok is not None and rem_tok < need)
        else:
            # No budget headers: nothing tells a limit from a glitch; assume the limit (measured
            # against a header-less 600 rpm server: 6 429s per 1,500 requests this way, 36 when
            # waiting for a burst of three to be sure).
            limited = True
        if not limited:
            self.isolated_429 += 1
            # A rejected request does not count against the server's window: give its start
            # slot back, or every such 429 would cost a pacing interval on top of its retry.
            st = self._states.get(asyncio.get_running_loop()) if _in_loop() else None
            if st is not None:
                self._refund(st)
            return
        self._last_429 = now
        after = retry_after_seconds(headers)
        self._cooldown_until = max(self._cooldown_until, now + min(after if after is not None else 1.0, 60.0))
        if limit_req is None and self.header_rpm is None and now - self._last_cut >= 2.0:
            while self._ok_times and now - self._ok_times[0] > _WINDOW:
                self._ok_times.popleft()
            observed = float(len(self._ok_times))
            current = self.rpm
            # Floor of 10 rpm: a 429 on the very first requests says little about the ceiling.
            observed = max(observed, 10.0)
            base = observed if current is None else min(current, observed)
            self.adaptive_rpm = 0.95 * base
            self._last_cut = now
            self._last_raise = now
