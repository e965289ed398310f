"""The one retry loop, provider-neutral: every LLM request of the session goes through here.

:class:`LLMClient` opens the endpoint's provider (:mod:`ragjudge.llm.providers`) and sends each
attempt through it; what a failed attempt means is the provider's call
(:meth:`~ragjudge.llm.providers.base.Provider.classify` -> a ``Verdict``), what to do about it
is decided here, once, for every provider.

Retry policy
    A verdict says ``retry`` (transient server errors, timeouts, connection errors, 429s) or
    not (then its ``final`` exception is raised). A 2xx reply that is not a usable completion,
    and a reply still arriving at the attempt's deadline, may be billed, so they are not
    retried here: they raise :class:`RejectedReply` with the usage they state (none: the
    session counts the worst case), and the session sends a fresh attempt only once the budget
    admits it. Waits honour the server's ``Retry-After`` (as the provider reads it) plus a
    little jitter; otherwise "full jitter" exponential backoff (uniform in ``[0, base * 2**n]``,
    capped). The timeout bounds each HTTP attempt as a whole (connect, headers and the entire
    body: a server trickling its body cannot stretch it) and starts when the runner lets the
    attempt go: time queued in our own runner never counts. Every attempt passes the runner's
    gate, so retries respect the rate limits and the circuit breaker too.
Two budgets
    A pair has ``max_attempts`` attempts for failures of its own (5xx, timeouts; the session
    gives it as many billed-but-unusable replies).
    A failure the verdict calls ``free`` (a 429: the server asking to wait; an unreachable
    server) and a failed outage probe are not the pair's fault: they do not use that budget,
    and are bounded by time instead (``patience`` seconds from the pair's first failed
    attempt -- the queue it met before is the run's pacing, not trouble of its own -- its
    waits at the runner's gate since, for the endpoint's shared pacing, excused up to half;
    the runner's circuit breaker stops a run whose server stays unreachable). So an outage or a
    shared rate limit delays work and loses none. A ``Retry-After`` beyond the patience left
    ends that request at once, with its reason.
Fail fast
    A verdict's ``final`` :class:`ragjudge.errors.LLMError` (a wrong key, model name or server)
    stops the run, not 10,000 judgments one by one; :class:`UnsupportedFeature` lets the
    session fall back; :class:`CallFailed` fails the item.
Secrets
    The API key is held only by the provider's SDK client; every message that leaves this
    module is passed through :func:`redact`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from .endpoint import Endpoint
from .provenance import FailureKind
from .providers import open_provider
from .providers.base import (
    AttemptFailed,
    BadBody,
    BodyLost,
    CallFailed,
    Completion,
    EmbeddingReply,
    Failure,
    RateInfo,
    RejectedReply,
    Sent,
    UnsupportedFeature,
    failure_of,
    retry_after_seconds,
)
from .redaction import redact, redact_url

__all__ = [
    "ClientConfig",
    "LLMClient",
    "Completion",
    "EmbeddingReply",
    "CallFailed",
    "RejectedReply",
    "UnsupportedFeature",
    "AttemptDeadline",
    "within_deadline",
    "Failure",
    "classify_failure",
    "redact",
    "redact_url",
    "retry_after_seconds",
]

log = logging.getLogger("ragjudge.llm")

#: The older name of :class:`~ragjudge.llm.endpoint.Endpoint` (where and how to call).
ClientConfig = Endpoint
#: The share of ``timeout`` each read may wait (connect, headers, a body chunk); the attempt
#: as a whole has the full ``timeout``.
READ_SHARE = 0.8
#: A deadline's timer running this much later than due (seconds) means the loop itself stalled.
LATE = 0.1
#: A retry wait this long (seconds) or longer is said on stderr.
LONG_WAIT = 10.0


class AttemptDeadline(Exception):
    """An HTTP attempt that did not deliver its whole reply (connect, headers and body) within
    its deadline: a server that trickles or stalls its body. Retried like a timeout."""

    def __init__(self, seconds: float, url: str) -> None:
        super().__init__(f"no complete reply within {seconds:g} s")
        self.seconds = seconds
        self.url = url


async def within_deadline(seconds: float, awaitable: Any, url: str) -> Any:
    """``await awaitable``, cancelled after ``seconds`` in all (:class:`AttemptDeadline`).

    httpx's timeouts bound each read, so a body sent one byte at a time never times out; this
    bounds the attempt as a whole. Time in which this process's loop could not run is given
    back, up to ``seconds`` more: when the deadline's timer runs more than ``LATE`` s after it
    was due (another thread held the GIL, a blocking call on the loop), a reply that arrived
    meanwhile is waiting in the socket to be read, and cutting it off would pay for it again."""
    if sys.version_info < (3, 11):  # no asyncio.timeout: wait_for, without the give-back
        try:
            return await asyncio.wait_for(awaitable, timeout=seconds)
        except asyncio.TimeoutError:
            raise AttemptDeadline(seconds, url) from None
    try:
        async with asyncio.timeout(None) as scope:  # no extra task on the hot path
            timer = _Deadline(scope, seconds)
            try:
                return await awaitable
            finally:
                timer.cancel()
    except TimeoutError:
        raise AttemptDeadline(seconds, url) from None


class _Deadline:
    """The timer of :func:`within_deadline`: it expires ``scope`` when due, unless it runs more
    than ``LATE`` s late; then the lateness is given back (up to ``seconds`` in all)."""

    __slots__ = ("loop", "scope", "left", "timer")

    def __init__(self, scope: asyncio.Timeout, seconds: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.scope = scope
        self.left = seconds
        self.timer = self._at(self.loop.time() + seconds)

    def _at(self, when: float) -> asyncio.TimerHandle:
        return self.loop.call_at(when, self._due, when)

    def _due(self, when: float) -> None:
        now = self.loop.time()
        late = now - when
        if late > LATE and self.left > 0:
            grant = min(late, self.left)
            self.left -= grant
            self.timer = self._at(now + grant)
        else:
            self.scope.reschedule(now)

    def cancel(self) -> None:
        self.timer.cancel()  # also drops the handle's hold on this object


def classify_failure(exc: BaseException) -> Failure:
    """Tell an unreachable server from a slow one from an HTTP error, for the runner's
    circuit breaker and adaptive concurrency (no SDK or httpx types leak out)."""
    if isinstance(exc, AttemptFailed):
        return exc.verdict.failure
    if isinstance(exc, AttemptDeadline):
        return Failure("timeout", str(exc), exc.url)
    if isinstance(exc, BodyLost):
        return Failure("broken", str(exc), "the server")  # headers came: the server is there
    return failure_of(exc)


def _verdict_of(exc: BaseException | None) -> Any:
    return exc.verdict if isinstance(exc, AttemptFailed) else None


def _retryable(exc: BaseException) -> bool:
    verdict = _verdict_of(exc)
    return verdict is not None and verdict.retry


Gate = Callable[[], AbstractAsyncContextManager[Any]]
#: Hears whether an attempt is with the server (see :meth:`LLMClient.complete`).
InFlight = Callable[[bool], None]

#: Learns from a reply's rate-limit state and status (the runner's ``observe``).
Observer = Callable[[RateInfo, int], None]


def _duration(seconds: float) -> str:
    """Seconds as a person reads them in a message: whole seconds from 10 s, else three digits
    (a wait of 1 ms is not "0 s")."""
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.3g} s"


@dataclass
class _Call:
    """One request's retry bookkeeping: attempts made, those counted against its budget,
    and the runner's ticket of the current attempt (whose ``outage`` flag, set by the runner's
    circuit breaker, says its failure was the outage's, not the pair's)."""

    attempts: int = 0
    counted: int = 0
    ticket: Any = None
    #: (seconds the server asked to wait, patience left, HTTP status) when a Retry-After outran
    #: the patience
    refused_wait: tuple[float, float, int | None] | None = None
    #: When its first attempt failed: the patience counts from then (the queue it met before
    #: is the run's pacing, not an outage or a run of 429s of its own).
    troubled_at: float | None = None
    #: Seconds spent waiting at the runner's gate since then (the endpoint's shared pacing),
    #: excused from the patience up to half that time (see the module docstring).
    queued: float = 0.0


@asynccontextmanager
async def _open_gate() -> AsyncIterator[None]:
    yield


class LLMClient:
    """Sends chat and embedding requests through the endpoint's provider with the retry
    policy above."""

    def __init__(self, config: Endpoint, *, http_client: Any = None,
                 on_retry: Callable[[], None] | None = None) -> None:
        self.config = config
        self._on_retry = on_retry
        self.provider = open_provider(config, http_client)
        self.retries = 0
        self._said_wait_at = -math.inf

    @property
    def endpoint(self) -> str:
        """The base URL, with any credentials redacted."""
        return self.provider.endpoint

    async def close(self) -> None:
        await self.provider.close()

    def _say_wait(self, wait: float, exc: BaseException | None) -> None:
        """One stderr line for a wait of :data:`LONG_WAIT` s or more (at most one per
        :data:`LONG_WAIT` s, however many requests wait at once): a long pause is never silent."""
        now = time.monotonic()
        if now - self._said_wait_at < LONG_WAIT:
            return
        self._said_wait_at = now
        verdict = _verdict_of(exc)
        if verdict is not None and verdict.status == 429:
            why = "Retry-After" if verdict.retry_after is not None else "HTTP 429"
            log.warning("rate limited by %s: waiting %.0f s (%s)", self.endpoint, wait, why)
        else:
            why = verdict.reason if verdict is not None else "retry"
            log.warning("%s failed (%s): waiting %.0f s before retrying", self.endpoint, why, wait)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        verdict = _verdict_of(exc)
        if verdict is not None and verdict.failure.kind == "unreachable":
            # The runner's circuit breaker paces an outage (one probe at a time, backing off):
            # a long backoff here would only delay the resume once the server is back.
            return random.uniform(0, min(1.0, self.config.max_wait))
        after = verdict.retry_after if verdict is not None else None
        if after is not None:
            # Honour the server; the small jitter keeps a crowd of waiters from returning at once.
            return min(after, self.config.max_wait) + random.uniform(0, 0.05 + 0.1 * after)
        cap = min(self.config.max_wait, self.config.backoff_base * 2 ** (state.attempt_number - 1))
        return random.uniform(0, cap)

    async def complete(
        self,
        body: Mapping[str, Any],
        *,
        gate: Gate | None = None,
        observe: Observer | None = None,
        in_flight: InFlight | None = None,
    ) -> Completion:
        """One chat completion, retried per the policy. ``body`` is the neutral request
        (OpenAI-shaped: ``model``, ``messages``, ``max_tokens``, ``response_format``...).
        ``in_flight`` hears ``True`` when an attempt leaves for the server and ``False`` when
        it has ended: a caller cancelled in between knows a request may have been billed."""
        provider = self.provider

        async def once(call: _Call) -> Completion:
            sent = await self._attempt(lambda t: provider.send_chat(body, read_timeout=t),
                                       gate or _open_gate, observe, call, in_flight)
            return provider.chat_reply(sent, attempts=call.attempts)

        return await self._retrying(once)

    async def embed(
        self,
        body: Mapping[str, Any],
        *,
        gate: Gate | None = None,
        observe: Observer | None = None,
        in_flight: InFlight | None = None,
    ) -> EmbeddingReply:
        """One embeddings request, retried per the same policy. ``body`` is the request
        JSON (``model``, ``input`` list, ``encoding_format``); ``in_flight`` as for
        :meth:`complete`."""
        provider = self.provider
        expected = len(body.get("input") or ())

        async def once(call: _Call) -> EmbeddingReply:
            sent = await self._attempt(lambda t: provider.send_embed(body, read_timeout=t),
                                       gate or _open_gate, observe, call, in_flight)
            return provider.embed_reply(sent, expected=expected, attempts=call.attempts)

        return await self._retrying(once)

    async def _attempt(self, send: Callable[[float], Any], gate: Gate, observe: Observer | None,
                       call: _Call, in_flight: InFlight | None = None) -> Sent:
        """One HTTP attempt through the runner's gate, bounded by the deadline as a whole;
        its rate-limit state goes to ``observe``; a failure comes out as the provider's
        :class:`AttemptFailed` verdict (or :class:`AttemptDeadline`)."""
        arrived = time.monotonic()
        async with gate() as ticket:
            call.ticket = ticket
            start = time.monotonic()
            if call.troubled_at is not None:
                call.queued += start - arrived
            if in_flight is not None:
                in_flight(True)
            # A cancellation (a BaseException) skips every in_flight(False) below and leaves the
            # flag up: the attempt was cut off while the server may be doing (and billing) it.
            try:
                # Each read waits a share of the timeout, so a server that sends nothing at all
                # is a plain timeout (no reply, nothing billed, retried here), while one whose
                # reply started and never finished meets the deadline (maybe billed: see
                # RejectedReply, counted at its worst case).
                sent: Sent = await within_deadline(self.config.timeout, send(READ_SHARE * self.config.timeout),
                                                   self.endpoint)
            except (AttemptDeadline, BadBody):
                # A deadline, or a 2xx whose body stalled or broke after its headers
                # (BodyLost): billed, not retried here (RejectedReply, at its worst case).
                if in_flight is not None:
                    in_flight(False)
                raise
            except Exception as exc:  # the provider's SDK error: the provider says what it means
                if in_flight is not None:
                    in_flight(False)
                verdict = self.provider.classify(exc)
                if observe is not None and verdict.status is not None:
                    observe(verdict.rate or RateInfo(), verdict.status)
                raise AttemptFailed(verdict) from exc
            if in_flight is not None:
                in_flight(False)
            sent.latency = time.monotonic() - start
            if observe is not None:
                observe(self.provider.rate_info(sent.headers), sent.status)
        return sent

    async def _retrying(self, once: Callable[[_Call], Any]) -> Any:
        call = _Call()

        def before_sleep(state: RetryCallState) -> None:
            self.retries += 1
            if self._on_retry is not None:
                self._on_retry()
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            if wait >= LONG_WAIT:
                exc = state.outcome.exception() if state.outcome else None
                self._say_wait(wait, exc)

        def stop(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            verdict = _verdict_of(exc)
            if exc is not None and not (getattr(call.ticket, "outage", False)
                                        or (verdict is not None and verdict.free)):
                call.counted += 1
            if call.counted >= max(1, self.config.max_attempts):
                return True
            # Patience counts from the first failure; waits at the gate since are excused up to
            # half that time: where nothing but 429s come back, the gate's pacing is this
            # request's wait too, and patience must end it.
            now = time.monotonic()
            if call.troubled_at is None:
                call.troubled_at = now
            elapsed = now - call.troubled_at
            left = self.config.patience - (elapsed - min(call.queued, elapsed / 2))
            if left <= 0:
                return True
            after = verdict.retry_after if verdict is not None else None
            if after is not None and after > left:
                # Honour the server up to the patience, never past it: a Retry-After an hour
                # ahead ends this request now, with its reason, instead of a silent hour.
                call.refused_wait = (after, left, verdict.status if verdict is not None else None)
                return True
            return False

        retrying = AsyncRetrying(
            stop=stop,
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            before_sleep=before_sleep,
            reraise=True,
            sleep=asyncio.sleep,
        )

        async def attempt() -> Any:
            call.attempts += 1
            call.ticket = None
            return await once(call)

        try:
            # Called, not iterated: iterating keeps the attempt state on the retrying object,
            # a reference cycle per request that only the cycle collector frees (~40 objects
            # a judgment, and its pauses on a busy machine are our event loop's).
            return await retrying(attempt)
        except (AttemptFailed, BadBody, AttemptDeadline) as exc:
            if call.refused_wait is not None:
                after, left, status = call.refused_wait
                answered = f"HTTP {status}: " if status is not None else ""
                raise CallFailed(
                    f"rate limited by {self.endpoint}: {answered}the server asked to wait "
                    f"{_duration(after)} (Retry-After), more than the {_duration(max(left, 0.0))} "
                    f"of patience left (--patience {self.config.patience:g})",
                    attempts=call.attempts) from None
            raise self._final(exc, call.attempts) from None
        finally:
            retrying.iter_state.reset()  # its last actions refer back to it: the other cycle

    def _final(self, exc: BaseException, attempts: int) -> Exception:
        """Map the last failure to what callers handle: LLMError, UnsupportedFeature, CallFailed."""
        if isinstance(exc, BodyLost):
            return RejectedReply(f"reply lost ({exc})", usage=None, attempts=attempts,
                                 kind=FailureKind.RETRIES_EXHAUSTED if exc.stalled else FailureKind.MALFORMED)
        if isinstance(exc, BadBody):
            return RejectedReply(f"malformed reply body ({exc})", usage=exc.usage, attempts=attempts)
        if isinstance(exc, AttemptDeadline):
            # The server may have computed (and billed) the reply it was still sending.
            return RejectedReply(f"timeout ({exc})", usage=None, attempts=attempts,
                                 kind=FailureKind.RETRIES_EXHAUSTED)
        verdict = exc.verdict  # type: ignore[attr-defined]
        if verdict.retry:
            return CallFailed(redact(f"gave up after {attempts} attempt(s): {verdict.reason}"),
                              attempts=attempts, kind=FailureKind.RETRIES_EXHAUSTED)
        final = verdict.final or CallFailed(f"client error: {verdict.reason}", kind=FailureKind.MALFORMED)
        if isinstance(final, CallFailed):
            final.attempts = attempts
        return final
