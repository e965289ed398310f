"""The one client for OpenAI-compatible chat endpoints, and the one place that retries.

Built on ``openai.AsyncOpenAI`` (``AsyncAzureOpenAI`` for Azure) with the SDK's own retries
switched off (``max_retries=0``): tenacity retries here, so attempts never multiply.

Retry policy
    Retried: 408, 409, 429 (except ``insufficient_quota``), every 5xx, timeouts, connection
    errors and 200 replies whose body is not a chat completion. Waits honour ``retry-after-ms``
    / ``Retry-After`` (seconds or an HTTP date) plus a little jitter; otherwise "full jitter"
    exponential backoff (uniform in ``[0, base * 2**n]``, capped). The timeout is per HTTP
    attempt. Every attempt passes the runner's gate, so retries respect the rate limits too.
Fail fast
    401/403/404, ``insufficient_quota`` and other 4xx raise :class:`ragjudge.errors.LLMError`
    with a clear message -- a wrong key or model name must stop the run, not fail 10,000
    judgments one by one. A 400 that says the server lacks a feature we asked for
    (``response_format``/``json_schema``/``logprobs``/``seed``/``max_tokens``/``temperature``)
    raises :class:`UnsupportedFeature` so the
    session can fall back; a prompt too long for the model is a per-item :class:`CallFailed`.
Secrets
    The API key is held only by the SDK client; every message that leaves this module is
    passed through :func:`redact`.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..errors import LLMError
from .cost import Usage

__all__ = [
    "ClientConfig",
    "LLMClient",
    "Completion",
    "EmbeddingReply",
    "CallFailed",
    "UnsupportedFeature",
    "redact",
    "retry_after_seconds",
]

RETRY_STATUS = frozenset({408, 409, 429})
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


class CallFailed(Exception):
    """A per-item failure after the retry policy gave up (becomes ``Outcome.error``)."""

    def __init__(self, reason: str, *, attempts: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


class UnsupportedFeature(Exception):
    """The server rejected a request feature (``feature`` is the body field to drop)."""

    def __init__(self, feature: str, message: str) -> None:
        super().__init__(message)
        self.feature = feature


class _BadBody(Exception):
    """A 2xx reply whose body is not a chat completion (retried like a 5xx)."""


_SECRETS: set[str] = set()


def redact(text: str) -> str:
    """Remove API keys (the configured ones and anything shaped like one) from ``text``."""
    for secret in _SECRETS:
        if secret:
            text = text.replace(secret, "***")
    return _KEY_PATTERN.sub("***", text)


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
    def from_dict(cls, d: Mapping[str, Any], *, latency: float = 0.0, attempts: int = 1) -> Completion:
        """From the JSON of a ``/chat/completions`` reply (also used for Batch API results)."""
        choices = d.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise _BadBody("reply has no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        if not isinstance(message, Mapping):
            raise _BadBody("reply choice has no message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _BadBody("reply content is not text")
        lp = choice.get("logprobs")
        tokens = None
        if isinstance(lp, Mapping) and isinstance(lp.get("content"), list):
            tokens = [
                {
                    "token": t.get("token", ""),
                    "logprob": t.get("logprob"),
                    "top_logprobs": [
                        {"token": a.get("token", ""), "logprob": a.get("logprob")}
                        for a in (t.get("top_logprobs") or []) if isinstance(a, Mapping)
                    ],
                }
                for t in lp["content"] if isinstance(t, Mapping)
            ]
        return cls(
            text=content,
            finish_reason=choice.get("finish_reason"),
            refusal=message.get("refusal"),
            usage=Usage.from_openai(d.get("usage")),
            logprobs=tokens,
            system_fingerprint=d.get("system_fingerprint"),
            model=d.get("model"),
            latency=latency,
            attempts=attempts,
            raw=dict(d),
        )


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
        non-numeric vector) is a :class:`_BadBody` (retried like a malformed chat reply)."""
        items = d.get("data")
        if not isinstance(items, list) or len(items) != expected:
            raise _BadBody(f"embeddings reply has {len(items) if isinstance(items, list) else 'no'} "
                           f"vectors for {expected} inputs")
        vectors: list[list[float] | None] = [None] * expected
        for pos, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise _BadBody("embeddings reply item is not an object")
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
                raise _BadBody("embeddings reply has a malformed vector")
            vectors[index] = [float(x) for x in emb]
        u = d.get("usage") or {}
        tokens = int(u.get("prompt_tokens") or u.get("total_tokens") or 0) if isinstance(u, Mapping) else 0
        return cls([v for v in vectors if v is not None], Usage(calls=1, prompt_tokens=tokens),
                   d.get("model"), latency, attempts)


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
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, _BadBody)):
        return True
    status = _status(exc)
    if status is None:
        return False
    if status == 429 and _error_code(exc) == "insufficient_quota":  # type: ignore[arg-type]
        return False
    return status in RETRY_STATUS or status >= 500


