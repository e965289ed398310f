"""The RAG metrics as a Ray Data pipeline: the same metric units, prompts, parsing, repair,
cache, budget and provenance as ``ragjudge rag`` in one process, on a cluster.

    samples (objects, a samples file, a Ray dataset or Parquet files)
      -> samples whose every request is in the cache: scored in the driver, before anything is
         scheduled (a dataset's rows are first seen by the workers, which answer cached
         requests without sending them)
      -> the rest, in batches, to workers each running ragjudge's session:
         :func:`~ragjudge.rag.evaluate_samples` on the batch (each metric's own requests,
         de-duplicated per sample, strict parsing and the repair policy, the shared cache's
         claims, the worker's share of the budget)
      -> every sample's scores, in the input order -> one :class:`~ragjudge.rag.RagReport`,
         its aggregates computed once over all samples

A score depends only on its own sample and the replies, so the report's values equal one
process's given the same replies. Failures are scores with reasons (a worker's session that
stops -- its share of the budget spent, a revoked key -- leaves its batch's LLM values
undetermined with the reason and, for the budget, the failure kind the CLI's exit status 4
reads); a worker that dies has its batch retried by Ray, paying again only for the calls in
flight (finished ones are in the cache).

The vLLM engine is not offered here: a RAG metric asks in rounds (claims, then their
verification) through the session; serve the model with ``vllm serve`` and give its
OpenAI-compatible URL as the endpoint instead.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import uuid
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from .._sync import run_sync
from ..errors import InputError, LLMError
from ..llm import LLM
from ..llm.provenance import FailureKind
from ..rag.evaluate import (
    canonical_metric,
    evaluate_samples,
    needs_embeddings,
    plan_requests,
)
from ..rag.metrics import RagMetric, Setup, parse_rag_metrics, reviewed
from ..rag.options import RagOptions
from ..rag.report import RagReport, Score
from ..rag.samples import Sample, SampleSet, as_samples, samples_from_records
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
    sum_totals,
    totals,
    worker_llm,
)

__all__ = ["SAMPLE_ID_COLUMNS", "rag_ray", "rag_ray_sync", "score_batch"]

#: A dataset's samples name their ids in one of these columns (a batch alone cannot number
#: them as a file's reader does).
SAMPLE_ID_COLUMNS = ("id", "sample_id", "query_id", "qid")

#: The usage counts summed over the driver's and the workers' parts.
_COUNTS = ("requests", "calls", "retries", "cache_hits", "failed_calls", "prompt_tokens",
           "completion_tokens", "total_tokens", "embedding_tokens", "requests_asked", "requests_failed")


def _absent(m: RagMetric, samples: Sequence[Sample]) -> bool:
    """Whether an input field of LLM metric ``m`` is missing from every sample of a batch."""
    return bool(samples) and m.needs_llm and any(
        all(getattr(s, name) is None for s in samples) for name in m.unit.fields(m))


def _kind(reason: str) -> FailureKind:
    low = reason.lower()
    return FailureKind.BUDGET if "budget" in low or "max-cost" in low or "max_cost" in low else FailureKind.OTHER


async def score_batch(samples: Sequence[Sample], metrics: Sequence[RagMetric], llm: LLM | None,
                      options: RagOptions) -> tuple[dict[str, list[Score]], dict[str, Any]]:
    """Every metric's scores on ``samples`` (``{column: scores}``) and the usage of the calls
    made, through :func:`~ragjudge.rag.evaluate_samples`. A metric whose input field no sample
    of this batch has (others of the run may) is no usage error here: each sample gets the
    reason its metric gives (``no reference``...), as in one process. A session that stops
    (:class:`~ragjudge.errors.LLMError`) leaves the LLM values undetermined with its reason."""
    absent = [m for m in metrics if _absent(m, samples)]
    live = [m for m in metrics if m not in absent]
    columns: dict[str, list[Score]] = {}
    usage: dict[str, Any] = {}
    if live:
        before = llm.cost if llm is not None else None
        try:
            report: RagReport | None = await evaluate_samples(SampleSet(samples), live, judge=llm, options=options)
        except LLMError as exc:
            reason = " ".join(str(exc).split())
            plain = [m for m in live if not m.needs_llm]
            report = await evaluate_samples(SampleSet(samples), plain, options=options) if plain else None
            columns.update({str(m): [Score(None, reason, failure=_kind(reason)) for _ in samples]
                            for m in live if m.needs_llm})
        if report is not None:
            columns.update(report.scores)
            usage = dict(report.usage)
        if llm is not None:
            after = llm.cost
            usage["cost_usd"] = None if after is None else after - (before or 0.0)
    if absent:
        setup = Setup(options.grading, None, options.embedding_model,
                      not options.separate_calls and reviewed(metrics, options.grading), options.language)
        for m in absent:
            unit: Any = m.unit
            why = [unit.requests(m, s, s.cutoff(m.k, options.default_k), setup, {}) for s in samples]
            columns[str(m)] = [Score(None, w if isinstance(w, str) else "missing input field") for w in why]
    return columns, usage


def _all_cached(s: Sample, metrics: Sequence[RagMetric], llm: LLM | None, options: RagOptions) -> bool:
    """Whether scoring ``s`` sends nothing: every request the planner foresees is in the cache
    (embeddings are not planned, so a run using them schedules every sample)."""
    if llm is None or not any(m.needs_llm for m in metrics):
        return True
    if needs_embeddings(metrics):
        return False
    return all(llm.prepare(p, v).cached is not None
               for p, v in plan_requests([s], metrics, llm=llm, options=options))


def _sum_usage(parts: Iterable[Mapping[str, Any]], llm: LLM | None, samples: int) -> dict[str, Any]:
    if llm is None:
        return {}
    out: dict[str, Any] = {key: 0 for key in _COUNTS}
    cost: float | None = 0.0
    for part in parts:
        if not part:
            continue
        for key in _COUNTS:
            out[key] += int(part.get(key) or 0)
        c = part.get("cost_usd", 0.0)
        cost = None if c is None or cost is None else cost + c
    asked, failed = out.pop("requests_asked"), out.pop("requests_failed")
    # keys in evaluate_samples's order, so the JSON reads the same
    out.update(model=llm.model, cost_usd=cost, samples=samples, requests_asked=asked, requests_failed=failed)
    return out


def _workers_part(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The workers' usage as one part: their sessions' totals (:func:`sum_totals`) and the
    requests each batch asked and saw fail."""
    part = sum_totals((r["worker"], r["totals"]) for r in rows if r.get("totals"))
    part["requests_asked"] = sum(int(r.get("requests_asked") or 0) for r in rows)
    part["requests_failed"] = sum(int(r.get("requests_failed") or 0) for r in rows)
    return part


