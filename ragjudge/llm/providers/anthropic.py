"""Anthropic's Messages API (Claude models), through the official ``anthropic`` SDK
(the ``anthropic`` extra; imported when a client opens).

Requests
    The neutral chat body is translated: system messages become ``system``; ``max_tokens``
    (required here) and ``temperature`` carry over; a ``json_schema`` response format becomes
    one tool whose ``input_schema`` is the prompt's schema, forced with ``tool_choice``, so the
    reply is the tool's input (structured output); ``json_object`` and ``text`` send the prompt
    alone (it asks for JSON). There are no logprobs and no seed (``features``), so grades carry
    no probabilities and the session never sends those fields. A forced tool costs the tool
    definition plus Anthropic's tool-use system prompt (:data:`TOOL_PROMPT_TOKENS`, counted by
    the dry run). Prompt caching: when the shared prefix (the tool and the system prompt, the
    same for every call of a prompt) is at least the model's minimum cacheable length
    (:func:`min_cacheable_tokens`), the system block carries a ``cache_control`` breakpoint, so
    later calls read that prefix at a tenth of the input price.
Replies
    The ``tool_use`` block's input (or the text blocks) is the completion text. ``stop_reason``
    ``max_tokens`` is a truncated reply, ``refusal`` a refusal. Usage: ``input_tokens`` plus the
    prompt-cache reads and writes are the prompt (each token counted once); cache reads are the
    cached part, cache writes the 5-minute and 1-hour written parts (``cache_creation``), each
    billed at its own rate (:class:`~ragjudge.llm.cost.Price`).
Errors (:meth:`AnthropicProvider.classify`)
    Retried: 408, 409, 429 (the pair's patience, not its attempts), 5xx and 529 ``overloaded``
    (the runner's adaptive concurrency backs off on it), timeouts and connection errors. A
    reached spend or usage limit is not a rate limit: it stops the run at once, like a revoked
    key, in each form the API sends it (:func:`spend_limit_reached`): the tier's monthly cap as a
    429 whose ``details.error_code`` is ``enforced_spend_limit_reached`` (or without
    ``retry-after`` and saying so), a limit the organisation or workspace set itself as a 400
    ``invalid_request_error`` "You have reached your specified API usage limits. You will
    regain access on ...", an exhausted credit balance. A 400 saying the prompt is too long,
    or a 413, fails the item; a 400 about tools lets the session fall back to plain JSON;
    401/403/404 and other 4xx stop the run.
Models
    :meth:`AnthropicProvider.models` reads every page of ``/v1/models`` and adds each dated
    id's aliases (``claude-haiku-4-5`` for ``claude-haiku-4-5-20251001``, ``...-latest``,
    ``...-0``), so the model check accepts the names the API accepts.
Rate limits (:meth:`AnthropicProvider.rate_info`)
    ``anthropic-ratelimit-requests-*`` and ``anthropic-ratelimit-tokens-*`` (``limit``,
    ``remaining``, ``reset`` as an RFC 3339 time), and ``retry-after``.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...errors import LLMError
from ..cost import Price, Usage, estimate_tokens
from ..redaction import redact, remember_secret, remember_url_secrets
from .base import (
    PERMANENT_STATUS,
    BadBody,
    Completion,
    EmbeddingReply,
    ProviderSpec,
    RateInfo,
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
    watch_reply_headers,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint import Endpoint

__all__ = [
    "SPEC",
    "AnthropicProvider",
    "from_messages_reply",
    "messages_usage",
    "min_cacheable_tokens",
    "model_aliases",
    "rate_info",
    "spend_limit_reached",
    "to_messages_request",
]

API_VERSION = "2023-06-01"
RETRY_STATUS = frozenset({408, 409, 429, 529})
#: Prompt tokens Anthropic adds for a forced tool (its tool-use system prompt with
#: ``tool_choice`` ``tool``: 235-340 by model in its docs; the largest is counted).
TOOL_PROMPT_TOKENS = 340
#: Words of a 429 saying the account's spend or usage limit is reached (no wait helps).
SPEND_LIMIT_WORDS = ("spend limit", "spending limit", "usage limit", "regain access", "credit balance",
                     "billing", "spend_limit")
#: Words of a 400 saying the same (a self-set organisation or workspace limit, no credit left):
#: narrower, since any malformed request is a 400 too.
SPEND_LIMIT_400_WORDS = ("reached your specified api usage limits", "reached your specified workspace api usage limits",
                         "credit balance is too low")
#: ``error.details.error_code`` values of a reached spend limit.
SPEND_LIMIT_CODES = frozenset({"enforced_spend_limit_reached"})
FEATURE_WORDS = (("tool_choice", "response_format"), ("tools", "response_format"),
                 ("input_schema", "response_format"), ("temperature", "temperature"))
PROMPT_TOO_LONG = ("prompt is too long", "too many tokens", "context window", "context length")



def _list_price(inp: float, out: float) -> Price:
    """Anthropic's price structure: cache reads at 0.1x input, 5-minute writes at 1.25x,
    1-hour writes at 2x."""
    return Price(inp, out, round(inp * 0.1, 6), round(inp * 1.25, 6), inp * 2)


# Public list prices (USD / 1M tokens: input, output) at the time of writing: the fallback
# where the price database (genai-prices) is absent or does not know a model. They change:
# override them with --prices FILE; the report always shows tokens too.
PRICES: dict[str, Price] = {
    "claude-opus-4-6": _list_price(5.00, 25.00),
    "claude-opus-4-5": _list_price(5.00, 25.00),
    "claude-opus-4-1": _list_price(15.00, 75.00),
    "claude-opus-4": _list_price(15.00, 75.00),
    "claude-opus-4-0": _list_price(15.00, 75.00),
    "claude-sonnet-4-6": _list_price(3.00, 15.00),
    "claude-sonnet-4-5": _list_price(3.00, 15.00),
    "claude-sonnet-4": _list_price(3.00, 15.00),
    "claude-sonnet-4-0": _list_price(3.00, 15.00),
    "claude-3-7-sonnet": _list_price(3.00, 15.00),
    "claude-3-5-sonnet": _list_price(3.00, 15.00),
    "claude-3-opus": _list_price(15.00, 75.00),
    "claude-haiku-4-5": _list_price(1.00, 5.00),
    "claude-3-5-haiku": _list_price(0.80, 4.00),
    "claude-3-haiku": Price(0.25, 1.25, 0.03, 0.30, 0.50),
}

# Minimum cacheable prompt length (tokens) by model-name prefix, from Anthropic's prompt-caching
# documentation; a shorter prefix is never cached, so no breakpoint is sent for it.
_MIN_CACHEABLE = (("claude-opus-4-6", 4096), ("claude-opus-4-5", 4096), ("claude-haiku-4-5", 4096),
                  ("claude-3-5-haiku", 2048), ("claude-3-haiku", 2048), ("claude-haiku", 2048))
_DATED = re.compile(r"^(?P<base>.+)-(?P<date>20\d{6})$")

SPEC = ProviderSpec(
    name="anthropic",
    about="Anthropic's Messages API (Claude; the anthropic extra)",
    key_env="ANTHROPIC_API_KEY", base_url_env="ANTHROPIC_BASE_URL",
    features=frozenset({"json_schema"}),
    prices=PRICES,
    schema_overhead=TOOL_PROMPT_TOKENS,
    extra="anthropic",
)


def _reset_seconds(value: str | None) -> float | None:
    """Seconds until an RFC 3339 reset time (``None``: absent or unreadable)."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def rate_info(headers: Mapping[str, str]) -> RateInfo:
    """What ``anthropic-ratelimit-*`` and ``retry-after`` headers state."""
    h = "anthropic-ratelimit-"
    return RateInfo(
        limit_requests=int_header(headers, h + "requests-limit"),
        limit_tokens=int_header(headers, h + "tokens-limit"),
        remaining_requests=int_header(headers, h + "requests-remaining"),
        remaining_tokens=int_header(headers, h + "tokens-remaining"),
        reset_requests=_reset_seconds(headers.get(h + "requests-reset")),
        reset_tokens=_reset_seconds(headers.get(h + "tokens-reset")),
        retry_after=retry_after_seconds(headers),
    )


