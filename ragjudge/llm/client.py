"""The one client for OpenAI-compatible chat endpoints, and the one place that retries.

Built on ``openai.AsyncOpenAI`` (``AsyncAzureOpenAI`` for Azure) with the SDK's own retries
switched off (``max_retries=0``): tenacity retries here, so attempts never multiply.

Retry policy
    Retried: 408, 409, 429 (except ``insufficient_quota``), 5xx other than the permanent ones
    (501 Not Implemented, 505, 506, 510, 511), timeouts and connection errors. A 200 reply
    whose body is not a chat completion, and a reply still arriving at the attempt's deadline,
    may be billed, so they are not retried here: they raise :class:`RejectedReply` with the
    usage they state (none: the session counts the worst case), and the session sends a fresh
    attempt only once the budget admits it. Waits honour ``retry-after-ms`` / ``Retry-After`` (seconds
    or an HTTP date) plus a little jitter; otherwise "full jitter" exponential backoff (uniform
    in ``[0, base * 2**n]``, capped). The timeout bounds each HTTP attempt as a whole (connect, headers and
    the entire body: a server trickling its body cannot stretch it) and starts when the runner
    lets the attempt go: time queued in our own runner never counts. Every attempt passes the
    runner's gate, so retries respect the rate limits and the circuit breaker too.
Two budgets
    A pair has ``max_attempts`` attempts for failures of its own (5xx, timeouts; the session
    gives it as many billed-but-unusable replies).
    A 429 (the server asking to wait), an unreachable server and a failed outage probe are not
    the pair's fault: they do not use that budget, and are bounded by time instead (``patience``
    seconds from the pair's first attempt; the runner's circuit breaker stops a run whose server
    stays unreachable). So an outage or a shared rate limit delays work and loses none.
Fail fast
    401/403/404, 501, ``insufficient_quota`` and other 4xx raise
    :class:`ragjudge.errors.LLMError` with a clear message -- a wrong key, model name or server
    must stop the run, not fail 10,000 judgments one by one. A 400 that says the server lacks a feature we asked for
    (``response_format``/``json_schema``/``logprobs``/``seed``/``max_tokens``/``temperature``)
    raises :class:`UnsupportedFeature` so the
    session can fall back; a prompt too long for the model is a per-item :class:`CallFailed`.
Secrets
    The API key is held only by the SDK client; every message that leaves this module is
    passed through :func:`redact`, which also removes credentials from URLs
    (``https://user:key@host``, ``?api-key=...``): see :func:`redact_url`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import os
import random
import re
import socket
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from ..errors import LLMError
from .cost import Usage
from .provenance import FailureKind

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

#: The share of ``timeout`` each read may wait (connect, headers, a body chunk); the attempt
#: as a whole has the full ``timeout``.
READ_SHARE = 0.8
#: A retry wait this long (seconds) or longer is said on stderr.
LONG_WAIT = 10.0
RETRY_STATUS = frozenset({408, 409, 429})
# 5xx that say the server cannot ever do this (not implemented, misconfigured): never retried.
PERMANENT_STATUS = frozenset({501, 505, 506, 510, 511})
# (word in a 400 message, request feature the session can drop or replace), most specific first.
_FEATURE_WORDS = (
    ("max_completion_tokens", "max_tokens"),
    ("max_tokens", "max_tokens"),
    ("logprobs", "logprobs"),
    ("temperature", "temperature"),
    ("seed", "seed"),
    ("response_format", "response_format"),
    ("json_schema", "response_format"),
    ("json_object", "response_format"),
    ("structured output", "response_format"),
    ("grammar", "response_format"),
)
_KEY_PATTERN = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{4,}|Bearer\s+\S+)")
# Credentials inside URLs: the userinfo of "scheme://user:secret@host" and query parameters
# that carry a key or token ("?api-key=...", "&access_token=...", Azure's "sig=").
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#]+@")
_URL_SECRET_PARAM = re.compile(
    r"(?i)([?&](?:api[-_]?key|key|token|access[-_]?token|auth|authorization|password|secret|sig|"
    r"signature|code)=)[^&#\s]+")


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


class _BadBody(Exception):
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


def _usage_in(d: Any) -> Usage | None:
    """The usage a rejected body still states, if it states one."""
    if not isinstance(d, Mapping):
        return None
    usage = Usage.from_openai(d.get("usage"))
    return None if usage.unknown else usage


_USAGE_KEY = re.compile(r'"usage"\s*:\s*')


def _usage_in_text(text: str) -> Usage | None:
    """The usage a body that is not one JSON object still states (a JSON reply with a
    trailer, a cut-off or mangled body): the last readable top-level-looking ``"usage":
    {...}``. A key inside a string value is escaped (``\\"usage\\"``) and does not match."""
    try:
        return _usage_in(json.loads(text))
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for m in reversed(list(_USAGE_KEY.finditer(text))):
        try:
            value, _ = decoder.raw_decode(text, m.end())
        except (ValueError, RecursionError):
            continue
        usage = _usage_in({"usage": value})
        if usage is not None:
            return usage
    return None


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
    bounds the attempt as a whole."""
    timeout = getattr(asyncio, "timeout", None)
    try:
        if timeout is None:  # Python 3.10: wait_for runs the attempt in a task of its own
            return await asyncio.wait_for(awaitable, timeout=seconds)
        async with timeout(seconds):  # no extra task on the hot path
            return await awaitable
    except asyncio.TimeoutError:
        raise AttemptDeadline(seconds, url) from None