# ----------------------------------------------------------------------------- workers
class _RagWorker:
    """One Ray actor: the driver's session rebuilt, scoring a batch of samples per call."""

    def __init__(self, recipe: Mapping[str, Any]) -> None:
        self.llm = worker_llm(recipe["llm"]) if recipe["llm"] is not None else None
        self.metrics = parse_rag_metrics(recipe["metrics"])
        self.options: RagOptions = recipe["options"]
        self.records: bool = recipe["records"]
        self.uid = uuid.uuid4().hex  # a restarted worker counts apart from the one it replaces

    async def __call__(self, batch: Any) -> AsyncIterator[dict[str, list[Any]]]:
        # Async, as the judge's workers: one loop and session for the worker's life, and
        # BATCHES_IN_FLIGHT batches at once.
        rows = batch.to_pylist()
        invalid: list[str] = []
        if self.records:  # a dataset's rows: read as a samples file's records are
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # unrecognised columns: the driver saw the schema
                got = samples_from_records(rows, skip_invalid=True)
            samples, index = list(got), [-1] * len(got)
            invalid = [json.dumps({"message": e.message, "field": e.field}) for e in got.invalid]
        else:
            samples = [pickle.loads(r["sample"]) for r in rows]
            index = [int(r["index"]) for r in rows]
        columns, usage = await score_batch(samples, self.metrics, self.llm, self.options)
        n = len(samples)
        scores = [pickle.dumps([columns[str(m)][i] for m in self.metrics]) for i in range(n)]
        yield {"index": index + [-1] * len(invalid), "id": [s.id for s in samples] + [""] * len(invalid),
                "scores": scores + [b""] * len(invalid), "invalid": [""] * n + invalid,
                # the batch's usage rides on its first row
                "usage": [json.dumps({"worker": self.uid, "totals": totals(self.llm) if self.llm else {},
                                      "requests_asked": usage.get("requests_asked", 0),
                                      "requests_failed": usage.get("requests_failed", 0)})]
                + [""] * (n + len(invalid) - 1)}


