"""The context relevance family: metrics on the LLM grades of the retrieved chunks.

One grading (``relevance_listwise.v1``: all chunks of a sample in ceil(n / 20) calls; or
``relevance.v1`` / a relevance judge's prompt, one call per chunk, in pointwise mode) feeds
``context_relevance``, ``context_precision`` and ``context_ndcg/err/rbp``: together they cost
one grading. A run that also asks ``context_recall`` gets the grades and the passages
supporting each reference sentence from one call per sample (``context_review.v3``,
:func:`.base.review_request`). ``context_precision(by=reference)`` asks instead, in one call
(``context_usefulness.v1``), whether each chunk was useful for arriving at the reference.
The grading scale (top grade, relevance threshold) is the grading prompt's (:class:`Setup`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import MetricError
from ...lists import score_lists
from ...measures import Measure, parse_measure, spec_of
from ...measures.grammar import Param, choice, int_at_least
from ..report import Score
from ..samples import Sample
from .base import (
    LLMMetric, RagMetric, Request, Setup, chat, format_passages, present, register, review_request,
    sized
)

__all__ = [
    "LISTWISE_WINDOW",
    "grade_requests",
    "chunk_grades",
    "mean_normalized_grade",
    "context_precision_value",
    "graded_measure",
]

#: Listwise grading sends at most this many chunks per call (long lists are split).
LISTWISE_WINDOW = Setup.WINDOW


# ----------------------------------------------------------------------------- formulas
def mean_normalized_grade(grades: Sequence[int], k: int, max_grade: int) -> float:
    """context_relevance@k = (1/n) * sum_{i<=n} g_i / g_max, n = min(k, |retrieved|),
    g_max = the top grade of the grading prompt's scale."""
    top = list(grades[:k])
    return sum(g / max_grade for g in top) / len(top)


def context_precision_value(grades: Sequence[int], k: int, threshold: int, norm: str) -> float:
    """Average precision over the top k, a chunk being relevant when its grade >= ``threshold``:

    AP@k = (1/R) * sum_{i<=k, g_i >= t} P@i  (P@i = relevant chunks in the top i, over i).

    ``norm="ragas"``: R = relevant chunks *retrieved in the top k* (RAGAS's context precision).
    ``norm="ir"``: R = relevant chunks *known*, i.e. among all graded retrieved chunks
    (trec_eval ``map_cut_k`` with the grades as qrels). Both are 0 when no chunk they count is
    relevant: the grades cover only retrieved chunks, so that means nothing useful was
    retrieved -- a measured 0, not a failure. Computed by the ranking core.
    """
    m = parse_measure(f"map(rel={threshold})@{k}")
    if norm == "ragas":
        grades = list(grades[:k])
    elif norm != "ir":
        raise ValueError(f"norm must be ragas or ir, got {norm!r}")
    if not any(g >= threshold for g in grades):
        return 0.0
    return graded_measure(grades, m)


def graded_measure(grades: Sequence[int], measure: Measure) -> float:
    """A ranking measure (``ndcg``, ``err``, ``rbp``...) of one sample whose qrels are the LLM
    grades of its retrieved chunks, in rank order, computed by the ranking core. All grades 0
    (nothing relevant retrieved) is the retriever's miss: 0, not undetermined."""
    ids = [f"c{i:05d}" for i in range(len(grades))]
    (value,) = score_lists([dict(zip(ids, grades))], [ids], [measure])[measure]
    return value if isinstance(value, float) else 0.0  # rel > every grade: nothing relevant


# ----------------------------------------------------------------------------- requests
def _int_list(obj: Any) -> list[int]:
    return [int(g) for g in obj["grades"]]


def _label(field: str, labels: Sequence[Any]) -> Any:
    def parse(obj: Any) -> int:
        value = obj.get(field) if isinstance(obj, Mapping) else None
        if isinstance(value, bool) or value not in labels:
            raise ValueError(f"{field} must be one of {list(labels)}, got {value!r}")
        return int(value)

    return parse


