"""Judging pairs as a Ray Data pipeline: the same prompts, parsing, cache, budget and provenance
as one process, on a cluster.

    pairs (objects, the judge's pool, a Ray dataset or Parquet files)
      -> cached pairs answered in the driver, before anything is scheduled (a dataset's rows
         are first seen by the workers, which answer cached ones without a request)
      -> a Ray dataset of the rest, in batches
      -> engine "session": ragjudge's own session in each worker (API endpoints: the runner,
         retries, rate limits, the shared cache's claims, the budget), or
         engine "vllm": a ``ray.data.llm`` vLLM processor on the cluster's GPUs, its prompts
         rendered by ragjudge (same ids and sha256) and its replies parsed by ragjudge's
         strict parser
      -> judgments with provenance -> qrels (:class:`~ragjudge.judges.JudgeResult`)

Guarantees, as in one process: a pair already in the cache costs nothing and is never
scheduled; failures are judgments with reasons; a worker that dies has its batch retried by
Ray and pays again only for the calls that were in flight (finished ones are in the cache, and with a PostgreSQL cache the in-flight ones are claimed; Ray Data restarts
dead actors and retries their batches by default); grades equal
``ragjudge judge``'s given the same replies (same session, prompt and parser). The budget:
``max_cost`` is split evenly between the workers (each worker's session stops at its share), so
the sum never passes it; the dry run (:meth:`LLMRelevanceJudge.estimate`) prices the whole job
first.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from .._sync import run_sync
from ..data import Qrels
from ..errors import InputError, LLMError
from ..judges.relevance import JudgeResult, Judgment, LLMRelevanceJudge, Pair, as_pair
from ..llm import LLM
from ..llm.cost import Usage
from ..llm.provenance import FailureKind
from ..llm.replies import apply_validate, check_reply
from .cluster import (
    ENGINES,
    actors,
    check_counts,
    connect,
    in_order,
    is_dataset,
    key_env,
    open_dataset,
    parquet_files,
    recipe,
    worker_llm,
)

__all__ = ["PAIR_COLUMNS", "judge_ray", "judge_ray_sync", "vllm_judgment", "vllm_request"]

#: The columns of a pairs dataset (Parquet or Ray), each under its accepted names.
PAIR_COLUMNS = {"qid": ("qid", "query_id"), "docid": ("docid", "doc_id", "passage_id", "pid"),
                "query": ("query", "query_text"), "passage": ("passage", "passage_text", "text")}


# ----------------------------------------------------------------------------- workers
class _SessionWorker:
    """One Ray actor: the driver's session rebuilt, judging a batch of pairs per call."""

    def __init__(self, recipe: Mapping[str, Any]) -> None:
        llm = worker_llm(recipe["llm"])
        self.judge = LLMRelevanceJudge(llm=llm, prompt=recipe["prompt"], progress=False)

    async def __call__(self, batch: Mapping[str, Any]) -> AsyncIterator[dict[str, list[Any]]]:
        # Async: Ray Data runs the worker's batches on one event loop for the worker's life (the
        # HTTP client, the learned rate limits and the runner's concurrency carry over), and
        # BATCHES_IN_FLIGHT of them at once, so a batch's last slow calls leave no idle gap.
        # A pair already in the cache is answered from it without a request (the driver skips
        # them for objects; a dataset's rows are first seen here).
        pairs = [Pair(str(q), str(d), str(qu), str(pa)) for q, d, qu, pa in
                 zip(batch["qid"], batch["docid"], batch["query"], batch["passage"])]
        try:
            judgments = await self.judge.judge_many(pairs, progress=False)
        except LLMError as exc:  # the run stopped (budget share spent, a revoked key)
            done = {(j.qid, j.docid): j for j in (exc.partial or []) if isinstance(j, Judgment)}
            reason = " ".join(str(exc).split())
            kind = FailureKind.BUDGET if "budget" in reason.lower() or "max-cost" in reason.lower() \
                else FailureKind.OTHER
            judgments = [done.get((p.qid, p.docid)) or self._failed(p, kind, reason) for p in pairs]
        index = list(batch["index"]) if "index" in batch else [-1] * len(pairs)
        yield {"index": index, "judgment": [json.dumps(j.to_dict()) for j in judgments]}

    def _failed(self, pair: Pair, kind: FailureKind, reason: str) -> Judgment:
        llm = self.judge.llm
        call = llm.prepare(self.judge.prompt, {"query": pair.query, "passage": pair.passage})
        return Judgment.from_outcome(pair, llm.failure(call, kind, reason), self.judge.prompt.label_field or "")


