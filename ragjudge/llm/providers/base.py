"""The provider seam: what the provider-neutral retry loop (:mod:`ragjudge.llm.client`) asks of
an LLM API, and the values that cross it.

A provider (one module in this package, e.g. :mod:`.openai`) turns the neutral request (an
OpenAI-shaped chat body: ``messages``, ``max_tokens``, ``response_format``...) into its own
wire format, sends one HTTP attempt, and reads the reply back into a :class:`Completion` or an
:class:`EmbeddingReply` (reading its wire format is the provider's own: OpenAI's is in
:mod:`.openai`). It judges its own errors (:meth:`Provider.classify` -> a
:class:`Verdict`: retry or not, the pair's fault or not, how long the server asked to wait,
what to raise on giving up) and its own rate-limit headers (:meth:`Provider.rate_info` ->
:class:`RateInfo`). Retrying, deadlines, pacing and money stay outside, written once.

Obligations of a provider: honour ``read_timeout`` on every read (the loop bounds the attempt
as a whole); raise :class:`BadBody` with the usage the body states for a reply that may be
billed but cannot be used; pass every message that may carry a URL or key through
:func:`ragjudge.llm.redaction.redact`; never retry inside its SDK (``max_retries=0``).
"""

from __future__ import annotations

import contextvars
import email.utils
import json
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ...errors import LLMError
from ..cost import Price, Usage
from ..provenance import FailureKind
from ..redaction import redact, redact_url

__all__ = [
    "Provider", "ProviderSpec", "SDKProvider", "Sent", "RateInfo", "Verdict", "AttemptFailed", "BadBody", "BodyLost",
    "CallFailed", "RejectedReply", "UnsupportedFeature", "Completion", "EmbeddingReply",
    "Failure", "retry_after_seconds", "int_header", "json_object",
    "usage_in", "usage_in_text", "final_for_status", "transport_verdict", "PERMANENT_STATUS", "failure_of", "status_of", "headers_of",
    "server_message", "error_code", "ReplyHeaders", "watch_reply_headers",
]

class CallFailed(Exception):
    """A per-item failure after the retry policy gave up (becomes ``Outcome.error``).

    ``kind`` is the typed reason: ``RETRIES_EXHAUSTED``, ``PROMPT_TOO_LONG`` or ``MALFORMED``."""

    def __init__(self, reason: str, *, attempts: int = 1,
                 kind: FailureKind = FailureKind.RETRIES_EXHAUSTED) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts
        self.kind = kind


class UnsupportedFeature(Exception):
    """The server rejected a request feature (``feature`` is the body field to drop)."""

    def __init__(self, feature: str, message: str) -> None:
        super().__init__(message)
        self.feature = feature


class BadBody(Exception):  # noqa: N818 (a reply, not an error of ours)
    """A 2xx reply whose body is not a chat completion. The server did the work, so it is
    billed: ``usage`` is what the body said (``None``: unreadable, count the worst case)."""

    def __init__(self, reason: str, usage: Usage | None = None) -> None:
        super().__init__(reason)
        self.usage = usage


class BodyLost(BadBody):
    """A 2xx reply whose headers arrived but whose body could not be read: it stalled (a read
    timed out), the connection broke mid-body, or its ``Content-Encoding`` does not decode.
    The server did the work and billed it: counted at the worst case, never as a free
    connection error. ``stalled``: it timed out (the endpoint's health counts it as a stall)."""

    def __init__(self, reason: str, *, status: int, stalled: bool) -> None:
        super().__init__(reason, None)
        self.status = status
        self.stalled = stalled


class RejectedReply(CallFailed):
    """A reply that could not be used but may well be billed: a 2xx that is not JSON, not
    valid UTF-8, has no choices or a malformed vector, or one that was still arriving at the
    attempt's deadline. Not retried here: the session counts ``usage`` (the worst case when
    ``None``) and admits the next attempt against the budget before sending it."""

    def __init__(self, reason: str, *, usage: Usage | None, attempts: int = 1,
                 kind: FailureKind = FailureKind.MALFORMED) -> None:
        super().__init__(reason, attempts=attempts, kind=kind)
        self.usage = usage


