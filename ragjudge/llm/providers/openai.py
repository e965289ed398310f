"""OpenAI's Chat Completions and Embeddings APIs, and every server that speaks them (vLLM,
llama.cpp, Ollama, LiteLLM, Azure OpenAI).

Built on ``openai.AsyncOpenAI`` (``AsyncAzureOpenAI`` for Azure) with the SDK's own retries
switched off (``max_retries=0``): the neutral loop in :mod:`ragjudge.llm.client` retries.
The Batch API is this provider's capability (``features`` has ``batch``; :mod:`ragjudge.llm.batch`
uses :attr:`OpenAIProvider.sdk`).

How its errors read (:meth:`OpenAIProvider.classify`)
    Retried: 408, 409, 429 (except ``insufficient_quota``), 5xx other than the permanent ones
    (501, 505, 506, 510, 511), timeouts and connection errors. 429s and an unreachable server
    are not the pair's fault (bounded by the patience). Fail fast: 401/403/404, 501,
    ``insufficient_quota`` and other 4xx stop the run with a clear :class:`LLMError`. A 400
    naming a feature we asked for (``response_format``/``json_schema``/``logprobs``/``seed``/
    ``max_tokens``/``temperature``) is :class:`UnsupportedFeature` (the session falls back);
    a prompt too long for the model, or a 413, fails that item only.
Rate limits (:meth:`OpenAIProvider.rate_info`)
    ``x-ratelimit-limit|remaining|reset-requests|tokens`` (resets as ``6m0s``) and
    ``retry-after-ms`` / ``Retry-After``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..redaction import redact, remember_secret, remember_url_secrets
from .base import (
    SDKProvider,
    PERMANENT_STATUS,
    BadBody,
    CollectorPaused,
    ReplyHeaders,
    ProviderSpec,
    Completion,
    EmbeddingReply,
    RateInfo,
    Sent,
    Verdict,
    embedding_tokens,
    error_code,
    failure_of,
    headers_of,
    final_for_status,
    int_header,
    json_object,
    parse_duration,
    retry_after_seconds,
    server_message,
    status_of,
    transport_verdict,
    usage_in,
    watch_reply_headers,
)
from ..cost import Usage

if TYPE_CHECKING:  # pragma: no cover
    import openai

    from ..endpoint import Endpoint

__all__ = ["SPEC", "OpenAIProvider", "rate_info", "RETRY_STATUS", "FEATURE_WORDS"]

SPEC = ProviderSpec(
    name="openai",
    about="OpenAI and any OpenAI-compatible server (vLLM, llama.cpp, Ollama, LiteLLM, Azure OpenAI)",
    key_env="OPENAI_API_KEY", base_url_env="OPENAI_BASE_URL", key_env_azure="AZURE_OPENAI_API_KEY",
    # Its list prices are the built-in table (ragjudge.llm.cost).
    features=frozenset({"logprobs", "seed", "embeddings", "batch", "json_schema"}),
)

RETRY_STATUS = frozenset({408, 409, 429})
# (word in a 400 message, request feature the session can drop or replace), most specific first.
FEATURE_WORDS = (
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


def rate_info(headers: Mapping[str, str]) -> RateInfo:
    """What OpenAI-style ``x-ratelimit-*``, ``Retry-After`` and ``openai-processing-ms`` headers
    state."""
    processing = int_header(headers, "openai-processing-ms")
    return RateInfo(
        limit_requests=int_header(headers, "x-ratelimit-limit-requests"),
        limit_tokens=int_header(headers, "x-ratelimit-limit-tokens"),
        remaining_requests=int_header(headers, "x-ratelimit-remaining-requests"),
        remaining_tokens=int_header(headers, "x-ratelimit-remaining-tokens"),
        reset_requests=parse_duration(headers.get("x-ratelimit-reset-requests")),
        reset_tokens=parse_duration(headers.get("x-ratelimit-reset-tokens")),
        retry_after=retry_after_seconds(headers),
        server_time=None if processing is None or processing < 0 else processing / 1000.0,
    )


class OpenAIProvider(SDKProvider):
    """The OpenAI (and OpenAI-compatible) provider."""

    spec = SPEC

    def __init__(self, endpoint: Endpoint, http_client: Any = None) -> None:
        import openai  # the SDK is imported when a client is opened, not with the package

        self.config = endpoint
        key = endpoint.resolve_key()
        remember_secret(key)
        remember_url_secrets(endpoint.resolved_base_url())
        remember_url_secrets(endpoint.azure_endpoint)
        common: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": endpoint.timeout}
        # Our own HTTP client (the SDK's default one), so a reply's status is seen when its
        # headers arrive: a 2xx whose body then stalls or breaks was billed (ReplyHeaders).
        common["http_client"] = watch_reply_headers(
            http_client if http_client is not None else openai.DefaultAsyncHttpxClient())
        if endpoint.azure_endpoint:
            self.sdk: openai.AsyncOpenAI = openai.AsyncAzureOpenAI(
                azure_endpoint=endpoint.azure_endpoint,
                api_version=endpoint.azure_api_version or os.environ.get("OPENAI_API_VERSION") or "2024-10-21",
                **common,
            )
        else:
            self.sdk = openai.AsyncOpenAI(base_url=endpoint.resolved_base_url(), **common)
        # The chat resource imports its types on first use (~75 ms; ten times that on a busy
        # machine): here, when the client opens, not inside the run's first request, which
        # goes alone (slow start) while every other request waits for its reply.
        self.chat = self.sdk.chat.completions

    async def _send(self, resource: Any, body: Mapping[str, Any], read_timeout: float,
                    **required: Any) -> Sent:
        # The SDK reads the whole body inside create(); each read waits at most read_timeout.
        # The body goes as extra_body, sent as it is: create() would otherwise walk every
        # parameter against its TypedDicts (the JSON schema, every message) -- 1-1.5 ms of CPU
        # per call, a fifth of a judgment's, which a busy machine cannot spare. The body is
        # ours, built to the API's shape; ``required`` gives create()'s required arguments
        # empty, and the extra body's keys replace them.
        with ReplyHeaders() as seen:
            try:
                raw = await resource.with_raw_response.create(model=body.get("model"), **required,
                                                              extra_body=dict(body), timeout=read_timeout)
            except Exception as exc:
                lost = seen.lost(exc)
                if lost is not None:
                    raise lost from None
                raise
        return Sent(raw.http_response.content, raw.headers, raw.status_code)

    async def send_chat(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        return await self._send(self.chat, body, read_timeout, messages=[])

    async def send_embed(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        return await self._send(self.sdk.embeddings, body, read_timeout, input=[])

    def chat_reply(self, sent: Sent, *, attempts: int) -> Completion:
        with CollectorPaused():  # the reply's JSON tree is gone when this returns
            return self._chat_reply(sent.content, sent.latency, attempts)

    @staticmethod
    def _chat_reply(content: bytes, latency: float, attempts: int) -> Completion:
        data = json_object(content)
        try:
            return Completion.from_dict(data, latency=latency, attempts=attempts)
        except BadBody:
            raise
        except Exception as exc:  # a 200 read this far is billed: never an uncounted crash
            raise BadBody(f"unreadable reply: {type(exc).__name__}: {exc}", usage_in(data)) from None

    def embed_reply(self, sent: Sent, *, expected: int, attempts: int) -> EmbeddingReply:
        data = json_object(sent.content)
        try:
            return EmbeddingReply.from_dict(data, expected=expected, latency=sent.latency, attempts=attempts)
        except BadBody:
            raise
        except Exception as exc:  # e.g. base64 that is not a vector: billed all the same
            tokens = embedding_tokens(data.get("usage"))
            raise BadBody(f"unreadable reply: {type(exc).__name__}: {exc}",
                          None if tokens is None else Usage(calls=1, prompt_tokens=tokens)) from None

    def rate_info(self, headers: Mapping[str, str]) -> RateInfo:
        return rate_info(headers)

    def classify(self, exc: BaseException) -> Verdict:
        failure = failure_of(exc)
        status = status_of(exc)
        if status is None:
            return transport_verdict(exc, failure)
        quota = status == 429 and error_code(exc) == "insufficient_quota"
        retry = not quota and (status in RETRY_STATUS or (status >= 500 and status not in PERMANENT_STATUS))
        where = f"{self.endpoint} (model {self.config.model!r})"
        return Verdict(
            failure, retry=retry, free=status == 429 and not quota, status=status,
            reason=f"HTTP {status}: {redact(server_message(exc))}",
            rate=rate_info(headers_of(exc)),
            final=None if retry else final_for_status(
                exc, where=where, prompt_too_long=("context length", "maximum context", "too many tokens"),
                feature_words=FEATURE_WORDS),
        )
