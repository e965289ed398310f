"""RAG metric specs: names, parameters and what each result column means.

Specs use the generic grammar of :func:`ragjudge.measures.parse_spec`
(``name[(param=value,...)][@k]``). A :class:`RagMetric` is a frozen value whose ``str()`` is
the canonical spec and parses back to an equal value.

Deterministic (no LLM): every ranking measure of :mod:`ragjudge.measures` (``hit, recall,
recall_all, precision, mrr, map, ndcg, err, rbp``...) with an extra ``match=`` parameter
(``auto|id|text|normalized|chunk``), and ``containment@k``.

LLM-graded: ``context_relevance@k``, ``context_precision(threshold=2, norm=ragas|ir,
by=relevance|reference)@k``, ``context_ndcg@k`` / ``context_err@k`` / ``context_rbp@k`` (the
ranking core on the chunk grades), ``context_recall@k``, ``faithfulness``,
``answer_relevance(by=llm|embedding)``. ``context_precision`` without ``norm`` reports both normalisations.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MetricError
from ..measures import (
    Measure,
    format_spec,
    known_measures,
    parse_measure,
    parse_spec,
    split_metric_list,
)
from .matching import MATCH_MODES

__all__ = [
    "RagMetric",
    "parse_rag_metric",
    "parse_rag_metrics",
    "RAG_LLM_METRICS",
    "known_rag_metrics",
    "definition",
]

#: LLM-graded metric names.
RAG_LLM_METRICS = (
    "context_relevance",
    "context_precision",
    "context_recall",
    "faithfulness",
    "answer_relevance",
    "context_ndcg",
    "context_err",
    "context_rbp",
)
#: ``answer_relevance(by=...)``: an LLM grade (default) or RAGAS-style embedding similarity.
ANSWER_RELEVANCE_BY = ("llm", "embedding")
_GRADED = {"context_ndcg": "ndcg", "context_err": "err", "context_rbp": "rbp"}
_GRADE_DEFAULTS = {"err": {"max_grade": "3"}, "rbp": {"gain": "graded", "max_grade": "3"}}
_TAKES_K = {"context_relevance", "context_precision", "context_recall", "containment", *_GRADED}


@dataclass(frozen=True)
class RagMetric:
    """One RAG metric: ``name``, typed non-default ``params`` (sorted), cutoff ``k``.

    ``measure`` is the ranking measure behind ``hit``/``ndcg``/``context_ndcg``... (its ``k``
    is ``None``: the cutoff is resolved per sample).
    """

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    k: int | None = None
    measure: Measure | None = None

    def get(self, key: str, default: Any = None) -> Any:
        for pk, pv in self.params:
            if pk == key:
                return pv
        return default

    @property
    def needs_llm(self) -> bool:
        return self.name in RAG_LLM_METRICS

    @property
    def kind(self) -> str:
        if self.name in RAG_LLM_METRICS:
            return "graded" if self.name in _GRADED else self.name
        return "containment" if self.name == "containment" else "ranking"

    def __str__(self) -> str:
        return format_spec(self.name, self.params, self.k)


def known_rag_metrics() -> list[str]:
    return sorted({*known_measures(), "containment", *RAG_LLM_METRICS})


def _spec_of(base: str, params: dict[str, str]) -> str:
    return base + ("(" + ",".join(f"{a}={b}" for a, b in params.items()) + ")" if params else "")


def _no_params(name: str, raw: dict[str, str], spec: str) -> None:
    if raw:
        raise MetricError(f"metric {name!r} takes no parameters, got {spec!r}")


def parse_rag_metric(spec: str | RagMetric) -> list[RagMetric]:
    """Parse one spec into the metric(s) it reports (``context_precision`` without ``norm`` is
    two columns: the RAGAS and the IR normalisation). Raises :class:`MetricError`."""
    if isinstance(spec, RagMetric):
        return [spec]
    name, raw, k = parse_spec(spec)
    raw = dict(raw)
    if k is not None and name not in _TAKES_K and name in RAG_LLM_METRICS:
        raise MetricError(f"metric {name!r} takes no cutoff, got {spec!r}")

    if name == "containment":
        _no_params(name, raw, spec)
        return [RagMetric(name, (), k)]
    if name in _GRADED:
        base = _GRADED[name]
        own = dict(_GRADE_DEFAULTS.get(base, {}))
        if raw.get("gain", "").lower() == "binary":
            own.pop("max_grade", None)
        merged = {**own, **raw}
        try:
            m = parse_measure(_spec_of(base, merged))
            defaults = parse_measure(_spec_of(base, _GRADE_DEFAULTS.get(base, {})))
        except MetricError as exc:
            raise MetricError(f"in {spec!r}: {exc}") from None
        # Show what differs from this metric's own defaults (and RBP's p, always).
        keys = {pk for pk, _ in m.params} | {pk for pk, _ in defaults.params}
        shown = [(key, m.get(key)) for key in keys
                 if m.get(key) is not None and (key == "p" or m.get(key) != defaults.get(key))]
        return [RagMetric(name, tuple(sorted(shown)), k, m)]
    if name == "context_relevance" or name == "context_recall" or name == "faithfulness":
        _no_params(name, raw, spec)
        return [RagMetric(name, (), k)]
    if name == "answer_relevance":
        by = raw.get("by", "llm").lower()
        if by not in ANSWER_RELEVANCE_BY or set(raw) - {"by"}:
            raise MetricError(
                f"answer_relevance takes only by=llm|embedding (got {spec!r})"
            )
        return [RagMetric(name, (("by", "embedding"),) if by == "embedding" else (), None)]
    if name == "context_precision":
        allowed = {"threshold", "norm", "by"}
        bad = set(raw) - allowed
        if bad:
            raise MetricError(
                f"unknown parameter {sorted(bad)[0]!r} for context_precision in {spec!r}; "
                "allowed: by, norm, threshold"
            )
        by = raw.get("by", "relevance").lower()
        if by not in ("relevance", "reference"):
            raise MetricError(f"by must be relevance or reference in {spec!r}")
        params: list[tuple[str, Any]] = []
        if by == "reference":
            if "threshold" in raw:
                raise MetricError(f"threshold applies to by=relevance only, in {spec!r}")
            params.append(("by", "reference"))
        else:
            try:
                t = int(raw.get("threshold", "2"))
            except ValueError:
                t = -1
            if not 1 <= t <= 3:
                raise MetricError(f"threshold must be an integer grade 1-3 in {spec!r}")
            if t != 2:
                params.append(("threshold", t))
        norms = [raw["norm"].lower()] if "norm" in raw else ["ragas", "ir"]
        for n in norms:
            if n not in ("ragas", "ir"):
                raise MetricError(f"norm must be ragas or ir in {spec!r}")
        return [
            RagMetric(name, tuple(sorted(params + ([("norm", "ir")] if n == "ir" else []))), k)
            for n in norms
        ]
    if name in RAG_LLM_METRICS:  # pragma: no cover - every LLM name is handled above
        raise MetricError(f"unhandled metric {name!r}")

    # A ranking measure of the ranking core, plus ``match``.
    match = raw.pop("match", "auto").lower()
    if match not in MATCH_MODES:
        raise MetricError(f"match must be one of {', '.join(MATCH_MODES)} in {spec!r}")
    inner = name + ("(" + ",".join(f"{a}={b}" for a, b in raw.items()) + ")" if raw else "")
    try:
        m = parse_measure(inner)
    except MetricError as exc:
        msg = str(exc)
        if "unknown metric" in msg:
            msg += ", " + ", ".join(["containment", *RAG_LLM_METRICS])
        raise MetricError(msg) from None
    if m.k is not None:  # trec_eval spellings carry the cutoff in the name (P_10)
        if k is not None:
            raise MetricError(f"metric spec {spec!r} gives the cutoff twice")
        k, m = m.k, dataclasses.replace(m, k=None)
    params2 = list(m.params) + ([("match", match)] if match != "auto" else [])
    return [RagMetric(m.name, tuple(sorted(params2)), k, m)]


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
    k = f"@{m.k}" if m.k is not None else "@k"
    if m.name == "context_precision":
        by_ref = m.get("by") == "reference"
        rel = "useful for the reference answer" if by_ref else f"graded >= {m.get('threshold', 2)}"
        if m.get("norm") == "ir":
            return (f"AP{k} over chunks {rel}, divided by the relevant chunks known among all "
                    "retrieved (IR / trec_eval map_cut normalisation; 0 when none)")
        return (f"AP{k} over chunks {rel}, divided by the relevant chunks retrieved in the top k "
                "(RAGAS normalisation; 0 when none)")
    if m.name == "context_relevance":
        return f"mean normalised LLM grade (grade/3) of the top-k chunks{k}"
    if m.name in _GRADED:
        return f"{m.measure} of the ranking with the LLM chunk grades (0-3) as qrels"
    if m.name == "context_recall":
        return "reference statements attributed to the top-k contexts / reference statements"
    if m.name == "faithfulness":
        return "response claims supported by the retrieved contexts / response claims"
    if m.name == "answer_relevance" and m.get("by") == "embedding":
        return ("mean cosine similarity between the question's embedding and those of questions "
                "the LLM generates from the response")
    if m.name == "answer_relevance":
        return "LLM grade (0-3) of how well the response addresses the question, divided by 3"
    if m.name == "containment":
        return "1 if an expected answer occurs (case/whitespace normalised) in a top-k passage"
    match = m.get("match", "auto")
    return f"{m.measure} of the ranking core, retrieved chunks matched to gold by {match}"
