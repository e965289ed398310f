"""Request and response schemas of the HTTP service (pydantic; the OpenAPI document is made
from them). Every request model forbids unknown fields, so a stray ``api_key`` is refused:
provider keys come only from the server's environment."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..judges.options import JudgeOptions as _J
from ..nuggets.options import NuggetOptions as _N
from ..rag.options import GRADING_MODES, MATCH_MODES
from ..rag.options import RagOptions as _R
from ..synth.options import SynthOptions as _S

__all__ = [
    "QrelsInput", "RunInput", "EvaluateRequest", "CompareRequest", "ModelSettings",
    "JudgeRequest", "RagRequest", "SynthRequest", "JobState", "Progress", "MetricInfo",
    "ErrorBody", "Health", "Version", "ReportBody", "CompareBody", "RagReportBody", "DryRunBody",
    "SynthDryRunBody", "NuggetsRequest",
]

_INT32 = 2**31 - 1
# Bounded so every value fits the core's int64 columns (a huge number is a 422, not a crash).
Grade = Annotated[int, Field(ge=-_INT32, le=_INT32)]

#: Qrels inline: TREC (or BEIR TSV / JSON) text, ``{qid: {docid: grade}}``, or ``{qid: [docid, ...]}``
#: (each listed document gets grade 1).
QrelsInput = Union[
    str,
    dict[str, dict[str, Grade]],
    dict[str, list[str]],
]
#: A run inline: TREC (or JSON) text, ``{qid: {docid: score}}``, or ``{qid: [docid, ...]}``
#: ranked best first.
RunInput = Union[
    str,
    dict[str, dict[str, float]],
    dict[str, list[str]],
]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvaluateRequest(_Request):
    qrels: QrelsInput = Field(description="Relevance judgments: TREC text, {qid: {docid: grade}} "
                              "or {qid: [relevant docid, ...]}.")
    runs: dict[str, RunInput] = Field(
        min_length=1, max_length=64,
        description="Runs by name: TREC text, {qid: {docid: score}} or {qid: [docid, ...]} "
                    "(best first).")
    metrics: Optional[list[str]] = Field(
        default=None, max_length=256,
        description="Metric specs, e.g. ndcg@10, map(rel=2), P_10 (a string may be a "
                    "comma-separated list). Default: map, mrr, ndcg@10, p@10, recall@100.")
    rel: Optional[int] = Field(default=None, ge=1, le=_INT32,
                               description="Minimum grade counted as relevant (default 1).")
    skip_missing: bool = Field(default=False, description="Average over the queries in both "
                               "qrels and run (trec_eval 9 / pytrec_eval).")
    per_query: bool = Field(default=True, description="Include per-query values.")
    dedup: Literal["error", "first"] = Field(default="error", description="A repeated "
                                             "(query, document) line: an error, or keep the first.")


class CompareRequest(EvaluateRequest):
    runs: dict[str, RunInput] = Field(min_length=2, max_length=64,
                                      description="Two or more runs by name.")
    baseline: Optional[str] = Field(default=None, description="Run the others are compared "
                                    "with (default: the first).")
    test: Literal["randomization", "t"] = "randomization"
    resamples: int = Field(default=10_000, ge=1, le=100_000,
                           description="Randomization / bootstrap resamples.")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    all_pairs: bool = Field(default=False, description="Test every pair of runs (Holm over all "
                            "pairs per metric) instead of each run against the baseline.")


class ModelSettings(_Request):
    """Model choices a request may make. The endpoint, key, rate limits and prices are the
    server's (``ragjudge serve --base-url ... --api-key-env ...``)."""

    model: Optional[str] = Field(default=None, min_length=1, max_length=200,
                                 description="Model name (default: the server's --model).")
    seed: int = Field(default=0, ge=0, le=_INT32)
    max_tokens: Optional[int] = Field(default=None, ge=1, le=1_000_000)
    logprobs: bool = True
    concurrency: Optional[int] = Field(default=None, ge=1, le=1024,
                                       description="Requests in flight (capped by the server's).")
    max_cost: Optional[float] = Field(default=None, gt=0.0, le=1e9, description=(
        "USD budget of this job (capped by the server's --max-cost); never exceeded, "
        "across restarts too."))


