"""The metric catalog served by ``GET /v1/metrics``.

Read through public functions only (``known_measures``/``parse_measure`` for ranking measures,
``known_rag_metrics``/``parse_rag_metric``/``definition`` for RAG metrics, the reference kernels'
docstrings for formulas), so the measure and RAG-metric registries can change inside without
this module knowing. When the registries expose their specs directly, :func:`metric_catalog`
is the one function to switch.
"""

from __future__ import annotations

import inspect
import re
import sys
from functools import lru_cache
from typing import Any

from ..errors import MetricError
from ..measures import known_measures, parse_measure

__all__ = ["metric_catalog"]

# Kernel functions whose name is not the measure's.
_KERNEL_NAMES = {"map": "average_precision"}
_ALLOWED = re.compile(r"allowed: (.*)$")


def _takes_cutoff(parse: Any, name: str) -> bool:
    try:
        parse(f"{name}@1")
    except MetricError:
        return False
    return True


def _param_names(parse: Any, name: str) -> list[str]:
    """Parameter names, from the message the parser gives for an unknown parameter."""
    try:
        parse(f"{name}(zz_unknown=1)")
    except MetricError as exc:
        m = _ALLOWED.search(str(exc))
        if m and m.group(1).strip() != "none":
            return [p.strip() for p in m.group(1).split(",") if p.strip()]
    return []


def _doc(fn: Any) -> str | None:
    doc = inspect.getdoc(fn) if callable(fn) else None
    return " ".join(doc.split()) if doc else None


def _registry_spec(name: str) -> Any:
    """The measure registry's spec of ``name`` (None: not a registered measure)."""
    from ..measures import spec_of

    try:
        return spec_of(name)
    except MetricError:
        return None


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
    if spec is not None:
        params = [{"name": k, "default": p.default, "allowed": p.allowed}
                  for k, p in sorted(spec.params.items())]
        takes_cutoff = bool(spec.cutoff)
        # Labels judged on demand: does the value move with the pool (the other runs judged)?
        pool_free: bool | str | None = ("depends on the parameters" if callable(spec.pool_free)
                                        else bool(spec.pool_free))
    else:
        pool_free = None
        m = parse_measure(name)
        params = [{"name": p, "default": m.get(p)} for p in _param_names(parse_measure, name)]
        takes_cutoff = _takes_cutoff(parse_measure, name)
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
    from ..rag import parse_rag_metric
    from ..rag.metrics import definition

    parsed = parse_rag_metric(name)
    first = parsed[0]
    params = [{"name": k, "default": v} for k, v in first.params]
    # Parameter names beyond the shown defaults, from the parser's own message.
    for p in _param_names(parse_rag_metric, name):
        if p not in {q["name"] for q in params}:
            params.append({"name": p, "default": None})
    return {
        "name": name,
        "family": "rag",
        "spec": ", ".join(str(m) for m in parsed),
        "takes_cutoff": _takes_cutoff(parse_rag_metric, name),
        "parameters": params,
        "needs_llm": first.needs_llm,
        "definition": "; ".join(definition(m) for m in parsed),
    }


@lru_cache(maxsize=1)
def metric_catalog() -> list[dict[str, Any]]:
    """Every ranking measure and RAG metric: name, canonical spec, cutoff, parameters with
    defaults, whether it calls an LLM, and a one-paragraph definition."""
    from ..rag import known_rag_metrics

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
