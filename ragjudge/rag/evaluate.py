"""Evaluate RAG samples: :func:`evaluate_samples` (async) and :func:`evaluate_samples_sync`,
and the dry-run planner :func:`plan_requests`.

Both drive the metrics of :mod:`ragjudge.rag.metrics` through the same loop: a metric's
:meth:`~ragjudge.rag.metrics.LLMMetric.requests` says what to ask for a sample given the
answers so far; the evaluator asks (every request at most once per sample, shared between
metrics: one grading feeds context_relevance, context_precision and context_ndcg), the planner
supposes the answers (cached ones, else the metric's stand-in). So a dry run counts exactly
the calls an evaluation makes, as far as answers can be foreseen.

LLM calls go through :meth:`ragjudge.llm.LLM.structured` -- the judge's client, retry and
repair policy, runner, cache and budget -- and embeddings through :meth:`ragjudge.llm.LLM.embed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._sync import run_sync
from ..errors import LLMError, MetricError
from ..llm.progress import Progress
from ..llm.provenance import FailureKind
from .metrics import (
    DeterministicMetric, LLMMetric, RagMetric, Request, Setup, definition, parse_rag_metrics, reviewed
)
from .report import RagReport, Score, undetermined
from .options import DEFAULT_GRADING, GRADING_MODES, RagOptions
from .samples import Sample, SampleSet, as_samples

__all__ = [
    "evaluate_samples",
    "evaluate_samples_sync",
    "plan_requests",
    "check_embedding_model",
    "needs_embeddings",
    "GRADING_MODES",
    "DEFAULT_GRADING",
]


# Keyword defaults come from the options value, where each is stated once.
_D = RagOptions.default


def _resolve_llm(judge: Any) -> tuple[Any, Any]:
    """``(LLM session, relevance judge or None)`` from an LLM, an LLMRelevanceJudge (its
    ``.llm`` is used for every call and its ``judge()`` for pointwise grades) or a model name."""
    if judge is None:
        return None, None
    if isinstance(judge, str):
        from ..llm import LLM  # deferred: the LLM stack loads only when a model is named

        return LLM(judge), None
    if hasattr(judge, "structured"):
        return judge, None
    inner = getattr(judge, "llm", None)
    if inner is not None and hasattr(inner, "structured") and hasattr(judge, "judge"):
        return inner, judge
    raise MetricError(f"judge must be an LLM session, a judge with .llm, or a model name; got {judge!r}")


@dataclass(frozen=True)
class _Answer:
    value: Any
    error: str | None
    failure: FailureKind | None = None  # set with ``error``: the LLM layer's typed reason


class _Asker:
    """Asks requests: each identity once per sample (a task shared by the metrics that need
    it), and counts what was asked and what failed."""

    def __init__(self, llm: Any, judge: Any) -> None:
        self.llm = llm
        self.judge = judge
        self.asked = 0
        self.failed = 0

    def for_sample(self) -> Any:
        memo: dict[tuple[Any, ...], asyncio.Task[_Answer]] = {}

        def ask(r: Request) -> asyncio.Task[_Answer]:
            task = memo.get(r.identity)
            if task is None:
                task = memo[r.identity] = asyncio.ensure_future(self._ask(r))
            return task

        return ask

    async def _ask(self, r: Request) -> _Answer:
        self.asked += 1
        got = await self._send(r)
        if got.error is not None:
            self.failed += 1
        return got

    async def _send(self, r: Request) -> _Answer:
        variables = dict(r.variables)
        if r.embed is not None:
            emb = await self.llm.embed(list(r.embed), model=r.model)
            return _Answer(emb.vectors, None) if emb.ok else _Answer(None, emb.error, _kind(emb.failure))
        if r.pair and self.judge is not None:
            j = await self.judge.judge(variables["query"], variables["passage"])
            return _Answer(int(j.grade), None) if j.ok else _Answer(None, j.error or "failed", _kind(j.failure))
        o = await self.llm.structured(r.prompt, variables, validate=r.parse)
        return _Answer(o.value, None) if o.ok else _Answer(None, o.error or "failed", _kind(o.failure))


def _kind(failure: FailureKind | None) -> FailureKind:

    return failure if failure is not None else FailureKind.OTHER


def _failure(todo: Sequence[Request], answers: Sequence[_Answer]) -> tuple[str, FailureKind] | None:
    """Why a stage failed, and the kind of its first failed call: ``"<what> call failed:
    <error>"``, or for a group of like requests ``"2 of 5 chunk grades failed: <first error>"``."""
    failed = [(r, a) for r, a in zip(todo, answers) if a.error is not None]
    if not failed:
        return None
    r, a = failed[0]
    error = a.error or ""
    kind = _kind(a.failure)
    if r.group is not None:
        n = sum(1 for q in todo if q.group == r.group)
        return f"{len(failed)} of {n} {r.group} failed: {error}", kind
    prefix = f"{r.what} call failed"
    return (error if error.startswith(prefix) else f"{prefix}: {error}"), kind


