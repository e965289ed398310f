"""The registry of LLM providers (see :mod:`.base` for the seam they plug into).

A provider is one module here (its ``SPEC`` and its class) plus one :func:`register` call
below. Modules import their SDK only when a client is opened, so ``--provider`` choices, key
variables, feature flags and prices cost nothing, and an optional SDK may be missing.

Providers with the ``object`` feature call a Python object (``Endpoint.target``) instead of an
address: ``function`` (:class:`ragjudge.llm.fake.FakeLLM`) and the model objects users already
have, each with a ``recognise(obj)`` that tells its objects by their classes' modules
(:func:`recognise_object`, behind ``LLM(obj)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import InputError
from .base import Provider, ProviderSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..endpoint import Endpoint

__all__ = ["register", "provider_spec", "provider_names", "open_provider", "recognise_object", "Provider",
           "ProviderSpec"]

Factory = Callable[["Endpoint", Any], Provider]
_REGISTRY: dict[str, tuple[ProviderSpec, Factory]] = {}


def register(spec: ProviderSpec, factory: Factory) -> None:
    """Make ``spec.name`` selectable (``--provider NAME``, ``Endpoint(provider=NAME)``)."""
    _REGISTRY[spec.name] = (spec, factory)


def provider_names() -> tuple[str, ...]:
    """The names of the registered providers (``--provider`` choices)."""
    return tuple(_REGISTRY)


def provider_spec(name: str) -> ProviderSpec:
    """The spec of a registered provider; an unknown name is an error naming the known ones."""
    try:
        return _REGISTRY[name][0]
    except (KeyError, TypeError):
        raise InputError(f"unknown provider {name!r} (known: {', '.join(_REGISTRY)})",
                         field="provider") from None


def open_provider(endpoint: Endpoint, http_client: Any = None) -> Provider:
    """A provider client for ``endpoint`` (its SDK is imported here, on first use)."""
    provider_spec(endpoint.provider)
    return _REGISTRY[endpoint.provider][1](endpoint, http_client)


# -- registrations (one per provider module; the modules import their SDKs only when opened) --

from . import anthropic as _anthropic_provider  # noqa: E402
from . import callable as _callable_provider  # noqa: E402
from . import function as _function_provider  # noqa: E402
from . import langchain as _langchain_provider  # noqa: E402
from . import litellm as _litellm_provider  # noqa: E402
from . import llamaindex as _llamaindex_provider  # noqa: E402
from . import openai as _openai_provider  # noqa: E402

register(_openai_provider.SPEC, _openai_provider.OpenAIProvider)
register(_anthropic_provider.SPEC, _anthropic_provider.AnthropicProvider)
register(_function_provider.SPEC, _function_provider.FunctionProvider)
# Model objects, told apart by ``recognise`` in this order (the most specific first).
register(_langchain_provider.SPEC, _langchain_provider.LangChainProvider)
register(_llamaindex_provider.SPEC, _llamaindex_provider.LlamaIndexProvider)
register(_litellm_provider.SPEC, _litellm_provider.LiteLLMProvider)
register(_callable_provider.SPEC, _callable_provider.CallableProvider)


def recognise_object(obj: Any) -> tuple[str, str]:
    """``(provider, model name)`` of a model object (``LLM(obj)``): the first provider whose
    ``recognise`` knows the object's class (told by module name: no framework is imported to
    tell) and the model name the object reports. Anything else is an :class:`InputError`
    saying what is accepted."""
    for name in _REGISTRY:
        recognise = _RECOGNISERS.get(name)
        model = recognise(obj) if recognise is not None else None
        if model is not None:
            return name, model
    raise InputError(f"LLM() takes a model name, an Endpoint or a model object (a LangChain chat model, "
                     f"a LlamaIndex LLM, LiteLLM's acompletion, an async function (messages, schema) -> "
                     f"text); got {type(obj).__name__}", field="model")


_RECOGNISERS: dict[str, Callable[[Any], str | None]] = {
    module.SPEC.name: module.recognise
    for module in (_langchain_provider, _llamaindex_provider, _litellm_provider, _callable_provider)}
