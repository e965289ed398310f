"""ragjudge: evaluate retrieval and RAG systems with or without human labels."""

from __future__ import annotations

__version__ = "0.1.0"

from .data import Qrels, Run
from .errors import InputError, LLMError, MetricError, RagjudgeError

__all__ = [
    "__version__",
    "Qrels",
    "Run",
    "RagjudgeError",
    "InputError",
    "MetricError",
    "LLMError",
]
