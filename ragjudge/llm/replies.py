"""Reading model replies: JSON extraction, local repairs, schema checks, label probabilities,
and the one repair/retry policy every structured call follows (the judge's and the RAG
metrics' alike).

Pure functions and a small state machine; no I/O. The session feeds it what came back and
does what it says.

The policy (:class:`Conversation`), per structured call:

* an unusable reply (no JSON object, schema violation, validator rejection) gets a repair
  turn -- the reply and what was wrong, asking again -- at most :data:`MAX_REPAIRS` times;
  when the repairs did not help, a fresh attempt (the original request again, as after a
  5xx), until the call's retry budget (``attempts``) is spent -- unusable replies and billed
  bodies that were no completion at all (:meth:`Conversation.rejected`) draw on the same
  budget. A word-for-word repeat ends the call only when the *same request* got the same
  reply again (a fresh attempt answered like the first one: the model is deterministic
  there); a repair turn that gets the same bad reply back was a different request, and the
  policy goes on;
* a reply cut off by ``max_tokens`` (``finish_reason="length"``) is asked again for the
  label alone -- the prompt's schema without its free-text fields (``reasoning``), which
  the caller sees as ``Outcome.dropped`` -- when the schema has such fields, else with twice
  the token budget; a second cut-off doubles the budget (again); a third is a failure
  (:data:`MAX_TRUNCATIONS`). Every re-ask is a new HTTP call, admitted by the budget.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .prompts import Prompt
from .provenance import FailureKind
from .values import Outcome, Validator

__all__ = [
    "parse_reply",
    "check_reply",
    "label_probs",
    "apply_validate",
    "describe_exc",
    "compact_prompt",
    "Conversation",
    "Turn",
    "MAX_REPAIRS",
    "MAX_TRUNCATIONS",
]

MAX_REPAIRS = 2
MAX_TRUNCATIONS = 2


def describe_exc(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# ----------------------------------------------------------------------------- JSON extraction
def _objects(text: str) -> list[tuple[dict[str, Any], str]]:
    """Every top-level JSON object in ``text`` with its source span."""
    decoder = json.JSONDecoder()
    found: list[tuple[dict[str, Any], str]] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append((obj, text[i:end]))
        i = text.find("{", end)
    return found


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_reply(text: str | None, *, quoted: Sequence[str] = ()) -> dict[str, Any]:
    """The one JSON object in a model reply (tolerant of code fences and chatter around it).

    Several *different* objects are ambiguous and rejected rather than guessed between. When
    the reply is prose, an object that also occurs in ``quoted`` (the data the prompt showed
    the model: a passage, a response) is a quotation, not a verdict, and is ignored -- a
    passage carrying ``{"grade": 3}`` cannot grade itself through a model that repeats it.
    """
    if text is None or not text.strip():
        raise ValueError("empty reply")
    stripped = text.strip()
    try:
        obj = json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        pass
    else:
        if isinstance(obj, dict):
            return obj
        raise ValueError(f"reply is JSON but not an object ({type(obj).__name__})")
    found = _objects(stripped)
    if not found:
        raise ValueError("no JSON object in the reply")
    if quoted:
        planted = {_canonical(o) for q in quoted if "{" in q for o, _ in _objects(q)}
        own = [(o, src) for o, src in found if _canonical(o) not in planted]
        if not own:
            raise ValueError("the only JSON object in the reply is quoted from the input data")
        found = own
    first = found[0][0]
    if any(o != first for o, _ in found[1:]):
        raise ValueError(f"ambiguous reply: {len(found)} different JSON objects")
    return first


# ----------------------------------------------------------------------------- local repairs
def _coerce(value: Any, schema: Mapping[str, Any]) -> Any:
    """Obvious type slips a strict schema would reject: ``"2"`` for an integer, ``"true"``
    for a boolean (recursively through objects and arrays). Anything else is left alone."""
    kind = schema.get("type")
    if isinstance(value, str):
        s = value.strip()
        if kind == "integer" and re.fullmatch(r"-?\d{1,9}", s):
            return int(s)
        if kind == "boolean" and s.lower() in ("true", "false"):
            return s.lower() == "true"
        max_len = schema.get("maxLength")
        if kind == "string" and "enum" not in schema and isinstance(max_len, int) \
                and len(value) > max_len:
            # A bounded free-text field the server did not enforce (OpenAI ignores maxLength):
            # keep its start rather than lose the answer.
            return value[:max_len]
        return value
    if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
        props = schema["properties"]
        return {k: _coerce(v, props[k]) if isinstance(props.get(k), Mapping) else v
                for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_coerce(v, schema["items"]) for v in value]
    return value


def check_reply(prompt: Prompt, text: str | None, validate: Validator | None = None,
                *, quoted: Sequence[str] = ()) -> tuple[dict[str, Any], Any]:
    """Parse, repair obvious slips, check the schema strictly, then the caller's validator.
    Returns ``(obj, value)``; raises ``ValueError`` naming the problem."""
    obj = parse_reply(text, quoted=quoted)
    obj = _coerce(obj, prompt.output_schema)
    prompt.validate(obj)
    return obj, (validate(obj) if validate is not None else obj)


def apply_validate(outcome: Outcome, validate: Validator | None) -> Outcome:
    """Re-apply a caller's validator to a stored successful outcome (its ``value`` is the
    validator's result; the cache stores the reply object)."""
    if validate is None or outcome.obj is None:
        return outcome
    try:
        return dataclasses.replace(outcome, value=validate(outcome.obj))
    except (ValueError, TypeError, KeyError) as exc:
        return dataclasses.replace(outcome, value=None, failure=FailureKind.INVALID,
                                   error=f"invalid reply: {describe_exc(exc)}")


