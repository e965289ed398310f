"""The metric catalog served by ``GET /v1/metrics``.

Read through public functions only (``known_measures``/``parse_measure`` for ranking measures,
``known_rag_metrics``/``parse_rag_metric``/``definition`` for RAG metrics, the reference kernels'
docstrings for formulas), so the measure and RAG-metric registries can change inside without
this module knowing. When the registries expose their specs directly, :func:`metric_catalog`
is the one function to switch.
"""

from __future__ import annotations

import inspect
import sys
from functools import lru_cache
from typing import Any

from ..errors import MetricError
from ..measures import known_measures, parse_measure, spec_of
from ..rag import known_rag_metrics, parse_rag_metric
from ..rag.metrics import definition, unit_of


__all__ = ["metric_catalog"]

# Kernel functions whose name is not the measure's.
_KERNEL_NAMES = {"map": "average_precision"}


def _doc(fn: Any) -> str | None:
    doc = inspect.getdoc(fn) if callable(fn) else None
    return " ".join(doc.split()) if doc else None


def _registry_spec(name: str) -> Any:
    """The measure registry's spec of ``name``."""

    return spec_of(name)


def _definition(name: str, spec: Any) -> str | None:
    """The formula and citation: the docstring of the measure's reference kernel, beside its
    spec in the registry's family module."""
    if spec is None:
        return None
    fname = _KERNEL_NAMES.get(name, name)
    family = sys.modules.get(getattr(spec.batch, "__module__", ""), None)
    return _doc(getattr(family, fname, None)) or _doc(getattr(family, name, None))


def _ranking(name: str) -> dict[str, Any]:
    spec = _registry_spec(name)
    try:
        canonical = str(parse_measure(name))
    except MetricError:  # a measure that needs a parameter to be spelled
        canonical = name
    # The registry is the one source: parameters, cutoff and pool-freedom are read off the spec.
    params = [{"name": k, "default": p.default, "allowed": p.allowed} for k, p in sorted(spec.params.items())]
    takes_cutoff = bool(spec.cutoff)
    # Labels judged on demand: does the value move with the pool (the other runs judged)?
    pool_free: bool | str = "depends on the parameters" if callable(spec.pool_free) else bool(spec.pool_free)
    return {
        "name": name,
        "family": "ranking",
        "spec": canonical,
        "takes_cutoff": takes_cutoff,
        "parameters": params,
        "needs_llm": False,
        "pool_free": pool_free,
        "definition": _definition(name, spec) or f"{name} (ranking measure)",
    }


def _rag(name: str) -> dict[str, Any]:
    parsed = parse_rag_metric(name)
    unit = unit_of(name)
    # The unit declares its parameters: read them, never probe the parser.
    params = [{"name": key, "default": p.default, "allowed": p.allowed}
              for key, p in sorted(unit.parameters(name).items())]
    return {
        "name": name,
        "family": "rag",
        "spec": ", ".join(str(m) for m in parsed),
        "takes_cutoff": unit.takes_k,
        "parameters": params,
        "needs_llm": parsed[0].needs_llm,
        "definition": "; ".join(definition(m) for m in parsed),
    }


@lru_cache(maxsize=1)
def metric_catalog() -> list[dict[str, Any]]:
    """Every ranking measure and RAG metric: name, canonical spec, cutoff, parameters with
    defaults, whether it calls an LLM, and a one-paragraph definition."""

    ranking = known_measures()
    out = [_entry(_ranking, n, "ranking") for n in ranking]
    out.extend(_entry(_rag, n, "rag") for n in known_rag_metrics() if n not in set(ranking))
    return out


def _entry(make: Any, name: str, family: str) -> dict[str, Any]:
    # One odd registry entry must not take the whole catalog (and /v1/metrics) down.
    try:
        return make(name)
    except Exception:  # noqa: BLE001
        return {"name": name, "family": family, "spec": name, "takes_cutoff": False,
                "parameters": [], "needs_llm": False, "definition": name}
