"""Where an answer came from, and why one failed: the two values every LLM result carries.

One :class:`Provenance` shape is used by :class:`~ragjudge.llm.values.Outcome`, by the cache
record, by :class:`~ragjudge.judges.Judgment` and by reports; one :class:`FailureKind` enum
classifies every failure at the place it happens, so reports count kinds without reading
error text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["FailureKind", "Provenance", "Traced"]


class FailureKind(str, Enum):
    """Why an item has no value. The ``value`` strings are stable (they appear in reports,
    judgment files and the HTTP service)."""

    UNPARSABLE = "unparsable"  # no usable JSON object after the repair turns
    INVALID = "invalid reply"  # parsed, but the caller's validator rejected it
    TRUNCATED = "truncated"  # cut off by max_tokens even after the policy's re-asks
    REFUSAL = "refusal"  # the model (or its content filter) declined
    RETRIES_EXHAUSTED = "retries exhausted"  # transport: 5xx/429/timeouts beyond the attempts
    PROMPT_TOO_LONG = "prompt too long"
    MALFORMED = "malformed reply"  # a reply body that is not a chat completion
    BATCH = "batch error"  # the Batch API returned no answer for the request
    BUDGET = "budget"  # not attempted: --max-cost reached (not a model failure)
    OTHER = "other"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any) -> FailureKind | None:
        """From a stored value (``None``/empty -> ``None``; an unknown string -> ``OTHER``)."""
        if value is None or value == "":
            return None
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            return cls.OTHER


@dataclass(frozen=True)
class Provenance:
    """Model, prompt (id, version, sha256 of the file), sampling parameters and what the
    server reported: enough to say exactly which question produced an answer."""

    model: str = ""
    prompt_id: str = ""
    prompt_version: str = ""
    prompt_sha: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    served_model: str | None = None
    system_fingerprint: str | None = None
    response_format: str | None = None
    #: The endpoint that answered (redacted URL), when a session spreads work over several.
    endpoint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready fields (the keys of judgment lines and cache records)."""
        extra = {} if self.endpoint is None else {"endpoint": self.endpoint}
        return {
            "model": self.model,
            "served_model": self.served_model,
            "system_fingerprint": self.system_fingerprint,
            "prompt_id": self.prompt_id,
            "prompt_version": self.prompt_version,
            "prompt_sha": self.prompt_sha,
            "params": dict(self.params),
            "response_format": self.response_format,
            **extra,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Provenance:
        def text(key: str) -> str | None:
            v = d.get(key)
            return None if v is None else str(v)

        params = d.get("params")
        return cls(
            model=str(d.get("model") or ""),
            prompt_id=str(d.get("prompt_id") or ""),
            prompt_version=str(d.get("prompt_version") or ""),
            prompt_sha=str(d.get("prompt_sha") or ""),
            params=dict(params) if isinstance(params, Mapping) else {},
            served_model=text("served_model"),
            system_fingerprint=text("system_fingerprint"),
            response_format=text("response_format"),
            endpoint=text("endpoint"),
        )


class Traced:
    """Mixin of the result records (``Outcome``, ``Judgment``): the provenance fields readable
    directly (``out.model``, ``j.prompt_sha``...), and ``failure`` defaulting to ``OTHER``
    when an ``error`` is set without a kind. The dataclass provides ``provenance``, ``error``
    and ``failure``."""

    provenance: Provenance
    error: str | None
    failure: FailureKind | None

    def __post_init__(self) -> None:
        if self.error is not None and self.failure is None:
            object.__setattr__(self, "failure", FailureKind.OTHER)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def model(self) -> str:
        return self.provenance.model

    @property
    def served_model(self) -> str | None:
        return self.provenance.served_model

    @property
    def prompt_id(self) -> str:
        return self.provenance.prompt_id

    @property
    def prompt_version(self) -> str:
        return self.provenance.prompt_version

    @property
    def prompt_sha(self) -> str:
        return self.provenance.prompt_sha

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.provenance.params)

    @property
    def system_fingerprint(self) -> str | None:
        return self.provenance.system_fingerprint

    @property
    def response_format(self) -> str | None:
        return self.provenance.response_format
