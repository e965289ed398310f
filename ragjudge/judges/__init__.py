"""Judges that turn model calls into labels: :class:`LLMRelevanceJudge` (graded qrels), and
judging on demand while evaluating (:func:`evaluate_with_judge`)."""

from __future__ import annotations

from importlib import import_module

from .._lazy import lazy_exports

from .options import JudgeOptions

# The judges (and the LLM layer under them) load on first use, so that the options value
# alone (read by the CLI's parser and the service's models) stays cheap.
_LAZY = {
    "export_judge_batch": "batch", "import_judge_batch": "batch", "judge_with_batch": "batch",
    "judge_with_batch_sync": "batch",
    "evaluate_with_judge": "ondemand", "evaluate_with_judge_sync": "ondemand",
    "JudgeResult": "relevance", "Judgment": "relevance", "LLMRelevanceJudge": "relevance",
    "Pair": "relevance", "holes": "relevance", "pool_pairs": "relevance",
    "qrels_from_judgments": "relevance",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))


__all__ = ["LLMRelevanceJudge", "JudgeOptions", "Judgment", "JudgeResult", "Pair", "holes", "pool_pairs",
           "qrels_from_judgments", "judge_with_batch", "judge_with_batch_sync", "export_judge_batch", "import_judge_batch", "evaluate_with_judge",
           "evaluate_with_judge_sync"]

