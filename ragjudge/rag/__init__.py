"""RAG metrics on samples (question, retrieved contexts, response, reference).

Deterministic metrics (``hit, recall, recall_all, precision, mrr, map, ndcg, err, rbp`` at k,
``containment@k``) come from the ranking core on ids or matched contents; LLM metrics
(``context_relevance``, ``context_precision``, ``context_recall``, ``faithfulness``,
``answer_relevance``, ``context_ndcg/err/rbp``...) share the LLM layer's
client, runner and cache. Each metric is one unit of the registry :mod:`ragjudge.rag.metrics`.

    from ragjudge.rag import evaluate_samples_sync
    report = evaluate_samples_sync("samples.jsonl", ["ndcg@5", "faithfulness"], judge=LLM("gpt-4o-mini"))
"""

from __future__ import annotations

from .evaluate import (
    DEFAULT_GRADING,
    GRADING_MODES,
    evaluate_samples,
    evaluate_samples_sync,
    plan_requests,
)
from .matching import MATCH_MODES, canonical_text, document_recall, match_chunks, normalize_text
from .metrics import RagMetric, known_rag_metrics, parse_rag_metric, parse_rag_metrics
from .report import RagReport, Score, Summary
from .samples import (
    DEFAULT_K,
    Context,
    Sample,
    SampleSet,
    as_samples,
    parse_samples,
    read_samples,
    samples_from_dataframe,
    samples_from_records,
)

__all__ = [
    "evaluate_samples",
    "evaluate_samples_sync",
    "plan_requests",
    "DEFAULT_GRADING",
    "GRADING_MODES",
    "DEFAULT_K",
    "MATCH_MODES",
    "Context",
    "Sample",
    "SampleSet",
    "RagMetric",
    "RagReport",
    "Score",
    "Summary",
    "as_samples",
    "parse_samples",
    "read_samples",
    "samples_from_dataframe",
    "samples_from_records",
    "parse_rag_metric",
    "parse_rag_metrics",
    "known_rag_metrics",
    "document_recall",
    "match_chunks",
    "normalize_text",
    "canonical_text",
]
