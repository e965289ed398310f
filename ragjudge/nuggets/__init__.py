"""Answer-level evaluation as the TREC RAG track does it: nuggets and citation support.

Nuggets are the atomic facts an answer to a query should contain, made from the query's
relevant passages and labelled *vital* or *okay*; each is assigned to each answer as
*support*, *partial support* or *not support*, and an answer scores the share of (vital)
nuggets it supports (:mod:`.score`). Citation support checks each answer sentence against
the passages it cites (ALCE citation precision and recall).

    from ragjudge.nuggets import read_assignments, score_assignments
    report = score_assignments(read_assignments("assignments.jsonl"))
    print(report)          # per-run means with intervals and paired tests
"""

from __future__ import annotations

from importlib import import_module

from .._lazy import lazy_exports

_LAZY = {
    "IMPORTANCE": "data", "LABELS": "data", "LABELS_2": "data", "Nugget": "data",
    "NuggetSet": "data", "Sentence": "data", "Answer": "data", "AssignedNugget": "data",
    "Assignment": "data", "parse_nuggets": "data", "read_nuggets": "data",
    "write_nuggets": "data", "parse_answers": "data", "read_answers": "data",
    "parse_assignments": "data", "read_assignments": "data", "write_assignments": "data", "read_texts": "data",
    "METRICS": "score", "CREDIT": "score", "WEIGHT": "score", "answer_scores": "score",
    "score_assignments": "score", "per_run": "score",
    "AssignResult": "assign", "assign_nuggets": "assign", "assign_nuggets_sync": "assign",
    "estimate_assign": "assign", "assign_prompt": "assign",
    "NuggetOptions": "options",
    "CreateResult": "create", "create_nuggets": "create", "create_nuggets_sync": "create",
    "label_importance": "create", "label_importance_sync": "create", "estimate_create": "create",
    "passages_for": "create",
    "SUPPORT": "cite", "CITE_METRICS": "cite", "CitedAnswer": "cite", "CiteResult": "cite",
    "cite_support": "cite", "cite_support_sync": "cite", "estimate_cite": "cite",
    "NuggetEvaluation": "pipeline", "evaluate_answers": "pipeline",
    "evaluate_answers_sync": "pipeline", "estimate_answers": "pipeline",
    "NuggetAgreement": "agree", "nugget_agreement": "agree",
    "citation_scores": "cite", "read_support": "cite", "support_pairs": "cite",
    "NuggetToLabel": "labelling", "sample_nuggets_to_label": "labelling",
    "read_nugget_to_label": "labelling", "human_assignments": "labelling",
    "human_from_files": "labelling", "replay_nugget_labels": "labelling",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))

__all__ = [
    "Answer", "AssignResult", "AssignedNugget", "Assignment", "CITE_METRICS", "CREDIT",
    "CiteResult", "CitedAnswer", "CreateResult", "IMPORTANCE", "LABELS", "LABELS_2", "METRICS",
    "Nugget", "NuggetAgreement", "NuggetEvaluation", "NuggetOptions", "NuggetSet",
    "NuggetToLabel", "SUPPORT",
    "Sentence", "WEIGHT", "answer_scores", "assign_nuggets", "assign_nuggets_sync",
    "assign_prompt", "citation_scores", "cite_support", "cite_support_sync", "create_nuggets",
    "create_nuggets_sync", "estimate_answers", "estimate_assign", "estimate_cite",
    "estimate_create", "evaluate_answers", "evaluate_answers_sync", "human_assignments",
    "human_from_files", "label_importance",
    "label_importance_sync", "nugget_agreement", "parse_answers", "parse_assignments",
    "parse_nuggets", "passages_for", "per_run", "read_answers", "read_assignments",
    "read_nugget_to_label", "read_nuggets", "read_support", "read_texts",
    "replay_nugget_labels", "sample_nuggets_to_label", "score_assignments", "support_pairs",
    "write_assignments", "write_nuggets",
]
