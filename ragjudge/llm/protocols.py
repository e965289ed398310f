"""What judges and metrics need from an LLM session: small typed interfaces.

:class:`ragjudge.llm.LLM` implements both; a test double or another backend only has to
provide these members. Callers above the LLM layer (``judges/``, ``rag/``) type their
session with these Protocols rather than with ``Any`` or the concrete class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .cost import Usage
from .prompts import Prompt
from .values import DryRun, Embeddings, Outcome, PreparedCall, Stats, Validator

__all__ = ["StructuredSession", "EmbeddingSession"]


@runtime_checkable
class StructuredSession(Protocol):
    """Structured calls, their planning and their totals."""

    model: str
    usage: Usage
    stats: Stats

    async def structured(self, prompt: Prompt | str | Path, variables: Mapping[str, Any], *,
                         validate: Validator | None = None) -> Outcome: ...

    async def structured_many(self, prompt: Prompt | str | Path,
                              variables: Iterable[Mapping[str, Any]], *,
                              validate: Validator | None = None, desc: str | None = None,
                              progress: bool = True) -> list[Outcome]: ...

    def prepare(self, prompt: Prompt | str | Path, variables: Mapping[str, Any]) -> PreparedCall: ...

    def estimate(self, prompt: Prompt | str | Path,
                 variables: Iterable[Mapping[str, Any]]) -> DryRun: ...

    def cost_of(self, usage: Usage, *, batch: bool = False) -> float | None: ...

    @property
    def cost(self) -> float | None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EmbeddingSession(StructuredSession, Protocol):
    """A structured session that also embeds texts."""

    async def embed(self, texts: Sequence[str], *, model: str) -> Embeddings: ...
