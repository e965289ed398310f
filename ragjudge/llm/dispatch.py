"""The endpoints of one session as one: which endpoint a request goes to, and what happens
when one is down (its requests move on until it answers a probe) or refuses the session (it
is drained for good).

:func:`.routing.route` picks the endpoint; :class:`Dispatcher` sends there and moves the
request on. The session (:mod:`.session`) and the conversation of one call
(:mod:`.conversation`) send through it; nothing billed is sent twice.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from ..errors import LLMError
from .caller import Caller, EndpointDown, call_failed_kind, loop_state
from .client import (
    CallFailed,
    Completion,
    EmbeddingReply,
    RejectedReply,
    UnsupportedFeature,
)
from .cost import Usage
from .provenance import FailureKind
from .routing import route

log = logging.getLogger("ragjudge.llm")

__all__ = ["Dispatcher"]


class Dispatcher:
    """Sends a session's requests over its endpoints (one :class:`Caller` each, serving one
    model). Safe to use from several event loops in turn: the lock of the model check is made
    per loop."""

    def __init__(self, callers: Sequence[Caller], model: str) -> None:
        self.callers = list(callers)
        self.model = model
        # One endpoint serves the session's model by construction: nothing to check.
        self.checked = len(self.callers) == 1
        self._said_down: dict[int, int] = {}  # id(caller) -> the outage said
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())

    @property
    def several(self) -> bool:
        """More than one endpoint (answers then name the one that served them)."""
        return len(self.callers) > 1

    def route(self, key: str) -> Caller:
        """The endpoint for requests keyed ``key`` (see :func:`.routing.route`)."""
        return route(self.callers, key)

    def where(self) -> str:
        """The first endpoint, fit to print (the session's own)."""
        return self.callers[0].where()

    # -- an endpoint's state -------------------------------------------------------------
    def drain(self, caller: Caller, exc: Exception) -> None:
        """Stop sending to ``caller`` for good (it refused the session: a key, a model)."""
        if caller.drained is None:
            caller.drained = str(exc)
            log.warning("endpoint %s drained: %s; its requests go to the other endpoints", caller.where(), exc)

    def say_down(self, caller: Caller, exc: Exception) -> None:
        """One line when an endpoint goes down and its work moves (it is probed again later)."""
        outage = caller.runner.breaker.outages
        if self._said_down.get(id(caller)) != outage:
            self._said_down[id(caller)] = outage
            log.warning("endpoint %s is down (%s); its requests go to the other endpoints until it "
                        "answers a probe", caller.where(), exc)

    async def check_models(self) -> None:
        """Before anything is spent on several endpoints: each must list the session's model
        (an endpoint that lists others is drained); one that lists nothing is taken on trust,
        and every answer's provenance names the endpoint and the model it says it served."""
        if self.checked:
            return
        async with loop_state(self._locks, asyncio.Lock):  # one check; the others wait for it
            if self.checked:
                return
            listed = await asyncio.gather(*(c.served_models() for c in self.callers))
            for caller, models in zip(self.callers, listed):
                if models is not None and self.model not in models:
                    self.drain(caller, LLMError(f"it does not serve {self.model!r} (it lists "
                                                f"{', '.join(models[:5]) or 'no model'})"))
            if all(c.drained for c in self.callers):
                raise LLMError(f"no endpoint serves {self.model!r}: "
                               + "; ".join(f"{c.where()}: {c.drained}" for c in self.callers))
            self.checked = True

    # -- requests ------------------------------------------------------------------------
    async def chat(self, body: dict[str, Any], key: str) -> tuple[Completion | None, Caller]:
        """One chat request on the endpoint :func:`.routing.route` picks. With several endpoints, one
        that is down (nothing was sent: :class:`EndpointDown`) passes the request on; one that
        refuses the session (an :class:`LLMError`) is drained for good; a request that used up
        its retries on one (5xx, timeouts: nothing billed) goes to another it has not tried.
        When every endpoint is down, the request waits on its own like a single endpoint's
        (the breaker's patience then stops the run). Nothing billed is sent twice."""
        tried: set[int] = set()
        while True:
            caller = self.route(key)
            several = self.several
            wait = several and not any(c.healthy() for c in self.callers if c is not caller) \
                and caller.down()
            try:
                return await caller.chat(body, wait=wait), caller
            except EndpointDown as exc:
                self.say_down(caller, exc)
                if not any(c.healthy() for c in self.callers):
                    await asyncio.sleep(0.05)  # every endpoint is down: the next pass waits on one
                continue
            except UnsupportedFeature:
                raise
            except RejectedReply:
                raise
            except CallFailed as exc:
                tried.add(id(caller))
                if not several or call_failed_kind(exc) is not FailureKind.RETRIES_EXHAUSTED:
                    raise
                return await self._chat_on(body, tried, exc)
            except LLMError as exc:
                if not several:
                    raise
                self.drain(caller, exc)
                if all(c.drained for c in self.callers):
                    raise

    async def _chat_on(self, body: dict[str, Any], tried: set[int],
                       failed: CallFailed) -> tuple[Completion | None, Caller]:
        """The request again on the healthy endpoints it has not tried (it used up its
        retries on the others: nothing was billed); ``failed`` when none serves it."""
        for caller in self.callers:
            if id(caller) in tried or not caller.healthy():
                continue
            tried.add(id(caller))
            try:
                return await caller.chat(body), caller
            except EndpointDown as exc:
                self.say_down(caller, exc)
            except CallFailed as exc:
                if isinstance(exc, RejectedReply) or call_failed_kind(exc) is not FailureKind.RETRIES_EXHAUSTED:
                    raise
                failed = exc
            except LLMError as exc:
                self.drain(caller, exc)
        raise failed

    async def embeddings(self, model: str, texts: list[str]) -> tuple[
            EmbeddingReply | None, Usage, tuple[FailureKind, str] | None]:
        """One embeddings request (see :meth:`Caller.embeddings`) on the endpoint routing
        picks for ``model``: one that is down passes it on while another is healthy; when
        none is, one that stays down is drained."""
        while True:
            caller = self.route(model)
            try:
                return await caller.embeddings(model, texts)
            except EndpointDown as exc:
                if any(c.healthy() for c in self.callers if c is not caller):
                    self.say_down(caller, exc)
                else:
                    self.drain(caller, exc)
