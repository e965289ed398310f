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
  carries no such headers) pauses every new start for the server's ``Retry-After``. When no
  header told us the limit, :class:`RateLearner` sets the rate from the 429s alone (AIMD): cut
  to 90% of the capacity measured over the time actually observed (accepted starts over the
  observed span plus ``Retry-After``), at most halving per episode (a burst of 429s is one
  episode); then raise it every few seconds of quiet, binding pacing, halving the gap to the
  rate that last failed, and probe past that rate only after holding just below it for a while.
  A 429 whose headers show budget left (an overloaded replica, a spurious reply) only makes
  that request wait and retry: it must not throttle the whole run.

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
from .defaults import DEFAULT_CONCURRENCY
from .providers.base import RateInfo, parse_duration

__all__ = ["EndpointDown", "Runner", "RateLearner", "CircuitBreaker", "Slowdown", "ConcurrencyLimit", "LoopLag", "Attempt", "Reservation",
           "parse_duration"]

log = logging.getLogger("ragjudge.llm")


class EndpointDown(LLMError):
    """The endpoint is in an outage (its circuit breaker is open) and the session has others:
    nothing was sent, so the request may go to another endpoint without paying twice."""

HEADROOM = 0.98
# The current task's HTTP attempt (see Attempt): lets observe() place a reply's remaining-budget
# headers on our own timeline, tell which start a 429 rejected, and record the reply's status.
_TICKET: contextvars.ContextVar["Attempt | None"] = contextvars.ContextVar("ragjudge_runner_ticket", default=None)
_WINDOW = 60.0


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