def grade_requests(s: Sample, setup: Setup) -> list[Request] | str:
    """The grading requests of a sample's retrieved chunks (shared by the whole family)."""
    texts = s.context_texts
    if texts is None:
        return "no retrieved texts" if s.contexts is None else "some retrieved chunks have no text"
    if not texts:
        return "no retrieved chunks"
    if not present(s.question):
        return "no question"
    q = s.question or ""
    if setup.grading == "listwise":
        review = review_request(s, setup)
        if review is not None:
            return [review]
        out = []
        for i in range(0, len(texts), LISTWISE_WINDOW):
            w = texts[i : i + LISTWISE_WINDOW]
            out.append(chat(f"grades{i:06d}", "grading", setup.sized(Setup.LISTWISE, "grades", len(w)),
                            {"query": q, "passages": format_passages(w), "count": str(len(w))},
                            _int_list))
        return out
    p = setup.grading_prompt
    parse = _label(p.label_field or "grade", p.label_values)
    return [chat(f"grades{i:06d}", "chunk grade", p, {"query": q, "passage": t}, parse,
                 pair=True, group="chunk grades")
            for i, t in enumerate(texts)]


def chunk_grades(got: Mapping[str, Any]) -> list[int]:
    """The grades in rank order from the answers of :func:`grade_requests`."""
    if "review" in got:
        return list(got["review"]["grades"])
    out: list[int] = []
    for key in sorted(k for k in got if k.startswith("grades")):
        value = got[key]
        out.extend(value if isinstance(value, list) else [int(value)])
    return out


class _Graded(LLMMetric):
    needs = ("question", "contexts")
    takes_k = True

    def shares(self, m: RagMetric) -> frozenset[str]:
        return frozenset({"grades"})

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        return grade_requests(s, setup)

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        grades = chunk_grades(got)
        return Score(self.value(m, grades, k, setup), detail={"k": k, "grades": grades})

    def value(self, m: RagMetric, grades: list[int], k: int, setup: Setup) -> float:
        raise NotImplementedError


# ----------------------------------------------------------------------------- units
@register
class ContextRelevance(_Graded):
    names = ("context_relevance",)

    def value(self, m: RagMetric, grades: list[int], k: int, setup: Setup) -> float:
        return mean_normalized_grade(grades, k, setup.top_grade)

    def definition(self, m: RagMetric) -> str:
        k = f"@{m.k}" if m.k is not None else "@k"
        return f"mean normalised LLM grade (grade / top grade of the scale) of the top-k chunks{k}"


@register
class ContextPrecision(_Graded):
    names = ("context_precision",)
    params = {
        "by": Param("relevance", choice("relevance", "reference"), "relevance or reference"),
        "norm": Param(None, choice("ragas", "ir"), "ragas or ir (default: both columns)"),
        "threshold": Param(None, int_at_least(1), "a positive integer grade (default: the prompt's)"),
    }

    def parse(self, name: str, raw: dict[str, str], k: int | None, spec: str) -> list[RagMetric]:
        self.check_names(name, raw, spec)
        by = raw.get("by", "relevance").lower()
        if by not in ("relevance", "reference"):
            raise MetricError(f"by must be relevance or reference in {spec!r}")
        params: list[tuple[str, Any]] = []
        if by == "reference":
            if "threshold" in raw:
                raise MetricError(f"threshold applies to by=relevance only, in {spec!r}")
            params.append(("by", "reference"))
        elif "threshold" in raw:
            try:
                t = int(raw["threshold"])
            except ValueError:
                t = 0
            if t < 1:
                raise MetricError(f"threshold must be a positive integer grade in {spec!r}")
            params.append(("threshold", t))
        norms = [raw["norm"].lower()] if "norm" in raw else ["ragas", "ir"]
        for n in norms:
            if n not in ("ragas", "ir"):
                raise MetricError(f"norm must be ragas or ir in {spec!r}")
        return [RagMetric(name, tuple(sorted(params + ([("norm", "ir")] if n == "ir" else []))), k)
                for n in norms]

    def fields(self, m: RagMetric) -> tuple[str, ...]:
        return ("contexts", "reference") if m.get("by") == "reference" else self.needs

    def shares(self, m: RagMetric) -> frozenset[str]:
        return frozenset() if m.get("by") == "reference" else frozenset({"grades"})

    def check(self, m: RagMetric, setup: Setup) -> None:
        super().check(m, setup)
        t = m.get("threshold")
        if t is not None and t > setup.top_grade:
            raise MetricError(f"{m}: threshold {t} is above the top grade {setup.top_grade} of "
                              f"{setup.grading_prompt.name}")

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        if m.get("by") != "reference":
            return grade_requests(s, setup)
        texts = s.context_texts
        if not texts:
            return "no retrieved texts"
        if not present(s.reference):
            return "no reference"
        return [chat("useful", "usefulness", setup.sized("context_usefulness.v1", "useful", len(texts)),
                     {"question": s.question or "", "reference": s.reference or "",
                      "passages": format_passages(texts), "count": str(len(texts))},
                     lambda obj: [bool(u) for u in obj["useful"]])]

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        if m.get("by") == "reference":
            grades = [int(u) for u in got["useful"]]
            threshold = 1
        else:
            grades = chunk_grades(got)
            threshold = m.get("threshold", setup.relevant_from)
        v = context_precision_value(grades, k, threshold, m.get("norm", "ragas"))
        return Score(v, detail={"k": k, "grades": grades})

    def definition(self, m: RagMetric) -> str:
        k = f"@{m.k}" if m.k is not None else "@k"
        if m.get("by") == "reference":
            rel = "useful for the reference answer"
        elif m.get("threshold") is not None:
            rel = f"graded >= {m.get('threshold')}"
        else:
            rel = "graded relevant (>= the scale's relevant_from grade)"
        if m.get("norm") == "ir":
            return (f"AP{k} over chunks {rel}, divided by the relevant chunks known among all "
                    "retrieved (IR / trec_eval map_cut normalisation; 0 when none)")
        return (f"AP{k} over chunks {rel}, divided by the relevant chunks retrieved in the top k "
                "(RAGAS normalisation; 0 when none)")


