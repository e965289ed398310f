"""Any function as the judge: ``LLM(fn)`` with ``fn(messages, schema) -> text`` (``async`` or
not), for a model served your own way (a local pipeline, a client of your company's gateway).

``messages`` are the chat messages (``{"role", "content"}`` dicts); ``schema`` is the JSON
schema the reply must follow (``None`` once a request asks for plain JSON or text). The
function returns the reply's text, the reply object (a ``dict``), or an OpenAI-shaped response
(with ``choices`` and ``usage``, whose usage is then counted). A plain text carries no usage:
each reply is counted at its worst case, and that is said once. The model name is the
function's ``model_name`` attribute, else its name.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ..cost import Usage
from .base import Completion, ProviderSpec
from .objects import ObjectProvider, dumps, json_schema, openai_completion

__all__ = ["SPEC", "CallableProvider", "recognise"]

SPEC = ProviderSpec(
    name="callable",
    about="a function (messages, schema) -> text of your own (LLM(fn))",
    key_env="",
    features=frozenset({"json_schema", "object"}),
)


def recognise(obj: Any) -> str | None:
    """The model name of a function (``None``: not callable)."""
    if not callable(obj) or isinstance(obj, type):
        return None
    name = getattr(obj, "model_name", None)
    if isinstance(name, str) and name:
        return name
    target = getattr(obj, "func", obj)
    return str(getattr(target, "__qualname__", None) or type(obj).__name__)


class CallableProvider(ObjectProvider):
    """The ``callable`` provider (see the module docstring)."""

    spec = SPEC

    async def ask(self, body: Mapping[str, Any]) -> Completion:
        wanted = json_schema(body)
        messages = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        out = self.target(messages, wanted[1] if wanted is not None else None)
        if inspect.isawaitable(out):
            out = await out
        if out is None or isinstance(out, str):
            text = out
        elif (isinstance(out, Mapping) and "choices" in out) or hasattr(out, "choices"):
            return openai_completion(out)
        else:
            text = dumps(out)
        return Completion(text=text, finish_reason="stop", refusal=None, usage=Usage(1, unknown=1),
                          logprobs=None, system_fingerprint=None, model=None)
