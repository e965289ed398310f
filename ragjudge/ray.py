"""Judging as a Ray Data pipeline: the same prompts, parsing, cache, budget and provenance as
one process, on a cluster (``pip install -e '.[ray]'`` in the ragjudge checkout; imported only
when used).

    pairs (objects, or the judge's pool)
      -> cached pairs answered in the driver, before anything is scheduled
      -> a Ray dataset of the rest, in batches
      -> engine "session": ragjudge's own session in each worker (API endpoints: the runner,
         retries, rate limits, the shared cache's claims, the budget), or
         engine "vllm": a ``ray.data.llm`` vLLM processor on the cluster's GPUs, its prompts
         rendered by ragjudge (same ids and sha256) and its replies parsed by ragjudge's
         strict parser
      -> judgments with provenance -> qrels (:class:`~ragjudge.judges.JudgeResult`)

Guarantees, as in one process: a pair already in the cache costs nothing and is never
scheduled; failures are judgments with reasons; a worker that dies has its batch retried by Ray and pays again only for the calls that were in flight (finished ones are
in the cache, and with a PostgreSQL cache the in-flight ones are claimed; Ray Data restarts
dead actors and retries their batches by default); grades equal
``ragjudge judge``'s given the same replies (same session, prompt and parser). The budget:
``max_cost`` is split evenly between the workers (each worker's session stops at its share), so
the sum never passes it; the dry run (:meth:`LLMRelevanceJudge.estimate`) prices the whole job
first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._lazy import optional
from .data import Qrels
from .errors import InputError, LLMError
from .judges.relevance import JudgeResult, Judgment, LLMRelevanceJudge, Pair, as_pair
from .llm import LLM
from .llm.cost import Usage
from .llm.provenance import FailureKind
from .llm.replies import apply_validate

__all__ = ["judge_ray", "judge_ray_sync", "ENGINES", "vllm_request", "vllm_judgment"]

#: Where the model runs: ragjudge's session in each worker, or a vLLM engine per GPU worker.
ENGINES = ("session", "vllm")


# ----------------------------------------------------------------------------- recipes
def _cache_target(llm: LLM) -> str | None:
    """What a worker opens to share the driver's cache: the PostgreSQL URL or the SQLite path
    (a path the workers can reach: the same machine, or a shared filesystem)."""
    cache = llm.cache
    url = getattr(cache, "url", None)
    if isinstance(url, str):
        return url
    path = getattr(cache, "path", None)
    return None if path is None else str(path)


def _recipe(llm: LLM, prompt: str, workers: int) -> dict[str, Any]:
    """How a worker builds the driver's session: its endpoints, cache, prices and sampling,
    with an even share of the budget (plain values: Ray pickles them to the workers)."""
    share = None if llm.max_cost is None else max(0.0, llm.max_cost - (llm.cost or 0.0)) / workers
    return {
        "llm": {
            "model": [c.endpoint for c in llm.callers],
            "cache": _cache_target(llm) or False,
            "prices": llm.prices,
            "max_cost": share,
            "temperature": llm.temperature,
            "seed": llm.seed,
            "max_tokens": llm.max_tokens,
            "logprobs": llm.logprobs,
            "top_logprobs": llm.top_logprobs,
        },
        "prompt": prompt,
    }


def _key_env(llm: LLM) -> dict[str, str]:
    """The environment variables holding the endpoints' keys, for the workers' runtime
    environment (a local cluster inherits them; a remote one gets them this way)."""
    out = {}
    for c in llm.callers:
        e = c.endpoint
        for name in (getattr(e, "api_key_env", None), getattr(getattr(llm, "spec", None), "key_env", None)):
            if isinstance(name, str) and name in os.environ:
                out[name] = os.environ[name]
    return out


# ----------------------------------------------------------------------------- workers
class _SessionWorker:
    """One Ray actor: the driver's session rebuilt, judging a batch of pairs per call."""

    def __init__(self, recipe: Mapping[str, Any]) -> None:
        llm = LLM(**recipe["llm"], check_key=True)
        self.judge = LLMRelevanceJudge(llm=llm, prompt=recipe["prompt"], progress=False)
        # One loop for the worker's life: the HTTP client, the learned rate limits and the
        # concurrency the runner grew carry over from batch to batch instead of starting cold.
        self.loop = asyncio.new_event_loop()

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, list[Any]]:
        pairs = [Pair(str(q), str(d), str(qu), str(pa)) for q, d, qu, pa in
                 zip(batch["qid"], batch["docid"], batch["query"], batch["passage"])]
        try:
            judgments = self.loop.run_until_complete(self.judge.judge_many(pairs, progress=False))
        except LLMError as exc:  # the run stopped (budget share spent, a revoked key)
            done = {(j.qid, j.docid): j for j in (exc.partial or []) if isinstance(j, Judgment)}
            reason = " ".join(str(exc).split())
            kind = FailureKind.BUDGET if "budget" in reason.lower() or "max-cost" in reason.lower() \
                else FailureKind.OTHER
            judgments = [done.get((p.qid, p.docid)) or self._failed(p, kind, reason) for p in pairs]
        return {"index": list(batch["index"]),
                "judgment": [json.dumps(j.to_dict()) for j in judgments]}

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
    from .llm.replies import check_reply

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
        return {"index": row["index"],
                "judgment": json.dumps(Judgment.from_outcome(pair, out, judge.prompt.label_field or "").to_dict())}
    prov = llm.provenance(judge.prompt, endpoint="ray.data.llm vLLM engine", response_format="guided json")
    j = Judgment.record(pair.qid, pair.docid, grade, None, obj.get("reasoning"), prov, usage, 0.0, None)
    return {"index": row["index"], "judgment": json.dumps(j.to_dict())}