def usage_in(d: Any) -> Usage | None:
    """The usage a rejected body still states, if it states one."""
    if not isinstance(d, Mapping):
        return None
    usage = Usage.from_openai(d.get("usage"))
    return None if usage.unknown else usage


_USAGE_KEY = re.compile(r'"usage"\s*:\s*')


def usage_in_text(text: str) -> Usage | None:
    """The usage a body that is not one JSON object still states (a JSON reply with a
    trailer, a cut-off or mangled body): the last readable top-level-looking ``"usage":
    {...}``. A key inside a string value is escaped (``\\"usage\\"``) and does not match."""
    try:
        return usage_in(json.loads(text))
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for m in reversed(list(_USAGE_KEY.finditer(text))):
        try:
            value, _ = decoder.raw_decode(text, m.end())
        except (ValueError, RecursionError):
            continue
        usage = usage_in({"usage": value})
        if usage is not None:
            return usage
    return None


@dataclass
class Completion:
    """The parts of one chat completion the judge uses, whatever the API (each provider reads
    its own reply into one; OpenAI's: :func:`ragjudge.llm.providers.openai.completion_from_dict`).

    ``logprobs``: one dict per token of the text, ``{"token", "logprob", "top_logprobs": {text:
    logprob or None}}`` (``None``: the API gave no readable probabilities)."""

    text: str | None
    finish_reason: str | None
    refusal: str | None
    usage: Usage
    logprobs: list[dict[str, Any]] | None
    system_fingerprint: str | None
    model: str | None
    latency: float = 0.0
    attempts: int = 1


@dataclass
class EmbeddingReply:
    """The vectors of one ``/embeddings`` reply, in input order, and its usage."""

    vectors: list[list[float]]
    usage: Usage
    model: str | None
    latency: float = 0.0
    attempts: int = 1


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra:
        try:
            return max(0.0, float(ra))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(ra)
                return max(0.0, when.timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None


class Failure(NamedTuple):
    """What a failed HTTP attempt says about the server (see :func:`classify_failure`).

    ``kind``: ``"unreachable"`` (no HTTP reply: refused, unknown host, connect timeout, dropped
    connection), ``"timeout"`` (connected, no reply in time), ``"status"`` (an HTTP error
    reply) or ``"other"``; ``reason`` is one short phrase; ``url`` is redacted."""

    kind: str
    reason: str
    url: str
    status: int | None = None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK's error reply (any SDK whose errors carry ``status_code``)."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def headers_of(exc: BaseException | None) -> Mapping[str, str]:
    """The headers of an SDK's error reply (empty when it has none)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers if isinstance(headers, Mapping) else {}


def server_message(exc: BaseException) -> str:
    """The server's error text as sent (``{"error": {"message": ...}}`` or the SDK's message):
    classify on this, show only :func:`redact`-ed text (a short configured key such as "k"
    would otherwise cut words like "max_tokens" apart)."""
    if status_of(exc) is not None:
        body = getattr(exc, "body", None)
        if isinstance(body, Mapping):
            err = body.get("error", body)
            if isinstance(err, Mapping) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
        return str(getattr(exc, "message", exc))
    return str(exc)


def error_code(exc: BaseException) -> str:
    """The ``code`` (or ``type``) of an error body, e.g. ``insufficient_quota``."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            return str(err.get("code") or err.get("type") or "")
    return ""


_TIMEOUT_NAMES = frozenset({"APITimeoutError", "TimeoutException", "ReadTimeout", "WriteTimeout", "PoolTimeout"})
_CONNECTION_NAMES = frozenset({"APIConnectionError", "ConnectError", "RemoteProtocolError", "ReadError", "WriteError"})

def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 12:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _request_url(exc: BaseException) -> str:
    for attr in ("request", "response"):
        obj = getattr(exc, attr, None)
        if attr == "response" and obj is not None:
            obj = getattr(obj, "request", None)
        try:
            url = getattr(obj, "url", None)
        except RuntimeError:  # httpx raises when a response has no request
            url = None
        if url is not None:
            return redact_url(str(url))
    return "the server"