_SECRETS: set[str] = set()
# A URL in free text, and the path segments of one that look like a key rather than a name:
# a known key prefix, or a long token mixing letters and digits (gateways that take the key in
# the path: "https://gw.example/sk-abc.../v1", "https://host/3f9c0a...e1/v1").
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s'\"<>]+")
_KEY_PREFIX = re.compile(r"^(sk|pk|rk|key|gsk|xai|hf|api|tok|token)[-_]", re.IGNORECASE)
_TOKEN_SEGMENT = re.compile(r"^[A-Za-z0-9_\-.~%]{20,}$")


_UUID_OR_HEX = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{24,})$",
                          re.IGNORECASE)


def _key_like_segment(segment: str) -> bool:
    if len(segment) >= 12 and _KEY_PREFIX.match(segment):
        return True
    if _UUID_OR_HEX.match(segment):  # gateways that take a UUID or hex token as the key
        return True
    if not _TOKEN_SEGMENT.match(segment):
        return False
    # A name is made of short words ("gpt-4o-mini-2024-07-18"); a key has one long random run.
    longest = max(re.split(r"[-_.~]", segment), key=len)
    digits = sum(c.isdigit() for c in longest)
    letters = sum(c.isalpha() for c in longest)
    return len(longest) >= 16 and digits >= 3 and letters >= 3


def _redact_url_path(match: re.Match[str]) -> str:
    url = match.group(0)
    head, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if not slash:
        return url
    tail = ""
    for mark in ("?", "#"):
        if mark in path:
            path, cut, after = path.partition(mark)
            tail = cut + after + tail
            break
    segments = ["***" if _key_like_segment(seg) else seg for seg in path.split("/")]
    return f"{head}{sep}{host}/{'/'.join(segments)}{tail}"


def redact(text: str) -> str:
    """Remove API keys (the configured ones, anything shaped like one, and credentials inside
    URLs: userinfo, key-bearing query parameters and key-like path segments) from ``text``.
    Every message, record or log line that can carry a URL or a key passes through here."""
    for secret in _SECRETS:
        # Placeholder keys of local servers ("k", "no-key") protect nothing, and replacing
        # every "k" would garble the message itself.
        if len(secret) >= 8:
            text = text.replace(secret, "***")
    text = _URL_USERINFO.sub(r"\1***@", text)
    text = _URL_SECRET_PARAM.sub(r"\1***", text)
    text = _URL_IN_TEXT.sub(_redact_url_path, text)
    return _KEY_PATTERN.sub("***", text)


def redact_url(url: str | None) -> str:
    """``url`` fit to print: no ``user:password@``, no key-bearing query parameter, no
    key-like path segment."""
    return redact(str(url or ""))


