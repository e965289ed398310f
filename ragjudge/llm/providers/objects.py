"""What the providers of model objects share: a model the user already has -- a LangChain chat
model (:mod:`.langchain`), a LlamaIndex LLM (:mod:`.llamaindex`), LiteLLM's ``acompletion``
(:mod:`.litellm`), an async function ``(messages, schema) -> text`` (:mod:`.callable`) -- is
called in place of an HTTP API, behind the same session, cache, budget, retry loop and repair
policy.

Each such provider answers one request with :meth:`ObjectProvider.ask` (the object's reply read
into a :class:`Completion`); this class adds the rest of the seam. Usage is read where the
object reports it; where it does not, the caller counts each reply at its worst case and this
module says so once per class on stderr. Provenance names the object's model and, as the
``system_fingerprint``, its class. Errors: an :class:`LLMError` stops the run; an SDK error
carrying an HTTP status (the frameworks raise their providers' errors) is judged as the HTTP
providers judge it; timeouts, connection errors and rate limits are retried; anything else
fails the item with its reason. Frameworks are never imported here: objects are recognised by
their classes' module names (``recognise`` in each module).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import LLMError
from ..cost import Usage
from ..provenance import FailureKind
from ..redaction import redact
from .base import (
    PERMANENT_STATUS,
    CallFailed,
    Completion,
    EmbeddingReply,
    RateInfo,
    Sent,
    Verdict,
    failure_of,
    final_for_status,
    status_of,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint import Endpoint

__all__ = ["ObjectProvider", "class_path", "in_modules", "json_schema", "openai_completion", "text_of"]

log = logging.getLogger("ragjudge.llm")

#: Classes already said to report no usage (said once per process, not once per call).
_SAID: set[str] = set()
FEATURE_WORDS = (("response_format", "response_format"), ("json_schema", "response_format"),
                 ("structured output", "response_format"))
PROMPT_TOO_LONG = ("context length", "context_length", "too many tokens", "prompt is too long",
                   "maximum context")


def class_path(obj: Any) -> str:
    """``module.Class`` of ``obj`` (a function: its module and name)."""
    target = getattr(obj, "func", obj)  # functools.partial
    if callable(target) and hasattr(target, "__qualname__") and not isinstance(target, type) \
            and type(target).__name__ in ("function", "builtin_function_or_method", "method"):
        module = getattr(target, "__module__", None)
        return f"{module}.{target.__qualname__}" if module else target.__qualname__
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def in_modules(obj: Any, prefix: str, names: tuple[str, ...]) -> bool:
    """Whether a class of ``obj``'s MRO named one of ``names`` lives under module ``prefix``:
    how a framework's object is told without importing the framework."""
    return any(c.__module__.startswith(prefix) and c.__name__.split("[")[0] in names
               for c in type(obj).__mro__)