def failure_of(exc: BaseException) -> Failure:
    """Tell an unreachable server from a slow one from an HTTP error, for the runner's
    circuit breaker and adaptive concurrency (no openai or httpx types leak out)."""
    url = _request_url(exc)
    status = status_of(exc)
    if status is not None:
        return Failure("status", f"HTTP {status}", url, status)
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    if names & _TIMEOUT_NAMES:
        if "ConnectTimeout" in names:
            return Failure("unreachable", "connect timeout", url)
        return Failure("timeout", "timeout", url)
    if names & _CONNECTION_NAMES:
        reason = "connection error"
        for e in reversed(chain):  # the root cause first
            if isinstance(e, ConnectionRefusedError):
                reason = "connection refused"
            elif isinstance(e, socket.gaierror):
                reason = f"host not found ({e.strerror or e})"
            elif isinstance(e, ConnectionResetError) or type(e).__name__ == "RemoteProtocolError":
                reason = "connection dropped by the server"
            else:
                continue
            break
        return Failure("unreachable", redact(reason), url)
    return Failure("other", redact(f"{type(exc).__name__}: {exc}"), url)


# The status of the reply whose headers arrived during the current task's attempt (see
# ReplyHeaders): set by an httpx response hook, which httpx runs in the sending task.
_REPLY_STATUS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "ragjudge_reply_status", default=None)


async def _note_reply_headers(response: Any) -> None:
    box = _REPLY_STATUS.get()
    if box is not None:
        box.append(int(response.status_code))


def watch_reply_headers(http_client: Any) -> Any:
    """Add the hook that lets :class:`ReplyHeaders` see a reply's status as soon as its headers
    arrive (before its body is read) to an ``httpx.AsyncClient``; returns the client."""
    hooks = getattr(http_client, "event_hooks", None)
    if isinstance(hooks, Mapping):
        responses = list(hooks.get("response", []))
        if _note_reply_headers not in responses:
            http_client.event_hooks = {**hooks, "response": [*responses, _note_reply_headers]}
    return http_client


class ReplyHeaders:
    """``with ReplyHeaders() as seen:`` around one send: ``seen.status`` is the status of the
    reply whose headers arrived (``None``: none did). A send that fails after a 2xx's headers
    lost a reply the server billed: :meth:`lost` says so."""

    __slots__ = ("_box", "_token")

    def __enter__(self) -> ReplyHeaders:
        self._box: list[int] = []
        self._token = _REPLY_STATUS.set(self._box)
        return self

    def __exit__(self, *exc: object) -> None:
        _REPLY_STATUS.reset(self._token)

    @property
    def status(self) -> int | None:
        return self._box[-1] if self._box else None

    def lost(self, exc: BaseException) -> BodyLost | None:
        """The :class:`BodyLost` that ``exc`` (the send's failure) means, if a 2xx's headers had
        arrived: a read timeout is a stall, anything else a body that broke or did not decode."""
        status = self.status
        if status is None or not 200 <= status < 300:
            return None
        names = {type(e).__name__ for e in _chain(exc)}
        if names & _TIMEOUT_NAMES:
            return BodyLost(f"HTTP {status} stalled after its headers (read timeout)", status=status, stalled=True)
        decoding = "DecodingError" in names
        what = "did not decode (Content-Encoding)" if decoding else "broke off"
        root = _chain(exc)[-1]
        detail = redact(f"{type(root).__name__}: {root}")[:160]
        return BodyLost(f"HTTP {status} body {what}: {detail}", status=status, stalled=False)


def transport_verdict(exc: BaseException, failure: Failure) -> Verdict:
    """The verdict on an SDK error that carries no HTTP status: timeouts and connection
    errors are retried (an unreachable server is not the pair's fault); anything else fails
    the item as a client error."""
    retry = failure.kind in ("unreachable", "timeout")
    if type(exc).__name__ == "APITimeoutError" or failure.kind == "timeout":
        reason = "timeout"
    elif failure.kind == "unreachable":
        reason = "connection error"
    else:
        reason = redact(f"{type(exc).__name__}: {exc}")
    return Verdict(failure, retry=retry, free=failure.kind == "unreachable", reason=reason,
                   final=None if retry else CallFailed(f"client error: {reason}", kind=FailureKind.MALFORMED))


