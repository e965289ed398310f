"""The turns of one structured call: send, strict parse, the repair turn, the downgrade of a
feature the server lacks.

:class:`Converser` runs the conversation the policy of :mod:`.replies` directs for one
:class:`PreparedCall` and returns its :class:`Outcome`; the requests go through the session's
:class:`.dispatch.Dispatcher`. What the server was learned to lack (a response format, a
field) is :class:`ServerFeatures`, shared by every call of a session. The session
(:mod:`.session`) renders the request bodies, holds the runner slot and writes the cache.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import LLMError
from .caller import call_failed_kind
from .client import CallFailed, Completion, RejectedReply, UnsupportedFeature
from .cost import Usage
from .dispatch import Dispatcher
from .prompts import Prompt
from .provenance import FailureKind, Provenance
from .replies import Conversation, GiveUp, check_reply, label_probs
from .values import BUDGET_REASON, Outcome, PreparedCall, Stats, Validator

__all__ = ["FORMATS", "Converser", "ServerFeatures"]

#: Response formats, most to least strict; a server that rejects one gets the next.
#: ``json_schema_basic`` is the schema without length/pattern keywords (Azure and OpenAI
#: strict mode reject ``maxLength``; llama.cpp and vLLM grammars enforce it).
FORMATS = ("json_schema", "json_schema_basic", "json_object", "text")
# A 400 naming one of these rejects the schema's length/pattern keywords, not json_schema.
_SCHEMA_KEYWORDS = re.compile(r"maxlength|minlength|pattern", re.IGNORECASE)

#: Renders a turn's request body: ``(prompt, messages, format index, max_tokens multiple)``.
Render = Callable[[Prompt, list[dict[str, str]], int, int], dict[str, Any]]


class ProvenanceOf(Protocol):
    """The provenance of an answer to ``prompt`` (``reported``: what the server said)."""

    def __call__(self, prompt: Prompt, **reported: Any) -> Provenance: ...


@dataclass
class ServerFeatures:
    """What the server was learned to lack from its 400s, shared by every call of a session:
    the response format to send (an index into :data:`FORMATS`) and the fields to leave out."""

    format: int = 0
    drop: set[str] = field(default_factory=set)

    def downgrade(self, exc: UnsupportedFeature, fmt: int, dropped: set[str], where: str) -> str | None:
        """Drop a feature the server rejected (once per session: the fallback to record, or
        ``None`` when another call already did), or give up with :class:`LLMError`. ``fmt``
        and ``dropped``: what the rejected request was sent with."""
        if exc.feature == "response_format":
            if fmt + 1 >= len(FORMATS):
                raise LLMError(f"{where} rejected the request: {exc}")
            nxt = fmt + 1
            if FORMATS[nxt] == "json_schema_basic" and not _SCHEMA_KEYWORDS.search(str(exc)):
                nxt += 1  # the server lacks json_schema itself, not some of its keywords
            if self.format == fmt:
                self.format = nxt
                return f"response_format -> {FORMATS[nxt]}"
            return None
        if exc.feature in dropped:
            raise LLMError(f"{where} rejected the request: {exc}")
        if exc.feature not in self.drop:
            self.drop.add(exc.feature)
            return ("max_tokens -> max_completion_tokens" if exc.feature == "max_tokens"
                    else f"dropped {exc.feature}")
        return None


class Converser:
    """Runs one structured call's turns for a session: ``render`` makes each turn's body,
    ``dispatcher`` sends it, ``provenance`` names the answer; repairs, answers without their
    free-text fields and fallbacks are counted in ``stats``."""

    def __init__(self, dispatcher: Dispatcher, features: ServerFeatures, stats: Stats, *,
                 render: Render, provenance: ProvenanceOf, attempts: int) -> None:
        self.dispatcher = dispatcher
        self.features = features
        self.stats = stats
        self.render = render
        self.provenance = provenance
        self.attempts = attempts  # unusable or rejected replies one call may spend

    async def run(self, call: PreparedCall, validate: Validator | None) -> Outcome:
        """The turns of one structured call, as the policy of :mod:`.replies` directs."""
        conv = Conversation(call.prompt, call.messages, attempts=self.attempts)
        usage = Usage()
        attempts = 0
        latency = 0.0
        served = fingerprint = where = None
        route = call.data[0] if call.data else call.key
        await self.dispatcher.check_models()

        def done(value: Any = None, failure: tuple[FailureKind, str] | None = None,
                 comp: Completion | None = None, fmt: int = 0, **extra: Any) -> Outcome:
            prov = self.provenance(call.prompt, served_model=served, system_fingerprint=fingerprint,
                                   response_format=FORMATS[fmt].replace("_basic", ""), endpoint=where)
            return Outcome(value=None if failure else value, error=failure[1] if failure else None,
                           failure=failure[0] if failure else None,
                           text=comp.text if comp else None, usage=usage, latency=latency,
                           provenance=prov, key=call.key, attempts=attempts,
                           repaired=conv.repaired, **extra)

        while True:
            turn = conv.turn
            fmt = self.features.format
            dropped = set(self.features.drop)
            body = self.render(turn.prompt, turn.messages, fmt, turn.boost)
            try:
                comp, answered = await self.dispatcher.chat(body, route)
                if self.dispatcher.several:
                    where = answered.where()
            except UnsupportedFeature as exc:
                fallback = self.features.downgrade(exc, fmt, dropped, self.dispatcher.where())
                if fallback is not None:
                    self.stats.fallbacks.append(fallback)
                continue
            except CallFailed as exc:
                attempts += exc.attempts
                if isinstance(exc, RejectedReply):
                    # Billed but no completion: the turn again, like a 5xx, but only once the
                    # budget admits it again, and from the same retry budget as unusable content.
                    usage = usage + (exc.usage or Usage())
                    if conv.rejected():
                        continue
                return done(failure=(call_failed_kind(exc), exc.reason), fmt=fmt)
            if comp is None:
                return done(failure=(FailureKind.BUDGET, BUDGET_REASON), fmt=fmt)
            attempts += comp.attempts
            latency += comp.latency
            usage = usage + comp.usage
            fingerprint = comp.system_fingerprint or fingerprint
            served = comp.model or served
            if comp.refusal:
                return done(failure=(FailureKind.REFUSAL, f"refusal: {comp.refusal}"), comp=comp, fmt=fmt)
            if comp.finish_reason == "content_filter":
                return done(failure=(FailureKind.REFUSAL, "refusal: content filter"), comp=comp, fmt=fmt)
            if comp.finish_reason == "length":
                step = conv.truncated(body.get("max_tokens") or body.get("max_completion_tokens"))
                if isinstance(step, GiveUp):
                    return done(failure=(step.kind, step.reason), comp=comp, fmt=fmt)
                continue
            try:
                obj, value = check_reply(turn.check, comp.text, validate, quoted=call.data)
            except (ValueError, TypeError, KeyError) as exc:
                step = conv.unusable(comp.text, exc)
                if isinstance(step, GiveUp):
                    return done(failure=(step.kind, step.reason), comp=comp, fmt=fmt)
                self.stats.repaired += 1
                continue
            dropped_fields = tuple(f for f in conv.dropped if f not in obj)
            self.stats.dropped += bool(dropped_fields)
            label = obj.get(call.prompt.label_field) if call.prompt.label_field else None
            probs, expected = label_probs(comp.logprobs, comp.text, call.prompt, label)
            return done(value, comp=comp, fmt=fmt, probs=probs, expected=expected, obj=obj,
                        dropped=dropped_fields)