class RateLearner:
    """The requests-per-minute rate learned from 429s alone, for servers that send no
    ``x-ratelimit-*`` headers (AIMD: multiplicative decrease on a 429, fast then careful increase).

    Pure bookkeeping: every method takes the monotonic time ``now``, so it runs under a fake
    clock in tests. ``rpm`` is ``None`` until the first 429 (unthrottled).

    *Decrease.* A 429 means the server's window is full. What it let through tells its capacity
    ``est``: the starts it accepted since the oldest start of the last minute, over that span
    **plus the Retry-After** (the window takes nothing more before then). Measuring over the time
    actually observed matters: a run a few seconds old has far fewer successes than a minute's
    worth, and dividing by a full minute (the old rule) read a 600 rpm server as ~10 rpm. Adding
    the Retry-After makes one formula fit every window length: 600 rpm per 1 s window, a probe
    then a burst of 16 -> 10 accepted in 0.3 s, Retry-After 0.7 s -> 600 rpm; per 60 s window ->
    600 accepted in 12 s, Retry-After 48 s -> 600 rpm. The span ends when the rejected attempt
    *started* (about when the server judged it), not when its reply arrived. Then:

    * unthrottled (the first burst filled the window): ``est`` is the capacity; rate = 90% of it;
    * paced at R and rejected: R is about an upper bound of the capacity and ``est`` a lower one:
      rate = min(90% of R, est) -- AIMD, and straight down to what got through when a probe
      overshot far or another client shares the quota -- but never below half of R in one
      episode (an ``est`` measured while demand was low must not collapse the rate).

    All 429s of attempts started before the cut are one episode: they refine its measurement
    (in-flight starts count as accepted until their 429 arrives) instead of compounding cuts.

    *Burst residue.* The first cut follows an unthrottled burst whose accepted starts stay in the
    server's window after the Retry-After; pacing at the new rate from then on would overrun it
    (per 1 s window: 9 of the burst's starts leave 0.3 s after the first slot frees). So after
    that cut the k-th new start waits until the k-th accepted start has left the window, whose
    length the 429 told us (observed span + Retry-After, +0.1 s for connection setup). That
    length also sets ``window``, the probe interval past the known limit (below).

    *Increase.* After each quiet probe interval (``PROBE_EVERY`` = 5 s, or ``PROBE_STARTS``
    starts' worth at low rates) in which the pacer was binding (demand used >= 80% of the rate:
    raising a rate nobody uses learns nothing and allows a later burst), the rate halves its gap
    to the rate that last failed (x1.25 at most per step): 90% -> 95% -> 97.5% -> 98.75% in 15 s.
    Within 2% of it, it holds ``HOLD`` s (or one server window), then forgets it and probes past
    it by x1.1 per server ``window`` (>= 5 s; 60 s for a minute window, which only answers an
    overrun once its minute is full) until a 429 says where the limit is now -- it may have been
    raised, or the first measurement was low. Near the ceiling that costs one small 429 episode
    per probe cycle; each 429 is retried by the client, nothing is lost.
    """

    BETA = 0.9
    MAX_CUT = 0.5
    PROBE_EVERY = 5.0
    PROBE_STARTS = 5
    FAST = 1.25
    BEYOND = 1.1
    EDGE = 0.98
    HOLD = 30.0
    BINDING = 0.8
    MIN_SPAN = 1.0  # seconds: no server enforces a limit on a window shorter than this
    EPISODE = 2.0  # without start times: 429s this close to a cut belong to its episode
    RELEASE_MARGIN = 0.1  # seconds: see on_limit

    def __init__(self) -> None:
        self.rpm: float | None = None
        self.cuts = 0  # episodes (one per burst of 429s)
        self.raises = 0
        self._starts: deque[list[float]] = deque()  # [start time, 1.0 accepted | 0.0 rejected]
        self._ok: deque[float] = deque()  # times of successful replies
        self._cut_at = -math.inf
        self._base: float | None = None  # the rate in force when the current episode began
        self._bad: float | None = None  # the rate that last failed (None: unknown / forgotten)
        self._resume_at = -math.inf  # start of the current probe interval
        self._edge_since: float | None = None
        self._release: deque[float] = deque()
        # Length of the server's window, as the first (unthrottled) 429 showed it: probing past
        # the known limit waits this long for the verdict (a 60 s window answers an overrun
        # only once its minute is full; probing every 5 s would overshoot by x1.1^12 first).
        self.window = self.PROBE_EVERY

    def _prune(self, now: float) -> None:
        while self._starts and now - self._starts[0][0] > _WINDOW:
            self._starts.popleft()
        while self._ok and now - self._ok[0] > _WINDOW:
            self._ok.popleft()

    # -- events ----------------------------------------------------------------------
    def on_start(self, now: float) -> list[float]:
        """Record an attempt's start; the returned record is passed to :meth:`on_rejected`."""
        entry = [now, 1.0]
        self._starts.append(entry)
        self._prune(now)
        return entry

    def on_success(self, now: float) -> None:
        self._ok.append(now)
        self._prune(now)

    @staticmethod
    def on_rejected(entry: list[float]) -> None:
        """Any 429: the server did not count that start."""
        entry[1] = 0.0

    def capacity(self, now: float, retry_after: float, at: float | None = None) -> tuple[float, float, float]:
        """(rpm the server let through, observed span + Retry-After, start of the span).

        ``at``: when the rejected attempt started, i.e. about when the server counted its window
        and computed Retry-After (``now`` would add the reply's trip back and our own queueing,
        ~7% of a 1 s window on a loaded machine); defaults to ``now``."""
        self._prune(now)
        firsts = [q for q in (self._starts[0][0] if self._starts else None,
                              self._ok[0] if self._ok else None) if q is not None]
        since = min(firsts) if firsts else now
        accepted = sum(e[1] for e in self._starts)
        # Successes are a lower bound of what was accepted (replies observed without starts).
        accepted = max(accepted, float(len(self._ok)), 1.0)
        end = now if at is None else min(max(at, since), now)
        span = max((end - since) + max(retry_after, 0.0), self.MIN_SPAN)
        return accepted / span * 60.0, span, since

    def on_limit(self, now: float, *, retry_after: float, current: float | None,
                 started_at: float | None = None) -> None:
        """A 429 that reflects the account's limit. ``current``: the rate in force (None:
        unthrottled); ``started_at``: when the rejected attempt started, if known."""
        if started_at is not None:
            same = started_at < self._cut_at
        else:
            same = now - self._cut_at < self.EPISODE
        if not same:
            self.cuts += 1
            self._cut_at = now
            self._base = current
            self._edge_since = None
        est, span, _ = self.capacity(now, retry_after, started_at)
        base = self._base
        if base is None:
            # Unthrottled: the burst filled the window, so `est` is the capacity itself.
            target = self.BETA * est
        else:
            # Paced at `base` and rejected: `base` is about an upper bound of the capacity and
            # `est`, what got through, about a lower one. Cut below the upper bound (AIMD), and
            # to `est` if that is lower still (a probe that overshot far, a quota shared with
            # another client) -- but never by more than half in one episode.
            target = max(min(self.BETA * base, est), self.MAX_CUT * base)
        if same and self.rpm is not None:
            target = min(self.rpm, target)
        self.rpm = target
        # The rate that failed: the one in force, or -- unthrottled -- what the server took.
        if base is not None:
            self._bad = base
        else:
            self._bad = est if not same or self._bad is None else min(self._bad, est)
        self._resume_at = max(self._resume_at, now + retry_after)
        if base is None:
            self.window = min(max(self.PROBE_EVERY, span), _WINDOW)
            # Burst residue: the k-th accepted start leaves the window at its time + span. The
            # margin covers what our start times miss: a burst opens new connections, so the
            # server counted its starts tens of ms after we recorded them (measured: a 1%
            # margin still let a loaded machine overrun the 1 s window right after the cut).
            free = span + self.RELEASE_MARGIN
            self._release = deque(e[0] + free for e in self._starts if e[1] > 0.0 and e[0] + free > now)
        else:
            self._release.clear()

    def next_release(self, now: float) -> float:
        """Earliest time the next start may go (burst residue); each start takes one slot."""
        return max(now, self._release.popleft()) if self._release else now

    def maybe_raise(self, now: float) -> None:
        """Raise the rate after a quiet, binding probe interval (see the class docstring)."""
        if self.rpm is None or now < self._resume_at:
            return
        elapsed = now - self._resume_at
        interval = max(self.PROBE_EVERY, self.PROBE_STARTS * 60.0 / self.rpm)
        bad = self._bad
        beyond = bad is None or self.rpm >= self.EDGE * bad
        if beyond:
            # Past the rate known to fail: one step per server window (see `window`).
            interval = max(interval, self.window)
        if elapsed < interval:
            return
        started = sum(1 for e in self._starts if e[0] >= self._resume_at)
        self._resume_at = now
        if started < self.BINDING * self.rpm * elapsed / 60.0:
            return  # demand, not the rate, is what binds: nothing learned
        if not beyond:
            assert bad is not None
            self.rpm = min(self.rpm * self.FAST, (self.rpm + bad) / 2.0)
        elif bad is not None:
            if self._edge_since is None:
                self._edge_since = now
            if now - self._edge_since < max(self.HOLD, self.window):
                return
            self._bad = None
            self._edge_since = None
            self.rpm *= self.BEYOND
        else:
            self.rpm *= self.BEYOND
        self.raises += 1
        if self._bad is not None and self.rpm >= self.EDGE * self._bad and self._edge_since is None:
            self._edge_since = now