async def _score(unit: LLMMetric, m: RagMetric, s: Sample, k: int, setup: Setup, ask: Any) -> Score:
    got: dict[str, Any] = {}
    while True:
        reqs = unit.requests(m, s, k, setup, got)
        if isinstance(reqs, str):
            return Score(None, reqs, dict(got))
        todo = [r for r in reqs if r.key not in got]
        if not todo:
            return unit.score(m, s, k, setup, got)
        answers = await asyncio.gather(*(ask(r) for r in todo))
        failed = _failure(todo, answers)
        if failed is not None:
            return Score(None, failed[0], dict(got), failure=failed[1])
        got.update((r.key, a.value) for r, a in zip(todo, answers))


def _setup(opts: RagOptions, judge: Any, metrics: Sequence[RagMetric]) -> Setup:
    review = not opts.separate_calls and reviewed(metrics, opts.grading)
    return Setup(opts.grading, getattr(judge, "prompt", None) if judge is not None else None,
                 opts.embedding_model, review, opts.language)


async def evaluate_samples(
    samples: Any,
    metrics: str | Iterable[str | RagMetric],
    *,
    judge: Any = None,
    options: RagOptions | None = None,
    grading: str = _D("grading"),
    match: str | None = _D("match"),
    default_k: int = _D("default_k"),
    skip_invalid: bool = _D("skip_invalid"),
    progress: bool = False,
    embedding_model: str | None = _D("embedding_model"),
    separate_calls: bool = _D("separate_calls"),
    language: str = _D("language"),
) -> RagReport:
    """Evaluate RAG samples on ``metrics`` (specs such as ``"faithfulness"``, ``"ndcg@5"``,
    ``"context_precision(threshold=2)"``).

    ``samples``: a path, a :class:`SampleSet`, :class:`Sample` objects, dicts, a DataFrame, or
    the objects of RAGAS / DeepEval / Hugging Face datasets (see :func:`as_samples`).
    ``judge``: an :class:`ragjudge.llm.LLM` session (or a judge holding one, or a model name),
    needed only by LLM metrics. ``grading``: ``listwise`` (all chunks of a sample in one call)
    or ``pointwise`` (one call per chunk, shared with ``ragjudge judge``'s cache). ``match``
    sets the matching mode of ranking metrics that do not set ``match=`` themselves.
    ``default_k`` is the cutoff when neither the sample nor the metric gives one.
    ``embedding_model``: the embeddings model of the metrics that use one, such as
    ``answer_relevance(by=embedding)`` (served by the judge's endpoint).
    ``separate_calls``: a run asking both the listwise chunk grades and ``context_recall``
    gets them from one call per sample (``context_review.v3``), whose grader also sees the
    reference; ``True`` asks them in two calls.
    ``language``: the samples' language (``"es"``...): context recall's sentence rules and the
    shipped prompt variants for it (English prompts where none is shipped); recorded in the
    report's settings.
    ``options``: a :class:`RagOptions` carrying these settings instead of the keywords.
    Never raises for a per-sample problem: it becomes an undetermined score with its reason.
    A run-stopping :class:`~ragjudge.errors.LLMError` (a spend limit, a revoked key) is raised
    after every sample ran, its ``partial`` the report: complete samples scored, the others
    undetermined with the stop as reason.
    """
    opts = RagOptions.merge(options, grading=grading, match=match, default_k=default_k,
                            skip_invalid=skip_invalid, embedding_model=embedding_model,
                            separate_calls=separate_calls, language=language)
    grading, match, default_k = opts.grading, opts.match, opts.default_k
    embedding_model = opts.embedding_model
    data: SampleSet = as_samples(samples, skip_invalid=opts.skip_invalid)
    parsed = parse_rag_metrics(metrics)
    llm_metrics = [m for m in parsed if m.needs_llm]
    llm, rel_judge = _resolve_llm(judge)
    setup = _setup(opts, rel_judge, parsed)
    if llm_metrics and llm is None:
        names = ", ".join(str(m) for m in llm_metrics)
        raise MetricError(f"{names} need an LLM judge: pass judge=LLM(model) (CLI: --model M)")
    for m in parsed:
        m.unit.check(m, setup)
    _check_fields(data, llm_metrics)

    columns: dict[str, list[Score]] = {}
    for m in parsed:
        unit = m.unit
        if isinstance(unit, DeterministicMetric):
            columns[str(m)] = unit.scores(m, data, match=match, default_k=default_k)

    usage_before = _usage(llm) if llm is not None else None
    asker = _Asker(llm, rel_judge)
    stop: LLMError | None = None
    if llm_metrics:
        # The LLM layer's one progress display: a bar on a terminal or in a notebook (no
        # IProgress warning without ipywidgets), a few plain lines when stderr is redirected.
        bar = Progress(len(data), "rag samples", unit="sample", enabled=progress, leave=False)

        async def one(s: Sample) -> list[Score]:
            ask = asker.for_sample()
            got = await asyncio.gather(*(
                _score(m.unit, m, s, s.cutoff(m.k, default_k), setup, ask)  # type: ignore[arg-type]
                for m in llm_metrics))
            bar.update(1)
            return list(got)

        try:
            # Every sample runs to its end, so a run stopped mid-way (a spend limit, a revoked
            # key) keeps the samples that were complete: they are paid for.
            got = await asyncio.gather(*(one(s) for s in data), return_exceptions=True)
        finally:
            bar.close()
            if isinstance(judge, str):  # a session made here from a model name is closed here
                await llm.aclose()
        for r in got:
            if isinstance(r, BaseException) and not isinstance(r, LLMError):
                raise r
        stop = next((r for r in got if isinstance(r, LLMError)), None)
        stopped = [undetermined(f"{STOPPED} ({stop})")] * len(llm_metrics)
        results = [stopped if isinstance(r, BaseException) else r for r in got]
        for j, m in enumerate(llm_metrics):
            columns[str(m)] = [row[j] for row in results]

    usage: dict[str, Any] = {}
    if llm is not None and usage_before is not None:
        after = _usage(llm)
        usage = {key: after[key] - usage_before[key] for key in after if key != "cost"}
        usage["model"] = getattr(llm, "model", None)
        usage["cost_usd"] = getattr(llm, "cost", None)
        usage["samples"] = len(data)
        usage["requests_asked"] = asker.asked
        usage["requests_failed"] = asker.failed
    report = RagReport(
        [str(m) for m in parsed],
        [s.id for s in data],
        columns,
        definitions={str(m): definition(m) for m in parsed},
        usage=usage,
        invalid=[str(e) for e in data.invalid],
        settings={"grading": grading, "default_k": default_k, "match": match or "auto",
                  "language": opts.language},
        canonical=canonical_metric,
    )
    if llm_metrics and stop is not None:
        stop.partial = report  # the complete samples scored, the others undetermined
        raise stop
    return report


