"""Judges that turn model calls into labels: :class:`LLMRelevanceJudge` (graded qrels), and
judging on demand while evaluating (:func:`evaluate_with_judge`)."""

from __future__ import annotations

from .batch import export_judge_batch, import_judge_batch, judge_with_batch, judge_with_batch_sync
from .ondemand import evaluate_with_judge, evaluate_with_judge_sync
from .relevance import (
    JudgeResult, Judgment, LLMRelevanceJudge, Pair, holes, pool_pairs, qrels_from_judgments,
)

__all__ = ["LLMRelevanceJudge", "Judgment", "JudgeResult", "Pair", "holes", "pool_pairs",
           "qrels_from_judgments", "judge_with_batch", "judge_with_batch_sync", "export_judge_batch", "import_judge_batch", "evaluate_with_judge",
           "evaluate_with_judge_sync"]

