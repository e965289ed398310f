"""LLM-graded RAG metrics: the calls (one prompt file each) and the pure math on their answers.

Calls go through :meth:`ragjudge.llm.LLM.structured` -- the same client, runner, cache and
failure model as ``ragjudge judge`` -- with strict response schemas. A failed call comes back
as an error string and makes the affected scores undetermined with that reason.

Calls per sample (listwise grading, the default of ``ragjudge rag``):

===========================  ====================================================
chunk grades (0-3)           1 call for all retrieved chunks (``relevance_listwise.v1``), or
                             1 call per chunk in pointwise mode (``relevance.v1``, shared with
                             ``ragjudge judge``); feeds context_relevance, context_precision
                             and context_ndcg/err/rbp, so they cost nothing extra together
context_precision(by=reference)  1 call (``context_usefulness.v1``)
context_recall               1 call (``context_recall.v1``)
faithfulness                 2 calls: claims (``faithfulness_claims.v1``), then all claims
                             verified together (``faithfulness_verify.v1``)
answer_relevance             1 call (``answer_relevance.v1``)
answer_relevance(by=embedding)  1 call (``answer_questions.v1``: N questions the response
                             answers) + 1 embeddings request (question + N generated)
===========================  ====================================================
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..data import Qrels, Run
from ..measures import Measure
from .report import Score, undetermined
from .samples import Sample

__all__ = [
    "PROMPTS",
    "Grades",
    "format_passages",
    "mean_normalized_grade",
    "context_precision_value",
    "graded_measure",
    "fraction_true",
    "grade_listwise",
    "grade_pointwise",
    "usefulness",
    "recall_statements",
    "faithfulness_claims",
    "faithfulness_verdicts",
    "answer_relevance_grade",
    "cosine",
    "mean_cosine",
    "answer_questions",
    "answer_relevance_embedding_score",
]

#: Prompt of each call (names under ``prompts/``).
PROMPTS = {
    "pointwise": "relevance.v1",
    "listwise": "relevance_listwise.v1",
    "usefulness": "context_usefulness.v1",
    "recall": "context_recall.v1",
    "claims": "faithfulness_claims.v1",
    "verify": "faithfulness_verify.v1",
    "answer": "answer_relevance.v1",
    "questions": "answer_questions.v1",
}

#: Listwise grading sends at most this many chunks per call (long lists are split).
LISTWISE_WINDOW = 20


# ----------------------------------------------------------------------------- pure math
def mean_normalized_grade(grades: Sequence[int], k: int, max_grade: int) -> float:
    """context_relevance@k = (1/n) * sum_{i<=n} g_i / g_max, n = min(k, |retrieved|).

    The mean normalised grade of the top-k chunks (g_max = the scale's top grade, 3).
    """
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
    from ..measures import parse_measure

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
    grades of its retrieved chunks, in rank order, computed by the ranking core."""
    from ..engine import compute

    ids = [f"c{i:05d}" for i in range(len(grades))]
    qrels = Qrels.from_lists([dict(zip(ids, grades))])
    return float(compute(qrels, Run.from_lists([ids]), [measure], qids=["0"])[measure][0])


def fraction_true(flags: Sequence[bool]) -> float:
    """sum(flags) / len(flags): faithfulness = supported claims / claims; context_recall =
    attributed statements / statements."""
    return sum(1 for f in flags if f) / len(flags)


def format_passages(texts: Sequence[str]) -> str:
    """``[1] text`` blocks separated by blank lines (how prompts number passages and claims)."""
    return "\n\n".join(f"[{i}] {t.strip()}" for i, t in enumerate(texts, start=1))


def format_claims(claims: Sequence[str]) -> str:
    return "\n".join(f"{i}. {c.strip()}" for i, c in enumerate(claims, start=1))


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
    the question's embedding and those of the N questions generated from the response
    (RAGAS answer relevancy, Es et al. 2023, without its noncommittal factor)."""
    if not generated:
        raise ValueError("no generated questions")
    return math.fsum(cosine(g, question) for g in generated) / len(generated)


# ----------------------------------------------------------------------------- prompts
_SIZED: dict[tuple[str, str, int], Any] = {}


def _prompt(key: str) -> Any:
    from ..llm.prompts import load_prompt

    return load_prompt(PROMPTS[key])


def _sized(key: str, field: str, n: int) -> Any:
    """The prompt with its reply array ``field`` pinned to exactly ``n`` items (``minItems`` =
    ``maxItems``), so strict structured output and local validation both enforce the count."""
    prompt = _prompt(key)
    ck = (prompt.sha256, field, n)
    got = _SIZED.get(ck)
    if got is None:
        schema = dict(prompt.output_schema)
        props = dict(schema["properties"])
        props[field] = {**props[field], "minItems": n, "maxItems": n}
        schema["properties"] = props
        got = dataclasses.replace(prompt, output_schema=schema)
        _SIZED[ck] = got
    return got


def max_grade(key: str = "listwise") -> int:
    """Top of the grading scale, read from the prompt's front-matter labels."""
    return max(int(v) for v in _prompt(key).label_values)


# ----------------------------------------------------------------------------- calls
@dataclasses.dataclass(frozen=True)
class Grades:
    """Grades of a sample's retrieved chunks in rank order, or the reason they are missing."""

    grades: tuple[int, ...] | None
    reason: str | None = None


def _reason(outcome: Any, what: str) -> str:
    return f"{what} call failed: {outcome.error}"


async def grade_listwise(llm: Any, question: str, texts: Sequence[str]) -> Grades:
    """All chunks graded 0-3 in ceil(n / LISTWISE_WINDOW) calls."""
    out: list[int] = []
    windows = [texts[i : i + LISTWISE_WINDOW] for i in range(0, len(texts), LISTWISE_WINDOW)]
    outcomes = await asyncio.gather(*(
        llm.structured(
            _sized("listwise", "grades", len(w)),
            {"query": question, "passages": format_passages(w), "count": str(len(w))},
            validate=lambda obj: [int(g) for g in obj["grades"]],
        )
        for w in windows
    ))
    for o in outcomes:
        if not o.ok:
            return Grades(None, _reason(o, "grading"))
        out.extend(o.value)
    return Grades(tuple(out))


async def grade_pointwise(llm: Any, question: str, texts: Sequence[str], *, judge: Any = None) -> Grades:
    """Each chunk graded alone with ``relevance.v1`` -- the exact call ``ragjudge judge`` makes
    for a (query, passage) pair, so the two share cache entries. With ``judge`` (an
    :class:`~ragjudge.judges.LLMRelevanceJudge`) its own prompt and parsing are used."""
    if judge is not None:
        judgments = await asyncio.gather(*(judge.judge(question, t) for t in texts))
        failed = [j for j in judgments if not j.ok]
        if failed:
            return Grades(None, f"{len(failed)} of {len(texts)} chunk grades failed: {failed[0].error}")
        return Grades(tuple(int(j.grade) for j in judgments))
    prompt = _prompt("pointwise")
    field = prompt.label_field or "grade"
    outcomes = await asyncio.gather(*(
        llm.structured(prompt, {"query": question, "passage": t},
                       validate=lambda obj: _label(obj, field, prompt.label_values))
        for t in texts
    ))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        return Grades(None, f"{len(failed)} of {len(texts)} chunk grades failed: {failed[0].error}")
    return Grades(tuple(int(o.value) for o in outcomes))


def _label(obj: Any, field: str, labels: Sequence[Any]) -> int:
    value = obj.get(field) if isinstance(obj, Mapping) else None
    if isinstance(value, bool) or value not in labels:
        raise ValueError(f"{field} must be one of {list(labels)}, got {value!r}")
    return int(value)


async def usefulness(llm: Any, question: str, reference: str, texts: Sequence[str]) -> list[bool] | str:
    """Per chunk: was it useful for arriving at the reference answer? (one call)"""
    o = await llm.structured(
        _sized("usefulness", "useful", len(texts)),
        {"question": question, "reference": reference, "passages": format_passages(texts),
         "count": str(len(texts))},
        validate=lambda obj: [bool(u) for u in obj["useful"]],
    )
    return o.value if o.ok else _reason(o, "usefulness")


async def recall_statements(
    llm: Any, question: str, reference: str, texts: Sequence[str]
) -> list[tuple[str, bool]] | str:
    """The reference split into statements, each attributed or not to the contexts (one call)."""
    o = await llm.structured(
        _prompt("recall"),
        {"question": question, "reference": reference, "contexts": format_passages(texts)},
        validate=lambda obj: [(s["statement"], bool(s["attributed"])) for s in obj["statements"]],
    )
    return o.value if o.ok else _reason(o, "context_recall")


async def faithfulness_claims(llm: Any, question: str, response: str) -> list[str] | str:
    """Atomic claims of the response (one call); blank claims are dropped."""
    o = await llm.structured(
        _prompt("claims"),
        {"question": question, "response": response},
        validate=lambda obj: [c.strip() for c in obj["claims"] if c.strip()],
    )
    return o.value if o.ok else _reason(o, "claim extraction")


async def faithfulness_verdicts(llm: Any, claims: Sequence[str], texts: Sequence[str]) -> list[bool] | str:
    """All claims verified against the contexts together (one call)."""
    o = await llm.structured(
        _sized("verify", "verdicts", len(claims)),
        {"contexts": format_passages(texts), "claims": format_claims(claims), "count": str(len(claims))},
        validate=lambda obj: [bool(v) for v in obj["verdicts"]],
    )
    return o.value if o.ok else _reason(o, "claim verification")


async def answer_relevance_grade(llm: Any, question: str, response: str) -> int | str:
    prompt = _prompt("answer")
    field = prompt.label_field or "grade"
    o = await llm.structured(prompt, {"question": question, "response": response},
                             validate=lambda obj: int(obj[field]))
    return o.value if o.ok else _reason(o, "answer_relevance")


def question_count() -> int:
    """N, the number of questions ``answer_questions.v1`` asks for (its schema's maxItems)."""
    return int(_prompt("questions").output_schema["properties"]["questions"]["maxItems"])


async def answer_questions(llm: Any, response: str) -> list[str] | str:
    """The N questions the response answers (one call), or the failure reason."""
    n = question_count()

    def check(obj: Any) -> list[str]:
        qs = [str(q).strip() for q in obj["questions"]]
        if len(qs) != n or not all(qs):
            raise ValueError(f"expected {n} non-empty questions, got {len(qs)}")
        return qs

    o = await llm.structured(_prompt("questions"), {"response": response}, validate=check)
    return o.value if o.ok else _reason(o, "answer questions")


# ----------------------------------------------------------------------------- per-sample scores
async def faithfulness_score(llm: Any, sample: Sample) -> Score:
    """faithfulness = supported claims / claims, contexts = every retrieved chunk (what the
    generator saw). Undetermined: no response, no contexts, no claims, a failed call."""
    if not sample.response or not sample.response.strip():
        return undetermined("empty response" if sample.response is not None else "no response")
    texts = sample.context_texts
    if not texts:
        return undetermined("no retrieved texts")
    claims = await faithfulness_claims(llm, sample.question or "", sample.response)
    if isinstance(claims, str):
        return undetermined(claims)
    if not claims:
        return undetermined("no claims in the response")
    verdicts = await faithfulness_verdicts(llm, claims, texts)
    if isinstance(verdicts, str):
        return undetermined(verdicts, claims=claims)
    return Score(fraction_true(verdicts), detail={"claims": list(zip(claims, verdicts))})


async def context_recall_score(llm: Any, sample: Sample, k: int) -> Score:
    """context_recall@k = attributed statements / statements of the reference, against the
    top-k chunks. Undetermined: no reference, no contexts, no statements, a failed call."""
    if not sample.reference or not sample.reference.strip():
        return undetermined("empty reference" if sample.reference is not None else "no reference")
    texts = sample.context_texts
    if not texts:
        return undetermined("no retrieved texts")
    got = await recall_statements(llm, sample.question or "", sample.reference, texts[:k])
    if isinstance(got, str):
        return undetermined(got)
    if not got:
        return undetermined("no statements in the reference")
    return Score(fraction_true([a for _, a in got]), detail={"k": k, "statements": got})


async def answer_relevance_score(llm: Any, sample: Sample, top: int) -> Score:
    """answer_relevance = grade / top grade (0-3 scale of ``answer_relevance.v1``)."""
    if not sample.question or not sample.question.strip():
        return undetermined("no question")
    if not sample.response or not sample.response.strip():
        return undetermined("empty response" if sample.response is not None else "no response")
    got = await answer_relevance_grade(llm, sample.question, sample.response)
    if isinstance(got, str):
        return undetermined(got)
    return Score(got / top, detail={"grade": got})


async def answer_relevance_embedding_score(llm: Any, sample: Sample, embedding_model: str) -> Score:
    """answer_relevance(by=embedding) = :func:`mean_cosine` of the question and the questions
    generated from the response. Undetermined: no question, empty response, a failed call, a
    zero vector."""
    if not sample.question or not sample.question.strip():
        return undetermined("no question")
    if not sample.response or not sample.response.strip():
        return undetermined("empty response" if sample.response is not None else "no response")
    questions = await answer_questions(llm, sample.response)
    if isinstance(questions, str):
        return undetermined(questions)
    emb = await llm.embed([sample.question, *questions], model=embedding_model)
    if not emb.ok:
        return undetermined(f"embedding call failed: {emb.error}"
                            if not emb.error.startswith("embedding call failed") else emb.error,
                            questions=questions)
    try:
        value = mean_cosine(emb.vectors[0], emb.vectors[1:])
    except ValueError as exc:
        return undetermined(str(exc), questions=questions)
    return Score(value, detail={"questions": questions, "embedding_model": embedding_model})