class CircuitBreaker:
    """Declares the server down when its attempts keep failing, probes it, and resumes.

    Pure bookkeeping with the clock passed in (like :class:`RateLearner`), so it runs under a
    fake clock in tests. The runner consults :meth:`admit` before each HTTP attempt and reports
    every attempt's end to :meth:`on_reply` / :meth:`on_failure`.

    *Opening.* Each attempt that fails the way a sick server fails counts towards one streak:
    it cannot reach the server (connection refused, host not found, connect timeout,
    connection dropped), gets a 5xx, times out, or its 2xx reply stalls or breaks after the
    headers. Any other reply (a 2xx, a 4xx, a 429: the server is there) resets it.
    ``OPEN_AFTER`` unreachable attempts in a row, or ``OPEN_AFTER_FAULTS`` faults of any of
    these kinds, open the breaker: new attempts wait (or, with other endpoints, go there)
    instead of burning each pair's retries. Before the server has ever answered, the first
    unreachable attempt opens it. Five keeps random faults from opening it: at 10% 5xx, a
    streak of five comes once in ~100,000 attempts.

    *Probing.* While open, one attempt at a time probes after a delay that doubles from
    ``FIRST_PROBE`` to ``MAX_PROBE`` seconds; a reply that is not a fault closes the breaker
    and everyone resumes. A probe's failure is the outage's, not its pair's: the client does
    not count it against the pair's attempt budget.

    *Giving up.* A server that never answered, or never answered one request well, is
    declared down for good after ``startup`` seconds of outage (a wrong URL, a server that is
    not running or fails every call is a one-line error within seconds, not minutes of
    retries); one that served before, after ``patience`` seconds of outage.
    """

    OPEN_AFTER = 3
    OPEN_AFTER_FAULTS = 5
    OPEN_AFTER_5XX = OPEN_AFTER_FAULTS  # the older name
    FIRST_PROBE = 0.5
    MAX_PROBE = 30.0

    def __init__(self, *, patience: float = 600.0, startup: float = 5.0) -> None:
        self.patience = patience
        self.startup = startup
        self.reached = False  # any HTTP reply seen from the server
        self.served = False  # any reply that was not a fault (the server can do the work)
        self.opened_at: float | None = None  # None: closed
        self.outages = 0
        self.reason = ""
        self.where = "the server"
        self.state = "unreachable"
        self._streak = 0
        self._faults = 0
        self._delay = self.FIRST_PROBE
        self._next_probe = 0.0
        self._probing = False

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def probe_due(self, now: float) -> bool:
        """Open, and a probe may go now (nobody is probing)."""
        return self.opened_at is not None and not self._probing and now >= self._next_probe

    def admit(self, now: float) -> tuple[float, bool]:
        """``(seconds to wait, probe)``: ``(0, False)`` while closed; while open, one caller at
        a time gets ``(0, True)`` once the probe delay has passed, the others a wait."""
        if self.opened_at is None:
            return 0.0, False
        if not self._probing and now >= self._next_probe:
            self._probing = True
            return 0.0, True
        # Re-check at least every second: another caller's probe may have closed it.
        return min(max(self._next_probe - now, 0.05), 1.0), False

    def dead(self, now: float) -> str | None:
        """The one-line reason to stop the run, once the outage outlasted its patience."""
        if self.opened_at is None:
            return None
        down = now - self.opened_at
        if not self.reached and down >= self.startup:
            return (f"server {self.state} at {self.where}: {self.reason} "
                    f"(no reply in {down:.0f} s); is the server running and the URL right?")
        if self.reached and not self.served and down >= self.startup:
            return (f"server {self.state} at {self.where}: {self.reason} on every attempt "
                    f"(none served in {down:.0f} s); stopping")
        if self.reached and down >= self.patience:
            return (f"server {self.state} at {self.where} for {down:.0f} s: {self.reason}; stopping "
                    "(finished answers are cached: rerun the same command to resume)")
        return None

    def on_reply(self, now: float, status: int, *, probe: bool = False, where: str = "",
                 started_at: float | None = None) -> str | None:
        """An HTTP reply arrived to an attempt started at ``started_at``; returns a message when
        it ends an outage. A late reply to an attempt sent before the outage began (the server
        was still finishing it) says nothing about now: only the probe or a later attempt
        closes the breaker."""
        self.reached = True
        if status >= 500:
            return self._fail(now, "5xx", f"HTTP {status}", where, probe=probe)
        if self.opened_at is not None and not probe and started_at is not None \
                and started_at < self.opened_at:
            return None
        self.served = True
        self._streak = self._faults = 0
        if self.opened_at is None:
            return None
        down = now - self.opened_at
        self.opened_at = None
        self._probing = False
        self._delay = self.FIRST_PROBE
        return f"server at {self.where} answers again after {down:.0f} s; resuming"

    def on_failure(self, now: float, reason: str, where: str, *, probe: bool,
                   kind: str = "unreachable") -> str | None:
        """An attempt failed without a usable reply: ``kind`` ``"unreachable"`` (no reply),
        ``"stall"`` (a timeout, or a reply that stalled or broke after its headers); returns
        a message when the breaker opens or a probe fails."""
        return self._fail(now, kind, reason, where, probe=probe)

    def on_probe_done(self) -> None:
        """A probe ended without a verdict (cancelled, or a failure of another kind)."""
        self._probing = False

    def _fail(self, now: float, kind: str, reason: str, where: str | None, *, probe: bool) -> str | None:
        if where and where != "the server":
            self.where = where
        self.reason = reason
        self.state = {"5xx": "unavailable", "stall": "stalling"}.get(kind, "unreachable")
        if kind == "unreachable":
            self._streak += 1
        self._faults += 1
        if self.opened_at is None:
            threshold = self.OPEN_AFTER if self.reached else 1
            if self._streak < threshold and self._faults < self.OPEN_AFTER_FAULTS:
                return None
            self.opened_at = now
            self.outages += 1
            self._delay = self.FIRST_PROBE
            self._next_probe = now + self._delay
            self._probing = False
            return f"server {self.state} at {self.where}: {reason}; retrying in {self._delay:g} s"
        if not probe:
            return None
        self._probing = False
        self._delay = min(self._delay * 2.0, self.MAX_PROBE)
        self._next_probe = now + self._delay
        return (f"server still {self.state} at {self.where} after {now - self.opened_at:.0f} s: "
                f"{reason}; retrying in {self._delay:g} s")


