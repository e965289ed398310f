"""The requests-per-minute rate learned from 429s alone, for servers that state no limit in
their headers (:class:`RateLearner`). Pure bookkeeping under a clock passed in; the runner
(:mod:`ragjudge.llm.runner`) paces starts at the rate it learns."""

from __future__ import annotations

import math
from collections import deque

__all__ = ["RateLearner", "WINDOW"]

#: Seconds of the rate-limit window a limit per minute counts over.
WINDOW = 60.0


class RateLearner:
    """The requests-per-minute rate learned from 429s alone, for servers that send no
    ``x-ratelimit-*`` headers (AIMD: multiplicative decrease on a 429, fast then careful increase).

    Pure bookkeeping: every method takes the monotonic time ``now``, so it runs under a fake
    clock in tests. ``rpm`` is ``None`` until the first 429 (unthrottled).

    *Is it a limit at all?* A 429 without budget headers may be the account's limit or a
    rejection that has nothing to do with our rate (an overloaded upstream, a flaky proxy: a
    fixed share of requests refused at any pace). Cutting the rate for the latter only slows the
    run (measured: 30% rate-independent 429s paced a 12-pair run down to ~20 rpm, 38 s instead
    of ~3 s), and each cut fails in turn. Until a limit is known, :meth:`limit_evident` says
    "limit" only when the recent outcomes could hardly come from rejections at random: the
    chance of so many 429s among the last ``n`` known outcomes, were each rejected at
    ``NOISE`` = 30% independently, is below ``ALPHA`` for some ``n`` <= ``RECENT`` (10 429s in a
    row, or 22 of the last 32). A full window answers everything with 429 and crosses that
    within a burst; until then each 429 only delays its own request (:meth:`on_unexplained`
    keeps what the first of them measured, for the cut). Rate-independent 429s above
    ``NOISE`` read as a limit -- slower, never lost.

    *Rejections at random on top of a limit.* Once a limit is known, reading every 429 as the
    limit let such rejections sink the rate: each cut, a cut again (measured: 5% of requests
    refused at random on a 600 rpm limit kept 19-41% of it; 15%, 12-13%). What tells them apart
    is the rate's effect: the limit refuses nothing below it, rejections at random come at any
    pace. So the learner measures a *floor* -- the share of 429s among the starts the limit
    cannot have refused: paced at the rate a cut set, after that cut's Retry-After -- and a 429
    is the limit only when the outcomes since the last cut's Retry-After hold more 429s than
    the floor explains (binomial tail below ``KNOWN_ALPHA`` over up to ``KNOWN_RECENT``
    outcomes). Until ``FLOOR_MIN`` such outcomes are known, a 429 of one of those starts needs
    the evidence asked before any limit was known, any other is the limit. The floor is the
    lower of its older and newer half's shares, so a limit that drops mid-run (part of the
    quota taken by another client) is followed though the rate a cut set is over it. Measured
    on the model of the tests: 5% at random keeps 66-98% of the ceiling, 15% 32-74%; a pure
    limit costs a few more 429s per probe past it (each must stand out from the floor).

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
    NOISE = 0.3  # share of 429s at random that alone never reads as a limit
    ALPHA = 1e-5  # chance of the recent 429s at that share below which they read as a limit
    RECENT = 32  # known outcomes weighed
    # Once a limit is known (see "Rejections at random on top of a limit"):
    FLOOR_MIN = 30  # outcomes below the limit before their 429 share is the floor
    FLOOR_KEEP = 400  # outcomes below the limit remembered
    FLOOR_PRIOR = 0.1  # 429s added to the floor's count (no 429 yet is not "never")
    KNOWN_ALPHA = 1e-4  # as ALPHA, against the floor
    KNOWN_RECENT = 128  # known outcomes weighed against the floor

    def __init__(self) -> None:
        self.rpm: float | None = None
        self.cuts = 0  # episodes (one per burst of 429s)
        self.raises = 0
        # [start time, 1.0 accepted (or not known yet) | 0.0 rejected, 1.0 outcome known | 0.0,
        #  1.0 started below the limit (see _floor) | 0.0]
        self._starts: deque[list[float]] = deque()
        self._ok: deque[float] = deque()  # times of successful replies
        self._cut_at = -math.inf
        self._base: float | None = None  # the rate in force when the current episode began
        self._bad: float | None = None  # the rate that last failed (None: unknown / forgotten)
        self._resume_at = -math.inf  # start of the current probe interval
        self._edge_since: float | None = None
        self._release: deque[float] = deque()
        # What the server had let through at the first 429 not (yet) read as a limit, and when
        # it arrived (see on_unexplained).
        self._early: float | None = None
        self._early_at = -math.inf
        # Length of the server's window, as the first (unthrottled) 429 showed it: probing past
        # the known limit waits this long for the verdict (a 60 s window answers an overrun
        # only once its minute is full; probing every 5 s would overshoot by x1.1^12 first).
        self.window = self.PROBE_EVERY
        # Outcomes of the starts the limit cannot have refused: paced at the rate a cut set (no
        # raise since), after the cut's Retry-After (`_drained_at`). True: refused.
        self._floor: deque[bool] = deque(maxlen=self.FLOOR_KEEP)
        self._cut_rate: float | None = None
        self._drained_at = math.inf

    def _prune(self, now: float) -> None:
        while self._starts and now - self._starts[0][0] > WINDOW:
            self._starts.popleft()
        while self._ok and now - self._ok[0] > WINDOW:
            self._ok.popleft()

    # -- events ----------------------------------------------------------------------
    def on_start(self, now: float) -> list[float]:
        """Record an attempt's start; the returned record is passed to :meth:`on_rejected`."""
        below = self._cut_rate is not None and self.rpm is not None and self.rpm <= self._cut_rate \
            and now >= self._drained_at
        entry = [now, 1.0, 0.0, 1.0 if below else 0.0]
        self._starts.append(entry)
        self._prune(now)
        return entry

    def on_success(self, now: float, entry: list[float] | None = None) -> None:
        """A 2xx reply; ``entry``: its start record, if known."""
        self._ok.append(now)
        if entry is not None:
            self._known(entry, False)
        self._prune(now)

    def on_rejected(self, entry: list[float]) -> None:
        """Any 429: the server did not count that start."""
        entry[1] = 0.0
        self._known(entry, True)

    def _known(self, entry: list[float], rejected: bool) -> None:
        if not entry[2] and entry[3]:
            self._floor.append(rejected)
        entry[2] = 1.0

    def limit_evident(self, entry: list[float] | None = None) -> bool:
        """Whether a 429 without budget headers is the account's limit: the recent outcomes
        are too many 429s for rejections at random (see the class docstring). Otherwise the
        429 only makes its own request wait. ``entry``: the rejected start's record."""
        if self.rpm is None:
            return self._beyond(self.NOISE, self.ALPHA, half=True)
        # Only what the last cut does not explain: the starts after its Retry-After.
        since = self._drained_at
        floor = self.floor()
        if floor is None:
            # No floor yet: where the limit cannot be the cause, a 429 needs the evidence asked
            # before any limit was known; elsewhere it is the limit.
            below = entry is not None and bool(entry[3])
            return self._beyond(self.NOISE, self.ALPHA, half=True, since=since) if below else True
        return self._beyond(floor, self.KNOWN_ALPHA, half=False, recent=self.KNOWN_RECENT, since=since)

    def floor(self) -> float | None:
        """The share of 429s the server gives at random, measured where the limit cannot
        cause them (None: too few outcomes yet). The lower of the older and the newer half's
        shares: should the limit drop (another client takes part of the quota), the rate a cut
        set may itself be over it, and its 429s would otherwise lift the floor and hide it."""
        seen = list(self._floor)
        if len(seen) < self.FLOOR_MIN:
            return None
        parts = (seen[:len(seen) // 2], seen[len(seen) // 2:]) if len(seen) >= 2 * self.FLOOR_MIN else (seen,)
        return min((sum(p) + self.FLOOR_PRIOR) / (len(p) + 1.0) for p in parts)

    def _beyond(self, share: float, alpha: float, *, half: bool, recent: int = RECENT,
                since: float = -math.inf) -> bool:
        """Whether the last ``n`` known outcomes, for some ``n`` <= ``recent``, hold more 429s
        than a ``share`` of them at random explains (chance below ``alpha``; ``half``: and most
        of them). Past 32 outcomes only doubling lengths are weighed (the sum stays cheap)."""
        known = [e[1] == 0.0 for e in self._starts if e[2] and e[0] >= since][-recent:]
        rejected = 0
        for n, was in enumerate(reversed(known), 1):
            rejected += was
            if n > 32 and n & (n - 1):
                continue
            if (not half or rejected * 2 > n) and rejected > share * n and _tail(rejected, n, share) < alpha:
                return True
        return False

    def on_unexplained(self, now: float, *, retry_after: float, started_at: float | None = None) -> None:
        """A 429 not read as a limit (yet): remember what the server had let through at the
        first of them, measured as a cut then would have (the 429s of attempts started before
        it arrived refine it). Should the limit become evident, the first cut measures no less:
        by then its requests are waiting out their 429s and fewer starts count as accepted."""
        if self.rpm is not None:
            return
        self._note_early(now, self.capacity(now, retry_after, started_at)[0], started_at)

    def _note_early(self, now: float, est: float, started_at: float | None) -> None:
        """The first 429's measurement: set by the first, lowered by the 429s of attempts
        started before it arrived (the in-flight starts it counted as accepted were not)."""
        if self._early is None:
            self._early, self._early_at = est, now
        elif (started_at if started_at is not None else now) < self._early_at:
            self._early = min(self._early, est)

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
        if base is None and self._early is not None and now - self._early_at <= WINDOW:
            # Measure as a cut at the first 429 would have: the 429s of attempts started
            # before it arrived refine that measurement; later starts (sent while those 429s
            # only waited) would read the window low.
            self._note_early(now, est, started_at)
            est = max(est, self._early)
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
        self._cut_rate = target
        self._drained_at = max(self._drained_at if same else -math.inf, now + retry_after + self.RELEASE_MARGIN)
        # The rate that failed: the one in force, or -- unthrottled -- what the server took.
        if base is not None:
            self._bad = base
        else:
            self._bad = est if not same or self._bad is None else min(self._bad, est)
        self._resume_at = max(self._resume_at, now + retry_after)
        if base is None:
            self.window = min(max(self.PROBE_EVERY, span), WINDOW)
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


def _tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p); exact, and n <= RECENT keeps it tiny (the runner does
    not load numpy or scipy for it)."""
    return sum(math.comb(n, i) * p ** i * (1.0 - p) ** (n - i) for i in range(k, n + 1))