class JudgePair(_Request):
    qid: str = Field(min_length=1, max_length=1000)
    docid: str = Field(min_length=1, max_length=1000)
    query: str = Field(max_length=100_000)
    passage: str = Field(max_length=1_000_000)


class JudgeRequest(_Request):
    queries: Optional[dict[str, str]] = Field(default=None, description="{qid: query text}")
    corpus: Optional[dict[str, str]] = Field(default=None, description="{docid: passage text}")
    runs: Optional[dict[str, RunInput]] = Field(default=None, max_length=64, description=(
        "Runs to pool the top `depth` documents from."))
    depth: int = Field(default=_J.default("depth"), ge=1, le=10_000, description=_J.help("depth"))
    fill: Optional[QrelsInput] = Field(default=None, description=(
        "Human qrels: judge only the pooled pairs they lack; human labels win."))
    all_queries: bool = Field(default=_J.default("all_queries"), description=_J.help("all_queries"))
    pairs: Optional[list[JudgePair]] = Field(default=None, description=(
        "Explicit pairs to grade instead of queries/corpus/runs."))
    prompt: str = Field(default=_J.default("prompt"), max_length=200,
                        description="A prompt shipped with ragjudge (by name).")
    settings: ModelSettings = Field(default_factory=ModelSettings)
    dry_run: bool = Field(default=False, description=(
        "Only estimate: calls, cached answers, tokens and cost; nothing is sent, no job."))


class RagRequest(_Request):
    samples: list[dict[str, Any]] = Field(min_length=1, description=(
        "Samples with RAGAS, DeepEval or id+text field names (as in `ragjudge rag`)."))
    metrics: list[str] = Field(min_length=1, max_length=256)
    # Defaults and descriptions are the library's (RagOptions); the bounds are this service's.
    default_k: int = Field(default=_R.default("default_k"), ge=1, le=100_000,
                           description=_R.help("default_k"))
    match: Optional[Literal[MATCH_MODES]] = Field(
        default=_R.default("match"), description=_R.help("match"))
    grading: Literal[GRADING_MODES] = Field(default=_R.default("grading"),
                                           description=_R.help("grading"))
    skip_invalid: bool = Field(default=_R.default("skip_invalid"), description=_R.help("skip_invalid"))
    separate_calls: bool = Field(default=_R.default("separate_calls"), description=_R.help("separate_calls"))
    language: str = Field(default=_R.default("language"), pattern=r"^[a-z]{2,3}$",
                          description=_R.help("language"))
    per_sample: bool = True
    embedding_model: Optional[str] = Field(default=_R.default("embedding_model"), max_length=200,
                                           description=_R.help("embedding_model"))
    settings: ModelSettings = Field(default_factory=ModelSettings)


