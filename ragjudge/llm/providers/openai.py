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
Replies (:func:`completion_from_dict`, :func:`embedding_reply_from_dict`)
    A chat completion's text, finish reason, refusal, usage, logprobs (as the neutral
    :class:`~.base.Completion` holds them) and an embeddings reply's vectors; a Batch API result
    line is read by :func:`parse_completion`.
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..cost import MAX_COUNT, Usage
from ..redaction import redact, remember_secret, remember_url_secrets
from .base import (
    PERMANENT_STATUS,
    BadBody,
    Completion,
    EmbeddingReply,
    ProviderSpec,
    RateInfo,
    RejectedReply,
    ReplyHeaders,
    SDKProvider,
    Sent,
    Verdict,
    error_code,
    failure_of,
    final_for_status,
    headers_of,
    int_header,
    json_object,
    retry_after_seconds,
    server_message,
    status_of,
    transport_verdict,
    usage_in,
    watch_reply_headers,
)

if TYPE_CHECKING:  # pragma: no cover
    import openai

    from ..endpoint import Endpoint

__all__ = ["SPEC", "OpenAIProvider", "rate_info", "RETRY_STATUS", "FEATURE_WORDS", "parse_duration",
           "parse_completion", "completion_from_dict", "embedding_reply_from_dict", "embedding_tokens"]

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


# -- OpenAI's wire format: what its replies and headers say ------------------------------

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


def parse_completion(d: Any) -> Completion:
    """A chat completion obtained elsewhere (a Batch API result line): an unusable body raises
    :class:`RejectedReply` carrying the usage it states, so it is still counted."""
    if not isinstance(d, Mapping):
        raise RejectedReply("malformed reply body (not a JSON object)", usage=None)
    try:
        return completion_from_dict(d)
    except BadBody as exc:
        raise RejectedReply(f"malformed reply body ({exc})", usage=exc.usage) from None


def completion_from_dict(d: Mapping[str, Any], *, latency: float = 0.0, attempts: int = 1) -> Completion:
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
    return Completion(
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


def embedding_reply_from_dict(d: Mapping[str, Any], *, expected: int, latency: float = 0.0,
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
    return EmbeddingReply([v for v in vectors if v is not None], usage, d.get("model"), latency, attempts)


def embedding_tokens(usage: Any) -> int | None:
    """The input tokens an ``/embeddings`` reply states (``prompt_tokens`` or
    ``total_tokens``), ``None`` when it states no readable count."""
    if not isinstance(usage, Mapping):
        return None
    for name in ("prompt_tokens", "total_tokens"):
        value = usage.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 13:
            value = int(value.strip())
        if isinstance(value, int) and 0 <= value <= MAX_COUNT:
            return value
        if isinstance(value, float) and math.isfinite(value) and 0 <= value <= MAX_COUNT and value == int(value):
            return int(value)
    return None


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


# -- the provider ---------------------------------------------------------------------------

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
        data = json_object(sent.content)
        try:
            return completion_from_dict(data, latency=sent.latency, attempts=attempts)
        except BadBody:
            raise
        except Exception as exc:  # a 200 read this far is billed: never an uncounted crash
            raise BadBody(f"unreadable reply: {type(exc).__name__}: {exc}", usage_in(data)) from None

    def embed_reply(self, sent: Sent, *, expected: int, attempts: int) -> EmbeddingReply:
        data = json_object(sent.content)
        try:
            return embedding_reply_from_dict(data, expected=expected, latency=sent.latency, attempts=attempts)
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
