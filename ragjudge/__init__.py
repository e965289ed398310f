"""ragjudge: evaluate retrieval and RAG systems with or without human labels.

Every name loads on first use (PEP 562), so ``import ragjudge`` and ``ragjudge --help`` cost no
more than the lightest peer's import; a CI job that only scores runs never loads the LLM judge,
the agreement statistics or the RAG metrics.
"""

from __future__ import annotations

from ._version import __version__

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._lazy import lazy_exports

from .errors import InputError, LLMError, MetricError, RagjudgeError

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .data import Qrels, Run
    from .evaluate import compare, evaluate, evaluate_lists
    from .fuse import fuse
    from .io import (
        format_qrels, format_run, parse_qrels, parse_run, read_beir, read_corpus, read_qrels,
        read_queries, read_run, write_qrels, write_run,
    )
    from .measures import Measure, known_measures, parse_measure
    from .report import CompareReport, Report
    from .trust.agreement import AgreementReport, label_agreement, ranking_agreement
    from .judges import (
        Judgment, JudgeResult, LLMRelevanceJudge, evaluate_with_judge, evaluate_with_judge_sync,
    )
    from .llm import LLM, Prompt, load_prompt
    from .rag import RagReport, Sample, evaluate_samples, evaluate_samples_sync, read_traces, span_scores
    from .trust import PPIReport, judge_panel, judge_panel_sync, plan_labels, ppi_evaluate, ppi_mean, soft_evaluate
    from .synth import SynthResult, synthesize, synthesize_sync
    from .nuggets import (assign_nuggets, assign_nuggets_sync, create_nuggets, create_nuggets_sync,
                          score_assignments)
    from .integrations.retrievers import RetrievalError, RetrievedRun, run_retriever, run_retriever_sync
    from .integrations.pipelines import collect_samples, collect_samples_sync
    from .integrations.mlflow import log_mlflow
    from .integrations.logged import load_mlflow

# name -> module it is loaded from on first access (PEP 562)
_LAZY = {
    "Qrels": "data", "Run": "data",
    "compare": "evaluate", "evaluate": "evaluate", "evaluate_lists": "evaluate",
    "fuse": "fuse",
    "format_qrels": "io", "format_run": "io", "parse_qrels": "io", "parse_run": "io",
    "read_beir": "io", "read_corpus": "io", "read_qrels": "io", "read_queries": "io",
    "read_run": "io", "write_qrels": "io", "write_run": "io",
    "Measure": "measures", "known_measures": "measures", "parse_measure": "measures",
    "CompareReport": "report", "Report": "report",
    "AgreementReport": "trust.agreement",
    "label_agreement": "trust.agreement",
    "ranking_agreement": "trust.agreement",
    "LLMRelevanceJudge": "judges",
    "Judgment": "judges",
    "JudgeResult": "judges",
    "evaluate_with_judge": "judges",
    "evaluate_with_judge_sync": "judges",
    "LLM": "llm",
    "Prompt": "llm",
    "load_prompt": "llm",
    "evaluate_samples": "rag",
    "evaluate_samples_sync": "rag",
    "RagReport": "rag",
    "Sample": "rag",
    "read_traces": "rag",
    "span_scores": "rag",
    "ppi_evaluate": "trust",
    "ppi_mean": "trust",
    "plan_labels": "trust",
    "PPIReport": "trust",
    "soft_evaluate": "trust",
    "judge_panel": "trust",
    "judge_panel_sync": "trust",
    "synthesize": "synth",
    "synthesize_sync": "synth",
    "SynthResult": "synth",
    "create_nuggets": "nuggets", "create_nuggets_sync": "nuggets", "assign_nuggets": "nuggets",
    "assign_nuggets_sync": "nuggets", "score_assignments": "nuggets",
    "run_retriever": "integrations.retrievers",
    "run_retriever_sync": "integrations.retrievers",
    "RetrievedRun": "integrations.retrievers",
    "RetrievalError": "integrations.retrievers",
    "collect_samples": "integrations.pipelines",
    "collect_samples_sync": "integrations.pipelines",
    "log_mlflow": "integrations.mlflow",
    "load_mlflow": "integrations.logged",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))


# ``ragjudge.evaluate`` and ``ragjudge.fuse`` are the functions, though their modules have the
# same names: importing a submodule sets it as the package's attribute, which would hide the
# function once anything imported the module. The package answers with the function instead.
_SHADOWED = frozenset({"evaluate", "fuse"})


class _Package(types.ModuleType):
    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return getattr(value, name)
        return value


sys.modules[__name__].__class__ = _Package


__all__ = [
    "__version__",
    # data and I/O
    "Qrels",
    "Run",
    "parse_qrels",
    "read_qrels",
    "format_qrels",
    "write_qrels",
    "parse_run",
    "read_run",
    "format_run",
    "write_run",
    "read_queries",
    "read_corpus",
    "read_beir",
    # measures and evaluation
    "Measure",
    "parse_measure",
    "known_measures",
    "evaluate",
    "compare",
    "evaluate_lists",
    "fuse",
    "Report",
    "CompareReport",
    # LLM judging
    "LLM",
    "Prompt",
    "load_prompt",
    "LLMRelevanceJudge",
    "Judgment",
    "JudgeResult",
    "evaluate_with_judge",
    "evaluate_with_judge_sync",
    # RAG metrics
    "evaluate_samples",
    "evaluate_samples_sync",
    "RagReport",
    "Sample",
    "read_traces",
    "span_scores",
    # synthetic test collections
    "synthesize",
    "synthesize_sync",
    "SynthResult",
    # answer-level evaluation with nuggets (ragjudge.nuggets)
    "create_nuggets",
    "create_nuggets_sync",
    "assign_nuggets",
    "assign_nuggets_sync",
    "score_assignments",
    # your retriever and pipeline (ragjudge.integrations)
    "run_retriever",
    "run_retriever_sync",
    "RetrievedRun",
    "RetrievalError",
    "collect_samples",
    "collect_samples_sync",
    "log_mlflow",
    "load_mlflow",
    # agreement
    "label_agreement",
    "ranking_agreement",
    "AgreementReport",
    # trusting LLM labels (ragjudge.trust)
    "ppi_evaluate",
    "ppi_mean",
    "plan_labels",
    "PPIReport",
    "soft_evaluate",
    "judge_panel",
    "judge_panel_sync",
    # errors
    "RagjudgeError",
    "InputError",
    "MetricError",
    "LLMError",
]