#: The ranking measure behind each graded context metric, and its defaults here.
_MEASURE = {"context_ndcg": "ndcg", "context_err": "err", "context_rbp": "rbp"}
_DEFAULTS = {"rbp": {"gain": "graded"}}


def _spec(base: str, params: Mapping[str, Any]) -> str:
    return base + ("(" + ",".join(f"{a}={b}" for a, b in params.items()) + ")" if params else "")


@register
class ContextRanking(_Graded):
    """``context_ndcg/err/rbp``: the ranking core with the chunk grades as qrels. ERR and
    graded RBP take their top grade from the grading prompt unless ``max_grade`` is given."""

    names = tuple(_MEASURE)

    def parameters(self, name: str) -> Mapping[str, Param]:
        """The ranking measure's own parameters (from the measure registry), with this metric's
        own defaults (graded gain for RBP)."""
        base = _MEASURE[name]
        own = _DEFAULTS.get(base, {})
        return {key: dataclasses.replace(p, default=own[key]) if key in own else p
                for key, p in spec_of(base).params.items()}

    def parse(self, name: str, raw: dict[str, str], k: int | None, spec: str) -> list[RagMetric]:
        base = _MEASURE[name]
        own = dict(_DEFAULTS.get(base, {}))
        try:
            m = parse_measure(_spec(base, {**own, **raw}))
            defaults = parse_measure(_spec(base, own))
        except MetricError as exc:
            raise MetricError(f"in {spec!r}: {exc}") from None
        # Show what differs from this metric's own defaults (and RBP's p, always); max_grade
        # only when given (else the grading prompt's top grade applies).
        keys = {pk for pk, _ in m.params} | {pk for pk, _ in defaults.params}
        shown = [(key, m.get(key)) for key in keys
                 if m.get(key) is not None and key != "max_grade"
                 and (key == "p" or m.get(key) != defaults.get(key))]
        if "max_grade" in raw:
            shown.append(("max_grade", m.get("max_grade")))
        return [RagMetric(name, tuple(sorted(shown)), k, m)]

    def measure(self, m: RagMetric, k: int, setup: Setup) -> Measure:
        assert m.measure is not None
        measure = dataclasses.replace(m.measure, k=k)
        if m.get("max_grade") is None and _scaled(measure):
            params = {**dict(measure.params), "max_grade": setup.top_grade}
            measure = dataclasses.replace(parse_measure(_spec(measure.name, params)), k=k)
        return measure

    def value(self, m: RagMetric, grades: list[int], k: int, setup: Setup) -> float:
        return graded_measure(grades, self.measure(m, k, setup))

    def definition(self, m: RagMetric) -> str:
        return f"{m.measure} of the ranking with the LLM chunk grades (the prompt's scale) as qrels"


def _scaled(measure: Measure) -> bool:
    """Whether a measure normalises by a top grade (ERR; RBP with graded gain)."""
    try:
        measure.get("max_grade")
    except KeyError:
        return False
    return measure.name != "rbp" or measure.get("gain") == "graded"
