"""The RAG metric registry: one unit per metric, one family per module.

Specs use the generic grammar of :func:`ragjudge.measures.parse_spec`
(``name[(param=value,...)][@k]``); a :class:`RagMetric` is a frozen value whose ``str()`` is
the canonical spec and parses back to an equal value.

Families (each module registers its units with :func:`~.base.register`):

* :mod:`.ids` -- no LLM: every ranking measure of the core (``hit, recall, mrr, ndcg``...)
  with ``match=auto|id|text|normalized|chunk``, and ``containment@k``;
* :mod:`.context` -- ``context_relevance@k``, ``context_precision(threshold, norm=ragas|ir,
  by=relevance|reference)@k``, ``context_ndcg/err/rbp@k`` (one grading feeds them all);
* :mod:`.recall` -- ``context_recall@k``; :mod:`.faithfulness` -- ``faithfulness``;
* :mod:`.answer` -- ``answer_relevance(by=llm|embedding)``;
* and any other module here (:func:`llm_metric_names` lists what is registered).

To add a metric: copy the closest family module (``recall.py`` for a one-call LLM metric),
declare ``names``/``needs``, write ``requests`` (what to ask for a sample, given the answers
so far) and ``score``, and add its prompt under ``prompts/``: every module of this package
is imported (and so registered) at start-up.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Sequence

from ...errors import MetricError
from ...measures import known_measures, parse_spec, split_metric_list
from .base import (
    DeterministicMetric,
    LLMMetric,
    MetricUnit,
    RagMetric,
    Request,
    Setup,
    reviewed,
    unit_of,
    units,
)

__all__ = [
    "RagMetric",
    "MetricUnit",
    "LLMMetric",
    "DeterministicMetric",
    "Request",
    "Setup",
    "unit_of",
    "reviewed",
    "parse_rag_metric",
    "parse_rag_metrics",
    "known_rag_metrics",
    "llm_metric_names",
    "definition",
]

# Every module of this package but ``base`` is a family: importing it registers its units, so
# a new metric is one new file (plus its prompt and test), with no list to edit.
for _family in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _family != "base":
        importlib.import_module(f"{__name__}.{_family}")


def llm_metric_names() -> list[str]:
    """Names of the LLM-graded metrics."""
    return sorted(n for n, u in units().items() if isinstance(u, LLMMetric))


def known_rag_metrics() -> list[str]:
    """Every RAG metric name: the ranking measures and the RAG metric units, sorted."""
    return sorted({*known_measures(), *(n for n in units() if n != "*")})


def parse_rag_metric(spec: str | RagMetric) -> list[RagMetric]:
    """Parse one spec into the metric(s) it reports (``context_precision`` without ``norm`` is
    two columns: the RAGAS and the IR normalisation). Raises :class:`MetricError`."""
    if isinstance(spec, RagMetric):
        return [spec]
    name, raw, k = parse_spec(spec)
    unit = unit_of(name)
    if k is not None and not unit.takes_k:
        raise MetricError(f"metric {name!r} takes no cutoff, got {spec!r}")
    return unit.parse(name, dict(raw), k, spec)


def parse_rag_metrics(specs: str | Iterable[str | RagMetric]) -> list[RagMetric]:
    """Parse ``-m`` values (each may be a comma list); duplicates are dropped, order kept."""
    if isinstance(specs, str):
        specs = [specs]
    out: list[RagMetric] = []
    seen: set[str] = set()
    for item in specs:
        parts: Sequence[str | RagMetric] = split_metric_list(item) if isinstance(item, str) else [item]
        for part in parts:
            for m in parse_rag_metric(part):
                if str(m) not in seen:
                    seen.add(str(m))
                    out.append(m)
    if not out:
        raise MetricError("no metrics given")
    return out


def definition(m: RagMetric) -> str:
    """One line saying what a result column means."""
    return m.unit.definition(m)