#: 5xx that say the server cannot ever do this (not implemented, misconfigured): never retried.
PERMANENT_STATUS = frozenset({501, 505, 506, 510, 511})


def final_for_status(exc: BaseException, *, where: str, prompt_too_long: tuple[str, ...],
                     feature_words: tuple[tuple[str, str], ...]) -> Exception:
    """The exception that ends a request whose error reply is not retried: a prompt too long
    (``prompt_too_long``: words of the server's message) or a 413 fails the item; a 400 naming
    a request feature (``feature_words``: (word, feature) pairs) lets the session fall back;
    anything else stops the run with an :class:`LLMError` saying what to check."""
    status = status_of(exc)
    raw = server_message(exc)
    message = redact(raw)
    code = error_code(exc)
    lowered = raw.lower()
    if status in (400, 422):
        if code == "context_length_exceeded" or any(w in lowered for w in prompt_too_long):
            return CallFailed(f"prompt too long for the model: {message}", kind=FailureKind.PROMPT_TOO_LONG)
        for word, feature in feature_words:
            if word in lowered:
                return UnsupportedFeature(feature, message)
        return LLMError(f"bad request rejected by {where}: {message}")
    if status == 401:
        return LLMError(f"authentication failed at {where} (HTTP 401): check the API key. {message}")
    if status == 403:
        return LLMError(f"permission denied at {where} (HTTP 403): {message}")
    if status == 404:
        return LLMError(f"not found at {where} (HTTP 404): wrong model name or base URL? {message}")
    if status == 429:
        return LLMError(f"quota exhausted at {where} (HTTP 429 {code or 'insufficient_quota'}): {message}")
    if status == 413:
        return CallFailed(f"request too large for the server (HTTP 413): {message}",
                          kind=FailureKind.PROMPT_TOO_LONG)
    if status in PERMANENT_STATUS:
        return LLMError(f"{where} cannot serve this request (HTTP {status}"
                        f"{', not implemented' if status == 501 else ''}): {message}")
    return LLMError(f"request rejected by {where} (HTTP {status}): {message}")


def int_header(headers: Mapping[str, str], name: str) -> int | None:
    """A header as an integer (``None``: absent or not a number)."""
    value = headers.get(name)
    if value is None:
        return None
    try:
        return int(float(value))
    except (ValueError, OverflowError):  # "inf" overflows int()
        return None


try:
    # A reply with logprobs is ~30 KB of JSON, read once per request on the event loop:
    # pydantic-core's parser (the SDK's pydantic brings it) takes half json's time on it.
    from pydantic_core import from_json as _from_json
except ImportError:  # pydantic 1 (the SDK allows it): json alone
    _from_json = None
_UNREAD = object()


def json_object(content: bytes) -> Mapping[str, Any]:
    """The JSON object of a 2xx body; :class:`BadBody` (with the usage it still states) when
    it is not one: the server did the work, so it may be billed."""
    data: Any = _UNREAD
    if _from_json is not None:
        try:
            data = _from_json(content, cache_strings="keys")
        except ValueError:
            # It refuses lone surrogate escapes and very deep nesting, which json reads, and
            # whatever is not JSON: json decides, and words the failure.
            pass
    if data is _UNREAD:
        try:
            data = json.loads(content.decode("utf-8"))
        except UnicodeDecodeError:
            # Still read what it says it cost: a stray byte in the text is billed all the same.
            raise BadBody("not valid UTF-8", usage_in_text(content.decode("utf-8", errors="replace"))) from None
        except (ValueError, RecursionError):
            raise BadBody("not JSON", usage_in_text(content.decode("utf-8"))) from None
    if not isinstance(data, Mapping):
        raise BadBody("not a JSON object")
    return data


@dataclass(frozen=True)
class RateInfo:
    """What one reply's headers say about the account's limits, in the provider's own header
    names translated: limits per minute, what is left of the current window and the seconds
    until it resets, and the server's ``Retry-After``; ``server_time``: the seconds the server
    says it spent on the request (OpenAI's ``openai-processing-ms``). ``None``: not stated."""

    limit_requests: int | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests: float | None = None
    reset_tokens: float | None = None
    retry_after: float | None = None
    server_time: float | None = None


