"""What the endpoints do, without any web framework: a request -> the library's values ->
the library's own JSON, and every decision between answering at once and starting a job.
The routes (:mod:`ragjudge.server.routes`) only translate HTTP to these calls.

Each endpoint is one function returning a :class:`Reply` (the answer, now) or a
:class:`JobPlan` (what to store as a job: the request as the client sent it, the ``spec`` the
job owns -- its model and budget, whichever replica runs it -- and its size);
:func:`submit` stores a plan (idempotently) and returns the job's public state.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..data import Qrels, Run
from ..errors import InputError, RagjudgeError
from ..evaluate import compare, evaluate
from ..io import format_qrels, parse_qrels, parse_run
from ..judges import Pair, pool_pairs
from ..judges.options import JudgeOptions
from ..llm import LLM, list_prompts
from ..nuggets import estimate_answers
from ..nuggets.data import parse_answers, parse_assignments, parse_nuggets
from ..nuggets.options import NuggetOptions
from ..rag import evaluate_samples_sync, parse_rag_metrics, samples_from_records
from ..rag.evaluate import check_embedding_model
from ..rag.options import RagOptions
from ..synth import estimate_synth
from ..synth.options import SynthOptions
from .models import (
    CompareRequest,
    EvaluateRequest,
    JudgeRequest,
    ModelSettings,
    NuggetsRequest,
    RagRequest,
    SynthRequest,
)
from .settings import ServerSettings
from .store import FINAL, JobStore

__all__ = ["load_qrels", "load_run", "count_pairs", "evaluate_json", "compare_json",
           "TooLarge", "check_pairs", "Reply", "JobPlan", "rag", "judge", "synth", "submit",
           "job", "jobs", "cancel", "job_view", "job_spec", "build_llm", "judge_options", "judge_pairs", "rag_inputs",
           "synth_inputs", "synth_plan", "synth_result", "nuggets", "nuggets_inputs",
           "NuggetInputs"]


class TooLarge(RagjudgeError):
    """A request over one of the server's size limits (HTTP 413; a failed job's reason)."""


@contextmanager
def _named(field: str) -> Iterator[None]:
    """Errors of a shape that does not know its request field get it as their source."""
    try:
        yield
    except InputError as exc:
        if exc.source is not None:
            raise
        raise InputError(exc.message, source=field, line=exc.line, field=exc.field) from None


def _is_lists(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(isinstance(v, list) for v in value.values())


def load_qrels(value: Any, field: str = "qrels", dedup: str = "error") -> Qrels:
    """Qrels from TREC/BEIR/JSON text, ``{qid: {docid: grade}}`` or ``{qid: [docid, ...]}``."""
    with _named(field):
        if isinstance(value, str):
            return parse_qrels(value, source=field, format="auto", dedup=dedup)  # type: ignore[arg-type]
        if _is_lists(value):
            return Qrels.from_lists(list(value.values()), [str(q) for q in value])
        return Qrels.from_dict(value, source=field)


def load_run(value: Any, field: str, name: str, dedup: str = "error") -> Run:
    """A run from TREC/JSON text, ``{qid: {docid: score}}`` or ``{qid: [docid, ...]}``."""
    with _named(field):
        if isinstance(value, str):
            return parse_run(value, source=field, format="auto", name=name, dedup=dedup)  # type: ignore[arg-type]
        if _is_lists(value):
            return Run.from_lists(list(value.values()), [str(q) for q in value], name=name)
        return Run.from_dict(value, name=name, source=field)


def count_pairs(value: Any) -> int:
    """(query, document) entries of an inline qrels or run, before parsing it."""
    if value is None:
        return 0
    if isinstance(value, str):
        return value.count("\n") + 1
    return sum(len(v) for v in value.values())


def check_pairs(n: int, limit: int, what: str = "query-document pairs") -> None:
    if n > limit:
        raise TooLarge(f"request has {n:,} {what}; this server accepts at most {limit:,} "
                       "per request (ragjudge serve --max-pairs)")


def _inputs(req: EvaluateRequest, limit: int) -> tuple[Qrels, dict[str, Run]]:
    check_pairs(count_pairs(req.qrels) + sum(count_pairs(r) for r in req.runs.values()), limit)
    qrels = load_qrels(req.qrels, "qrels", req.dedup)
    runs = {name: load_run(v, f"runs.{name}", name, req.dedup) for name, v in req.runs.items()}
    return qrels, runs


def evaluate_json(req: EvaluateRequest, limit: int) -> str:
    """``ragjudge evaluate --no-stats --format json``: one run -> its report object; several
    runs -> a list of them (built by :meth:`Report.to_json`, never re-implemented)."""
    qrels, runs = _inputs(req, limit)
    parts = [
        evaluate(qrels, run, req.metrics, rel=req.rel, skip_missing=req.skip_missing,
                 name=name).to_json(per_query=req.per_query, indent=None)
        for name, run in runs.items()
    ]
    return parts[0] if len(parts) == 1 else "[" + ",".join(parts) + "]"


def compare_json(req: CompareRequest, limit: int) -> str:
    """``ragjudge compare --format json`` (:meth:`CompareReport.to_json`)."""
    qrels, runs = _inputs(req, limit)
    if req.baseline is not None and req.baseline not in runs:
        raise InputError(f"baseline {req.baseline!r} is not one of the runs: {', '.join(runs)}",
                         field="baseline")
    result = compare(qrels, runs, req.metrics, baseline=req.baseline, test=req.test,
                     n_resamples=req.resamples, seed=req.seed, alpha=req.alpha, rel=req.rel,
                     skip_missing=req.skip_missing, all_pairs=req.all_pairs)
    return result.to_json(per_query=req.per_query, indent=None)


# ----------------------------------------------------------------------------- jobs' inputs
def job_spec(settings: ServerSettings, ms: ModelSettings) -> dict[str, Any]:
    """What a job owns from the moment it is accepted, whichever replica runs it: the model
    (the request's, else this server's ``--model``) and the budget (the request's
    ``max_cost`` capped by this server's ``--max-cost``; None: no cap)."""
    model = ms.model or settings.model
    if not model:
        raise InputError("no model given: set settings.model, or start the server with --model",
                         field="settings.model")
    budget = ms.max_cost
    if settings.max_cost is not None:
        budget = settings.max_cost if budget is None else min(budget, settings.max_cost)
    return {"model": model, "max_cost": budget}


def build_llm(settings: ServerSettings, ms: ModelSettings, *, spec: Mapping[str, Any] | None = None,
              spent: float = 0.0, check_key: bool = True) -> Any:
    """A job's :class:`ragjudge.llm.LLM`: endpoint, key, limits and prices from this server;
    model choices from the request; model and budget from the job's ``spec`` (default: as
    :func:`job_spec` makes it now), the budget less ``spent`` (what earlier runs paid)."""

    spec = job_spec(settings, ms) if spec is None else spec
    model = spec["model"]
    budget = spec.get("max_cost")
    if budget is not None:
        budget = max(0.0, budget - spent)
    cache = settings.cache_path()
    endpoints = settings.llm_endpoints(model, ms.concurrency)
    return LLM(
        endpoints if len(endpoints) > 1 else endpoints[0],
        cache=False if cache is None else cache,
        prices=settings.prices,
        max_cost=budget,
        seed=ms.seed,
        max_tokens=ms.max_tokens,
        logprobs=ms.logprobs,
        check_key=check_key,  # an estimate sends nothing and needs no key
    )


def _check_prompt(name: str) -> None:
    shipped = list_prompts()
    if name not in shipped:  # never a path: a request must not read the server's files
        raise InputError(f"unknown prompt {name!r}; this server offers {', '.join(shipped)}",
                         field="prompt")


def _options_of(options: Any, req: Any) -> Any:
    """The options value (``options``: its class) of a request: the request fields named like
    its parameters (a field the service does not offer keeps the library's default)."""
    fields = type(req).model_fields
    return options.from_mapping({name: getattr(req, name) for name in options.names() if name in fields})


def judge_options(req: JudgeRequest) -> JudgeOptions:
    """The :class:`ragjudge.judges.JudgeOptions` of a judge request (shipped prompts only)."""

    _check_prompt(req.prompt)
    return _options_of(JudgeOptions, req)


def judge_pairs(req: JudgeRequest, limit: int) -> list[Any]:
    """The pairs a judge job grades, in a deterministic order (so a resumed job lines up)."""

    options = judge_options(req)
    if req.pairs is not None:
        if req.runs is not None or req.fill is not None:
            raise InputError("give either pairs or runs (with queries and corpus), not both",
                             field="pairs")
        check_pairs(len(req.pairs), limit)
        return [Pair(p.qid, p.docid, p.query, p.passage) for p in req.pairs]
    if not req.runs:
        raise InputError("nothing to judge: give runs (with queries and corpus) or pairs",
                         field="runs")
    for name in ("queries", "corpus"):
        if getattr(req, name) is None:
            raise InputError("required with runs", field=name)
    runs = [load_run(v, f"runs.{name}", name) for name, v in req.runs.items()]
    check_pairs(sum(r.num_queries for r in runs) * options.depth, limit,
                "queries x depth to pool")
    human = load_qrels(req.fill, "fill") if req.fill is not None else None
    if options.all_queries and human is None:
        raise InputError("only makes sense with fill", field="all_queries")
    return pool_pairs(req.queries or {}, req.corpus or {}, runs, options.depth, skip=human,
                      all_queries=options.all_queries if human is not None else True)


def rag_inputs(req: RagRequest, limit: int) -> tuple[Any, list[Any], RagOptions]:
    """Samples, parsed metrics and :class:`ragjudge.rag.RagOptions` of a RAG request (errors
    name ``samples`` / ``metrics`` / the option's field)."""

    options = _options_of(RagOptions, req)
    metrics = parse_rag_metrics(req.metrics)
    check_embedding_model(metrics, options.embedding_model)
    samples = samples_from_records(req.samples, source="samples", skip_invalid=options.skip_invalid)
    size = sum(max(1, len(s.context_texts or s.context_ids or [])) for s in samples)
    check_pairs(size, limit, "sample-context pairs")
    return samples, metrics, options


def synth_inputs(req: SynthRequest, limit: int) -> SynthOptions:
    """The :class:`ragjudge.synth.SynthOptions` of a request (its fields carry the options'
    names, so a bad value is reported under the request field), after the checks that cost
    nothing: the size limit (documents x draws: every candidate query is ranked against the
    whole corpus) and docids that TREC qrels can hold."""

    options = _options_of(SynthOptions, req)
    check_pairs(len(req.corpus) * math.ceil(req.n * options.oversample), limit,
                "corpus documents x draws (n x oversample)")
    for docid in req.corpus:
        if not docid or docid.split() != [docid] or "\x00" in docid:
            shown = docid if len(docid) <= 60 else docid[:57] + "..."
            raise InputError(f"doc id {shown!r} cannot be written to TREC qrels (it is empty "
                             "or contains whitespace)", field="corpus")
    return options


def synth_plan(req: SynthRequest, options: SynthOptions, llm: Any) -> Any:
    """The request's :class:`ragjudge.synth.SynthPlan` (dry run; checks every input, sends
    nothing). CPU work: sampling and the BM25 index over the corpus."""

    return estimate_synth(req.corpus, req.n, llm=llm, options=options)


def synth_result(result: Any) -> dict[str, Any]:
    """A :class:`ragjudge.synth.SynthResult` as a job result: ``to_dict()`` plus the outputs
    (``queries``, ``qrels`` as TREC text, ``samples``, every candidate)."""

    return {**result.to_dict(), "queries": result.queries,
            "qrels": format_qrels(result.qrels) if len(result.qrels) else "",
            "samples": result.samples, "candidates": [c.to_dict() for c in result.candidates]}




@dataclass(frozen=True)
class NuggetInputs:
    """A nuggets request as the library's values (see :func:`nuggets_inputs`)."""

    answers: list[Any]
    nuggets: list[Any] | None
    queries: dict[str, str] | None
    qrels: Any
    corpus: dict[str, str] | None
    human: list[Any] | None
    options: Any

    def keywords(self) -> dict[str, Any]:
        """The keywords of :func:`ragjudge.nuggets.evaluate_answers` / ``estimate_answers``."""
        return {"nuggets": self.nuggets, "queries": self.queries, "qrels": self.qrels,
                "corpus": self.corpus, "options": self.options}


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def nuggets_inputs(req: NuggetsRequest, limit: int) -> NuggetInputs:
    """Answers, nugget sets, human assignments and :class:`ragjudge.nuggets.NuggetOptions` of
    a nuggets request; errors name the request field and the record (``answers:3: topic_id``),
    and the size limit counts answers x nuggets (every nugget is graded against every answer)."""

    options = _options_of(NuggetOptions, req)
    answers = parse_answers(_jsonl(req.answers), source="answers", run_id=req.run_id)
    sets = parse_nuggets(_jsonl(req.nuggets), source="nuggets") if req.nuggets is not None else None
    if sets is None and req.qrels is not None and req.corpus is None:
        raise InputError("qrels need the passages' texts: give corpus", field="corpus")
    per_query = ({s.qid: len(s.nuggets) for s in sets} if sets is not None else {})
    size = sum(per_query.get(a.qid, options.max_nuggets if sets is None else 0) for a in answers)
    check_pairs(max(size, len(answers)), limit, "answer-nugget pairs")
    human = parse_assignments(_jsonl(req.human), source="human") if req.human is not None else None
    qrels = load_qrels(req.qrels, "qrels") if req.qrels is not None else None
    return NuggetInputs(answers, sets, req.queries, qrels, req.corpus, human, options)


def nuggets(req: NuggetsRequest, settings: ServerSettings) -> Answer:
    """``POST /v1/nuggets``: the estimate (``dry_run``), or a nuggets job (its size: the
    estimate's calls)."""

    inputs = nuggets_inputs(req, settings.max_pairs)
    spec = job_spec(settings, req.settings)
    llm = build_llm(settings, req.settings, spec=spec, check_key=not req.dry_run)
    est = estimate_answers(inputs.answers, llm=llm, cite=req.cite, **inputs.keywords())
    if req.dry_run:
        return Reply(json.dumps({**dataclasses.asdict(est), "description": est.describe()}))
    return JobPlan("nuggets", req.model_dump(mode="json"), spec, est.calls + est.cached)


# ----------------------------------------------------------------------------- the decisions
@dataclass(frozen=True)
class Reply:
    """An answer now: JSON text and its HTTP status."""

    text: str
    status: int = 200


@dataclass(frozen=True)
class JobPlan:
    """A job to store: ``request`` as the client sent it (what an ``Idempotency-Key`` is
    compared with), ``spec`` what the job owns (:func:`job_spec`), ``total`` its size."""

    kind: str
    request: dict[str, Any]
    spec: dict[str, Any]
    total: int


Answer = Reply | JobPlan


def rag(req: RagRequest, settings: ServerSettings) -> Answer:
    """``POST /v1/rag``: deterministic metrics are answered at once (the report of
    ``ragjudge rag --format json``); LLM metrics are a job whose result is that report."""
    samples, metrics, options = rag_inputs(req, settings.max_pairs)
    if not any(m.needs_llm for m in metrics):

        report = evaluate_samples_sync(samples, metrics, options=options)
        return Reply(report.render("json", per_sample=req.per_sample))
    spec = job_spec(settings, req.settings)
    build_llm(settings, req.settings, spec=spec)  # model, key and budget checked before accepting
    return JobPlan("rag", req.model_dump(mode="json"), spec, 0)


def judge(req: JudgeRequest, settings: ServerSettings) -> Answer:
    """``POST /v1/judge``: the estimate (``dry_run``), or a judge job over the pooled pairs."""
    pairs = judge_pairs(req, settings.max_pairs)
    spec = job_spec(settings, req.settings)
    llm = build_llm(settings, req.settings, spec=spec, check_key=not req.dry_run)
    if req.dry_run:
        est = llm.estimate(req.prompt, [{"query": p.query, "passage": p.passage} for p in pairs])
        return Reply(json.dumps({**dataclasses.asdict(est), "description": est.describe()}))
    return JobPlan("judge", req.model_dump(mode="json"), spec, len(pairs))


def synth(req: SynthRequest, settings: ServerSettings) -> Answer:
    """``POST /v1/synth``: the plan (``dry_run``), or a synth job (its size: the plan's bound)."""
    options = synth_inputs(req, settings.max_pairs)
    spec = job_spec(settings, req.settings)
    llm = build_llm(settings, req.settings, spec=spec, check_key=not req.dry_run)
    plan = synth_plan(req, options, llm)  # checks every input; sends nothing
    if req.dry_run:
        return Reply(json.dumps({**dataclasses.asdict(plan), "calls": plan.calls,
                                 "cost": plan.cost, "description": plan.describe()}))
    total = sum(d.pairs for d in plan.generation.values()) + plan.judge.pairs
    return JobPlan("synth", req.model_dump(mode="json"), spec, total)


def submit(store: JobStore, plan: JobPlan, idempotency_key: str | None) -> dict[str, Any]:
    """Store ``plan`` as a job (or find the one stored under ``idempotency_key``): its state."""
    job_id = store.create(plan.kind, plan.request, plan.total, spec=plan.spec,
                          idempotency_key=idempotency_key)
    row = store.get(job_id)
    if row is None:  # pragma: no cover - stored a moment ago
        raise RagjudgeError(f"job {job_id} vanished from the job store")
    return job_view(row)


def job(store: JobStore, job_id: str, *, with_result: bool = True) -> dict[str, Any] | None:
    """A job's public state, or None when there is no such job."""
    row = store.get(job_id)
    return None if row is None else job_view(row, with_result=with_result)


def jobs(store: JobStore, limit: int = 100) -> list[dict[str, Any]]:
    """The most recent jobs, newest first, without their results."""
    return [job_view(r, with_result=False) for r in store.list(limit)]


def cancel(store: JobStore, job_id: str) -> tuple[int, dict[str, Any]]:
    """Cancel a job: ``(200, its state)``, ``(404, error)`` or ``(409, error)`` (already over)."""
    row = store.get(job_id)
    if row is None:
        return 404, {"detail": f"job_id: no job {job_id}"}
    if row["status"] in FINAL:
        return 409, {"detail": f"job_id: job {job_id} is already {row['status']}"}
    row = store.request_cancel(job_id)
    return 200, job_view(row)  # type: ignore[arg-type]


def job_view(row: Mapping[str, Any], *, with_result: bool = True) -> dict[str, Any]:
    """The public state of a job (``GET /v1/jobs/{id}``)."""
    total, done = int(row["total"]), int(row["done"])
    return {
        "id": row["id"],
        "kind": row["kind"],
        "status": row["status"],
        "created": row["created"],
        "updated": row["updated"],
        "progress": {"done": done, "total": total,
                     "fraction": (done / total) if total else (1.0 if row["status"] == "done" else 0.0)},
        "counts": json.loads(row["counts"]),
        "cost_usd": row["cost"],
        "usage": json.loads(row["usage"]),
        "cancel_requested": bool(row["cancel"]),
        "error": row["error"],
        "result": json.loads(row["result"]) if with_result and row["result"] else None,
    }


