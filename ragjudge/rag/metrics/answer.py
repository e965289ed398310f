"""``answer_relevance``: how well the response addresses the question.

``by=llm`` (default): one call (``answer_relevance.v1``) grades it on the prompt's scale;
the score is grade / top grade. ``by=embedding`` (RAGAS answer relevancy, Es et al. 2023,
without its noncommittal factor): one call (``answer_questions.v1``) writes N questions the
response answers, one embeddings request embeds the question and them; the score is their
mean cosine similarity to the question.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import MetricError
from ...measures.grammar import Param, choice
from ..report import Score
from ..samples import Sample
from .base import (
    LLMMetric, RagMetric, Request, Setup, chat, missing_text, present, prompt, register,
    top_grade
)

__all__ = ["AnswerRelevance", "cosine", "mean_cosine"]

_GRADE_PROMPT = "answer_relevance.v1"
_QUESTIONS_PROMPT = "answer_questions.v1"


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity ``a.b / (|a| |b|)`` of two vectors of the same length.

    Raises ``ValueError`` for different lengths or a zero vector (the cosine is undefined;
    the caller reports the score undetermined rather than inventing a value).
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"embedding vectors of different lengths ({len(a)} and {len(b)})")
    dot = math.fsum(x * y for x, y in zip(a, b))
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        raise ValueError("zero embedding vector")
    return dot / (na * nb)


def mean_cosine(question: Sequence[float], generated: Sequence[Sequence[float]]) -> float:
    """answer_relevance(by=embedding) = (1/N) sum_i cos(E(g_i), E(q)), the mean cosine between
    the question's embedding and those of the N questions generated from the response."""
    if not generated:
        raise ValueError("no generated questions")
    return math.fsum(cosine(g, question) for g in generated) / len(generated)


def question_count() -> int:
    """N, the number of questions ``answer_questions.v1`` asks for (its schema's maxItems)."""
    return int(prompt(_QUESTIONS_PROMPT).output_schema["properties"]["questions"]["maxItems"])


def _questions(obj: Any) -> list[str]:
    n = question_count()
    qs = [str(q).strip() for q in obj["questions"]]
    if len(qs) != n or not all(qs):
        raise ValueError(f"expected {n} non-empty questions, got {len(qs)}")
    return qs


@register
class AnswerRelevance(LLMMetric):
    names = ("answer_relevance",)
    needs = ("question", "response")

    params = {"by": Param("llm", choice("llm", "embedding"), "llm or embedding")}

    def parse(self, name: str, raw: dict[str, str], k: int | None, spec: str) -> list[RagMetric]:
        by = raw.get("by", "llm").lower()
        if by not in ("llm", "embedding") or set(raw) - {"by"}:
            raise MetricError(f"answer_relevance takes only by=llm|embedding (got {spec!r})")
        return [RagMetric(name, (("by", "embedding"),) if by == "embedding" else (), None)]

    def uses_embeddings(self, m: RagMetric) -> bool:
        return m.get("by") == "embedding"

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        if not present(s.question):
            return "no question"
        if not present(s.response):
            return missing_text("response", s.response)
        q, r = s.question or "", s.response or ""
        if m.get("by") != "embedding":
            p = setup.prompt(_GRADE_PROMPT)
            field = p.label_field or "grade"
            return [chat("grade", "answer_relevance", p, {"question": q, "response": r},
                         lambda obj: int(obj[field]))]
        if "questions" not in got:
            return [chat("questions", "answer questions", setup.prompt(_QUESTIONS_PROMPT), {"response": r},
                         _questions)]
        # The embeddings request is not in a dry run's count (tiny next to the chat calls).
        return [Request("vectors", "embedding", embed=(q, *got["questions"]), model=setup.embedding_model)]

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        if m.get("by") != "embedding":
            grade = got["grade"]
            return Score(grade / top_grade(setup.prompt(_GRADE_PROMPT)), detail={"grade": grade})
        vectors, questions = got["vectors"], got["questions"]
        try:
            value = mean_cosine(vectors[0], vectors[1:])
        except ValueError as exc:
            return Score(None, str(exc), {"questions": questions})
        return Score(value, detail={"questions": questions, "embedding_model": setup.embedding_model})

    def definition(self, m: RagMetric) -> str:
        if m.get("by") == "embedding":
            return ("mean cosine similarity between the question's embedding and those of questions "
                    "the LLM generates from the response")
        return "LLM grade of how well the response addresses the question, divided by the top grade"
