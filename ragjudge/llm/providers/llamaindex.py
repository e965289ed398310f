"""A LlamaIndex LLM as the judge (any ``llama_index.core`` ``LLM``: ``OpenAI``, ``Ollama``,
``MockLLM``...): ``LLM(llm)``.

Requests go through ``achat`` with the chat messages as LlamaIndex ``ChatMessage`` values; the
prompt asks for JSON in its schema and the session's repair policy checks the reply (a
LlamaIndex LLM takes structured output as a pydantic class, not the JSON schema a prompt
states). Usage is read from the response's ``raw`` reply (an OpenAI-shaped ``usage``) or its
``additional_kwargs`` (``prompt_tokens`` / ``completion_tokens``); the model name is the
object's ``metadata.model_name`` (its class name when that says ``unknown``). LlamaIndex is
imported only when a request is sent, and then it is the object's own framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..cost import Usage
from .base import Completion, ProviderSpec
from .objects import ObjectProvider, in_modules, text_of

__all__ = ["SPEC", "LlamaIndexProvider", "recognise", "usage_of"]

SPEC = ProviderSpec(
    name="llamaindex",
    about="a LlamaIndex LLM object (LLM(llm))",
    key_env="",
    features=frozenset({"object"}),
)


def recognise(obj: Any) -> str | None:
    """The model name of a LlamaIndex LLM (``None``: not one)."""
    if not in_modules(obj, "llama_index.core", ("LLM", "BaseLLM")):
        return None
    try:
        name = obj.metadata.model_name
    except Exception:  # noqa: BLE001 -- a metadata property of a custom LLM may fail
        name = None
    return name if isinstance(name, str) and name and name != "unknown" else type(obj).__name__


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def usage_of(response: Any) -> Usage:
    """What a chat response says it used (unknown when it says nothing)."""
    usage = Usage.from_openai(_get(_get(response, "raw"), "usage"))
    if not usage.unknown:
        return usage
    extra = _get(response, "additional_kwargs") or {}
    return Usage.from_openai({"prompt_tokens": _get(extra, "prompt_tokens"),
                              "completion_tokens": _get(extra, "completion_tokens")})


class LlamaIndexProvider(ObjectProvider):
    """The ``llamaindex`` provider (see the module docstring)."""

    spec = SPEC

    async def ask(self, body: Mapping[str, Any]) -> Completion:
        # the object's own framework, loaded already
        from llama_index.core.base.llms.types import ChatMessage

        messages = [ChatMessage(role=m["role"], content=m["content"]) for m in body["messages"]]
        response = await self.target.achat(messages)
        message = _get(response, "message")
        raw = _get(response, "raw")
        finish = None
        choices = _get(raw, "choices")
        if isinstance(choices, list) and choices:
            finish = _get(choices[0], "finish_reason")
        served = _get(raw, "model")
        return Completion(text=text_of(_get(message, "content")),
                          finish_reason=finish if isinstance(finish, str) else None, refusal=None,
                          usage=usage_of(response), logprobs=None, system_fingerprint=None,
                          model=served if isinstance(served, str) else None)