@dataclass
class Sent:
    """One HTTP attempt that got a 2xx reply: its raw body, headers and status."""

    content: bytes
    headers: Mapping[str, str]
    status: int
    latency: float = 0.0


@dataclass
class Verdict:
    """A provider's reading of one failed attempt.

    ``retry``: worth another attempt. ``free``: not the pair's fault (a 429, an unreachable
    server): bounded by the patience, not by ``max_attempts``. ``final``: what to raise when
    the loop gives up on a failure that is not retried (an :class:`LLMError` stops the run,
    :class:`UnsupportedFeature` lets the session fall back, :class:`CallFailed` fails the item).
    ``failure`` tells an unreachable server from a slow one from an HTTP error (the runner's
    circuit breaker and adaptive concurrency read it); ``status`` and ``rate`` feed the runner."""

    failure: Failure
    retry: bool
    free: bool = False
    reason: str = ""
    status: int | None = None
    rate: RateInfo | None = None
    final: Exception | None = None

    @property
    def retry_after(self) -> float | None:
        return self.rate.retry_after if self.rate is not None else None


class AttemptFailed(Exception):  # noqa: N818
    """A failed attempt as the provider judged it (the SDK's exception is its ``__cause__``)."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


@dataclass(frozen=True)
class ProviderSpec:
    """A provider as the registry knows it, without importing its SDK.

    ``key_env``: the default API-key variable (``key_env_azure`` when an Azure endpoint is
    set); ``base_url_env``: the variable that may hold its base URL; ``features``: what its
    requests can carry (``logprobs``, ``seed``, ``embeddings``, ``batch``, ``json_schema``);
    ``prices``: its models' list prices (USD per 1M tokens), merged under ``--prices``;
    ``extra``: the pip extra that installs its SDK; ``schema_overhead``: prompt tokens it adds
    to a request carrying a response schema (besides the schema itself)."""

    name: str
    about: str
    key_env: str
    base_url_env: str | None = None
    key_env_azure: str | None = None
    features: frozenset[str] = frozenset()
    prices: Mapping[str, Price] = field(default_factory=dict)
    extra: str | None = None
    schema_overhead: int = 0


class SDKProvider:
    """What providers built on an official SDK client (``self.sdk``: OpenAI's, Anthropic's)
    share: the redacted endpoint, closing, and the models the server lists."""

    sdk: Any

    @property
    def endpoint(self) -> str:
        """The base URL, redacted (for messages and provenance)."""
        return redact_url(str(self.sdk.base_url))

    async def close(self) -> None:
        await self.sdk.close()

    async def models(self) -> list[str]:
        """The model ids the server lists."""
        page = await self.sdk.models.list()
        return [m.id for m in page.data]


class Provider(Protocol):
    """One LLM API behind the neutral retry loop (see the module docstring)."""

    spec: ProviderSpec

    @property
    def endpoint(self) -> str:
        """The base URL, redacted (for messages and provenance)."""
        ...

    async def send_chat(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        """One chat attempt; a non-2xx reply or a transport error raises the SDK's exception."""
        ...

    def chat_reply(self, sent: Sent, *, attempts: int) -> Completion:
        """The completion in a 2xx reply (:class:`BadBody` when it is not one)."""
        ...

    async def send_embed(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        """One ``/embeddings`` attempt (``body``: ``model``, ``input`` list, ``encoding_format``)."""
        ...

    def embed_reply(self, sent: Sent, *, expected: int, attempts: int) -> EmbeddingReply:
        """The vectors in a 2xx reply (:class:`BadBody` when it is not one)."""
        ...

    def classify(self, exc: BaseException) -> Verdict:
        """Read a failed attempt (anything ``send_*`` raised)."""
        ...

    def rate_info(self, headers: Mapping[str, str]) -> RateInfo:
        """The rate-limit state a reply's headers state."""
        ...

    async def close(self) -> None:
        ...
