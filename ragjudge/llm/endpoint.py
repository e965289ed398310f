"""One frozen value saying where and how to call a model: :class:`Endpoint`, the LLM edge's
options value.

Each field is declared once, with its default, help and flag, in :data:`.defaults.ENDPOINT_OPTIONS`
(where the CLI reads it without loading this module) and checked once, in
:meth:`Endpoint.validate`; the CLI's flags (``cli/_llm.add_llm_options``), ``serve``'s and the
keywords of :class:`ragjudge.llm.LLM` are all made from them. Built once -- by the CLI from its
flags (``serve`` keeps them in the service's settings, and a job takes them with its own model),
by library callers directly -- and passed down to the session, the client and the provider;
nothing below restates these options.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, fields
from typing import Any

from ..errors import InputError, LLMError
from ..options import OptionsValue, option
from .budget import check_finite
from .defaults import DEFAULT_CONCURRENCY, ENDPOINT_OPTIONS
from .redaction import redact, redact_url, remember_url_secrets

__all__ = ["Endpoint", "ENDPOINT_FIELDS", "DEFAULT_CONCURRENCY", "parse_endpoint"]


def _spec(name: str) -> Any:
    # Deferred: the registry loads every provider module (and their shared base); a command
    # that only declares its LLM flags, and never calls a model, should not pay for that.
    from .providers import provider_spec

    return provider_spec(name)


def _declared(name: str, **kw: Any) -> Any:
    """The field ``name`` as :data:`.defaults.ENDPOINT_OPTIONS` declares it."""
    d = ENDPOINT_OPTIONS[name]
    return option(d.default, d.help, flag=d.flag, **kw)


@dataclass(frozen=True)
class Endpoint(OptionsValue):
    """A model behind one API: the provider, its address and key, and the limits of calling it.

    ``provider`` names a registered provider (``openai``: any OpenAI-compatible server,
    Azure OpenAI included; ``anthropic``: Anthropic's Messages API; ``function``, ``callable``,
    ``litellm``, ``langchain``, ``llamaindex``: a Python object in ``target``). ``api_key`` is
    excluded from ``repr`` and never stored elsewhere; without it the key is read from
    ``api_key_env`` or the provider's default variable. Values are checked when the endpoint is
    made: a NaN would silently disable the limit it sets.
    """

    model: str
    provider: str = _declared("provider")
    base_url: str | None = _declared("base_url")
    api_key: str | None = _declared("api_key", repr=False)
    api_key_env: str | None = _declared("api_key_env")
    azure_endpoint: str | None = _declared("azure_endpoint")
    azure_api_version: str | None = _declared("azure_api_version")
    timeout: float = _declared("timeout")
    max_attempts: int = _declared("max_attempts")
    backoff_base: float = _declared("backoff_base")
    max_wait: float = _declared("max_wait")
    patience: float = _declared("patience")
    concurrency: int = _declared("concurrency")
    rpm: float | None = _declared("rpm")
    tpm: float | None = _declared("tpm")
    #: Share of the work when a session spreads it over several endpoints (default: ``rpm``,
    #: else 1): queries are hashed to endpoints in proportion.
    weight: float | None = _declared("weight")
    #: The Python object a provider of objects calls (a function, a LangChain chat model, a
    #: LlamaIndex LLM, LiteLLM's ``acompletion``); not part of equality, never shown.
    target: Any = _declared("target", repr=False, compare=False)

    def validate(self) -> None:
        # Registered as soon as a URL is configured, so every message from here on (an
        # option's error, a dry run, a provider's failure) prints it redacted.
        remember_url_secrets(self.base_url)
        remember_url_secrets(self.azure_endpoint)
        if not self.model or not isinstance(self.model, str):
            raise InputError("no model given", field="model")
        _check_url(self.base_url, "base_url")
        _check_url(self.azure_endpoint, "azure_endpoint")
        spec = _spec(self.provider)  # an unknown provider names the known ones
        if self.azure_endpoint and spec.key_env_azure is None:
            raise InputError(f"azure_endpoint is for the openai provider, not {self.provider!r}",
                             field="azure_endpoint")
        if "object" in spec.features and self.target is None:
            raise InputError(f"the {self.provider} provider calls a Python object: give it as target "
                             "(or pass the object itself to LLM(...))", field="target")
        for name in ("rpm", "tpm", "timeout", "backoff_base", "max_wait", "patience", "weight"):
            check_finite(getattr(self, name), name)
        for name in ("concurrency", "max_attempts"):
            check_finite(getattr(self, name), name, integer=True)

    def __repr__(self) -> str:  # the base URL may carry credentials
        where = redact_url(self.azure_endpoint or self.base_url) or None
        return f"Endpoint(provider={self.provider!r}, model={self.model!r}, base_url={where!r}, timeout={self.timeout:g})"

    def resolved_base_url(self) -> str | None:
        """The base URL: given, or from the provider's variable (``OPENAI_BASE_URL``...)."""
        env = _spec(self.provider).base_url_env
        return self.base_url or (os.environ.get(env) if env else None) or None

    def resolve_key(self) -> str:
        """The API key: given, from ``api_key_env``, or from the provider's default variable;
        a local server (a base URL, no key) or a provider that needs none (a Python object)
        gets a placeholder. A missing key is an :class:`LLMError` naming where it was looked for."""
        if self.api_key:
            return self.api_key
        spec = _spec(self.provider)
        default = spec.key_env_azure if (self.azure_endpoint and spec.key_env_azure) else spec.key_env
        env = self.api_key_env or default
        if not env:
            return "no-key"  # the provider calls an object in this process: nothing to unlock
        key = os.environ.get(env)
        if key:
            return key
        if self.api_key_env:
            raise LLMError(f"environment variable {self.api_key_env} (given as the API key variable) is not set")
        if self.resolved_base_url():
            # Local servers (vLLM, Ollama, llama.cpp) usually ignore the key, but SDKs want one.
            return "no-key"
        raise LLMError(f"no API key: set {env}, pass --api-key-env VAR, or --base-url for a local server")