class Slowdown:
    """What slowed the run down: one stderr line when faults or limits have held an endpoint
    back for ``AFTER`` seconds (then at most one per ``EVERY`` s while it lasts), saying by
    what and how much: 429s, 5xx, stalls (timeouts, replies stalled after the headers),
    unreachable attempts, and the seconds every start was held by a 429's Retry-After.

    Pure bookkeeping with the clock passed in. An episode starts at the first fault after
    ``QUIET`` s without any, and ends with such a quiet spell."""

    AFTER = 15.0
    EVERY = 60.0
    QUIET = 10.0
    KINDS = ("429", "5xx", "stall", "unreachable")

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(self.KINDS, 0)
        self.held = 0.0  # seconds every start was paused by a 429's Retry-After, this episode
        self.attempts = 0  # attempts that ended this episode
        self._since: float | None = None  # start of the current episode
        self._last = -math.inf  # time of the last fault
        self._said = -math.inf

    def note(self, now: float, kind: str | None) -> None:
        """One attempt ended: ``kind`` its fault (one of :data:`KINDS`), ``None`` if fine."""
        if self._since is not None and now - self._last > self.QUIET:
            self._since = None  # the episode ended with a quiet spell
        if kind is None:
            if self._since is not None:
                self.attempts += 1
            return
        if self._since is None:
            self._since = now
            self.counts = dict.fromkeys(self.KINDS, 0)
            self.held = 0.0
            self.attempts = 0
        self.attempts += 1
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._last = now

    def pause(self, seconds: float) -> None:
        """Every start is held ``seconds`` (a 429 of the account's limit)."""
        if self._since is not None:
            self.held += seconds

    def line(self, now: float, where: str) -> str | None:
        """The line to say now, if any."""
        if self._since is None or now - self._since < self.AFTER or now - self._said < self.EVERY:
            return None
        if now - self._last > self.QUIET:
            return None
        self._said = now
        names = {"429": "HTTP 429", "5xx": "5xx", "stall": "stalls/timeouts", "unreachable": "unreachable"}
        parts = [f"{n} {names[k]}" for k, n in self.counts.items() if n]
        held = f"; starts held {self.held:.0f} s by Retry-After" if self.held >= 1.0 else ""
        return (f"slowed down by {where} for {now - self._since:.0f} s: {', '.join(parts)} of "
                f"{self.attempts} attempts{held}")


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
                 adaptive: bool = True, patience: float = 600.0, startup: float = 5.0) -> None:
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
            while self._tpm_window and now - self._tpm_window[0][0] > _WINDOW:
                self._tpm_window.popleft()
            # A call larger than the whole budget may start once the window is empty.
            if limit is None or not self._tpm_window or sum(e[1] for e in self._tpm_window) + tokens <= limit:
                entry = [now, float(tokens)]
                self._tpm_window.append(entry)
                res.entry = entry
                return res
            wait = _WINDOW - (now - self._tpm_window[0][0]) + 0.01
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
        if not st.first_reply.is_set() and self.header_rpm is None and self.adaptive_rpm is None:
            if st.probing:
                await st.first_reply.wait()
            else:
                # Slow start: the first request goes alone, so its reply's rate-limit headers
                # set the pace before a burst of `concurrency` requests can overrun the window.
                st.probing = True
                try:
                    async with self._admit(st, tokens, wait, may_probe) as ticket:
                        yield ticket
                finally:
                    st.first_reply.set()
                return
        async with self._admit(st, tokens, wait, may_probe) as ticket:
            yield ticket

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
                     may_probe: bool = True) -> AsyncIterator[Attempt]:
        while True:
            probe = await self._await_breaker(wait, may_probe)
            await self._acquire_active(st, probe)
            if probe or not self.breaker.open:
                break
            self._release_active(st)  # the breaker opened while we waited: back to its gate
        try:
            while True:
                delay = self._cooldown_until - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(min(delay, 1.0))
                    continue
                await self._pace(st)
                # Checked after pacing, with no await before the counters move: check-and-start
                # is atomic, so concurrent attempts cannot all spend the same reported budget.
                wait = self._budget_wait(tokens)
                if wait <= 0 and self._cooldown_until <= time.monotonic():
                    break
                self._refund(st)  # not starting now: the slot goes back to the schedule
                if wait >= LONG_WAIT:
                    self._say_pause(wait)
                # Re-check at least every second: a fresher reply may have brought better news.
                await asyncio.sleep(min(max(wait, 0.01), 1.0))
        except BaseException:
            self._release_active(st)
            if probe:
                self.breaker.on_probe_done()
            raise
        self.started += 1
        self._started_tokens += tokens
        now = time.monotonic()
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
            self.learner.on_success(now)
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
        if rem_req is not None or rem_tok is not None:
            need = ticket.tokens if ticket is not None else 1.0
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
        after = rate.retry_after
        if after is not None and after > self.breaker.patience:
            # The client ends this request at once (a wait beyond the patience is refused):
            # pausing every start for it, or learning a rate from it, would stall the pairs
            # the server still serves (a spurious "come back in an hour" froze whole runs).
            self.refused_waits += 1
            return
        wait = min(after if after is not None else 1.0, 60.0)
        self.slowdown.pause(max(0.0, now + wait - max(self._cooldown_until, now)))
        self._cooldown_until = max(self._cooldown_until, now + wait)
        if self.limiter is not None:
            self.limiter.on_drop(now, now if ticket is None else ticket.t0)
        if limit_req is None and self.header_rpm is None:
            # No header says the limit: learn it from this 429 (see RateLearner).
            self.learner.on_limit(now, retry_after=wait, current=self.rpm,
                                  started_at=None if ticket is None else ticket.entry[0])