class SynthRequest(_Request):
    """A synthetic test collection from a corpus alone (as ``ragjudge synth``): shipped
    prompts only, no judge pool."""

    corpus: dict[str, str] = Field(min_length=1, description=(
        "{docid: passage text}; docids are written to TREC qrels (no whitespace)."))
    n: int = Field(ge=1, le=10_000, description="Number of queries to keep.")
    # Defaults and descriptions are the library's (SynthOptions); the bounds are this service's.
    styles: Optional[str] = Field(default=_S.default("styles"), max_length=1000,
                                  description=_S.help("styles"))
    examples: Optional[list[Annotated[str, Field(max_length=10_000)]]] = Field(
        default=_S.default("examples"), max_length=10_000, description=(
            "Example queries of your users; a few go into each prompt (InPars-style)."))
    oversample: float = Field(default=_S.default("oversample"), ge=1.0, le=100.0,
                              description=_S.help("oversample"))
    seed: int = Field(default=_S.default("seed"), ge=0, le=2**32 - 1, description=_S.help("seed"))
    roundtrip_k: Optional[int] = Field(default=_S.default("roundtrip_k"), ge=1, le=1_000_000,
                                       description=_S.help("roundtrip_k").replace("None:", "null:"))
    min_grade: int = Field(default=_S.default("min_grade"), ge=0, le=100,
                           description=_S.help("min_grade"))
    min_confidence: Optional[float] = Field(default=_S.default("min_confidence"), ge=0.0, le=1.0,
                                            description=_S.help("min_confidence"))
    copy_span: int = Field(default=_S.default("copy_span"), ge=0, le=100_000,
                           description=_S.help("copy_span"))
    min_words: int = Field(default=_S.default("min_words"), ge=0, le=100_000,
                           description=_S.help("min_words"))
    language: str = Field(default=_S.default("language"), pattern=r"^[a-z]{2,3}$",
                          description=_S.help("language"))
    settings: ModelSettings = Field(default_factory=ModelSettings)
    dry_run: bool = Field(default=False, description=(
        "Only estimate: calls, tokens and cost (upper bounds); nothing is sent, no job."))


class NuggetsRequest(_Request):
    """Answers evaluated with nuggets as the TREC RAG track does it (as ``ragjudge nuggets``):
    nuggets given (or created from the passages), assigned to every answer, scored per run
    with intervals; optionally citation support and agreement with human assignments."""

    answers: list[dict[str, Any]] = Field(min_length=1, description=(
        "Answers: TREC RAG 2024/2025 records (run_id, topic_id, topic, references, answer as "
        "[{text, citations}]), or plain {query_id, answer} records (run_id optional)."))
    run_id: str = Field(default="run", min_length=1, max_length=200, description=(
        "Run of the answers that name none."))
    nuggets: Optional[list[dict[str, Any]]] = Field(default=None, description=(
        "Nugget sets, one per query: {qid, query, nuggets: [{text, importance}]} (the TREC RAG "
        "layout; unlabelled importance is labelled). Absent: created from qrels + corpus, or "
        "from the passages the answers cite."))
    queries: Optional[dict[str, str]] = Field(default=None, description=(
        "{qid: query text} for creating nuggets (default: the answers' topics)."))
    qrels: Optional[QrelsInput] = Field(default=None, description=(
        "Relevance judgments choosing the passages nuggets are created from."))
    corpus: Optional[dict[str, str]] = Field(default=None, description=(
        "{docid: passage text}: passages for creation and citation support."))
    cite: bool = Field(default=False, description="Also check citation support (ALCE citation "
                       "precision and recall).")
    human: Optional[list[dict[str, Any]]] = Field(default=None, description=(
        "Human assignments of some answers (the assignment layout): agreement, Kendall tau "
        "and a PPI interval for each run's score."))
    metric: Literal["strict_vital", "vital", "strict_all", "all", "weighted"] = Field(
        default="all", description="Score of the run-level agreement and PPI.")
    # Defaults and descriptions are the library's (NuggetOptions); the bounds are this service's.
    grades: Literal[2, 3] = Field(default=_N.default("grades"), description=_N.help("grades"))
    assign_window: int = Field(default=_N.default("assign_window"), ge=1, le=1000,
                               description=_N.help("assign_window"))
    create_window: int = Field(default=_N.default("create_window"), ge=1, le=1000,
                               description=_N.help("create_window"))
    max_nuggets: int = Field(default=_N.default("max_nuggets"), ge=1, le=1000,
                             description=_N.help("max_nuggets"))
    importance_window: int = Field(default=_N.default("importance_window"), ge=1, le=1000,
                                   description=_N.help("importance_window"))
    min_grade: int = Field(default=_N.default("min_grade"), ge=-_INT32, le=_INT32,
                           description=_N.help("min_grade"))
    max_passages: int = Field(default=_N.default("max_passages"), ge=1, le=10_000,
                              description=_N.help("max_passages"))
    resamples: int = Field(default=10_000, ge=1, le=100_000, description="Bootstrap / "
                           "randomization resamples of the per-run intervals and tests.")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Seed of the resampling.")
    settings: ModelSettings = Field(default_factory=ModelSettings)
    dry_run: bool = Field(default=False, description=(
        "Only estimate: calls, cached answers, tokens and cost; nothing is sent, no job."))


