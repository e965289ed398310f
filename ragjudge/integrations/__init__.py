"""Your own retriever and RAG pipeline, evaluated; reports logged to MLflow.

* :func:`run_retriever` (:mod:`.retrievers`): a run from a function, a LangChain, LlamaIndex or
  Haystack retriever;
* :func:`collect_samples` (:mod:`.pipelines`): RAG samples from a function, a LangChain chain,
  a LlamaIndex query engine or a Haystack pipeline;
* :func:`log_mlflow` (:mod:`.mlflow`): a report's metrics, intervals, settings and JSON in an
  MLflow run.

Nothing here imports a framework until it is handed one of its objects; the names load on
first use.
"""

from __future__ import annotations

from importlib import import_module

from .._lazy import lazy_exports

__all__ = [
    "RetrievalError",
    "RetrievedRun",
    "run_retriever",
    "run_retriever_sync",
    "collect_samples",
    "collect_samples_sync",
    "log_mlflow",
]

_LAZY = {
    "RetrievalError": "retrievers",
    "RetrievedRun": "retrievers",
    "run_retriever": "retrievers",
    "run_retriever_sync": "retrievers",
    "collect_samples": "pipelines",
    "collect_samples_sync": "pipelines",
    "log_mlflow": "mlflow",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))


