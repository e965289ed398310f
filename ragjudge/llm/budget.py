"""The ``--max-cost`` ledger: never start a call whose worst case could cross the cap.

Pure bookkeeping (no I/O, no clock): the session asks :meth:`Budget.admit` before every HTTP
call with that call's *worst case* in USD and gets one of three answers:

* ``GO`` -- the worst case is reserved; :meth:`Budget.release` frees it when the call ends
  (its real cost is then part of what the session has spent);
* ``WAIT`` -- spent + reserved + this worst case would cross the cap, but calls in flight
  will most likely settle below their worst case: wait for one of them and ask again;
* ``SKIP`` -- even with nothing in flight this call could cross the cap: do not make it.

The worst case of a chat call is its prompt at the upper bound of its token count (one
token per UTF-8 byte: byte-level BPE tokens are never shorter, plus chat framing and the
response schema a provider injects) and its whole ``max_tokens`` of output -- hidden
reasoning included, since ``max_completion_tokens`` bounds both. A server that bills more
completion tokens than it was allowed teaches the ledger a larger output factor; until the
first call has settled only one call is in flight, so such a server can overshoot the
worst case once, not once per slot.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from ..errors import InputError

__all__ = ["Budget", "Admission", "worst_case_prompt_tokens", "check_finite"]


class Admission(Enum):
    GO = "go"
    WAIT = "wait"
    SKIP = "skip"


def check_finite(value: Any, field: str, *, positive: bool = True, integer: bool = False) -> None:
    """Raise a one-line :class:`InputError` unless ``value`` is ``None`` or a finite number
    that is > 0 (``positive``) or >= 0. NaN would silently disable any limit it sets (every
    comparison with NaN is false), infinity is no limit at all."""
    if value is None:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        ok = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if ok and integer:
        ok = float(value) == int(value)
    if not ok:
        want = "an integer" if integer else "a finite number"
        raise InputError(f"must be {want} {'> 0' if positive else '>= 0'}, got {value!r}",
                         field=field)


def worst_case_prompt_tokens(messages: Sequence[Mapping[str, Any]],
                             response_format: Mapping[str, Any] | None = None) -> int:
    """An upper bound of a request's prompt tokens: UTF-8 bytes of every message (no BPE
    token is shorter than a byte), chat-template framing per message, and the response
    schema (providers add it to the prompt for structured output)."""
    size = sum(len(str(m.get("content", "")).encode("utf-8")) + 16 for m in messages) + 32
    if response_format:
        size += len(json.dumps(response_format, separators=(",", ":")).encode("utf-8"))
    return size


class Budget:
    """Reservations against a USD cap (``cap=None``: no cap, every call goes). The worst case
    of the calls in flight is held in ``reserved`` with or without a cap, so a run cut off
    mid-call (a killed service replica) can still be counted at its worst case."""

    def __init__(self, cap: float | None) -> None:
        check_finite(cap, "max_cost", positive=False)
        self.cap = cap
        self.reserved = 0.0
        self.in_flight = 0
        self.settled = 0
        # Completion tokens billed per allowed token, learned from replies (>1: the server
        # bills hidden reasoning beyond max_tokens).
        self.output_factor = 1.0

    def admit(self, spent: float, worst: float) -> Admission:
        """May a call whose worst case is ``worst`` USD start, given ``spent`` so far?"""
        if self.cap is None:
            self.reserved += worst
            self.in_flight += 1
            return Admission.GO
        if spent + worst > self.cap:
            return Admission.SKIP
        if self.in_flight and (spent + self.reserved + worst > self.cap or not self.settled):
            return Admission.WAIT
        self.reserved += worst
        self.in_flight += 1
        return Admission.GO

    def release(self, worst: float, *, completion_tokens: int | None = None,
                allowed_tokens: int | None = None) -> None:
        """A call admitted with ``worst`` ended (its real cost is now counted as spent).
        ``completion_tokens``/``allowed_tokens`` teach the output factor."""
        self.in_flight = max(0, self.in_flight - 1)
        self.reserved = max(0.0, self.reserved - worst)
        if completion_tokens is not None:
            self.settled += 1
            if allowed_tokens and completion_tokens > allowed_tokens:
                self.output_factor = max(self.output_factor, completion_tokens / allowed_tokens)

    def worst_output_tokens(self, max_tokens: int) -> int:
        return math.ceil(max_tokens * self.output_factor)