def compact_prompt(prompt: Prompt) -> tuple[Prompt, Prompt, tuple[str, ...]] | None:
    """For a model that keeps running out of tokens before the label: the prompt whose
    schema asks for the label alone (its free-text fields removed, to send), the prompt that
    checks the reply (those fields optional), and the removed names; ``None`` when there is
    nothing to remove or nothing would remain."""
    schema = prompt.output_schema
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, Mapping):
        return None
    drop = tuple(name for name, sub in props.items()
                 if name != prompt.label_field and isinstance(sub, Mapping)
                 and sub.get("type") == "string" and "enum" not in sub)
    keep = {k: v for k, v in props.items() if k not in drop}
    if not drop or not keep:
        return None
    required = [r for r in schema.get("required", []) if r not in drop]
    send = {**schema, "properties": keep, "required": required}
    check = {**schema, "required": required}
    return (dataclasses.replace(prompt, output_schema=send),
            dataclasses.replace(prompt, output_schema=check), drop)


# ----------------------------------------------------------------------------- logprobs
_STRIP_LEFT = " \t\n\r\":"
_STRIP_RIGHT = " \t\n\r\",}"


def label_probs(
    tokens: Sequence[Mapping[str, Any]] | None, text: str | None, prompt: Prompt, value: Any
) -> tuple[dict[str, float] | None, float | None]:
    """Probability of each label at the token where the reply states it, renormalised over
    the valid labels, and the expected label (for integer labels).

    The label is located in the token stream itself (the concatenated token texts), not in
    ``text``: llama.cpp's logprobs spell a fenced "```json ... ```" reply while its message
    content is the unwrapped object, so offsets taken from the content land on the wrong token.

    ``tokens``: a completion's logprobs as the provider reads them (each token's ``token``,
    ``logprob`` and ``top_logprobs`` as ``{text: logprob or None}``).

    Returns ``(None, None)`` when the server gave no usable logprobs (absent, not numbers),
    the label's token cannot be found in the stream, or it does not carry the parsed label.
    """
    if not tokens or not prompt.labels or not prompt.label_field:
        return None, None
    toks = [t for t in tokens if isinstance(t, Mapping)]
    texts = [str(tok.get("token", "")) for tok in toks]
    stream = "".join(texts)
    pattern = re.compile(r'"' + re.escape(prompt.label_field) + r'"\s*:\s*"?')
    matches = list(pattern.finditer(stream))
    if not matches:
        return None, None
    # The last match: a mention inside a JSON string value is escaped (\"grade\") and does not
    # match, so the last unescaped one is the field itself.
    pos = matches[-1].end()
    offset = 0
    target = None
    for tok, t in zip(toks, texts):
        if offset <= pos < offset + len(t):
            target = tok
            break
        offset += len(t)
    if target is None:
        return None, None
    labels = set(prompt.labels)
    mass: dict[str, float] = {}
    for token, lp in (target.get("top_logprobs") or {}).items():
        if lp is None:
            return None, None  # an unreadable alternative: the mass cannot be told
        label = token.lstrip(_STRIP_LEFT).rstrip(_STRIP_RIGHT)
        if label in labels:
            mass[label] = mass.get(label, 0.0) + math.exp(lp)
    total = sum(mass.values())
    if total <= 0 or str(value) not in mass:
        return None, None  # nothing readable, or the token is not the one carrying the label
    probs = {label: mass.get(label, 0.0) / total for label in prompt.labels}
    try:
        expected = sum(float(k) * p for k, p in probs.items())
    except ValueError:
        expected = None
    return probs, expected


