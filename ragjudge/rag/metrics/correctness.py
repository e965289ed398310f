"""``answer_correctness``: factual overlap of the response with the reference (RAGAS-style).

One call (``answer_correctness.v1``) splits response and reference into statements and sorts
them: TP (response statements the reference supports), FP (response statements it does not),
FN (reference statements the response misses). The score is their F-beta,

    F = (1 + b^2) TP / ((1 + b^2) TP + b^2 FN + FP)      (b = 1: TP / (TP + (FP + FN) / 2)),

as in RAGAS's answer correctness (factuality part). ``similarity=w`` (0 < w < 1, needs an
embeddings model) blends in RAGAS's semantic part: (1 - w) F + w cos(E(response), E(reference)).
Undetermined: no response or reference, no statements at all, a failed call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import MetricError
from ...measures.grammar import Param, positive_number, unit_number
from ..report import Score
from ..samples import Sample
from .answer import cosine
from .base import LLMMetric, RagMetric, Request, Setup, chat, missing_text, present, prompt, register

__all__ = ["AnswerCorrectness", "f_beta"]


def f_beta(tp: int, fp: int, fn: int, beta: float = 1.0) -> float:
    """(1 + b^2) TP / ((1 + b^2) TP + b^2 FN + FP); needs TP + FP + FN > 0."""
    b2 = beta * beta
    return (1 + b2) * tp / ((1 + b2) * tp + b2 * fn + fp)


def _lists(obj: Any) -> dict[str, list[str]]:
    return {key: [str(x).strip() for x in obj[key] if str(x).strip()] for key in ("tp", "fp", "fn")}


def _number(raw: dict[str, str], key: str, default: float, spec: str, ok: Any, what: str) -> float:
    try:
        value = float(raw.get(key, default))
    except ValueError:
        value = float("nan")
    if not ok(value):
        raise MetricError(f"{key} must be {what} in {spec!r}")
    return value


@register
class AnswerCorrectness(LLMMetric):
    names = ("answer_correctness",)
    needs = ("response", "reference")

    params = {
        "beta": Param(1.0, positive_number, "a positive number (the F-beta weight of recall)"),
        "similarity": Param(0.0, unit_number, "a weight in [0, 1) of the embedding similarity"),
    }

    def parse(self, name: str, raw: dict[str, str], k: int | None, spec: str) -> list[RagMetric]:
        self.check_names(name, raw, spec)
        beta = _number(raw, "beta", 1.0, spec, lambda v: 0 < v < float("inf"), "a positive number")
        sim = _number(raw, "similarity", 0.0, spec, lambda v: 0 <= v < 1, "a weight in [0, 1)")
        params = ([("beta", beta)] if beta != 1.0 else []) + ([("similarity", sim)] if sim else [])
        return [RagMetric(name, tuple(params), None)]

    def uses_embeddings(self, m: RagMetric) -> bool:
        return bool(m.get("similarity"))

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        if not present(s.response):
            return missing_text("response", s.response)
        if not present(s.reference):
            return missing_text("reference", s.reference)
        out = [chat("statements", "answer_correctness", setup.prompt("answer_correctness.v1"),
                    {"question": s.question or "", "response": s.response or "",
                     "reference": s.reference or ""}, _lists)]
        if m.get("similarity"):
            out.append(Request("vectors", "embedding", embed=(s.response or "", s.reference or ""),
                               model=setup.embedding_model))
        return out

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        st = got["statements"]
        tp, fp, fn = len(st["tp"]), len(st["fp"]), len(st["fn"])
        if tp + fp + fn == 0:
            return Score(None, "no statements in the response or the reference", {"statements": st})
        value = f_beta(tp, fp, fn, m.get("beta", 1.0))
        detail: dict[str, Any] = {"statements": st, "f": value}
        w = m.get("similarity", 0.0)
        if w:
            try:
                sim = cosine(*got["vectors"])
            except ValueError as exc:
                return Score(None, str(exc), detail)
            detail["similarity"] = sim
            value = (1 - w) * value + w * sim
        return Score(value, detail=detail)

    def definition(self, m: RagMetric) -> str:
        f = "F1" if m.get("beta", 1.0) == 1.0 else f"F-beta (beta={m.get('beta')})"
        text = (f"{f} of the response's statements against the reference's (TP supported, "
                "FP unsupported, FN missed; one LLM call)")
        if m.get("similarity"):
            text += f", blended with weight {m.get('similarity')} with the response-reference embedding cosine"
        return text
