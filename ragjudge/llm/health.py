"""An endpoint's health: the circuit breaker that declares its server down, probes it and
resumes (:class:`CircuitBreaker`, the one health signal), the error that moves work off an
endpoint that is down (:class:`EndpointDown`), and the line that says what slowed it down
(:class:`Slowdown`). Pure bookkeeping with the clock passed in; the runner
(:mod:`ragjudge.llm.runner`) feeds them every attempt's end."""

from __future__ import annotations

import math

from ..errors import LLMError
from .defaults import ENDPOINT_OPTIONS

__all__ = ["CircuitBreaker", "EndpointDown", "Slowdown"]


class EndpointDown(LLMError):
    """The endpoint is in an outage (its circuit breaker is open) and the session has others:
    nothing was sent, so the request may go to another endpoint without paying twice."""


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

    def __init__(self, *, patience: float = ENDPOINT_OPTIONS["patience"].default, startup: float = 5.0) -> None:
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