# ----------------------------------------------------------------------------- the policy
@dataclasses.dataclass(frozen=True)
class Turn:
    """The next request of a conversation: its messages, the prompt whose schema it sends,
    the prompt that checks its reply, and the multiple of ``max_tokens`` it may spend."""

    messages: list[dict[str, str]]
    prompt: Prompt
    check: Prompt
    boost: int = 1


@dataclasses.dataclass(frozen=True)
class GiveUp:
    kind: FailureKind
    reason: str


class Conversation:
    """The repair/retry policy of one structured call (see the module docstring)."""

    def __init__(self, prompt: Prompt, messages: Sequence[Mapping[str, str]], *,
                 attempts: int = 1) -> None:
        self.base = [dict(m) for m in messages]
        self.prompt = prompt
        self.turn = Turn(list(self.base), prompt, prompt)
        self.attempts = max(1, attempts)  # unusable replies a call may spend (each billed)
        self.bad: list[str] = []  # this attempt's unusable replies (repair turns asked)
        self.seen: set[tuple[str, str]] = set()  # (request, unusable reply) of the call
        self.unusable_replies = 0
        self.rejected_replies = 0  # billed bodies that were no completion at all
        self.repairs = 0
        self.fresh = 0
        self.repaired = False
        self.truncations = 0
        self.dropped: tuple[str, ...] = ()
        self._compact = compact_prompt(prompt)

    def truncated(self, max_tokens: int | None) -> Turn | GiveUp:
        """The reply was cut off at ``max_tokens``."""
        t = self.turn
        self.truncations += 1
        if self.truncations > MAX_TRUNCATIONS:
            return GiveUp(FailureKind.TRUNCATED,
                          f"truncated reply (finish_reason=length, also with max_tokens={max_tokens}"
                          + (" and without " + ", ".join(self.dropped) if self.dropped else "") + ")")
        if self._compact is not None and not self.dropped:
            send, check, self.dropped = self._compact
            schema = json.dumps(send.output_schema, separators=(",", ":"))
            self.turn = Turn(self.base + [{"role": "user", "content": (
                "Your reply was cut off before it ended. Skip the "
                + " and ".join(self.dropped) + " and reply now with only a short JSON object "
                "matching this schema: " + schema)}], send, check, t.boost)
        else:
            self.turn = dataclasses.replace(t, boost=t.boost * 2)
        return self.turn

    def rejected(self) -> bool:
        """A billed reply body that was not a completion (no choices, not JSON): ``True``
        when the retry budget, shared with unusable replies, allows sending the turn again."""
        self.rejected_replies += 1
        return self.unusable_replies + self.rejected_replies < self.attempts

    def unusable(self, text: str | None, exc: BaseException) -> Turn | GiveUp:
        """The reply could not be used (``exc`` says why)."""
        text = text or ""
        # The request that got this reply: its messages and token budget (the schema it sent
        # is part of the messages' turn; the prompt is the call's).
        request = json.dumps([self.turn.messages, self.turn.boost], sort_keys=True, ensure_ascii=False)
        seen = (request, text)
        repeat = seen in self.seen
        self.seen.add(seen)
        self.unusable_replies += 1
        if repeat or self.unusable_replies + self.rejected_replies >= self.attempts:
            n, f = self.repairs, self.fresh
            fresh = f" and {f} fresh attempt{'s' * (f != 1)}" if f else ""
            return GiveUp(FailureKind.UNPARSABLE, f"unparsable reply after {n} repair{'s' * (n != 1)}"
                                                  f"{fresh}: {describe_exc(exc)}")
        self.repaired = True
        if len(self.bad) >= MAX_REPAIRS:
            # The repairs did not help, but the replies vary: a fresh attempt may well succeed.
            self.bad = []
            self.fresh += 1
            self.turn = Turn(list(self.base), self.prompt, self.prompt)
            return self.turn
        self.bad.append(text)
        self.repairs += 1
        t = self.turn
        schema = json.dumps(t.prompt.output_schema, separators=(",", ":"))
        # The repair turn: the request, the unusable reply, what was wrong.
        self.turn = dataclasses.replace(t, messages=t.messages + [
            {"role": "assistant", "content": text},
            {"role": "user", "content": (
                f"Your reply could not be used: {describe_exc(exc)}. Reply again with only "
                "a JSON object matching this schema: " + schema)},
        ])
        return self.turn