def _pipeline(ds: Any, llm: LLM | None, metrics: Sequence[RagMetric], options: RagOptions, *,
              records: bool, workers: int, batch_size: int) -> Any:
    made = {"llm": recipe(llm, workers) if llm is not None else None,
            "metrics": [str(m) for m in metrics], "options": options, "records": records}
    return ds.map_batches(
        _RagWorker, fn_constructor_kwargs={"recipe": made}, batch_format="pyarrow",
        # Ray Data restarts a dead actor and retries its batch (its defaults for actors).
        batch_size=batch_size, num_cpus=0.25, **actors(workers),
        runtime_env={"env_vars": key_env(llm) if llm is not None else {}})


def _run_objects(data: SampleSet, todo: Sequence[int], llm: LLM | None, metrics: Sequence[RagMetric],
                 options: RagOptions, *, workers: int, batch_size: int, address: str | None,
                 ) -> tuple[dict[int, list[Score]], list[dict[str, Any]]]:
    ray = connect(address)
    rows = [{"index": i, "sample": pickle.dumps(data[i])} for i in todo]
    out = _pipeline(ray.data.from_items(rows), llm, metrics, options, records=False,
                    workers=workers, batch_size=batch_size)
    scores: dict[int, list[Score]] = {}
    usage: list[dict[str, Any]] = []
    for row in out.iter_rows():
        if row["usage"]:
            usage.append(json.loads(row["usage"]))
        scores[int(row["index"])] = pickle.loads(row["scores"])
    return scores, usage


def _run_dataset(data: Any, llm: LLM | None, metrics: Sequence[RagMetric], options: RagOptions, *,
                 workers: int, batch_size: int, address: str | None,
                 ) -> tuple[list[str], list[list[Score]], list[str], list[dict[str, Any]]]:
    """A Ray dataset or Parquet files, streamed: the driver holds the scores, never the rows."""
    _, ds, _ = open_dataset(data, {"id": SAMPLE_ID_COLUMNS}, address, batch_size=batch_size)
    files = parquet_files(data)
    source = "<Ray dataset>" if files is None else files[0] if len(files) == 1 else f"{len(files)} Parquet files"
    ids: list[str] = []
    scores: list[list[Score]] = []
    invalid: list[str] = []
    usage: list[dict[str, Any]] = []
    seen: set[str] = set()
    out = _pipeline(ds, llm, metrics, options, records=True, workers=workers, batch_size=batch_size)
    with in_order(out):
        for row in out.iter_rows():
            if row["usage"]:
                usage.append(json.loads(row["usage"]))
            if row["invalid"]:
                bad = json.loads(row["invalid"])
                err = InputError(bad["message"], source=source, field=bad["field"])
                if not options.skip_invalid:
                    raise err
                invalid.append(str(err))
                continue
            if row["id"] in seen:
                raise InputError(f"sample {row['id']!r}: duplicate sample id", source=source, field="id")
            seen.add(row["id"])
            ids.append(row["id"])
            scores.append(pickle.loads(row["scores"]))
    return ids, scores, invalid, [_workers_part(usage)]