def model_aliases(model_id: str) -> list[str]:
    """The names the API also accepts for a listed model id: a dated id
    (``claude-haiku-4-5-20251001``) answers to its undated name, ``...-latest`` and, for a
    bare major version (``claude-opus-4-20250514``), ``...-0``."""
    m = _DATED.match(model_id)
    if m is None:
        return []
    base = m.group("base")
    out = [base, base + "-latest"]
    if re.search(r"-\d$", base):
        out.append(base + "-0")
    return out


def min_cacheable_tokens(model: str) -> int:
    """The shortest prompt prefix ``model`` caches (1024 tokens unless its docs say more)."""
    for prefix, tokens in _MIN_CACHEABLE:
        if model.startswith(prefix):
            return tokens
    return 1024


def to_messages_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages API request for a neutral (OpenAI-shaped) chat body."""
    system = [str(m.get("content") or "") for m in body.get("messages", ()) if m.get("role") == "system"]
    messages = [{"role": m["role"], "content": str(m.get("content") or "")}
                for m in body.get("messages", ()) if m.get("role") in ("user", "assistant")]
    req: dict[str, Any] = {
        "model": body["model"],
        "messages": messages,
        "max_tokens": int(body.get("max_tokens") or body.get("max_completion_tokens") or 1024),
    }
    if "temperature" in body:
        req["temperature"] = body["temperature"]
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        spec = rf.get("json_schema") or {}
        name = str(spec.get("name") or "answer")[:64]
        req["tools"] = [{"name": name, "description": "Record the answer in this exact structure.",
                         "input_schema": spec.get("schema") or {"type": "object"}}]
        req["tool_choice"] = {"type": "tool", "name": name}
    if system:
        text = "\n\n".join(system)
        # The tool and the system prompt are the prefix every call of a prompt shares (the API
        # caches tools, then system, then messages): mark it when it is long enough to be
        # cached. A prefix shorter than the minimum would not be cached anyway.
        prefix = estimate_tokens([{"content": text}], rf if req.get("tools") else None,
                                 schema_overhead=TOOL_PROMPT_TOKENS)
        if prefix >= min_cacheable_tokens(str(body["model"])):
            req["system"] = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
        else:
            req["system"] = text
    return req


def _details_code(exc: BaseException) -> str:
    """``error.details.error_code`` of an error body (``""``: none)."""
    body = getattr(exc, "body", None)
    err = body.get("error") if isinstance(body, Mapping) else None
    details = err.get("details") if isinstance(err, Mapping) else None
    code = details.get("error_code") if isinstance(details, Mapping) else None
    return code if isinstance(code, str) else ""


def spend_limit_reached(exc: BaseException) -> bool:
    """Whether an error says the account's spend or usage limit is reached, which waiting
    within a run does not lift: a 429 whose details name it, or without retry-after whose
    code or message says so; a 400 saying a specified usage limit is reached or the credit
    balance is too low."""
    status = status_of(exc)
    if status == 400:
        return any(w in server_message(exc).lower() for w in SPEND_LIMIT_400_WORDS)
    if status != 429:
        return False
    if _details_code(exc) in SPEND_LIMIT_CODES:
        return True
    if retry_after_seconds(headers_of(exc)) is not None:
        return False
    text = f"{error_code(exc)} {server_message(exc)}".lower()
    return any(w in text for w in SPEND_LIMIT_WORDS)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    return int(value) if value >= 0 else None


def messages_usage(usage: Any) -> Usage:
    """Usage of a Messages reply (``Usage(calls=1, unknown=1)`` when it states none). Every
    prompt token is counted once: ``input_tokens`` plus cache reads plus cache writes; the
    writes are split into 5-minute and 1-hour ones by ``cache_creation`` (a part it does not
    place is counted at the dearer 1-hour rate)."""
    if not isinstance(usage, Mapping):
        return Usage(calls=1, unknown=1)
    inp, out = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
    if inp is None or out is None:
        return Usage(calls=1, unknown=1)
    read = _count(usage.get("cache_read_input_tokens")) or 0
    write = _count(usage.get("cache_creation_input_tokens")) or 0
    split = usage.get("cache_creation")
    if isinstance(split, Mapping):
        w5 = _count(split.get("ephemeral_5m_input_tokens")) or 0
        w1h = _count(split.get("ephemeral_1h_input_tokens")) or 0
        w1h += max(0, write - w5 - w1h)
        write = w5 + w1h
    else:
        w5, w1h = write, 0
    return Usage(calls=1, prompt_tokens=inp + read + write, cached_tokens=read, completion_tokens=out,
                 cache_write_tokens=w5, cache_write_1h_tokens=w1h)


def from_messages_reply(d: Mapping[str, Any], *, latency: float = 0.0, attempts: int = 1) -> Completion:
    """The completion in a Messages reply (:class:`BadBody` when the body is not one)."""
    usage = messages_usage(d.get("usage"))
    stated = None if usage.unknown else usage
    content = d.get("content")
    if d.get("type") not in (None, "message") or not isinstance(content, list):
        raise BadBody("reply is not a message", stated)
    tool = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]
    if tool:
        if not isinstance(tool[0].get("input"), Mapping):
            raise BadBody("tool_use block has no input object", stated)
        text: str | None = json.dumps(tool[0]["input"], ensure_ascii=False)
    else:
        parts = [b.get("text") for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
        if any(not isinstance(p, str) for p in parts):
            raise BadBody("text block without text", stated)
        text = "".join(parts) if parts else None  # type: ignore[arg-type]
    stop = d.get("stop_reason")
    finish = {"max_tokens": "length", "refusal": "content_filter", "model_context_window_exceeded": "length"}.get(
        stop if isinstance(stop, str) else "", "stop")
    refusal = (text or "declined by the model") if stop == "refusal" else None
    model = d.get("model")
    return Completion(text=None if refusal else text, finish_reason=finish, refusal=refusal, usage=usage,
                      logprobs=None, system_fingerprint=None, model=model if isinstance(model, str) else None,
                      latency=latency, attempts=attempts)


class AnthropicProvider(SDKProvider):
    """The Anthropic Messages API provider."""

    spec = SPEC

    def __init__(self, endpoint: Endpoint, http_client: Any = None) -> None:
        try:
            import anthropic
        except ImportError:
            raise LLMError("the anthropic provider needs the anthropic SDK: pip install -e '.[anthropic]' "
                           "in the ragjudge checkout") from None
        self.config = endpoint
        key = endpoint.resolve_key()
        remember_secret(key)
        remember_url_secrets(endpoint.resolved_base_url())
        common: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": endpoint.timeout,
                                  "base_url": endpoint.resolved_base_url()}
        # The reply's status as soon as its headers arrive: a 200 whose body then stalls, breaks
        # off or does not decode was billed, and is counted at its worst case, never as free.
        default = getattr(anthropic, "DefaultAsyncHttpxClient", None)
        if http_client is not None or default is not None:
            common["http_client"] = watch_reply_headers(http_client if http_client is not None else default())
        self.sdk = anthropic.AsyncAnthropic(**common)
        self._known: frozenset[str] | None = None

    async def send_chat(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        create = self.sdk.messages.with_raw_response.create
        if self._known is None:
            # SDK releases add and drop keyword parameters (temperature left the signature in
            # 2.x while the API kept it): fields this SDK does not name travel in extra_body.
            self._known = frozenset(inspect.signature(self.sdk.messages.create).parameters)
        request = to_messages_request(body)
        extra = {k: request.pop(k) for k in list(request) if k not in self._known}
        with ReplyHeaders() as seen:
            try:
                raw = await create(**request, **({"extra_body": extra} if extra else {}), timeout=read_timeout)
            except Exception as exc:
                lost = seen.lost(exc)
                if lost is not None:
                    raise lost from None
                raise
        return Sent(raw.http_response.content, raw.headers, raw.status_code)

    def chat_reply(self, sent: Sent, *, attempts: int) -> Completion:
        data = json_object(sent.content)
        try:
            return from_messages_reply(data, latency=sent.latency, attempts=attempts)
        except BadBody:
            raise
        except Exception as exc:  # a 200 read this far is billed: never an uncounted crash
            usage = messages_usage(data.get("usage"))
            raise BadBody(f"unreadable reply: {type(exc).__name__}: {exc}",
                          None if usage.unknown else usage) from None

    async def send_embed(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        raise LLMError("the anthropic provider has no embeddings endpoint")

    def embed_reply(self, sent: Sent, *, expected: int, attempts: int) -> EmbeddingReply:
        raise LLMError("the anthropic provider has no embeddings endpoint")

    def rate_info(self, headers: Mapping[str, str]) -> RateInfo:
        return rate_info(headers)

    async def models(self) -> list[str]:
        """Every model id ``/v1/models`` lists (all its pages), with their aliases."""
        out: list[str] = []
        async for m in self.sdk.models.list(limit=1000):
            out.append(m.id)
            out.extend(model_aliases(m.id))
        return list(dict.fromkeys(out))

    def classify(self, exc: BaseException) -> Verdict:
        failure = failure_of(exc)
        status = status_of(exc)
        if status is None:
            return transport_verdict(exc, failure)
        retry = status in RETRY_STATUS or (status >= 500 and status not in PERMANENT_STATUS)
        message = redact(server_message(exc))
        code = error_code(exc)
        if spend_limit_reached(exc):
            # Not a rate limit: no wait within a run lifts it, so the run stops now, like a
            # revoked key, and writes what it has.
            code = _details_code(exc) or code
            return Verdict(failure, retry=False, status=status, reason=f"HTTP {status} {code}: {message}",
                           rate=rate_info(headers_of(exc)), final=LLMError(
                               f"spend limit reached at {self.endpoint} (HTTP {status} {code}): {message} "
                               "-- raise the limit or wait for it to reset, then rerun (answers so far "
                               "are kept)"))
        return Verdict(
            failure, retry=retry, free=status == 429, status=status,
            reason=f"HTTP {status}{' ' + code if code else ''}: {message}",
            rate=rate_info(headers_of(exc)),
            final=None if retry else final_for_status(
                exc, where=f"{self.endpoint} (model {self.config.model!r})",
                prompt_too_long=PROMPT_TOO_LONG, feature_words=FEATURE_WORDS),
        )
