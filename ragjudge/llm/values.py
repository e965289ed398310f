"""The values the LLM session hands out: :class:`Outcome`, :class:`PreparedCall`,
:class:`DryRun`, :class:`Stats`, :class:`Embeddings` (no behaviour beyond describing
themselves)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import LLMError
from ..render import ResultSurface
from .cost import Usage
from .prompts import Prompt
from .provenance import FailureKind, Provenance, Traced

__all__ = ["gather_or_stop", "Outcome", "PreparedCall", "DryRun", "Stats", "Embeddings", "Validator",
           "BUDGET_REASON"]

#: The error text of an item not attempted because ``max_cost`` was reached.
BUDGET_REASON = "not judged: max cost reached"
#: A caller's check of a parsed reply: returns the value to keep or raises ``ValueError``.
Validator = Callable[[Any], Any]


@dataclass(frozen=True)
class Outcome(Traced):
    """The result of one structured call. ``value is None`` exactly when ``error`` is set;
    ``failure`` then says which kind of failure it is."""

    value: Any
    error: str | None
    failure: FailureKind | None = None
    text: str | None = None
    probs: dict[str, float] | None = None
    expected: float | None = None
    usage: Usage = field(default_factory=Usage)
    latency: float = 0.0
    cached: bool = False
    provenance: Provenance = field(default_factory=Provenance)
    key: str = ""
    attempts: int = 0
    repaired: bool = False
    # Free-text reply fields given up to get the label from a model that kept running out of
    # tokens (the policy's last re-ask uses a schema without them).
    dropped: tuple[str, ...] = ()
    obj: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def skipped(self) -> bool:
        """Not attempted because the cost budget was reached (not a model failure)."""
        return self.failure is FailureKind.BUDGET


@dataclass(frozen=True)
class Embeddings:
    """Vectors of :meth:`LLM.embed`'s texts in input order; ``vectors is None`` exactly when
    ``error`` says why (a failed request, the budget)."""

    vectors: list[list[float]] | None
    error: str | None
    model: str
    usage: Usage = field(default_factory=Usage)
    cached: int = 0  # texts answered from the cache
    failure: FailureKind | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class PreparedCall:
    """A rendered request: what the session sends, batch mode submits and
    :meth:`LLM.accept` completes. ``data`` holds the variable values as given (a prose reply
    quoting a JSON object from them is not a verdict)."""

    key: str
    prompt: Prompt
    messages: list[dict[str, str]]
    body: dict[str, Any]
    estimated_prompt_tokens: int
    cached: Outcome | None = None
    data: tuple[str, ...] = ()


@dataclass(frozen=True)
class DryRun(ResultSurface):
    """What a job would cost: nothing is sent. ``assumptions`` says how it was estimated."""

    pairs: int
    cached: int
    duplicates: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    model: str
    worst_cost: float | None = None
    assumptions: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "cached": self.cached, "duplicates": self.duplicates,
                "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost": self.cost, "model": self.model,
                "worst_cost": self.worst_cost, "assumptions": self.assumptions}

    def describe(self) -> str:
        cost = "unknown (no price for this model; pass --prices)" if self.cost is None \
            else f"${self.cost:.4f}"
        worst = "" if self.worst_cost is None else f" (at most ${self.worst_cost:.4f})"
        text = (f"dry run: {self.pairs} requests, {self.cached} already cached, "
                f"{self.duplicates} duplicates -> {self.calls} calls to {self.model}; "
                f"~{self.prompt_tokens} prompt + ~{self.completion_tokens} completion tokens; "
                f"estimated cost {cost}{worst}")
        return text + (f"\nassumed: {self.assumptions}" if self.assumptions else "")


@dataclass
class Stats:
    calls: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    retries: int = 0
    repaired: int = 0
    failed: int = 0
    skipped: int = 0
    dropped: int = 0  # answers whose free-text fields were given up to get the label
    #: attempts cut off (a stop, a cancelled job) while the server had them: counted in
    #: ``calls`` and the usage at their worst case, since the server may bill them
    cancelled: int = 0
    fallbacks: list[str] = field(default_factory=list)



async def gather_or_stop(tasks: Sequence[asyncio.Future[Any]], results: list[Any]) -> None:
    """Await every task of a many-calls run. The first failure cancels the rest (and waits for
    them to stop); an :class:`LLMError` leaves with the outcomes finished so far as
    ``exc.partial`` (``None`` where unfinished): they are cached, and the caller writes them."""
    try:
        await asyncio.gather(*tasks)
    except BaseException as exc:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if isinstance(exc, LLMError):
            exc.partial = list(results)
        raise