async def rag_ray(
    samples: Any,
    metrics: str | Iterable[str | RagMetric],
    *,
    llm: LLM | None = None,
    options: RagOptions | None = None,
    engine: str = "session",
    workers: int = 2,
    batch_size: int = 16,
    address: str | None = None,
    **settings: Any,
) -> RagReport:
    """Evaluate RAG ``samples`` on ``metrics`` on a Ray cluster; the report equals
    :func:`~ragjudge.rag.evaluate_samples`'s given the same replies.

    ``samples``: what :func:`~ragjudge.rag.as_samples` takes (a file, objects, a DataFrame...),
    a Ray dataset, or Parquet files (a ``.parquet`` path, a directory of them, or a list) whose
    columns are sample fields (``user_input``, ``retrieved_contexts``, ``response``,
    ``reference``...; an id column, ``id``/``sample_id``/``query_id``/``qid``, is required). A
    dataset streams through the workers: the driver never holds its rows, only the scores.
    ``llm``: the session the workers rebuild (endpoints, cache, prices, sampling; ``max_cost``
    split evenly between the ``workers``); needed by LLM metrics. ``options`` (or the keyword
    ``settings``: ``grading``, ``match``, ``default_k``...): as for ``evaluate_samples``.
    ``address``: an existing cluster (``ray://host:10001``, ``auto``), else a local one.
    """
    if engine not in ENGINES:
        raise InputError(f"must be one of {', '.join(ENGINES)}, got {engine!r}", field="engine")
    if engine == "vllm":
        raise InputError("the RAG metrics ask in rounds (claims, then their verification) through "
                         "the session engine; serve the model with `vllm serve` and give its URL as "
                         "the endpoint (engine='session')", field="engine")
    check_counts(workers=workers, batch_size=batch_size)
    opts = RagOptions.merge(options, **settings)
    parsed = parse_rag_metrics(metrics)
    # The run's shape, checked before anything is scheduled: the metrics' options (an
    # embeddings model...), their definitions and the report's settings, from no sample.
    shape = await evaluate_samples(SampleSet([]), parsed, judge=llm, options=opts)
    how = {"workers": workers, "batch_size": batch_size, "address": address}
    if is_dataset(samples) or parquet_files(samples) is not None:
        ids, per_sample, invalid, parts = await asyncio.to_thread(_run_dataset, samples, llm, parsed, opts, **how)
    else:
        data = as_samples(samples, skip_invalid=opts.skip_invalid)
        todo = [i for i, s in enumerate(data) if not _all_cached(s, parsed, llm, opts)]
        skip = set(todo)
        cached = [s for i, s in enumerate(data) if i not in skip]
        columns, driver_usage = await score_batch(cached, parsed, llm, opts)
        by_index: dict[int, list[Score]] = {}
        rest = iter(range(len(cached)))
        for i in range(len(data)):
            if i not in skip:
                j = next(rest)
                by_index[i] = [columns[str(m)][j] for m in parsed]
        parts = [driver_usage]
        if todo:
            got, worker_usage = await asyncio.to_thread(_run_objects, data, todo, llm, parsed, opts, **how)
            by_index.update(got)
            parts.append(_workers_part(worker_usage))
        ids = [s.id for s in data]
        per_sample = [by_index[i] for i in range(len(data))]
        invalid = [str(e) for e in data.invalid]
    usage = _sum_usage(parts, llm, len(ids))
    return RagReport([str(m) for m in parsed], ids,
                     {str(m): [row[j] for row in per_sample] for j, m in enumerate(parsed)},
                     definitions=shape.definitions, usage=usage, invalid=invalid,
                     settings=shape.settings, canonical=canonical_metric)


def rag_ray_sync(samples: Any, metrics: Any, **kwargs: Any) -> RagReport:
    """Blocking :func:`rag_ray` (works inside Jupyter's running loop)."""
    return run_sync(rag_ray(samples, metrics, **kwargs))