_SPEC_KEYS: dict[str, tuple[str, type]] = {
    "key_env": ("api_key_env", str), "rpm": ("rpm", float), "tpm": ("tpm", float),
    "concurrency": ("concurrency", int), "weight": ("weight", float), "provider": ("provider", str)}


def _check_url(url: str | None, field: str) -> None:
    """An http(s) URL with a host and a port that can be, or a one-line error: otherwise every
    request fails, each counted as a failed item ("malformed reply" for a port of 99999)."""
    if url is None:
        return
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
        parts.port  # noqa: B018 -- raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise InputError(f"not a URL ({exc})", field=field) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InputError("not an http:// or https:// URL with a host", field=field)


def parse_endpoint(spec: str, base: Endpoint) -> Endpoint:
    """``URL[,key_env=VAR][,rpm=N][,tpm=N][,concurrency=N][,weight=W][,provider=NAME]`` -> the
    ``base`` endpoint at that URL with those fields (the CLI's ``--endpoint``, the service's
    ``endpoints`` setting); errors name the ``endpoint`` field."""
    url, *items = [part.strip() for part in str(spec).split(",")]
    remember_url_secrets(url)
    shown = redact(str(spec))  # a gateway may take the key in the URL's path or query
    if not url or "://" not in url:
        raise InputError(f"{shown!r} does not start with a URL", field="endpoint")
    changes: dict[str, Any] = {"base_url": url}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in _SPEC_KEYS:
            raise InputError(f"{redact(item)!r} in {shown!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(_SPEC_KEYS)}", field="endpoint")
        name, kind = _SPEC_KEYS[key.strip()]
        if name in changes:  # "rpm=5,rpm=7": which one was meant is not ours to guess
            raise InputError(f"{key.strip()} is given twice in {shown!r}", field="endpoint")
        try:
            changes[name] = kind(value.strip())
        except ValueError:
            raise InputError(f"{key.strip()} must be a {kind.__name__}, got {redact(value.strip())!r}",
                             field="endpoint") from None
    try:
        return base.replace(**changes)
    except InputError as exc:
        raise InputError(f"{shown!r}: {redact(exc.message)}", field="endpoint") from None


#: Field names of :class:`Endpoint` (what ``LLM(model, **fields)`` accepts for its endpoint).
ENDPOINT_FIELDS = tuple(f.name for f in fields(Endpoint))