#: The reason of a value left unscored because the run stopped (a spend limit, a revoked key).
STOPPED = "not scored: the run stopped"


def canonical_metric(spelling: str) -> str:
    """The report column of one metric spelled any way (raises :class:`MetricError`)."""
    parsed = parse_rag_metrics([spelling])
    if len(parsed) != 1:
        raise MetricError(f"{spelling!r} names {len(parsed)} metrics, not one")
    return str(parsed[0])


def needs_embeddings(metrics: Iterable[RagMetric]) -> list[RagMetric]:
    """The metrics that need an embeddings model."""
    return [m for m in metrics if m.unit.uses_embeddings(m)]


def check_embedding_model(metrics: Sequence[RagMetric], embedding_model: str | None) -> None:
    """A metric that uses embeddings needs an embeddings model (a clear error before any call)."""
    setup = Setup(embedding_model=embedding_model)
    for m in needs_embeddings(metrics):
        m.unit.check(m, setup)


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


#: How a sample field is named in messages (the accepted input names).
_FIELD_NAMES = {
    "question": "a question (user_input / input / question)",
    "contexts": "retrieved contexts",
    "response": "response / actual_output",
    "reference": "reference / expected_output",
}


def _check_fields(data: SampleSet, metrics: Sequence[RagMetric]) -> None:
    """A metric whose input field no sample has is a usage error, not 200 undetermined rows."""
    if not len(data):
        return
    for m in metrics:
        for name in m.unit.fields(m):
            if all(getattr(s, name) is None for s in data):
                raise MetricError(f"{m} needs {_FIELD_NAMES.get(name, name)} in the samples, "
                                  "and none of them has it")


