"""LiteLLM's async completion function as the judge: ``LLM(partial(litellm.acompletion,
model="openai/gpt-4o-mini"))`` (or any function of that shape: ``model`` and ``messages``
keywords, an OpenAI-shaped response with ``usage``).

The request's ``model``, ``messages``, ``temperature``, ``max_tokens`` and ``response_format``
(the prompt's JSON schema) are passed as keywords; a model that rejects ``response_format``
(a 400 naming it) makes the session fall back to plain JSON, as with any server. Usage, the
finish reason and the served model are read from the response; errors carry LiteLLM's HTTP
status and are judged as HTTP errors (429 and 5xx retried). The model name is the ``model``
bound with ``functools.partial``. LiteLLM is never imported here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ...errors import InputError
from .base import Completion, ProviderSpec
from .objects import ObjectProvider, openai_completion

__all__ = ["SPEC", "LiteLLMProvider", "recognise"]

SPEC = ProviderSpec(
    name="litellm",
    about="LiteLLM's acompletion (or a function of its shape) bound to a model with functools.partial",
    key_env="",
    features=frozenset({"json_schema", "object"}),
)


def _shaped(fn: Any) -> bool:
    """Called as ``fn(model=..., messages=...)``: LiteLLM's own, or a function of that shape."""
    target = getattr(fn, "func", fn)
    if str(getattr(target, "__module__", "")).split(".")[0] == "litellm":
        return True
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "messages" in params and "model" in params


def recognise(obj: Any) -> str | None:
    """The model name of a LiteLLM-style completion function (``None``: not one); one with no
    model bound is an error saying how to bind it."""
    if not callable(obj) or isinstance(obj, type) or not _shaped(obj):
        return None
    model = (getattr(obj, "keywords", None) or {}).get("model")
    if not isinstance(model, str) or not model:
        raise InputError("bind the model to the completion function: "
                         "LLM(functools.partial(litellm.acompletion, model=\"provider/model\"))",
                         field="model")
    return model


class LiteLLMProvider(ObjectProvider):
    """The ``litellm`` provider (see the module docstring)."""

    spec = SPEC

    async def ask(self, body: Mapping[str, Any]) -> Completion:
        keywords = {k: body[k] for k in ("messages", "temperature", "max_tokens", "response_format", "seed")
                    if k in body}
        response = self.target(model=self.model, **keywords)
        if inspect.isawaitable(response):
            response = await response
        return openai_completion(response)