# ----------------------------------------------------------------------------- responses
class ErrorBody(BaseModel):
    detail: str = Field(description="One line: `field:line: name: message` for input errors.")
    errors: Optional[list[dict[str, Any]]] = None


class ReportBody(BaseModel):
    """``Report.to_dict()`` -- what ``ragjudge evaluate --format json`` prints for one run
    (a list of these for several runs)."""

    model_config = ConfigDict(extra="allow")
    run: str
    mean: dict[str, Optional[float]]
    per_query: Optional[dict[str, dict[str, Optional[float]]]] = None
    meta: dict[str, Any]


class CompareBody(BaseModel):
    """``CompareReport.to_dict()`` -- what ``ragjudge compare --format json`` prints."""

    model_config = ConfigDict(extra="allow")
    runs: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    meta: dict[str, Any]


class RagReportBody(BaseModel):
    """``RagReport.to_dict()`` -- what ``ragjudge rag --format json`` prints."""

    model_config = ConfigDict(extra="allow")
    aggregates: list[dict[str, Any]]
    usage: dict[str, Any]
    settings: dict[str, Any]
    invalid_samples: list[str]
    samples: Optional[list[dict[str, Any]]] = None


class DryRunBody(BaseModel):
    """What a judge job would cost (``ragjudge judge --dry-run``); nothing is sent."""

    model_config = ConfigDict(extra="allow")
    pairs: int
    cached: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: Optional[float]
    model: str
    description: str


class SynthDryRunBody(BaseModel):
    """What a synth job would cost at most (``ragjudge synth --dry-run``); nothing is sent."""

    model_config = ConfigDict(extra="allow")
    draws: int
    candidates: int
    generation: dict[str, dict[str, Any]]
    judge: dict[str, Any]
    sampling: dict[str, Any]
    model: str
    calls: int
    cost: Optional[float]
    description: str


class Progress(BaseModel):
    done: int
    total: int
    fraction: float


class JobState(BaseModel):
    id: str
    kind: Literal["judge", "rag", "synth", "nuggets"]
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    created: float
    updated: float
    progress: Progress
    counts: dict[str, Any]
    cost_usd: Optional[float] = Field(description="Spent so far (None: the model's price is unknown).")
    usage: dict[str, Any]
    cancel_requested: bool
    error: Optional[str] = None
    result: Optional[dict[str, Any]] = Field(default=None, description=(
        "When done (or cancelled: what was judged): judge -> {qrels, judgments, summary}; "
        "rag -> the RAG report; synth -> {summary, filters, sampling, params, pool, queries, "
        "qrels, samples, candidates}; nuggets -> {nuggets, assignments, scores (per run: "
        "strict_vital, vital, strict_all, all, weighted with intervals and paired tests), "
        "citation_scores, agreement, usage}."))


class MetricInfo(BaseModel):
    name: str
    family: Literal["ranking", "rag"]
    spec: str
    takes_cutoff: bool
    parameters: list[dict[str, Any]]
    needs_llm: bool
    definition: str


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="degraded: the job store cannot be reached")
    store: str = Field(description="The job store: ok, or unavailable with the reason")
    jobs_running: int


class Version(BaseModel):
    ragjudge: str
    api: str
    python: str
