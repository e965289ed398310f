"""Judges that turn model calls into labels: :class:`LLMRelevanceJudge` (graded qrels)."""

from __future__ import annotations

from .relevance import JudgeResult, Judgment, LLMRelevanceJudge, Pair, holes, pool_pairs

__all__ = ["LLMRelevanceJudge", "Judgment", "JudgeResult", "Pair", "holes", "pool_pairs"]