def vllm_request(judge: LLMRelevanceJudge, row: Mapping[str, Any]) -> dict[str, Any]:
    """The vLLM processor's input row for one pair: the messages ragjudge renders, greedy
    sampling within the prompt's token limit, and the prompt's schema as guided decoding."""
    messages = judge.prompt.render(query=str(row["query"]), passage=str(row["passage"]))
    return {**row, "messages": messages,
            "sampling_params": {"temperature": 0.0, "max_tokens": judge.prompt.max_tokens,
                                "guided_decoding": {"json": judge.prompt.output_schema}}}


def vllm_judgment(judge: LLMRelevanceJudge, row: Mapping[str, Any]) -> dict[str, Any]:
    """The judgment of one vLLM reply, parsed by ragjudge's strict parser and the judge's
    validator (a reply that fails either is a failed judgment with its reason, never a
    guess); ``{"index", "judgment"}`` as the session workers return."""
    pair = Pair(str(row["qid"]), str(row["docid"]), str(row["query"]), str(row["passage"]))
    llm = judge.llm
    call = llm.prepare(judge.prompt, {"query": pair.query, "passage": pair.passage})
    text = row.get("generated_text")
    usage = Usage(prompt_tokens=int(row.get("num_input_tokens") or 0),
                  completion_tokens=int(row.get("num_generated_tokens") or 0))
    try:
        if not isinstance(text, str):
            raise ValueError(f"no generated text ({row.get('__inference_error__') or 'engine error'})")
        obj, grade = check_reply(judge.prompt, text, judge.grade_of, quoted=(pair.query, pair.passage))
    except (ValueError, TypeError, InputError) as exc:
        kind = FailureKind.UNPARSABLE if isinstance(text, str) else FailureKind.OTHER
        out = llm.failure(call, kind, f"vllm: {exc}", usage=usage)
        return {"index": row.get("index", -1),
                "judgment": json.dumps(Judgment.from_outcome(pair, out, judge.prompt.label_field or "").to_dict())}
    prov = llm.provenance(judge.prompt, endpoint="ray.data.llm vLLM engine", response_format="guided json")
    j = Judgment.record(pair.qid, pair.docid, grade, None, obj.get("reasoning"), prov, usage, 0.0, None)
    return {"index": row.get("index", -1), "judgment": json.dumps(j.to_dict()),
            "query": pair.query, "passage": pair.passage}


# ----------------------------------------------------------------------------- the pipeline
def _todo(judge: LLMRelevanceJudge, items: Sequence[Pair], done: dict[int, Judgment]) -> list[dict[str, Any]]:
    """The rows to schedule; cached pairs are answered into ``done`` and never reach the cluster."""
    llm = judge.llm
    label = judge.prompt.label_field or ""
    todo: list[dict[str, Any]] = []
    for i, p in enumerate(items):
        call = llm.prepare(judge.prompt, {"query": p.query, "passage": p.passage})
        cached = apply_validate(call.cached, judge.grade_of) if call.cached is not None else None
        if cached is not None and cached.value is not None:
            done[i] = Judgment.from_outcome(p, cached, label)
            continue
        todo.append({"index": i, "qid": p.qid, "docid": p.docid, "query": p.query, "passage": p.passage})
    return todo


def _remember(judge: LLMRelevanceJudge, j: Judgment, query: str, passage: str) -> None:
    """A vLLM engine's answer goes to the cache, so a rerun is free."""
    if j.error is None and not j.cached:
        llm = judge.llm
        call = llm.prepare(judge.prompt, {"query": query, "passage": passage})
        llm.cache.put(call.key, {**j.provenance.to_dict(), "obj": {
            judge.prompt.label_field or "": j.grade, "reasoning": j.reasoning}, "usage": j.usage.to_dict()})


def _pipeline(ray: Any, judge: LLMRelevanceJudge, ds: Any, *, engine: str, workers: int, batch_size: int,
              vllm: Mapping[str, Any] | None) -> Any:
    llm = judge.llm
    if engine == "session":
        return ds.map_batches(
            _SessionWorker, fn_constructor_kwargs={"recipe": {"llm": recipe(llm, workers),
                                                              "prompt": judge.prompt.name}},
            # Ray Data restarts a dead actor and retries its batch by default (max_restarts
            # and max_task_retries -1): the batch's finished calls are in the cache.
            batch_size=batch_size, num_cpus=0.25, **actors(workers),
            runtime_env={"env_vars": key_env(llm)})
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    config = vLLMEngineProcessorConfig(model_source=llm.model, batch_size=batch_size,
                                       concurrency=workers, **dict(vllm or {}))
    processor = build_processor(config, preprocess=lambda row: vllm_request(judge, row),
                                postprocess=lambda row: vllm_judgment(judge, row))
    return processor(ds)