def _describe(exc: BaseException) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection error"
    if isinstance(exc, _BadBody):
        return f"malformed reply body ({exc})"
    status = _status(exc)
    if status is not None:
        return f"HTTP {status}: {redact(_raw_server_message(exc))}"
    return redact(f"{type(exc).__name__}: {exc}")


Gate = Callable[[], AbstractAsyncContextManager[Any]]
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

    @property
    def endpoint(self) -> str:
        return str(self.openai.base_url)

    async def close(self) -> None:
        await self.openai.close()

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        headers = exc.response.headers if isinstance(exc, openai.APIStatusError) else None
        after = retry_after_seconds(headers)
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
        return await self._retrying(lambda n: self._once(body, gate, observe, n))

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
        return await self._retrying(lambda n: self._once_embed(body, gate, observe, n))

    async def _retrying(self, once: Callable[[int], Any]) -> Any:
        attempts = 0

        def before_sleep(state: RetryCallState) -> None:
            self.retries += 1
            if self._on_retry is not None:
                self._on_retry()

        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, self.config.max_attempts)),
            wait=self._wait,
            retry=retry_if_exception(_retryable),
            before_sleep=before_sleep,
            reraise=True,
            sleep=asyncio.sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    return await once(attempts)
        except (openai.APIError, _BadBody) as exc:
            raise self._final(exc, attempts) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, body: Mapping[str, Any], gate: Gate, observe: Observer | None,
                    attempts: int) -> Completion:
        data, latency = await self._post(self.openai.chat.completions, body, gate, observe)
        return Completion.from_dict(data, latency=latency, attempts=attempts)

    async def _post(self, resource: Any, body: Mapping[str, Any], gate: Gate,
                    observe: Observer | None) -> tuple[Mapping[str, Any], float]:
        """One HTTP attempt on ``resource`` (chat completions or embeddings): the JSON object
        of the reply and its latency; rate-limit headers go to ``observe``, 2xx bodies that
        are not a JSON object raise ``_BadBody`` (retried like a 5xx)."""
        async with gate():
            start = time.monotonic()
            try:
                raw = await resource.with_raw_response.create(**body, timeout=self.config.timeout)
            except openai.APIStatusError as exc:
                if observe is not None:
                    observe(exc.response.headers, exc.status_code)
                raise
            latency = time.monotonic() - start
            if observe is not None:
                observe(raw.headers, raw.status_code)
        try:
            data = raw.http_response.json()
        except ValueError:
            raise _BadBody("not JSON") from None
        if not isinstance(data, Mapping):
            raise _BadBody("not a JSON object")
        return data, latency

    async def _once_embed(self, body: Mapping[str, Any], gate: Gate, observe: Observer | None,
                          attempts: int) -> EmbeddingReply:
        data, latency = await self._post(self.openai.embeddings, body, gate, observe)
        return EmbeddingReply.from_dict(data, expected=len(body.get("input") or ()),
                                        latency=latency, attempts=attempts)

    def _final(self, exc: BaseException, attempts: int) -> Exception:
        """Map the last exception to what callers handle: LLMError, UnsupportedFeature, CallFailed."""
        status = _status(exc)
        if _retryable(exc):
            return CallFailed(f"gave up after {attempts} attempt(s): {_describe(exc)}", attempts=attempts)
        if status is None:  # an SDK error without an HTTP status: this item fails, the run goes on
            return CallFailed(f"client error: {_describe(exc)}", attempts=attempts)
        raw = _raw_server_message(exc)
        message = redact(raw)
        where = f"{self.endpoint} (model {self.config.model!r})"
        code = _error_code(exc) if isinstance(exc, openai.APIStatusError) else ""
        if status in (400, 422):
            lowered = raw.lower()
            if code == "context_length_exceeded" or "context length" in lowered \
                    or "maximum context" in lowered or "too many tokens" in lowered:
                return CallFailed(f"prompt too long for the model: {message}", attempts=attempts)
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
        return LLMError(f"request rejected by {where} (HTTP {status}): {message}")