def json_schema(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The (name, JSON schema) a request asks the reply to follow (``None``: plain JSON or text)."""
    rf = body.get("response_format") or {}
    if rf.get("type") != "json_schema":
        return None
    spec = rf.get("json_schema") or {}
    schema = spec.get("schema")
    return (str(spec.get("name") or "answer"), dict(schema)) if isinstance(schema, Mapping) else None


def text_of(content: Any) -> str | None:
    """A message's content as text (a list of content blocks: their text parts joined)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b if isinstance(b, str) else b.get("text") for b in content
                 if isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")]
        return "".join(p for p in parts if isinstance(p, str))
    return str(content)


def _plain(obj: Any) -> Any:
    """An SDK's response object as plain data (pydantic models, objects with ``dict()``)."""
    for method in ("model_dump", "dict", "to_dict"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                return fn()
            except Exception:  # noqa: BLE001 -- try the next spelling
                continue
    return obj


def openai_completion(response: Any) -> Completion:
    """The completion in an OpenAI-shaped chat response (LiteLLM's ``ModelResponse``, a
    dict): its text, finish reason, refusal, usage (unknown when it states none) and model."""
    d = _plain(response)
    if not isinstance(d, Mapping):
        raise CallFailed(f"the reply is not a chat completion: {type(response).__name__}",
                         kind=FailureKind.MALFORMED)
    choices = d.get("choices")
    choice = _plain(choices[0]) if isinstance(choices, list) and choices else {}
    message = _plain(choice.get("message")) if isinstance(choice, Mapping) else {}
    message = message if isinstance(message, Mapping) else {}
    refusal = message.get("refusal")
    finish = choice.get("finish_reason") if isinstance(choice, Mapping) else None
    model = d.get("model")
    return Completion(text=text_of(message.get("content")),
                      finish_reason=finish if isinstance(finish, str) else None,
                      refusal=str(refusal) if refusal else None, usage=Usage.from_openai(d.get("usage")),
                      logprobs=None, system_fingerprint=None,
                      model=model if isinstance(model, str) else None)


@dataclass
class _Sent(Sent):
    completion: Completion | None = None


class ObjectProvider:
    """A model object behind the provider seam (subclasses implement :meth:`ask`)."""

    spec: Any

    def __init__(self, endpoint: Endpoint, http_client: Any = None) -> None:
        self.target = endpoint.target
        self.model = endpoint.model
        self.cls = class_path(self.target)

    @property
    def endpoint(self) -> str:
        return f"{self.spec.name} {self.cls.rsplit('.', 1)[-1]}"

    async def close(self) -> None:
        return None

    async def ask(self, body: Mapping[str, Any]) -> Completion:
        """One request to the object: its reply as a completion."""
        raise NotImplementedError

    async def send_chat(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        return _Sent(b"", {}, 200, completion=await self.ask(body))

    def chat_reply(self, sent: Sent, *, attempts: int) -> Completion:
        assert isinstance(sent, _Sent) and sent.completion is not None
        comp = sent.completion
        comp.attempts, comp.latency = attempts, sent.latency
        comp.model = comp.model or self.model
        comp.system_fingerprint = self.cls
        if comp.usage.unknown and self.cls not in _SAID:
            _SAID.add(self.cls)
            log.warning("ragjudge: warning: %s reports no token usage: each of its replies is "
                        "counted at its worst case (costs and the budget are upper bounds)", self.cls)
        return comp

    async def send_embed(self, body: Mapping[str, Any], *, read_timeout: float) -> Sent:
        raise LLMError(f"the {self.spec.name} provider has no embeddings")

    def embed_reply(self, sent: Sent, *, expected: int, attempts: int) -> EmbeddingReply:
        raise LLMError(f"the {self.spec.name} provider has no embeddings")

    def rate_info(self, headers: Mapping[str, str]) -> RateInfo:
        return RateInfo()

    def classify(self, exc: BaseException) -> Verdict:
        failure = failure_of(exc)
        if isinstance(exc, (LLMError, CallFailed)):
            return Verdict(failure, retry=False, reason=str(exc), final=exc)
        status = status_of(exc)
        if status is not None:  # the framework's underlying SDK error: judged as HTTP
            retry = status in (408, 409, 429) or (status >= 500 and status not in PERMANENT_STATUS)
            return Verdict(failure, retry=retry, free=status == 429, status=status,
                           reason=redact(f"HTTP {status}: {exc}"),
                           final=None if retry else final_for_status(
                               exc, where=f"{self.cls} (model {self.model!r})",
                               prompt_too_long=PROMPT_TOO_LONG, feature_words=FEATURE_WORDS))
        name = type(exc).__name__.lower()
        if "ratelimit" in name:
            return Verdict(failure, retry=True, free=True, reason=redact(f"rate limited: {exc}"))
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)) \
                or failure.kind in ("timeout", "unreachable"):
            return Verdict(failure, retry=True, free=failure.kind == "unreachable",
                           reason=redact(f"{type(exc).__name__}: {exc}"))
        reason = redact(f"{self.cls} failed: {type(exc).__name__}: {exc}")
        return Verdict(failure, retry=False, reason=reason,
                       final=CallFailed(reason, kind=FailureKind.parse(getattr(exc, "kind", None))
                                        or FailureKind.OTHER))


def dumps(obj: Any) -> str:
    """A parsed structured reply as the JSON text the session checks."""
    return json.dumps(_plain(obj), ensure_ascii=False)
