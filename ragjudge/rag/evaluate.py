"""Evaluate RAG samples: :func:`evaluate_samples` (async) and :func:`evaluate_samples_sync`.

Deterministic metrics run on the ranking core with no LLM; LLM metrics share one
:class:`ragjudge.llm.LLM` session (client, runner, cache, budget). Within a sample the calls
that do not depend on each other run concurrently; the runner bounds the total. Grades are
asked once per sample and reused by every grade-based metric.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from .._sync import run_sync
from ..errors import MetricError
from .deterministic import containment_scores, ranking_scores
from .llm_metrics import (
    Grades,
    answer_relevance_embedding_score,
    answer_relevance_score,
    context_precision_value,
    context_recall_score,
    faithfulness_score,
    grade_listwise,
    grade_pointwise,
    graded_measure,
    max_grade,
    mean_normalized_grade,
    usefulness,
)
from .metrics import RagMetric, definition, parse_rag_metrics
from .report import RagReport, Score, undetermined
from .samples import DEFAULT_K, Sample, SampleSet, as_samples

__all__ = ["evaluate_samples", "evaluate_samples_sync", "plan_requests", "GRADING_MODES", "DEFAULT_GRADING"]

GRADING_MODES = ("listwise", "pointwise")
#: Listwise by default: context_precision + context_recall + faithfulness then need 4 calls per
#: sample (1 grading + 1 recall + 2 faithfulness) instead of n_chunks + 3.
DEFAULT_GRADING = "listwise"


def _resolve_llm(judge: Any) -> tuple[Any, Any]:
    """``(LLM session, relevance judge or None)`` from an LLM, an LLMRelevanceJudge (its
    ``.llm`` is used for every call and its ``judge()`` for pointwise grades) or a model name."""
    if judge is None:
        return None, None
    if isinstance(judge, str):
        from ..llm import LLM

        return LLM(judge), None
    if hasattr(judge, "structured"):
        return judge, None
    inner = getattr(judge, "llm", None)
    if inner is not None and hasattr(inner, "structured") and hasattr(judge, "judge"):
        return inner, judge
    raise MetricError(f"judge must be an LLM session, a judge with .llm, or a model name; got {judge!r}")


class _SampleRun:
    """All LLM work for one sample, every call at most once."""

    def __init__(self, llm: Any, sample: Sample, grading: str, judge: Any = None,
                 embedding_model: str | None = None) -> None:
        self.llm = llm
        self.embedding_model = embedding_model
        self._answer_emb: asyncio.Task[Score] | None = None
        self.judge = judge
        self.s = sample
        self.grading = grading
        self._grades: asyncio.Task[Grades] | None = None
        self._useful: asyncio.Task[Any] | None = None
        self._recall: dict[int, asyncio.Task[Score]] = {}
        self._faith: asyncio.Task[Score] | None = None
        self._answer: asyncio.Task[Score] | None = None

    def grades(self) -> asyncio.Task[Grades]:
        if self._grades is None:
            self._grades = asyncio.ensure_future(self._grade())
        return self._grades

    async def _grade(self) -> Grades:
        s = self.s
        texts = s.context_texts
        if texts is None:
            return Grades(None, "no retrieved texts" if s.contexts is None
                          else "some retrieved chunks have no text")
        if not texts:
            return Grades(None, "no retrieved chunks")
        if not s.question or not s.question.strip():
            return Grades(None, "no question")
        if self.grading == "listwise":
            return await grade_listwise(self.llm, s.question, texts)
        return await grade_pointwise(self.llm, s.question, texts, judge=self.judge)

    def useful(self) -> asyncio.Task[Any]:
        if self._useful is None:
            self._useful = asyncio.ensure_future(self._use())
        return self._useful

    async def _use(self) -> Grades:
        s = self.s
        texts = s.context_texts
        if not texts:
            return Grades(None, "no retrieved texts")
        if not s.reference or not s.reference.strip():
            return Grades(None, "no reference")
        got = await usefulness(self.llm, s.question or "", s.reference, texts)
        if isinstance(got, str):
            return Grades(None, got)
        return Grades(tuple(int(u) for u in got))

    def recall(self, k: int) -> asyncio.Task[Score]:
        if k not in self._recall:
            self._recall[k] = asyncio.ensure_future(context_recall_score(self.llm, self.s, k))
        return self._recall[k]

    def faithfulness(self) -> asyncio.Task[Score]:
        if self._faith is None:
            self._faith = asyncio.ensure_future(faithfulness_score(self.llm, self.s))
        return self._faith

    def answer(self) -> asyncio.Task[Score]:
        if self._answer is None:
            self._answer = asyncio.ensure_future(answer_relevance_score(self.llm, self.s, max_grade("answer")))
        return self._answer


    def answer_embedding(self) -> asyncio.Task[Score]:
        if self._answer_emb is None:
            assert self.embedding_model is not None
            self._answer_emb = asyncio.ensure_future(
                answer_relevance_embedding_score(self.llm, self.s, self.embedding_model))
        return self._answer_emb


def _from_grades(m: RagMetric, g: Grades, k: int, top: int) -> Score:
    if g.grades is None:
        return undetermined(g.reason or "no grades")
    grades = list(g.grades)
    if m.name == "context_relevance":
        return Score(mean_normalized_grade(grades, k, top), detail={"k": k, "grades": grades})
    if m.name == "context_precision":
        by_ref = m.get("by") == "reference"
        threshold = 1 if by_ref else int(m.get("threshold", 2))
        norm = m.get("norm", "ragas")
        v = context_precision_value(grades, k, threshold, norm)
        return Score(v, detail={"k": k, "grades": grades})
    # context_ndcg / context_err / context_rbp: the ranking core with the grades as qrels.
    # All grades 0: nothing relevant was retrieved; the ranking core scores that 0 (the grades
    # only cover retrieved chunks, so this is the retriever's miss, not missing gold).
    assert m.measure is not None
    return Score(graded_measure(grades, dataclasses.replace(m.measure, k=k)),
                 detail={"k": k, "grades": grades})


async def _sample_scores(run: _SampleRun, metrics: Sequence[RagMetric], default_k: int) -> list[Score]:
    s = run.s
    pending: list[Any] = []
    for m in metrics:
        k = s.cutoff(m.k, default_k)
        if m.name == "faithfulness":
            pending.append(run.faithfulness())
        elif m.name == "answer_relevance":
            pending.append(run.answer_embedding() if m.get("by") == "embedding" else run.answer())
        elif m.name == "context_recall":
            pending.append(run.recall(k))
        elif m.name == "context_precision" and m.get("by") == "reference":
            pending.append(run.useful())
        else:
            pending.append(run.grades())
    done = await asyncio.gather(*pending)
    out: list[Score] = []
    if run.grading == "pointwise" and run.judge is not None:
        top = max(int(v) for v in run.judge.prompt.label_values)
    else:
        top = max_grade("listwise" if run.grading == "listwise" else "pointwise")
    for m, got in zip(metrics, done):
        if isinstance(got, Score):
            out.append(got)
        else:
            out.append(_from_grades(m, got, s.cutoff(m.k, default_k), top))
    return out


async def evaluate_samples(
    samples: Any,
    metrics: str | Iterable[str | RagMetric],
    *,
    judge: Any = None,
    grading: str = DEFAULT_GRADING,
    match: str | None = None,
    default_k: int = DEFAULT_K,
    skip_invalid: bool = False,
    progress: bool = False,
    embedding_model: str | None = None,
) -> RagReport:
    """Evaluate RAG samples on ``metrics`` (specs such as ``"faithfulness"``, ``"ndcg@5"``,
    ``"context_precision(threshold=2)"``).

    ``samples``: a path, a :class:`SampleSet`, :class:`Sample` objects, dicts or a DataFrame.
    ``judge``: an :class:`ragjudge.llm.LLM` session (or a judge holding one, or a model name),
    needed only by LLM metrics. ``grading``: ``listwise`` (all chunks of a sample in one call)
    or ``pointwise`` (one call per chunk, shared with ``ragjudge judge``'s cache). ``match``
    sets the matching mode of ranking metrics that do not set ``match=`` themselves.
    ``default_k`` is the cutoff when neither the sample nor the metric gives one.
    ``embedding_model``: the embeddings model of ``answer_relevance(by=embedding)`` (served by
    the judge's endpoint; needed only by that metric).
    Never raises for a per-sample problem: it becomes an undetermined score with its reason.
    """
    if grading not in GRADING_MODES:
        raise MetricError(f"grading must be listwise or pointwise, got {grading!r}")
    if isinstance(default_k, bool) or not isinstance(default_k, int) or default_k < 1:
        raise MetricError(f"default k must be a positive integer, got {default_k!r}")
    data: SampleSet = as_samples(samples, skip_invalid=skip_invalid)
    parsed = parse_rag_metrics(metrics)
    llm_metrics = [m for m in parsed if m.needs_llm]
    llm, rel_judge = _resolve_llm(judge)
    if llm_metrics and llm is None:
        names = ", ".join(str(m) for m in llm_metrics)
        raise MetricError(f"{names} need an LLM judge: pass judge=LLM(model) (CLI: --model M)")
    _check_fields(data, llm_metrics)
    check_embedding_model(parsed, embedding_model)

    columns: dict[str, list[Score]] = {}
    for m in parsed:
        if m.kind == "ranking":
            mode = m.get("match", match or "auto")
            assert m.measure is not None
            columns[str(m)] = ranking_scores(data, _with_k(m.measure, m.k), match=mode,
                                             default_k=default_k)
        elif m.kind == "containment":
            columns[str(m)] = containment_scores(data, m.k, default_k=default_k)

    usage_before = _usage(llm) if llm is not None else None
    if llm_metrics:
        runs = [_SampleRun(llm, s, grading, rel_judge, embedding_model) for s in data]
        bar = _bar(len(runs), progress)

        async def one(r: _SampleRun) -> list[Score]:
            got = await _sample_scores(r, llm_metrics, default_k)
            if bar is not None:
                bar.update(1)
            return got

        try:
            results = await asyncio.gather(*(one(r) for r in runs))
        finally:
            if bar is not None:
                bar.close()
            if isinstance(judge, str):  # a session made here from a model name is closed here
                await llm.aclose()
        for j, m in enumerate(llm_metrics):
            columns[str(m)] = [row[j] for row in results]

    usage: dict[str, Any] = {}
    if llm is not None and usage_before is not None:
        after = _usage(llm)
        usage = {key: after[key] - usage_before[key] for key in after if key != "cost"}
        usage["model"] = getattr(llm, "model", None)
        usage["cost_usd"] = getattr(llm, "cost", None)
        usage["samples"] = len(data)
    return RagReport(
        [str(m) for m in parsed],
        [s.id for s in data],
        columns,
        definitions={str(m): definition(m) for m in parsed},
        usage=usage,
        invalid=[str(e) for e in data.invalid],
        settings={"grading": grading, "default_k": default_k, "match": match or "auto"},
    )


def needs_embeddings(metrics: Iterable[RagMetric]) -> list[RagMetric]:
    """The metrics that need an embeddings model (``answer_relevance(by=embedding)``)."""
    return [m for m in metrics if m.name == "answer_relevance" and m.get("by") == "embedding"]


def check_embedding_model(metrics: Sequence[RagMetric], embedding_model: str | None) -> None:
    """A metric that uses embeddings needs an embeddings model (a clear error before any call)."""
    wanted = needs_embeddings(metrics)
    if wanted and not embedding_model:
        raise MetricError(f"{', '.join(str(m) for m in wanted)} needs an embeddings model: pass "
                          "embedding_model= (CLI: --embedding-model M, e.g. text-embedding-3-small)")


def _with_k(measure: Any, k: int | None) -> Any:
    return dataclasses.replace(measure, k=k)


def _usage(llm: Any) -> dict[str, Any]:
    u = llm.usage
    st = llm.stats
    return {
        "requests": st.calls + st.retries,
        "calls": st.calls,
        "retries": st.retries,
        "cache_hits": st.cache_hits,
        "failed_calls": st.failed,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "embedding_tokens": sum(e.total_tokens for e in getattr(llm, "embedding_usage", {}).values()),
    }


def _bar(total: int, enabled: bool) -> Any:
    if not enabled or not total:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="rag samples", unit="sample", leave=False)


_NEEDS = {
    "faithfulness": ("response", "response / actual_output"),
    "answer_relevance": ("response", "response / actual_output"),
    "context_recall": ("reference", "reference / expected_output"),
}


def _check_fields(data: SampleSet, metrics: Sequence[RagMetric]) -> None:
    """A metric whose input field no sample has is a usage error, not 200 undetermined rows."""
    if not len(data):
        return
    for m in metrics:
        need = _NEEDS.get(m.name)
        if m.name == "context_precision" and m.get("by") == "reference":
            need = ("reference", "reference / expected_output")
        if need is not None and all(getattr(s, need[0]) is None for s in data):
            raise MetricError(f"{m} needs {need[1]} in the samples, and none of them has it")
        if all(s.contexts is None for s in data) and m.name != "answer_relevance":
            raise MetricError(f"{m} needs retrieved contexts in the samples, and none of them has them")


def evaluate_samples_sync(samples: Any, metrics: Any, **kwargs: Any) -> RagReport:
    """Synchronous :func:`evaluate_samples` (same arguments); works inside a running event loop
    (Jupyter). The LLM session's HTTP client of the private loop is closed at the end."""

    async def main() -> RagReport:
        llm, _ = _resolve_llm(kwargs.get("judge"))
        if llm is not None and kwargs.get("judge") is not llm and isinstance(kwargs.get("judge"), str):
            kwargs["judge"] = llm  # a model name: build the session once, here
        try:
            return await evaluate_samples(samples, metrics, **kwargs)
        finally:
            if llm is not None and hasattr(llm, "aclose"):
                await llm.aclose()

    return run_sync(main())


def plan_requests(
    samples: Any,
    metrics: str | Iterable[str | RagMetric],
    *,
    grading: str = DEFAULT_GRADING,
    default_k: int = DEFAULT_K,
    llm: Any = None,
) -> list[tuple[Any, dict[str, str]]]:
    """The ``(prompt, variables)`` of every LLM request an evaluation would make, for a dry run.

    Claim verification depends on the claims the model will extract: with ``llm`` given and
    the claims already in its cache they are used; otherwise the response stands in for its
    claims (one claim), so that estimate is approximate.
    """
    from .llm_metrics import LISTWISE_WINDOW, _prompt, _sized, format_claims, format_passages

    data = as_samples(samples)
    parsed = [m for m in parse_rag_metrics(metrics) if m.needs_llm]
    out: list[tuple[Any, dict[str, str]]] = []
    for s in data:
        texts = s.context_texts or []
        q = s.question or ""
        grades = useful = faith = answer = questions = False
        recall_ks: set[int] = set()
        for m in parsed:
            if m.name == "faithfulness":
                faith = True
            elif m.name == "answer_relevance" and m.get("by") == "embedding":
                questions = True
            elif m.name == "answer_relevance":
                answer = True
            elif m.name == "context_recall":
                recall_ks.add(s.cutoff(m.k, default_k))
            elif m.name == "context_precision" and m.get("by") == "reference":
                useful = True
            else:
                grades = True
        if grades and texts and q.strip():
            if grading == "listwise":
                for i in range(0, len(texts), LISTWISE_WINDOW):
                    w = texts[i : i + LISTWISE_WINDOW]
                    out.append((_sized("listwise", "grades", len(w)),
                                {"query": q, "passages": format_passages(w), "count": str(len(w))}))
            else:
                out.extend((_prompt("pointwise"), {"query": q, "passage": t}) for t in texts)
        if useful and texts and s.reference:
            out.append((_sized("usefulness", "useful", len(texts)),
                        {"question": q, "reference": s.reference,
                         "passages": format_passages(texts), "count": str(len(texts))}))
        if s.reference and s.reference.strip() and texts:
            for k in sorted(recall_ks):
                out.append((_prompt("recall"), {"question": q, "reference": s.reference,
                                                "contexts": format_passages(texts[:k])}))
        if faith and s.response and s.response.strip() and texts:
            cv = {"question": q, "response": s.response}
            out.append((_prompt("claims"), cv))
            claims = [s.response]
            if llm is not None:
                hit = llm.prepare(_prompt("claims"), cv).cached
                if hit is not None and isinstance(hit.obj, dict):
                    claims = [c.strip() for c in hit.obj.get("claims", []) if c.strip()]
            if claims:
                out.append((_sized("verify", "verdicts", len(claims)),
                            {"contexts": format_passages(texts), "claims": format_claims(claims),
                             "count": str(len(claims))}))
        if answer and q.strip() and s.response and s.response.strip():
            out.append((_prompt("answer"), {"question": q, "response": s.response}))
        if questions and q.strip() and s.response and s.response.strip():
            # The embeddings request that follows is not counted (tiny next to the chat calls).
            out.append((_prompt("questions"), {"response": s.response}))
    return out