def _run(judge: LLMRelevanceJudge, items: Sequence[Pair], *, engine: str, workers: int,
         batch_size: int, address: str | None, vllm: Mapping[str, Any] | None) -> list[Judgment]:
    done: dict[int, Judgment] = {}
    todo = _todo(judge, items, done)
    if todo:
        ray = connect(address)
        out = _pipeline(ray, judge, ray.data.from_items(todo), engine=engine, workers=workers,
                        batch_size=batch_size, vllm=vllm)
        for row in out.iter_rows():
            i = int(row["index"])
            done[i] = Judgment.from_dict(json.loads(row["judgment"]))
            if engine == "vllm":
                _remember(judge, done[i], items[i].query, items[i].passage)
    return [done[i] for i in range(len(items))]


def _run_dataset(judge: LLMRelevanceJudge, data: Any, *, engine: str, workers: int, batch_size: int,
                 address: str | None, vllm: Mapping[str, Any] | None) -> list[Judgment]:
    """A Ray dataset or Parquet files, streamed: the driver sees only the judgments."""
    ray, ds, names = open_dataset(data, PAIR_COLUMNS, address, batch_size=batch_size, only=True)
    renamed = {column: canonical for canonical, column in names.items() if column != canonical}
    if renamed:
        ds = ds.rename_columns(renamed)
    out = _pipeline(ray, judge, ds, engine=engine, workers=workers, batch_size=batch_size, vllm=vllm)
    judgments = []
    with in_order(out):
        for row in out.iter_rows():
            j = Judgment.from_dict(json.loads(row["judgment"]))
            if engine == "vllm":
                _remember(judge, j, row["query"], row["passage"])
            judgments.append(j)
    return judgments


async def judge_ray(
    pairs: Iterable[Any],
    *,
    llm: LLM,
    prompt: str = "relevance.v1",
    engine: str = "session",
    workers: int = 2,
    batch_size: int = 64,
    address: str | None = None,
    vllm: Mapping[str, Any] | None = None,
    human: Qrels | None = None,
) -> JudgeResult:
    """Grade ``pairs`` on a Ray cluster: objects as :meth:`LLMRelevanceJudge.judge_many` takes
    them, a Ray dataset, or Parquet files (a ``.parquet`` path, a directory of them, or a list),
    whose rows have ``qid`` (or ``query_id``), ``docid`` (``doc_id``), ``query`` (``query_text``)
    and ``passage`` (``passage_text``, ``text``) columns. A dataset streams through the workers
    (the driver never holds its rows, only the judgments, in the dataset's order) and its cached
    pairs are answered from the cache in the workers, without a request.

    ``llm``: the session the workers rebuild (its endpoints, cache, prices and sampling;
    ``max_cost`` split evenly between the ``workers``). ``engine``: ``"session"`` (ragjudge's
    session per worker, for API endpoints) or ``"vllm"`` (a ``ray.data.llm`` vLLM processor on
    the cluster's GPUs; ``vllm`` holds extra ``vLLMEngineProcessorConfig`` fields such as
    ``engine_kwargs``). ``address``: an existing cluster (``ray://host:10001``, ``auto``), else
    a local one is started. A worker that dies is restarted and its batch retried (Ray Data's
    defaults for actors).
    The qrels hold the successful grades (merged under ``human`` labels when given: judge the
    pool's holes with :func:`~ragjudge.judges.pool_pairs`'s ``skip=``); failures are judgments
    with reasons.
    """
    if engine not in ENGINES:
        raise InputError(f"must be one of {', '.join(ENGINES)}, got {engine!r}", field="engine")
    check_counts(workers=workers, batch_size=batch_size)
    judge = LLMRelevanceJudge(llm=llm, prompt=prompt, progress=False)
    how = {"engine": engine, "workers": workers, "batch_size": batch_size, "address": address, "vllm": vllm}
    if is_dataset(pairs) or parquet_files(pairs) is not None:
        judgments = await asyncio.to_thread(_run_dataset, judge, pairs, **how)
    else:
        items = [as_pair(p, i) for i, p in enumerate(pairs)]
        judgments = await asyncio.to_thread(_run, judge, items, **how)
    usage = sum((j.usage for j in judgments if not j.cached), Usage())
    return JudgeResult.build(judgments, usage, llm.cost_of(usage),
                             f"llm:{llm.model}:{judge.prompt.name}", human=human)


def judge_ray_sync(pairs: Iterable[Any], **kwargs: Any) -> JudgeResult:
    """Blocking :func:`judge_ray` (works inside Jupyter's running loop)."""
    return run_sync(judge_ray(pairs, **kwargs))