# ----------------------------------------------------------------------------- the pipeline
def _ray(address: str | None) -> Any:
    ray = optional("ray", extra="ray", what="the ray engine")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    import ray.data

    # ragjudge says what happened in its own lines; Ray Data's progress bars and INFO lines
    # would bury them on stderr.
    ray.data.DataContext.get_current().enable_progress_bars = False
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return ray


def _dataset(ray: Any, rows: list[dict[str, Any]]) -> Any:
    return ray.data.from_items(rows)


def _run(judge: LLMRelevanceJudge, items: Sequence[Pair], *, engine: str, workers: int,
         batch_size: int, address: str | None, vllm: Mapping[str, Any] | None) -> list[Judgment]:
    llm = judge.llm
    label = judge.prompt.label_field or ""
    done: dict[int, Judgment] = {}
    todo: list[dict[str, Any]] = []
    for i, p in enumerate(items):  # cached pairs never reach the cluster
        call = llm.prepare(judge.prompt, {"query": p.query, "passage": p.passage})
        cached = apply_validate(call.cached, judge.grade_of) if call.cached is not None else None
        if cached is not None and cached.value is not None:
            done[i] = Judgment.from_outcome(p, cached, label)
            continue
        todo.append({"index": i, "qid": p.qid, "docid": p.docid, "query": p.query, "passage": p.passage})
    if todo:
        ray = _ray(address)
        ds = _dataset(ray, todo)
        if engine == "session":
            out = ds.map_batches(
                _SessionWorker, fn_constructor_kwargs={"recipe": _recipe(llm, judge.prompt.name, workers)},
                # Ray Data restarts a dead actor and retries its batch by default (max_restarts
                # and max_task_retries -1): the batch's finished calls are in the cache.
                batch_size=batch_size, concurrency=workers, num_cpus=0.25,
                runtime_env={"env_vars": _key_env(llm)})
        else:
            from ray.data.llm import build_processor, vLLMEngineProcessorConfig

            config = vLLMEngineProcessorConfig(model_source=llm.model, batch_size=batch_size,
                                               concurrency=workers, **dict(vllm or {}))
            processor = build_processor(config, preprocess=lambda row: vllm_request(judge, row),
                                        postprocess=lambda row: vllm_judgment(judge, row))
            out = processor(ds)
        for row in out.iter_rows():
            done[int(row["index"])] = Judgment.from_dict(json.loads(row["judgment"]))
        if engine == "vllm":  # the engine's answers go to the cache, so a rerun is free
            for i, j in done.items():
                if j.error is None and not j.cached:
                    p = items[i]
                    call = llm.prepare(judge.prompt, {"query": p.query, "passage": p.passage})
                    llm.cache.put(call.key, {**j.provenance.to_dict(), "obj": {
                        label: j.grade, "reasoning": j.reasoning}, "usage": j.usage.to_dict()})
    return [done[i] for i in range(len(items))]


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
    """Grade ``pairs`` (as :meth:`LLMRelevanceJudge.judge_many` takes them) on a Ray cluster.

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
    for name, value in (("workers", workers), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"must be a positive integer, got {value!r}", field=name)
    judge = LLMRelevanceJudge(llm=llm, prompt=prompt, progress=False)
    items = [as_pair(p, i) for i, p in enumerate(pairs)]
    judgments = await asyncio.to_thread(
        _run, judge, items, engine=engine, workers=workers, batch_size=batch_size, address=address,
        vllm=vllm)
    usage = sum((j.usage for j in judgments if not j.cached), Usage())
    return JudgeResult.build(judgments, usage, llm.cost_of(usage),
                             f"llm:{llm.model}:{judge.prompt.name}", human=human)


def judge_ray_sync(pairs: Iterable[Any], **kwargs: Any) -> JudgeResult:
    """Blocking :func:`judge_ray` (works inside Jupyter's running loop)."""
    from ._sync import run_sync

    return run_sync(judge_ray(pairs, **kwargs))
