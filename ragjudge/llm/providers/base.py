"""The provider seam: what the provider-neutral retry loop (:mod:`ragjudge.llm.client`) asks of
an LLM API, and the values that cross it.

A provider (one module in this package, e.g. :mod:`.openai`) turns the neutral request (an
OpenAI-shaped chat body: ``messages``, ``max_tokens``, ``response_format``...) into its own
wire format, sends one HTTP attempt, and reads the reply back into a :class:`Completion` or an
:class:`EmbeddingReply`. It judges its own errors (:meth:`Provider.classify` -> a
:class:`Verdict`: retry or not, the pair's fault or not, how long the server asked to wait,
what to raise on giving up) and its own rate-limit headers (:meth:`Provider.rate_info` ->
:class:`RateInfo`). Retrying, deadlines, pacing and money stay outside, written once.

Obligations of a provider: honour ``read_timeout`` on every read (the loop bounds the attempt
as a whole); raise :class:`BadBody` with the usage the body states for a reply that may be
billed but cannot be used; pass every message that may carry a URL or key through
:func:`ragjudge.llm.redaction.redact`; never retry inside its SDK (``max_retries=0``).
"""

from __future__ import annotations

import gc
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ...errors import LLMError
from ..cost import Price, Usage
from ..provenance import FailureKind
from ..redaction import redact, redact_url

__all__ = [
    "Provider", "ProviderSpec", "SDKProvider", "Sent", "RateInfo", "Verdict", "AttemptFailed", "BadBody",
    "CallFailed", "RejectedReply", "UnsupportedFeature", "Completion", "EmbeddingReply",
    "Failure", "retry_after_seconds", "parse_duration", "int_header", "json_object", "CollectorPaused",
    "usage_in", "usage_in_text", "final_for_status", "transport_verdict", "PERMANENT_STATUS", "failure_of", "status_of", "headers_of",
    "server_message", "error_code", "embedding_tokens",
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
    """The parts of one chat completion the judge uses."""

    text: str | None
    finish_reason: str | None
    refusal: str | None
    usage: Usage
    logprobs: list[dict[str, Any]] | None
    system_fingerprint: str | None
    model: str | None
    latency: float = 0.0
    attempts: int = 1

    @classmethod
    def parse(cls, d: Any) -> Completion:
        """A reply obtained elsewhere (a Batch API result line): an unusable body raises
        :class:`RejectedReply` carrying the usage it states, so it is still counted."""
        if not isinstance(d, Mapping):
            raise RejectedReply("malformed reply body (not a JSON object)", usage=None)
        try:
            return cls.from_dict(d)
        except BadBody as exc:
            raise RejectedReply(f"malformed reply body ({exc})", usage=exc.usage) from None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, latency: float = 0.0, attempts: int = 1) -> Completion:
        """From the JSON of a ``/chat/completions`` reply (``BadBody`` when it is not one)."""
        choices = d.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise BadBody("reply has no choices", usage_in(d))
        choice = choices[0]
        message = choice.get("message") or {}
        if not isinstance(message, Mapping):
            raise BadBody("reply choice has no message", usage_in(d))
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise BadBody("reply content is not text", usage_in(d))
        refusal = message.get("refusal")
        return cls(
            text=content,
            finish_reason=_text_or_none(choice.get("finish_reason")),
            refusal=None if refusal is None or refusal == "" else str(refusal),
            usage=Usage.from_openai(d.get("usage")),
            logprobs=_read_logprobs(choice.get("logprobs")),
            system_fingerprint=_text_or_none(d.get("system_fingerprint")),
            model=_text_or_none(d.get("model")),
            latency=latency,
            attempts=attempts,
        )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _logprob(value: Any) -> float:
    """A finite log probability, else ``ValueError`` (strings, null, NaN, objects)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"logprob {value!r} is not a number")
    return float(value)


def _read_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    """``choices[0].logprobs.content`` as plain dicts: each token's text, its float logprob
    and its alternatives (``top_logprobs``) as ``{text: logprob}``; ``None`` (no
    probabilities, the grade is kept) when a token or its logprob cannot be read.

    An alternative's logprob is ``None`` when it cannot be read (not a number, positive, not
    finite, or the alternative is not an object): only the label's token uses alternatives,
    and one unreadable there leaves that label without probabilities. Two alternatives with
    the same text (byte-fallback tokens) hold their summed probability; a token without
    alternatives is its own only one.

    A dict of strings and floats is not tracked by Python's cycle collector: a reply's
    ~250 alternatives kept as the server's objects (a dict and a byte list each) made the
    collector run every few replies and, with the objects still alive, promote them, so it
    paused the event loop for whole-heap passes (~0.5 ms of a ~5 ms judgment, pauses of
    100+ ms)."""
    if not isinstance(lp, Mapping) or not isinstance(lp.get("content"), list):
        return None
    try:
        tokens = []
        for t in lp["content"]:
            alts = t.get("top_logprobs") or []
            if not isinstance(alts, list):
                raise ValueError("top_logprobs is not a list")
            token, own = str(t.get("token", "")), _logprob(t.get("logprob"))
            # no alternatives: the token itself is the only one
            tokens.append({"token": token, "logprob": own,
                           "top_logprobs": _alternatives(alts) or {token: _alternative_logprob(own)}})
    except (AttributeError, TypeError, ValueError):
        return None
    return tokens


def _alternatives(alts: list[Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for alt in alts:
        if isinstance(alt, Mapping):
            text, lp = str(alt.get("token", "")), _alternative_logprob(alt.get("logprob"))
        else:
            text, lp = "", None
        if text in out:
            seen = out[text]
            # log(exp(seen) + exp(lp)), without underflowing when both are very negative
            lp = None if seen is None or lp is None else \
                max(seen, lp) + math.log1p(math.exp(-abs(seen - lp)))
        out[text] = lp
    return out


def _alternative_logprob(value: Any) -> float | None:
    """An alternative's logprob: a number or numeric text, finite and <= 0; else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        lp = float(value)
    except ValueError:
        return None
    return lp if math.isfinite(lp) and lp <= 0.0 else None