def evaluate_samples_sync(samples: Any, metrics: Any, **kwargs: Any) -> RagReport:
    """Synchronous :func:`evaluate_samples` (same arguments); works inside a running event loop
    (Jupyter). The LLM session's HTTP client of the private loop is closed at the end."""

    async def main() -> RagReport:
        llm, _ = _resolve_llm(kwargs.get("judge"))
        if llm is not None and isinstance(kwargs.get("judge"), str):
            kwargs["judge"] = llm  # a model name: build the session once, here
        try:
            return await evaluate_samples(samples, metrics, **kwargs)
        finally:
            if llm is not None and hasattr(llm, "aclose"):
                await llm.aclose()

    return run_sync(main())


_UNKNOWN = object()


def _supposed(r: Request, llm: Any) -> Any:
    """The answer a dry run supposes: the cached one when ``llm`` has it, else ``r.assume``."""
    if llm is not None and r.prompt is not None and r.parse is not None:
        hit = llm.prepare(r.prompt, dict(r.variables)).cached
        if hit is not None and isinstance(hit.obj, Mapping):
            try:
                return r.parse(hit.obj)
            except (KeyError, TypeError, ValueError):
                pass
    return _UNKNOWN if r.assume is None else r.assume


def plan_requests(
    samples: Any,
    metrics: str | Iterable[str | RagMetric],
    *,
    grading: str = _D("grading"),
    default_k: int = _D("default_k"),
    llm: Any = None,
    judge: Any = None,
    embedding_model: str | None = _D("embedding_model"),
    separate_calls: bool = _D("separate_calls"),
    language: str = _D("language"),
    options: RagOptions | None = None,
) -> list[tuple[Any, dict[str, str]]]:
    """The ``(prompt, variables)`` of every chat request an evaluation would make, for a dry
    run -- from the metrics' own :meth:`requests`, so it counts what evaluation asks.

    A request that depends on an earlier answer (claim verification needs the claims) uses the
    answer in ``llm``'s cache when there is one, else the metric's stand-in (the response as
    one claim), so that part is approximate. Embeddings requests are not listed.
    """
    opts = RagOptions.merge(options, grading=grading, default_k=default_k,
                            embedding_model=embedding_model, separate_calls=separate_calls,
                            language=language)
    grading, default_k = opts.grading, opts.default_k
    data = as_samples(samples)
    parsed = [m for m in parse_rag_metrics(metrics) if m.needs_llm]
    setup = _setup(opts, judge, parsed)
    out: list[tuple[Any, dict[str, str]]] = []
    for s in data:
        seen: set[tuple[Any, ...]] = set()
        for m in parsed:
            unit = m.unit
            assert isinstance(unit, LLMMetric)
            k = s.cutoff(m.k, default_k)
            got: dict[str, Any] = {}
            while True:
                reqs = unit.requests(m, s, k, setup, got)
                todo = [] if isinstance(reqs, str) else [r for r in reqs if r.key not in got]
                if not todo:
                    break
                for r in todo:
                    if r.prompt is not None and r.identity not in seen:
                        seen.add(r.identity)
                        out.append((r.prompt, dict(r.variables)))
                    got[r.key] = _supposed(r, llm)
                if any(got[r.key] is _UNKNOWN for r in todo):
                    break
    return out
