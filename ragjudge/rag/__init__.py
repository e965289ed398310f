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

from importlib import import_module

from .._lazy import lazy_exports

from .options import DEFAULT_GRADING, DEFAULT_K, GRADING_MODES, MATCH_MODES, RagOptions

# Samples, metrics and evaluation load on first use, so that the options value alone (read by
# the CLI's parser and the service's models) stays cheap.
_LAZY = {
    "evaluate_samples": "evaluate", "evaluate_samples_sync": "evaluate", "plan_requests": "evaluate",
    "canonical_text": "matching", "document_recall": "matching", "match_chunks": "matching",
    "normalize_text": "matching",
    "RagMetric": "metrics", "known_rag_metrics": "metrics", "parse_rag_metric": "metrics",
    "parse_rag_metrics": "metrics",
    "RagReport": "report", "Score": "report", "Summary": "report",
    "Context": "samples", "Sample": "samples", "SampleSet": "samples", "as_samples": "samples",
    "parse_samples": "samples", "read_samples": "samples", "read_traces": "samples",
    "span_scores": "traces", "samples_from_dataframe": "samples",
    "samples_from_records": "samples",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))


__all__ = [
    "evaluate_samples",
    "evaluate_samples_sync",
    "plan_requests",
    "RagOptions",
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
    "read_traces",
    "span_scores",
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
