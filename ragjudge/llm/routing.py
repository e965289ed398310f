"""Work across the endpoints of one session: which endpoint serves a query, its share, how many
queries one may hold at once, and the per-endpoint queues an idle endpoint takes work from.

Every request of one query goes to the same endpoint while it is healthy (its server reuses the
prompt prefix it cached: a preference, not a rule), by rendezvous hashing weighted by each
endpoint's capacity; when one is down only its own queries move, to their next choice. The
session's dispatcher (:mod:`ragjudge.llm.dispatch`) decides when to route, drain and move work; the circuit
breaker (:mod:`ragjudge.llm.health`) is the one health signal read here.
"""

from __future__ import annotations

import contextvars
import hashlib
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import LLMError

if TYPE_CHECKING:  # pragma: no cover
    from .caller import Caller

__all__ = ["PREFER", "WorkQueues", "check_any_live", "room", "route", "weight"]

#: The endpoint the current worker of ``structured_many`` serves (its task's own context).
PREFER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("ragjudge_endpoint", default=None)


def weight(c: Caller, callers: Sequence[Caller]) -> float:
    """An endpoint's share of the queries: its ``weight=``, else its rate (``rpm=``, or the
    limit its replies or 429s taught), else the median of the known ones (1 when none)."""
    def own(x: Caller) -> float | None:
        return x.endpoint.weight or x.endpoint.rpm or x.runner.rpm

    mine = own(c)
    if mine:
        return mine
    known = sorted(w for w in (own(x) for x in callers) if w)
    return known[len(known) // 2] if known else 1.0


def route(callers: Sequence[Caller], key: str) -> Caller:
    """The endpoint for requests keyed ``key`` (a prompt's first variable: the query).

    The endpoint the current worker serves (:data:`PREFER`), while it is healthy; else
    rendezvous hashing weighted by :func:`weight` over the healthy endpoints. An endpoint in an
    outage is healthy again when its probe is due, so a short outage does not lose it."""
    if len(callers) == 1:
        return callers[0]
    now = time.monotonic()
    prefer = PREFER.get()
    if prefer is not None and prefer.healthy(now):
        return prefer
    live = [c for c in callers if c.healthy(now)] or [c for c in callers if c.drained is None]
    if not live:
        check_any_live(callers)

    def score(c: Caller) -> float:
        digest = hashlib.sha256(f"{c.where()}\x00{key}".encode()).digest()
        u = (int.from_bytes(digest[:8], "big") + 1) / (2**64 + 2)  # in (0, 1)
        return weight(c, callers) / -math.log(u)

    return max(live, key=score)


def check_any_live(callers: Sequence[Caller]) -> None:
    """:class:`LLMError` naming each endpoint and why, when every one is drained for good."""
    if all(c.drained is not None for c in callers):
        reasons = "; ".join(f"{c.where()}: {c.drained}" for c in callers)
        raise LLMError(f"every endpoint is drained ({reasons})")


def room(caller: Caller) -> int:
    """Queries an endpoint may hold at once (in flight or about to start): what its
    adaptive limit lets fly, and with a known rate, no more than it starts in its
    latency plus a second -- the rest stay queued, free for an idle endpoint to take."""
    runner = caller.runner
    allowed = runner.concurrency_limit
    rpm = runner.rpm
    if rpm is not None:
        latency = runner.limiter.wall if runner.limiter is not None and runner.limiter.wall else 1.0
        allowed = min(allowed, math.ceil(rpm / 60.0 * (latency + 1.0)) + 1)
    return max(1, allowed)


class WorkQueues:
    """One queue of item indices per endpoint: a slow or rate-limited endpoint holds up only its
    own queries, and one whose queue is empty takes queued items from the busiest other (from
    the tail: the items it would reach last), so the work follows the capacity the endpoints
    show, whatever their weights said at the start."""

    def __init__(self, n: int) -> None:
        self.queues: list[deque[int]] = [deque() for _ in range(n)]

    def put(self, k: int, item: int) -> None:
        self.queues[k].append(item)

    def take(self, k: int) -> int | None:
        """Endpoint ``k``'s next item, else one taken from the busiest queue (``None``: no work left)."""
        if self.queues[k]:
            return self.queues[k].popleft()
        busiest = max(range(len(self.queues)), key=lambda j: len(self.queues[j]))
        return self.queues[busiest].pop() if self.queues[busiest] else None

    def __bool__(self) -> bool:
        """Any item still queued."""
        return any(self.queues)