@dataclass
class EmbeddingReply:
    """The vectors of one ``/embeddings`` reply, in input order, and its usage."""

    vectors: list[list[float]]
    usage: Usage
    model: str | None
    latency: float = 0.0
    attempts: int = 1

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, expected: int, latency: float = 0.0,
                  attempts: int = 1) -> EmbeddingReply:
        """From the JSON of an ``/embeddings`` reply; a body that is not one (wrong count,
        non-numeric vector) is a :class:`BadBody` (billed, like a malformed chat reply)."""
        u = d.get("usage") or {}
        tokens = embedding_tokens(u)
        billed = Usage(calls=1, prompt_tokens=tokens) if tokens is not None else None
        items = d.get("data")
        if not isinstance(items, list) or len(items) != expected:
            raise BadBody(f"embeddings reply has {len(items) if isinstance(items, list) else 'no'} "
                           f"vectors for {expected} inputs", billed)
        vectors: list[list[float] | None] = [None] * expected
        for pos, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise BadBody("embeddings reply item is not an object", billed)
            index = item.get("index", pos)
            emb = item.get("embedding")
            if isinstance(emb, str):  # base64 little-endian float32 (encoding_format=base64)
                import base64

                import numpy as np

                emb = np.frombuffer(base64.b64decode(emb), dtype="<f4").astype(float).tolist()
            if (not isinstance(index, int) or not 0 <= index < expected or vectors[index] is not None
                    or not isinstance(emb, list) or not emb
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                               and math.isfinite(x) for x in emb)):
                raise BadBody("embeddings reply has a malformed vector", billed)
            vectors[index] = [float(x) for x in emb]
        # No readable count: unknown, and the session counts the worst case (never zero).
        usage = billed if billed is not None else Usage(calls=1, unknown=1)
        return cls([v for v in vectors if v is not None], usage, d.get("model"), latency, attempts)


def embedding_tokens(usage: Any) -> int | None:
    """The input tokens an ``/embeddings`` reply states (``prompt_tokens`` or
    ``total_tokens``), ``None`` when it states no readable count."""
    if not isinstance(usage, Mapping):
        return None
    for name in ("prompt_tokens", "total_tokens"):
        value = usage.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        if isinstance(value, int) and value >= 0:
            return value
        if isinstance(value, float) and math.isfinite(value) and value >= 0 and value == int(value):
            return int(value)
    return None


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
                import email.utils  # an HTTP date is rare; the CLI's start-up need not load it

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
        import socket  # only on a connection failure: the CLI's start-up does not pay for it

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


class CollectorPaused:
    """``with CollectorPaused():`` no cyclic garbage collection inside the block (unless it
    was off already). For reading a reply: its JSON tree is hundreds of containers that live
    only while it is read, and each would count toward the next collection; a collection
    started midway finds them alive and promotes them, so old-generation passes (whole-heap,
    100+ ms on a busy machine, with the event loop stalled) came every few hundred replies.
    Freed inside the block, they are never counted at all."""

    __slots__ = ("_was_on",)

    def __enter__(self) -> None:
        self._was_on = gc.isenabled()
        if self._was_on:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_on:
            gc.enable()


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