def _remember_url_secrets(url: str | None) -> None:
    """Register the credentials inside ``url`` so they are redacted wherever they appear."""
    if not url:
        return
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return
    for secret in (parts.password, parts.username if parts.password is None else None):
        if secret and len(secret) >= 4:
            _SECRETS.add(secret)
            _SECRETS.add(urllib.parse.unquote(secret))
    for name, value in urllib.parse.parse_qsl(parts.query):
        if value and len(value) >= 4 and _URL_SECRET_PARAM.search(f"?{name}=x"):
            _SECRETS.add(value)
    # A key in the path is also a secret wherever it shows up alone (an SDK message quoting
    # only the path, a percent-decoded copy).
    for segment in parts.path.split("/"):
        if _key_like_segment(segment):
            _SECRETS.add(segment)
            _SECRETS.add(urllib.parse.unquote(segment))


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to call. ``api_key`` is excluded from ``repr`` and never stored elsewhere."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    azure_endpoint: str | None = None
    azure_api_version: str | None = None
    timeout: float = 60.0
    max_attempts: int = 6
    backoff_base: float = 0.5
    max_wait: float = 60.0
    #: seconds a pair may keep retrying 429s and an unreachable server (see "Two budgets")
    patience: float = 600.0

    def __repr__(self) -> str:  # the base URL may carry credentials
        return (f"ClientConfig(model={self.model!r}, base_url={redact_url(self.base_url) or None!r}, "
                f"azure_endpoint={redact_url(self.azure_endpoint) or None!r}, timeout={self.timeout})")

    def resolved_base_url(self) -> str | None:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or None

    def resolve_key(self) -> str:
        if self.api_key:
            return self.api_key
        env = self.api_key_env or ("AZURE_OPENAI_API_KEY" if self.azure_endpoint else "OPENAI_API_KEY")
        key = os.environ.get(env)
        if key:
            return key
        if self.api_key_env:
            raise LLMError(f"environment variable {self.api_key_env} (given as the API key variable) is not set")
        if self.resolved_base_url():
            # Local servers (vLLM, Ollama, llama.cpp) usually ignore the key, but the SDK wants one.
            return "no-key"
        raise LLMError(f"no API key: set {env}, pass --api-key-env VAR, or --base-url for a local server")


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
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, d: Any) -> Completion:
        """A reply obtained elsewhere (a Batch API result line): an unusable body raises
        :class:`RejectedReply` carrying the usage it states, so it is still counted."""
        if not isinstance(d, Mapping):
            raise RejectedReply("malformed reply body (not a JSON object)", usage=None)
        try:
            return cls.from_dict(d)
        except _BadBody as exc:
            raise RejectedReply(f"malformed reply body ({exc})", usage=exc.usage) from None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, latency: float = 0.0, attempts: int = 1) -> Completion:
        """From the JSON of a ``/chat/completions`` reply (``_BadBody`` when it is not one)."""
        choices = d.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise _BadBody("reply has no choices", _usage_in(d))
        choice = choices[0]
        message = choice.get("message") or {}
        if not isinstance(message, Mapping):
            raise _BadBody("reply choice has no message", _usage_in(d))
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _BadBody("reply content is not text", _usage_in(d))
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
            raw=dict(d),
        )


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _logprob(value: Any) -> float:
    """A finite log probability, else ``ValueError`` (strings, null, NaN, objects)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"logprob {value!r} is not a number")
    return float(value)


def _read_logprobs(lp: Any) -> list[dict[str, Any]] | None:
    """``choices[0].logprobs.content`` as plain dicts with float logprobs; ``None`` (no
    probabilities, the grade is kept) when anything in it cannot be read."""
    if not isinstance(lp, Mapping) or not isinstance(lp.get("content"), list):
        return None
    try:
        tokens = []
        for t in lp["content"]:
            alts = t.get("top_logprobs") or []
            if not isinstance(alts, list):
                raise ValueError("top_logprobs is not a list")
            tokens.append({
                "token": str(t.get("token", "")),
                "logprob": _logprob(t.get("logprob")),
                "top_logprobs": [{"token": str(a.get("token", "")), "logprob": _logprob(a.get("logprob"))}
                                 for a in alts],
            })
    except (AttributeError, TypeError, ValueError):
        return None
    return tokens


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
        non-numeric vector) is a :class:`_BadBody` (billed, like a malformed chat reply)."""
        u = d.get("usage") or {}
        tokens = _count_tokens(u)
        billed = Usage(calls=1, prompt_tokens=tokens) if tokens is not None else None
        items = d.get("data")
        if not isinstance(items, list) or len(items) != expected:
            raise _BadBody(f"embeddings reply has {len(items) if isinstance(items, list) else 'no'} "
                           f"vectors for {expected} inputs", billed)
        vectors: list[list[float] | None] = [None] * expected
        for pos, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise _BadBody("embeddings reply item is not an object", billed)
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
                raise _BadBody("embeddings reply has a malformed vector", billed)
            vectors[index] = [float(x) for x in emb]
        # No readable count: unknown, and the session counts the worst case (never zero).
        usage = billed if billed is not None else Usage(calls=1, unknown=1)
        return cls([v for v in vectors if v is not None], usage, d.get("model"), latency, attempts)


