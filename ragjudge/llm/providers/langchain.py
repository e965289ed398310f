"""A LangChain chat model as the judge (any ``BaseChatModel``: ``ChatOpenAI``, ``ChatAnthropic``,
``ChatOllama``, LangChain's fake chat models...): ``LLM(chat_model)``.

Requests go through ``ainvoke`` with the chat messages as ``{"role", "content"}`` dicts. The
prompt's JSON schema is passed with ``with_structured_output(schema, include_raw=True)`` where
the model supports it (the parsed object is the reply; the raw message gives usage and the
finish reason); a model without it (``NotImplementedError``) answers the plain prompt, which
asks for JSON, and the session's repair policy checks it. Usage is the message's
``usage_metadata`` (``input_tokens``, ``output_tokens``, cache reads); the model name is the
object's ``model_name`` / ``model`` / ``model_id``, else its class name. LangChain is imported
by the object's own module, never here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..cost import Usage
from .base import Completion, ProviderSpec
from .objects import ObjectProvider, dumps, in_modules, json_schema, text_of

__all__ = ["SPEC", "LangChainProvider", "recognise", "usage_of"]

SPEC = ProviderSpec(
    name="langchain",
    about="a LangChain chat model object (LLM(chat_model))",
    key_env="",
    features=frozenset({"json_schema", "object"}),
)


def recognise(obj: Any) -> str | None:
    """The model name of a LangChain chat model (``None``: not one)."""
    if not in_modules(obj, "langchain_core.", ("BaseChatModel",)):
        return None
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(obj, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(obj).__name__


def usage_of(message: Any) -> Usage:
    """A message's ``usage_metadata`` as usage (unknown when it has none)."""
    meta = getattr(message, "usage_metadata", None)
    if not isinstance(meta, Mapping):
        return Usage(1, unknown=1)
    inp, out = meta.get("input_tokens"), meta.get("output_tokens")
    if not isinstance(inp, int) or not isinstance(out, int) or inp < 0 or out < 0:
        return Usage(1, unknown=1)
    details = meta.get("input_token_details")
    cached = details.get("cache_read") if isinstance(details, Mapping) else None
    return Usage(1, inp, min(cached, inp) if isinstance(cached, int) and cached > 0 else 0, out)


class LangChainProvider(ObjectProvider):
    """The ``langchain`` provider (see the module docstring)."""

    spec = SPEC

    def __init__(self, endpoint: Any, http_client: Any = None) -> None:
        super().__init__(endpoint, http_client)
        #: Runnables with structured output per schema name; ``None``: the model has none.
        self._structured: dict[str, Any] | None = {}

    def _runnable(self, name: str, schema: dict[str, Any]) -> Any:
        if self._structured is None:
            return None
        if name not in self._structured:
            try:
                self._structured[name] = self.target.with_structured_output(
                    {"title": name, "description": f"the {name} answer", **schema}, include_raw=True)
            except NotImplementedError:
                self._structured = None  # the plain prompt asks for JSON; the session checks it
                return None
        return self._structured[name]

    async def ask(self, body: Mapping[str, Any]) -> Completion:
        messages = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        wanted = json_schema(body)
        runnable = self._runnable(*wanted) if wanted is not None else None
        text: str | None
        if runnable is not None:
            out = await runnable.ainvoke(messages)
            raw = out.get("raw")
            parsed = out.get("parsed")
            text = dumps(parsed) if parsed is not None else text_of(getattr(raw, "content", None))
            if parsed is None and not text:  # the tool call's arguments, as the model wrote them
                calls = getattr(raw, "tool_calls", None) or []
                text = dumps(calls[0].get("args")) if calls else None
        else:
            raw = await self.target.ainvoke(messages)
            text = text_of(getattr(raw, "content", None))
        meta = getattr(raw, "response_metadata", None) or {}
        extra = getattr(raw, "additional_kwargs", None) or {}
        finish = meta.get("finish_reason") or meta.get("stop_reason")
        served = meta.get("model_name") or meta.get("model")
        refusal = extra.get("refusal") if isinstance(extra, Mapping) else None
        return Completion(text=text, finish_reason={"max_tokens": "length"}.get(finish, finish)
                          if isinstance(finish, str) else None,
                          refusal=str(refusal) if refusal else None, usage=usage_of(raw), logprobs=None,
                          system_fingerprint=None, model=served if isinstance(served, str) else None)