def _count_tokens(usage: Any) -> int | None:
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
                when = email.utils.parsedate_to_datetime(ra)
                return max(0.0, when.timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None


def _status(exc: BaseException) -> int | None:
    return exc.status_code if isinstance(exc, openai.APIStatusError) else None


def _headers(exc: BaseException | None) -> Mapping[str, str] | None:
    return exc.response.headers if isinstance(exc, openai.APIStatusError) else None


class Failure(NamedTuple):
    """What a failed HTTP attempt says about the server (see :func:`classify_failure`).

    ``kind``: ``"unreachable"`` (no HTTP reply: refused, unknown host, connect timeout, dropped
    connection), ``"timeout"`` (connected, no reply in time), ``"status"`` (an HTTP error
    reply) or ``"other"``; ``reason`` is one short phrase; ``url`` is redacted."""

    kind: str
    reason: str
    url: str
    status: int | None = None


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


def classify_failure(exc: BaseException) -> Failure:
    """Tell an unreachable server from a slow one from an HTTP error, for the runner's
    circuit breaker and adaptive concurrency (no openai or httpx types leak out)."""
    if isinstance(exc, AttemptDeadline):
        return Failure("timeout", str(exc), exc.url)
    url = _request_url(exc)
    status = _status(exc)
    if status is not None:
        return Failure("status", f"HTTP {status}", url, status)
    chain = _chain(exc)
    names = {type(e).__name__ for e in chain}
    if isinstance(exc, openai.APITimeoutError) or "TimeoutException" in names or "ReadTimeout" in names:
        if "ConnectTimeout" in names:
            return Failure("unreachable", "connect timeout", url)
        return Failure("timeout", "timeout", url)
    if isinstance(exc, openai.APIConnectionError) or names & {"ConnectError", "RemoteProtocolError",
                                                             "ReadError", "WriteError"}:
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


def _error_code(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            return str(err.get("code") or err.get("type") or "")
    return ""


def _raw_server_message(exc: BaseException) -> str:
    """The server's error text as sent: classify on this, show only :func:`redact`-ed text (a
    short configured key such as "k" would otherwise cut words like "max_tokens" apart)."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        if isinstance(body, Mapping):
            err = body.get("error", body)
            if isinstance(err, Mapping) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
        return str(exc.message)
    return str(exc)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    status = _status(exc)
    if status is None:
        return False
    if status == 429 and _error_code(exc) == "insufficient_quota":  # type: ignore[arg-type]
        return False
    return status in RETRY_STATUS or (status >= 500 and status not in PERMANENT_STATUS)


def _free(exc: BaseException) -> bool:
    """A failure that is not the pair's own: a 429 or an unreachable server (time-bounded)."""
    return _status(exc) == 429 or classify_failure(exc).kind == "unreachable"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection error"
    if isinstance(exc, _BadBody):
        return f"malformed reply body ({exc})"
    if isinstance(exc, AttemptDeadline):
        return f"timeout ({exc})"
    status = _status(exc)
    if status is not None:
        return f"HTTP {status}: {redact(_raw_server_message(exc))}"
    return redact(f"{type(exc).__name__}: {exc}")


Gate = Callable[[], AbstractAsyncContextManager[Any]]


@dataclass
class _Call:
    """One request's retry bookkeeping: attempts made, those counted against its budget,
    and the runner's ticket of the current attempt (whose ``outage`` flag, set by the runner's
    circuit breaker, says its failure was the outage's, not the pair's)."""

    attempts: int = 0
    counted: int = 0
    ticket: Any = None
    #: (seconds the server asked to wait, patience left) when a Retry-After outran the patience
    refused_wait: tuple[float, float] | None = None
Observer = Callable[[Mapping[str, str], int], None]


@asynccontextmanager
async def _open_gate() -> AsyncIterator[None]:
    yield


class LLMClient:
    """Calls ``/chat/completions`` with the retry policy above."""

    def __init__(self, config: ClientConfig, *, http_client: Any = None,
                 on_retry: Callable[[], None] | None = None) -> None:
        self.config = config
        self._on_retry = on_retry
        key = config.resolve_key()
        _SECRETS.add(key)
        _remember_url_secrets(config.resolved_base_url())
        _remember_url_secrets(config.azure_endpoint)
        common: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": config.timeout}
        if http_client is not None:
            common["http_client"] = http_client
        if config.azure_endpoint:
            self.openai: openai.AsyncOpenAI = openai.AsyncAzureOpenAI(
                azure_endpoint=config.azure_endpoint,
                api_version=config.azure_api_version or os.environ.get("OPENAI_API_VERSION") or "2024-10-21",
                **common,
            )
        else:
            self.openai = openai.AsyncOpenAI(base_url=config.resolved_base_url(), **common)
        self.retries = 0
        self._said_wait_at = -math.inf

    @property
    def endpoint(self) -> str:
        """The base URL, with any credentials redacted."""
        return redact_url(str(self.openai.base_url))

    async def close(self) -> None:
        await self.openai.close()

    def _say_wait(self, wait: float, exc: BaseException | None) -> None:
        """One stderr line for a wait of :data:`LONG_WAIT` s or more (at most one per
        :data:`LONG_WAIT` s, however many requests wait at once): a long pause is never silent."""
        now = time.monotonic()
        if now - self._said_wait_at < LONG_WAIT:
            return
        self._said_wait_at = now
        status = _status(exc) if exc is not None else None
        if status == 429:
            why = "Retry-After" if retry_after_seconds(_headers(exc)) is not None else "HTTP 429"
            log.warning("rate limited by %s: waiting %.0f s (%s)", self.endpoint, wait, why)
        else:
            why = _describe(exc) if exc is not None else "retry"
            log.warning("%s failed (%s): waiting %.0f s before retrying", self.endpoint, why, wait)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None and classify_failure(exc).kind == "unreachable":
            # The runner's circuit breaker paces an outage (one probe at a time, backing off):
            # a long backoff here would only delay the resume once the server is back.
            return random.uniform(0, min(1.0, self.config.max_wait))
        after = retry_after_seconds(_headers(exc))
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
    ) -> Completion:
        """One chat completion, retried per the policy. ``body`` is the request JSON."""
        gate = gate or _open_gate
        return await self._retrying(lambda c: self._once(body, gate, observe, c))

    async def embed(
        self,
        body: Mapping[str, Any],
        *,
        gate: Gate | None = None,
        observe: Observer | None = None,
    ) -> EmbeddingReply:
        """One ``/embeddings`` request, retried per the same policy. ``body`` is the request
        JSON (``model``, ``input`` list, ``encoding_format``)."""
        gate = gate or _open_gate
        return await self._retrying(lambda c: self._once_embed(body, gate, observe, c))

    async def _retrying(self, once: Callable[[_Call], Any]) -> Any:
        call = _Call()
        first = time.monotonic()

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
            if exc is not None and not (getattr(call.ticket, "outage", False) or _free(exc)):
                call.counted += 1
            if call.counted >= max(1, self.config.max_attempts):
                return True
            left = self.config.patience - (time.monotonic() - first)
            if left <= 0:
                return True
            after = retry_after_seconds(_headers(exc)) if exc is not None else None
            if after is not None and after > left:
                # Honour the server up to the patience, never past it: a Retry-After an hour
                # ahead ends this request now, with its reason, instead of a silent hour.
                call.refused_wait = (after, left)
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
        try:
            async for attempt in retrying:
                with attempt:
                    call.attempts += 1
                    call.ticket = None
                    return await once(call)
        except (openai.APIError, _BadBody, AttemptDeadline) as exc:
            if call.refused_wait is not None:
                after, left = call.refused_wait
                raise CallFailed(
                    f"rate limited by {self.endpoint}: the server asked to wait {after:.0f} s "
                    f"(Retry-After), more than the {max(left, 0.0):.0f} s of patience left "
                    f"(--patience {self.config.patience:g})", attempts=call.attempts) from None
            raise self._final(exc, call.attempts) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, body: Mapping[str, Any], gate: Gate, observe: Observer | None,
                    call: _Call) -> Completion:
        data, latency = await self._post(self.openai.chat.completions, body, gate, observe, call)
        try:
            return Completion.from_dict(data, latency=latency, attempts=call.attempts)
        except _BadBody:
            raise
        except Exception as exc:  # a 200 read this far is billed: never an uncounted crash
            raise _BadBody(f"unreadable reply: {type(exc).__name__}: {exc}", _usage_in(data)) from None

    async def _post(self, resource: Any, body: Mapping[str, Any], gate: Gate,
                    observe: Observer | None, call: _Call) -> tuple[Mapping[str, Any], float]:
        """One HTTP attempt on ``resource`` (chat completions or embeddings): the JSON object
        of the reply and its latency; rate-limit headers go to ``observe``, 2xx bodies that
        are not a JSON object raise ``_BadBody`` (retried like a 5xx)."""
        async with gate() as ticket:
            call.ticket = ticket
            start = time.monotonic()
            try:
                # The SDK reads the whole body inside create(): the deadline covers connect,
                # headers and body, whatever pace the server sends them at. Each read has a
                # shorter timeout, so a server that sends nothing at all is a plain timeout
                # (no reply, nothing billed, retried here), while one whose reply started
                # and never finished meets the deadline (maybe billed: see RejectedReply).
                raw = await within_deadline(
                    self.config.timeout,
                    resource.with_raw_response.create(**body, timeout=READ_SHARE * self.config.timeout),
                    self.endpoint)
            except openai.APIStatusError as exc:
                if observe is not None:
                    observe(exc.response.headers, exc.status_code)
                raise
            latency = time.monotonic() - start
            if observe is not None:
                observe(raw.headers, raw.status_code)
        content = raw.http_response.content
        try:
            data = json.loads(content.decode("utf-8"))
        except UnicodeDecodeError:
            # Still read what it says it cost: a stray byte in the text is billed all the same.
            raise _BadBody("not valid UTF-8",
                           _usage_in_text(content.decode("utf-8", errors="replace"))) from None
        except (ValueError, RecursionError):
            raise _BadBody("not JSON", _usage_in_text(content.decode("utf-8"))) from None
        if not isinstance(data, Mapping):
            raise _BadBody("not a JSON object")
        return data, latency

    async def _once_embed(self, body: Mapping[str, Any], gate: Gate, observe: Observer | None,
                          call: _Call) -> EmbeddingReply:
        data, latency = await self._post(self.openai.embeddings, body, gate, observe, call)
        try:
            return EmbeddingReply.from_dict(data, expected=len(body.get("input") or ()),
                                            latency=latency, attempts=call.attempts)
        except _BadBody:
            raise
        except Exception as exc:  # e.g. base64 that is not a vector: billed all the same
            tokens = _count_tokens(data.get("usage"))
            raise _BadBody(f"unreadable reply: {type(exc).__name__}: {exc}",
                           None if tokens is None else Usage(calls=1, prompt_tokens=tokens)) from None

    def _final(self, exc: BaseException, attempts: int) -> Exception:
        """Map the last exception to what callers handle: LLMError, UnsupportedFeature, CallFailed."""
        if isinstance(exc, _BadBody):
            return RejectedReply(f"malformed reply body ({exc})", usage=exc.usage, attempts=attempts)
        if isinstance(exc, AttemptDeadline):
            # The server may have computed (and billed) the reply it was still sending.
            return RejectedReply(f"timeout ({exc})", usage=None, attempts=attempts,
                                 kind=FailureKind.RETRIES_EXHAUSTED)
        status = _status(exc)
        if _retryable(exc):
            return CallFailed(redact(f"gave up after {attempts} attempt(s): {_describe(exc)}"), attempts=attempts,
                              kind=FailureKind.RETRIES_EXHAUSTED)
        if status is None:  # an SDK error without an HTTP status: this item fails, the run goes on
            return CallFailed(f"client error: {_describe(exc)}", attempts=attempts, kind=FailureKind.MALFORMED)
        raw = _raw_server_message(exc)
        message = redact(raw)
        where = f"{self.endpoint} (model {self.config.model!r})"
        code = _error_code(exc) if isinstance(exc, openai.APIStatusError) else ""
        if status in (400, 422):
            lowered = raw.lower()
            if code == "context_length_exceeded" or "context length" in lowered \
                    or "maximum context" in lowered or "too many tokens" in lowered:
                return CallFailed(f"prompt too long for the model: {message}", attempts=attempts,
                                  kind=FailureKind.PROMPT_TOO_LONG)
            for word, feature in _FEATURE_WORDS:
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
            return LLMError(f"quota exhausted at {where} (HTTP 429 insufficient_quota): {message}")
        if status == 413:
            return CallFailed(f"request too large for the server (HTTP 413): {message}", attempts=attempts,
                              kind=FailureKind.PROMPT_TOO_LONG)
        if status in PERMANENT_STATUS:
            return LLMError(f"{where} cannot serve this request (HTTP {status}"
                            f"{', not implemented' if status == 501 else ''}): {message}")
        return LLMError(f"request rejected by {where} (HTTP {status}): {message}")
