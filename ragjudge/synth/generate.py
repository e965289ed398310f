"""Synthetic test collections from a corpus: :func:`synthesize` (async) and :func:`synthesize_sync`.

The pipeline, per run: sample passages (seeded, stratified, no short/boilerplate/duplicate
text) -> plan *draws* (at most ``ceil(n * oversample)``; a draw is a style and its passage,
two-passage styles paired with a BM25 neighbour sharing an entity) -> one LLM call per draw
writing up to three candidate queries, each *with* its reference answer (the prompt's
``maxItems``; ``v1`` prompts write one) -> free filters (copy, round trip, duplicates) on
every candidate -> the relevance judge, best candidate of each draw first (the model's own
order), a sibling only when the one before it failed, and at most one query kept per draw ->
qrels (sources at grade 3; optionally a judged pool) and RAG samples.

Why siblings: one call shares the passage's prompt tokens between three candidates, and a
draw whose first candidate fails the judge usually still yields a query without a new
generation call, so calls per kept query are about ``1/P(draw yields a query) + 1/p`` (``p``
the judge's pass rate) instead of ``1/(f*p) + 1/p`` for one candidate per call. Every LLM
call goes through one :class:`ragjudge.llm.LLM` session: its cache makes a rerun (after a
crash, or with more queries) free for everything already answered.

The BM25 index (two-passage pairing, round trip) is built in a worker thread once the first
generation calls are out: importing bm25s (numba, scipy) and indexing the corpus is work those
calls need not wait for; a two-passage draw is paired, and a reply filtered, once it is built.
What each draw asks and keeps is the same as with the index built first.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._sync import run_sync
from ..data import Qrels, Run
from ..errors import InputError, LLMError
from ..io import read_corpus, read_queries
from ..judges import LLMRelevanceJudge
from ..judges.relevance import Pair
from ..llm import BUDGET_REASON, LLM, DryRun, Outcome, Progress, Prompt, load_prompt
from ..llm.values import gather_or_stop
from .filters import Candidate, SeenQueries, judge_filter, text_filters
from .lexical import LexicalIndex
from .options import DEFAULT_STYLES, SynthOptions
from .result import SynthResult
from .sampling import PassagePool, SamplingReport

__all__ = [
    "synthesize", "synthesize_sync", "estimate_synth", "parse_styles", "read_examples",
    "SynthPlan", "DEFAULT_STYLES", "STYLE_PROMPTS",
]

#: The shipped prompt of each style.
STYLE_PROMPTS: dict[str, str] = {
    "question": "synth_question.v2", "keyword": "synth_keyword.v2", "multi": "synth_multi.v2",
}
_ONE = ("passage",)
_TWO = ("passage_a", "passage_b")
_EXAMPLES_PER_CALL = 4
_NO_EXAMPLES = "(none given)"


# ----------------------------------------------------------------------------- inputs
def parse_styles(spec: str | Mapping[str, float] | None, known: Iterable[str] = ()) -> dict[str, float]:
    """``"question=0.6,keyword=0.3,multi=0.1"`` (or a mapping) -> weights; the names must be
    shipped styles or in ``known`` (styles with a user prompt), the weights >= 0 and sum to 1."""
    if spec is None:
        return dict(DEFAULT_STYLES)
    if isinstance(spec, str):
        items: dict[str, Any] = {}
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise InputError(f"{part!r} is not STYLE=WEIGHT", field="styles")
            if name.strip() in items:
                raise InputError(f"style {name.strip()!r} given twice", field="styles")
            items[name.strip()] = value.strip()
    else:
        items = dict(spec)
    if not items:
        raise InputError("no style given", field="styles")
    allowed = set(STYLE_PROMPTS) | set(known)
    out: dict[str, float] = {}
    for name, value in items.items():
        if name not in allowed:
            raise InputError(f"unknown style {name!r} (known: {', '.join(sorted(allowed))}); "
                             "a new style needs its prompt", field="styles")
        try:
            w = float(value)
        except (TypeError, ValueError):
            raise InputError(f"weight of {name!r} is not a number: {value!r}", field="styles") from None
        if not math.isfinite(w) or w < 0:
            raise InputError(f"weight of {name!r} must be >= 0, got {value}", field="styles")
        out[name] = w
    total = sum(out.values())
    if abs(total - 1.0) > 1e-6:
        raise InputError(f"style weights sum to {total:g}, not 1", field="styles")
    return {k: v for k, v in out.items() if v > 0}


def read_examples(path: str | Path) -> list[str]:
    """Few-shot example queries: BEIR ``queries.jsonl`` / TSV (``.jsonl``, ``.tsv``) or plain
    text, one query per line."""
    p = Path(path)
    if p.suffix in (".jsonl", ".tsv", ".gz"):
        qs = list(read_queries(p).values())
    else:
        try:
            qs = [ln.strip() for ln in p.read_text(encoding="utf-8").splitlines()]
        except OSError as exc:
            raise InputError(f"cannot read examples: {exc.strerror}", source=str(p)) from None
        except UnicodeDecodeError:
            raise InputError("examples file is not UTF-8 text", source=str(p)) from None
    qs = [q for q in qs if q]
    if not qs:
        raise InputError("no example queries in the file", source=str(p))
    return qs


@dataclass(frozen=True)
class _Style:
    name: str
    prompt: Prompt
    two: bool  # a two-passage style (passage_a, passage_b)
    per_call: int | None  # candidates one reply may hold: 1 for {query, answer}, else maxItems

    @property
    def many(self) -> bool:
        """The reply is ``{"queries": [{query, answer}, ...]}`` rather than ``{query, answer}``."""
        return self.per_call != 1


def _reply_shape(schema: Any) -> int | None | bool:
    """``1`` for ``{query, answer}`` replies, ``maxItems`` (``None``: unbounded) for
    ``{queries: [{query, answer}, ...]}``, ``False`` for anything else."""
    def pair(s: Any) -> bool:
        props = (s or {}).get("properties") or {} if isinstance(s, dict) else {}
        return all((props.get(k) or {}).get("type") == "string" for k in ("query", "answer"))

    if pair(schema):
        return 1
    arr = ((schema or {}).get("properties") or {}).get("queries") if isinstance(schema, dict) else None
    if isinstance(arr, dict) and arr.get("type") == "array" and pair(arr.get("items")):
        hi = arr.get("maxItems")
        return int(hi) if isinstance(hi, int) and hi >= 1 else None
    return False


def _styles(weights: Mapping[str, float], prompts: Mapping[str, Any], language: str = "en") -> dict[str, _Style]:
    out = {}
    for name in weights:
        # the user's own prompt as given; a shipped one in the corpus's language where shipped
        prompt = (load_prompt(prompts[name]) if name in prompts
                  else load_prompt(STYLE_PROMPTS.get(name, ""), language=language))
        got = set(prompt.variables)
        two = "passage_a" in got or "passage_b" in got
        need = set(_TWO if two else _ONE)
        missing = sorted(need - got)
        extra = sorted(got - need - {"examples"})
        where = f"prompt {prompt.name} (style {name})"
        if missing:
            raise InputError(f"{where} lacks the variable(s) {', '.join(missing)} (a one-passage style "
                             "uses {{passage}}, a two-passage style {{passage_a}} and {{passage_b}}; "
                             "{{examples}} is optional)", source=prompt.source, field="variables")
        if extra:
            raise InputError(f"{where} uses variable(s) synth cannot fill: {', '.join(extra)}",
                             source=prompt.source, field="variables")
        shape = _reply_shape(prompt.output_schema)
        if shape is False:
            raise InputError(f"{where}: the output schema needs string fields 'query' and 'answer', "
                             "or an array 'queries' of objects with them", source=prompt.source,
                             field="output_schema")
        out[name] = _Style(name, prompt, two, shape)
    return out


def _allocate(total: int, weights: Mapping[str, float]) -> list[str]:
    """``total`` style slots split by weight (largest remainder), interleaved evenly."""
    raw = {k: total * w for k, w in weights.items()}
    counts = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (-(raw[k] - counts[k]), list(weights).index(k)))[: total - sum(counts.values())]:
        counts[k] += 1
    keyed = [((j + 0.5) / c, i, k) for i, (k, c) in enumerate(counts.items()) for j in range(c)]
    return [k for _, _, k in sorted(keyed)]


def _pair(obj: Any) -> dict[str, str] | str:
    """A clean ``{query, answer}``, or why not."""
    query = " ".join(str(obj.get("query", "")).split()) if isinstance(obj, dict) else ""
    answer = " ".join(str(obj.get("answer", "")).split()) if isinstance(obj, dict) else ""
    if not query:
        return "the query is empty"
    if not answer:
        return "the answer is empty"
    return {"query": query, "answer": answer}


def _reply(obj: Any) -> list[dict[str, str] | str]:
    """The candidates of one reply, in the model's order: each a clean ``{query, answer}`` or
    the reason it is unusable (kept, so the accounting shows it). A reply with no usable
    candidate fails as a whole, which earns it the session's repair turn."""
    if isinstance(obj, dict) and isinstance(obj.get("queries"), list):
        items = [_pair(x) for x in obj["queries"]]
        if not any(isinstance(x, dict) for x in items):
            raise ValueError("no usable candidate in the reply"
                             + (f" ({items[0]})" if items else " (empty list)"))
        return items
    one = _pair(obj)
    if isinstance(one, str):
        raise ValueError(one)
    return [one]


# ----------------------------------------------------------------------------- the job
@dataclass
class SynthPlan:
    """A dry run: what :func:`synthesize` would send (no network)."""

    draws: int  # generation calls, at most
    candidates: int  # candidate queries those calls may write, at most
    generation: dict[str, DryRun]
    judge: DryRun  # upper bound: every candidate judged
    sampling: SamplingReport
    model: str

    @property
    def calls(self) -> int:
        return sum(d.calls for d in self.generation.values()) + self.judge.calls

    @property
    def cost(self) -> float | None:
        costs = [d.cost for d in self.generation.values()] + [self.judge.cost]
        known = [c for c in costs if c is not None]
        return sum(known) if len(known) == len(costs) else None

    def describe(self) -> str:
        cached = sum(d.cached for d in self.generation.values())
        ptoks = sum(d.prompt_tokens for d in self.generation.values()) + self.judge.prompt_tokens
        ctoks = sum(d.completion_tokens for d in self.generation.values()) + self.judge.completion_tokens
        cost = "unknown (no price for this model; pass --prices)" if self.cost is None else f"at most ${self.cost:.4f}"
        return (f"dry run: at most {self.draws} generation calls ({cached} cached) writing up to "
                f"{self.candidates} candidate queries from {self.sampling.eligible} eligible passages, "
                f"+ at most {self.judge.calls} judge calls to {self.model} (every candidate judged; "
                f"a run stops once N queries are kept); ~{ptoks} prompt + ~{ctoks} completion "
                f"tokens; estimated cost {cost}")


@dataclass
class _Draw:
    """One generation call: a style, its passage(s), the prompt variables, and the
    candidates its reply held (a single placeholder until then, which also carries a
    pairing, generation or budget drop)."""

    id: str
    style: str
    sources: list[str]
    variables: dict[str, Any]
    cands: list[Candidate]
    #: A two-passage draw not paired yet: the pool's near-duplicate count when its anchor was
    #: drawn (the partner is looked up as of then, once the index is built).
    as_of: int | None = None

    @property
    def generated(self) -> bool:
        """Its call was made (or skipped by the budget): the first candidate has provenance."""
        return bool(self.cands[0].generation)


class _Index:
    """The corpus's :class:`LexicalIndex`, built once, where first needed (:meth:`get`), or at
    once (:meth:`now`: a dry run).

    In a run it is built in a worker thread, and only once the first generation calls are out:
    importing bm25s (numba, scipy) is Python work that would share the interpreter lock with the
    event loop's own first-call work (the provider's SDK import, the first request), so a build
    started with the run delays the first request instead of overlapping it. A draw that needs
    the index while a generation call is out (:meth:`calling`) waits for the first answer, then
    starts the build; with no call out (every draw waiting to be paired) it starts at once."""

    def __init__(self, corpus: Mapping[str, str]) -> None:
        self._corpus = corpus
        self._built: LexicalIndex | None = None
        self._task: asyncio.Future[LexicalIndex] | None = None
        self._out = 0  # generation calls out
        self._answered: asyncio.Event | None = None

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around a generation call: the build waits for the first answer."""
        self._out += 1
        try:
            yield
        finally:
            self._out -= 1
            self._event().set()

    def _event(self) -> asyncio.Event:
        if self._answered is None:
            self._answered = asyncio.Event()
        return self._answered

    async def get(self) -> LexicalIndex:
        if self._built is None:
            if self._task is None and self._out:
                await self._event().wait()  # a call is out: it sets the event when answered
            if self._task is None:
                self._task = asyncio.ensure_future(asyncio.to_thread(LexicalIndex, self._corpus))
            # shielded: a draw cancelled while it waits must not cancel the build the others wait for
            self._built = await asyncio.shield(self._task)
        return self._built

    def now(self) -> LexicalIndex:
        if self._built is None:
            self._built = LexicalIndex(self._corpus)
        return self._built

    def discard(self) -> None:
        """The run is over: a build still running is let go (its thread ends by itself), and
        the error of one that failed unread is not reported again."""
        if self._task is None:
            return
        if not self._task.done():
            self._task.cancel()
        elif not self._task.cancelled():
            self._task.exception()


@dataclass
class _Job:
    corpus: Mapping[str, str]
    n: int
    llm: LLM
    styles: dict[str, _Style]
    weights: dict[str, float]
    examples: list[str]
    params: dict[str, Any]
    pool: PassagePool
    index: _Index
    seed: int
    max_chars: int  # passages are cut to this many characters in prompts
    draws: list[_Draw] = field(default_factory=list)

    @property
    def candidates(self) -> list[Candidate]:
        """Every candidate, in draw order then the model's order within a draw."""
        return [c for d in self.draws for c in d.cands]


def _corpus(corpus: Mapping[str, str] | str | Path) -> Mapping[str, str]:
    if isinstance(corpus, (str, Path)):
        corpus = read_corpus(corpus)
    if not isinstance(corpus, Mapping):
        raise InputError("corpus must be a file path or a mapping {docid: text}", field="corpus")
    if not corpus:
        raise InputError("the corpus is empty", field="corpus")
    return corpus


def _prepare(corpus: Mapping[str, str] | str | Path, n: int, llm: LLM, opts: SynthOptions) -> _Job:
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise InputError(f"the number of queries must be a positive integer, got {n!r}", field="n")
    styles, examples, seed = opts.styles, opts.examples, opts.seed
    oversample, min_words, max_passage_chars = opts.oversample, opts.min_words, opts.max_passage_chars
    prompts = dict(opts.prompts or {})
    weights = parse_styles(styles, known=prompts)
    unused = sorted(set(prompts) - set(weights))
    if unused:
        raise InputError(f"a prompt is given for style(s) not in the mix: {', '.join(unused)}",
                         field="prompts")
    style_map = _styles(weights, prompts, opts.language)
    if isinstance(examples, (str, Path)):
        ex = read_examples(examples)
    else:
        ex = [str(e).strip() for e in (examples or []) if str(e).strip()]
    corpus = _corpus(corpus)
    pool = PassagePool(corpus, seed=seed, min_words=min_words)
    rep = pool.report
    if rep.eligible == 0:
        raise InputError(f"no passage of the {rep.corpus} in the corpus can anchor a query ({rep.too_short} "
                         f"shorter than {min_words} words, {rep.boilerplate} boilerplate, "
                         f"{rep.duplicates} duplicates)", field="min_words")
    # A draw is a style and an anchor passage, each pair used once: more queries than that
    # cannot be made, and planning for them would only take time and memory.
    most = rep.eligible * len(style_map)
    if n > most:
        raise InputError(f"asks for {n} queries, but the corpus can anchor at most {most} "
                         f"({rep.eligible} eligible passages x {len(style_map)} style(s))", field="n")
    params = {
        "n": n, "styles": weights, "oversample": oversample, "seed": seed, "min_words": min_words,
        "copy_span": opts.copy_span, "roundtrip_k": opts.roundtrip_k,
        "roundtrip_retriever": "bm25s BM25 (k1=1.5, b=0.75)",
        "min_grade": opts.min_grade, "min_confidence": opts.min_confidence,
        "max_passage_chars": max_passage_chars,
        "examples": len(ex),
        "language": opts.language,
        "prompts": {k: {"prompt_id": s.prompt.id, "prompt_version": s.prompt.version,
                        "prompt_sha": s.prompt.sha256} for k, s in style_map.items()},
    }
    job = _Job(corpus, n, llm, style_map, weights, ex, params, pool, _Index(corpus), seed,
               max_passage_chars)
    _plan(job, math.ceil(n * oversample))
    return job


def _plan(job: _Job, total: int) -> None:
    """Draws in their final order: a style per slot, an anchor passage per draw (fresh
    passages first; on a small corpus, a passage again only with another style); a
    two-passage draw gets its partner from the index (:func:`_pair_draw`)."""
    fresh = job.pool.draw()
    used: dict[str, set[str]] = {}  # passage -> styles it anchors
    width = max(4, len(str(total)))
    for i, style in enumerate(_allocate(total, job.weights)):
        anchor = next(fresh, None)
        if anchor is None:  # corpus exhausted: reuse a passage with a style it has not had
            anchor = next((d for d in used if style not in used[d]), None)
            if anchor is None:
                continue
        used.setdefault(anchor, set()).add(style)
        did = f"c{i + 1:0{width}d}"
        c = Candidate(id=did, style=style, sources=[anchor], draw=did)
        draw = _Draw(did, style, c.sources, {}, [c])
        job.draws.append(draw)
        if job.styles[style].two:
            draw.as_of = job.pool.rejections
        else:
            draw.variables = _variables(job, draw)


def _pair_draw(job: _Job, d: _Draw, index: LexicalIndex) -> None:
    """A two-passage draw's partner (the anchor's BM25 neighbour, as of its drawing) and its
    prompt variables, or its drop when there is none."""
    c = d.cands[0]
    found = job.pool.partner(c.sources[0], index, as_of=d.as_of)
    d.as_of = None
    if found is None:
        c.drop("pairing", f"no eligible BM25 neighbour of {c.sources[0]} to pair with")
        return
    c.sources.append(found[0])
    c.pairing = found[1]
    d.variables = _variables(job, d)


async def _pair_rest(job: _Job) -> None:
    """Pair the two-passage draws never started too: the account of every draw names its
    passages, as when the pairing was done while planning."""
    for d in job.draws:
        if d.as_of is not None:
            _pair_draw(job, d, await job.index.get())


def _variables(job: _Job, d: _Draw) -> dict[str, Any]:
    st = job.styles[d.style]
    texts = [job.corpus[s][:job.max_chars] for s in d.sources]
    variables: dict[str, Any] = dict(zip(_TWO, texts)) if st.two else {"passage": texts[0]}
    if "examples" in st.prompt.variables:
        k = min(_EXAMPLES_PER_CALL, len(job.examples))
        picked = random.Random(f"{job.seed}:{d.id}").sample(job.examples, k) if k else []
        variables["examples"] = "\n".join(f"- {q}" for q in picked) or _NO_EXAMPLES
    return variables


def _provenance(out: Outcome) -> dict[str, Any]:
    return {
        "model": out.model, "served_model": out.served_model, "prompt_id": out.prompt_id,
        "prompt_version": out.prompt_version, "prompt_sha": out.prompt_sha, "params": dict(out.params),
        "usage": out.usage.to_dict(), "cached": out.cached, "latency": round(out.latency, 4),
        "system_fingerprint": out.system_fingerprint, "error": out.error,
    }


def _take_reply(job: _Job, d: _Draw, out: Outcome) -> None:
    """A draw's generation reply becomes its candidates (or a drop with the reason)."""
    st = job.styles[d.style]
    first = d.cands[0]
    first.generation = prov = _provenance(out)
    if not out.ok:
        if out.skipped:
            first.drop("budget", "not generated: max cost reached")
        else:
            first.drop("generation", str(out.error))
        return
    values = out.value
    prov["candidates_in_call"] = len(values)
    if not st.many:  # one candidate per call keeps the draw's id (v1 prompts)
        only = values[0]
        assert isinstance(only, dict)  # _reply raises for an unusable single candidate
        first.query, first.reference = only["query"], only["answer"]
        return
    d.cands = []
    for j, v in enumerate(values, 1):
        c = Candidate(id=f"{d.id}-{j}", style=d.style, sources=list(d.sources),
                      pairing=first.pairing, draw=d.id, generation=dict(prov))
        if isinstance(v, str):
            c.drop("generation", f"candidate {j} of the reply is unusable: {v}")
        else:
            c.query, c.reference = v["query"], v["answer"]
        d.cands.append(c)


def _record_judgment(c: Candidate, j: Any, min_grade: int, min_confidence: float | None) -> None:
    c.judgment = {"grade": j.grade, "expected": j.expected, "reasoning": j.reasoning,
                  "probs": None if j.probs is None else {str(k): v for k, v in j.probs.items()},
                  "error": j.error, "model": j.model, "served_model": j.served_model,
                  "prompt_id": j.prompt_id, "prompt_version": j.prompt_version,
                  "prompt_sha": j.prompt_sha, "usage": j.usage.to_dict(), "cached": j.cached}
    judge_filter(c, j.grade, j.probs, j.error, min_grade=min_grade, min_confidence=min_confidence,
                 budget=j.error == BUDGET_REASON)


def _next_to_judge(draw: _Draw) -> Candidate | None:
    """The draw's first candidate (the model's order) that survived the free filters and
    awaits the judge, unless a sibling was already kept (one query per draw)."""
    if any(c.kept for c in draw.cands):
        return None
    return next((c for c in draw.cands if c.pending and c.query is not None and c.checked
                 and c.judgment is None), None)


#: The observed rate of kept queries per draw is shrunk towards this optimistic prior, worth
#: ``_PRIOR_DRAWS`` draws, and read one standard error high: a started draw cannot be taken
#: back, so a few early failures must not start draws that the rate seen later shows were not
#: needed (a draw too few costs only a round trip: the best case then starts it). In a model
#: of draws yielding with probability 0.8 (n=40), 51.7 draws started against 50.1 needed.
_PRIOR_RATE = 0.9
_PRIOR_DRAWS = 20
_MIN_RATE = 0.15


async def _pipeline(job: _Job, judge: LLMRelevanceJudge, *, copy_span: int, roundtrip_k: int | None,
                    min_grade: int, min_confidence: float | None, progress: bool) -> None:
    """Generate, filter and judge draw by draw, all draws overlapping, so the run keeps the
    rate it is given instead of waiting for the slowest reply of each round.

    Each started draw runs on its own: its generation call; the free filters, in draw order
    (a query is deduplicated against the free-filter survivors of every earlier draw); then
    the judge, best candidate first and a sibling only when the one before failed -- each
    judge call only while the earlier draws cannot already hold ``n`` kept queries (those
    not finished counted as one each), so no judge call is made for a query that cannot be
    needed. Draws start when the *resolved prefix* (the finished draws from the first on)
    grows: those its rate of kept queries per draw says are needed (``need / rate``, the rate
    shrunk towards an optimistic prior), and at least every draw needed if each started one
    yields a query.
    The planned draws are a cap (``oversample``), not a quota.

    What is started and what is judged depends only on the replies, never on timing: a rerun
    from the cache makes the same calls, so it pays for nothing.
    """
    draws = job.draws
    total = len(draws)
    filtered = [asyncio.Event() for _ in draws]
    finished = [False] * total
    tasks: list[asyncio.Task[None]] = []
    changed = asyncio.Condition()
    seen = SeenQueries()  # the free-filter survivors of the draws filtered so far
    # Progress in kept queries (the calls they take are not known in advance).
    bar = Progress(job.n, f"synth ({job.llm.model})", unit="query", enabled=progress)
    calls = 0
    state = {"resolved": 0, "kept": 0, "target": 0}

    def yielded(d: _Draw) -> bool:
        return any(c.kept for c in d.cands)

    def best_case(i: int) -> int:
        """Queries the draws before ``i`` hold at most (an unfinished one counted as one)."""
        return state["kept"] + sum(1 if not finished[e] else int(yielded(draws[e]))
                                   for e in range(state["resolved"], i))

    def settled(i: int) -> bool:
        return best_case(i) < job.n or all(finished[state["resolved"]:i])

    async def run_draw(i: int) -> None:
        nonlocal calls
        d = draws[i]
        first = d.cands[0]
        if d.as_of is not None and first.pending:
            _pair_draw(job, d, await job.index.get())
        if not d.generated and first.pending:
            st = job.styles[d.style]
            with job.index.calling():
                out = await job.llm.structured(st.prompt, d.variables, validate=_reply)
            calls += 1
            _take_reply(job, d, out)
        if i:
            await filtered[i - 1].wait()
        index = None if roundtrip_k is None else await job.index.get()
        # Earlier draws' survivors are in ``seen`` already: only this draw's candidates are new.
        text_filters(d.cands, job.pool.tokens_of, index, copy_span=copy_span,
                     roundtrip_k=roundtrip_k, seen=seen)
        filtered[i].set()
        while (c := _next_to_judge(d)) is not None:
            async with changed:
                await changed.wait_for(lambda: settled(i))
            if best_case(i) >= job.n:
                break  # the earlier draws hold n queries: this one is not needed
            pair = Pair(c.id, "+".join(c.sources), c.query or "",
                        "\n\n".join(job.corpus[s] for s in c.sources))
            j = await judge.judge(pair.query, pair.passage, qid=pair.qid, docid=pair.docid)
            calls += 1
            _record_judgment(c, j, min_grade, min_confidence)
        finished[i] = True
        advance()
        async with changed:
            changed.notify_all()

    def start_needed() -> None:
        need = job.n - state["kept"]
        if need <= 0:
            return
        done = state["resolved"]
        # One standard error above the shrunk estimate: a started draw cannot be taken back, and
        # the target is the highest it has been, so early bad luck must not set it.
        seen = done + _PRIOR_DRAWS
        mean = (state["kept"] + _PRIOR_RATE * _PRIOR_DRAWS) / seen
        rate = max(min(0.99, mean + math.sqrt(mean * (1.0 - mean) / seen)), _MIN_RATE)
        # at least the best case (every started draw yields a query), else what the rate says
        target = done + max(need, math.ceil(need / rate))
        state["target"] = max(state["target"], min(total, target))
        while len(tasks) < state["target"]:
            tasks.append(asyncio.ensure_future(run_draw(len(tasks))))

    def advance() -> None:
        # One prefix length at a time, as a run without concurrency would see them.
        while state["resolved"] < len(tasks) and finished[state["resolved"]]:
            if yielded(draws[state["resolved"]]):
                state["kept"] += 1
                if state["kept"] <= job.n:
                    bar.update(1, status=f"{calls} calls")
            state["resolved"] += 1
            start_needed()

    start_needed()
    try:
        # Tasks start more tasks: wait until none is left running. The first failure (a
        # configuration error such as a revoked key) stops them all; answers so far are cached.
        while pending := [t for t in tasks if not t.done()]:
            await gather_or_stop(pending, [])
        for t in tasks:
            t.result()
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        bar.close()
    await _pair_rest(job)
    kept = 0
    for d in job.draws:  # the first n kept, in draw order, stay; a batch's surplus is unused
        sibling = None
        for c in d.cands:
            if c.kept:
                kept += 1
                if kept > job.n:
                    c.status, c.reason = "unused", f"passed, but {job.n} queries were already kept"
                else:
                    sibling = c.id
        for c in d.cands:
            if not c.pending:
                continue
            c.status = "unused"
            if sibling is not None:
                c.reason = f"not judged: {sibling}, from the same call, was kept (one query per draw)"
            else:
                c.reason = (f"not judged: {job.n} queries already kept" if c.generation
                            else f"not generated: {job.n} queries already kept")


def _llm(llm: LLM | None, model: str | None, options: Mapping[str, Any]) -> LLM:
    if llm is not None:
        if options or (model and model != llm.model):
            raise InputError("pass either llm= or model/options, not both", field="llm")
        return llm
    if not model:
        raise InputError("no model given (pass --model)", field="model")
    return LLM(model, **options)


# Keyword defaults come from the options value, where each is stated once.
_D = SynthOptions.default


async def synthesize(
    corpus: Mapping[str, str] | str | Path,
    n: int,
    *,
    llm: LLM | None = None,
    model: str | None = None,
    options: SynthOptions | None = None,
    styles: str | Mapping[str, float] | None = _D("styles"),
    prompts: Mapping[str, str | Path | Prompt] | None = _D("prompts"),
    examples: Sequence[str] | str | Path | None = _D("examples"),
    oversample: float = _D("oversample"),
    seed: int = _D("seed"),
    min_words: int = _D("min_words"),
    copy_span: int = _D("copy_span"),
    roundtrip_k: int | None = _D("roundtrip_k"),
    min_grade: int = _D("min_grade"),
    min_confidence: float | None = _D("min_confidence"),
    judge_prompt: str | Path | Prompt = _D("judge_prompt"),
    judge_pool: Run | Sequence[Run] | None = None,
    depth: int = _D("depth"),
    max_passage_chars: int = _D("max_passage_chars"),
    language: str = _D("language"),
    progress: bool = True,
    **llm_options: Any,
) -> SynthResult:
    """Make ``n`` synthetic queries (with reference answers, qrels and RAG samples) from a corpus.

    ``corpus``: ``{docid: text}`` or a BEIR JSONL / TSV path. ``llm`` (or ``model`` plus
    :class:`ragjudge.llm.LLM` options) generates and judges. ``styles``: weights per style
    (``"question=0.6,keyword=0.3,multi=0.1"``); ``prompts``: ``{style: prompt name/path}``
    overrides or adds styles; ``examples``: few-shot queries (list or file). ``oversample``:
    draws (generation calls, each writing up to the prompt's ``maxItems`` candidates; at most
    one query is kept per draw) tried at most per requested query. ``copy_span``: drop
    queries sharing this many consecutive words with their passage (0: off); ``roundtrip_k``: the source must rank in
    BM25's top k (``None``: off); ``min_grade``: answerability threshold of the relevance
    judge; ``min_confidence``: optional logprob confidence threshold. ``judge_pool``: runs of
    the kept queries whose top ``depth`` documents are judged into the qrels.

    Never raises for per-candidate failures and never returns silently empty: the result's
    ``ok`` says whether ``n`` queries survived and ``str(result)`` shows the accounting.
    """
    opts = SynthOptions.merge(
        options, styles=styles, prompts=prompts, examples=examples, oversample=oversample, seed=seed,
        min_words=min_words, copy_span=copy_span, roundtrip_k=roundtrip_k, min_grade=min_grade,
        min_confidence=min_confidence, judge_prompt=judge_prompt, depth=depth,
        max_passage_chars=max_passage_chars, language=language)
    llm = _llm(llm, model, llm_options)
    job = _prepare(corpus, n, llm, opts)
    judge = _judge_for(llm, opts.judge_prompt, opts.min_grade, progress, opts.language)
    job.params["judge_prompt"] = {"prompt_id": judge.prompt.id, "prompt_version": judge.prompt.version,
                                  "prompt_sha": judge.prompt.sha256}
    width = max(3, len(str(n)))
    depth = opts.depth
    runs = _pool_runs(judge_pool, depth, [f"synth-{i:0{width}d}" for i in range(1, n + 1)])
    before = llm.usage
    stop: LLMError | None = None
    try:
        await _pipeline(job, judge, copy_span=opts.copy_span, roundtrip_k=opts.roundtrip_k,
                        min_grade=opts.min_grade, min_confidence=opts.min_confidence, progress=progress)
    except LLMError as exc:  # a spend limit, a revoked key: keep what was finished (paid for)
        stop = exc
        await _pair_rest(job)
        for c in job.candidates:
            if c.pending:
                c.drop("stopped", f"not finished: the run stopped ({exc})")
    finally:
        job.index.discard()
    kept = [c for c in job.candidates if c.kept]
    for i, c in enumerate(kept, 1):
        c.qid = f"synth-{i:0{width}d}"
    qrels = Qrels.from_dict({c.qid: {s: 3 for s in c.sources} for c in kept if c.qid},
                            source=f"synth:{llm.model}")
    pool_summary = None
    if runs and kept and stop is None:
        queries = {c.qid: c.query for c in kept if c.qid and c.query}
        pooled = await judge.fill_holes(qrels, queries, job.corpus, runs, depth)
        qrels = pooled.qrels
        pool_summary = pooled.summary()
        pool_summary["depth"] = depth
    usage = llm.usage - before
    result = SynthResult(requested=n, candidates=job.candidates, qrels=qrels, corpus=job.corpus,
                         sampling=job.pool.report, usage=usage, cost=llm.prices.cost(llm.model, usage),
                         model=llm.model, params=job.params, pool=pool_summary)
    if stop is not None:
        stop.partial = result  # the queries kept before the stop; the rest "stopped"
        raise stop
    return result


def _judge_for(llm: LLM, prompt: str | Path | Prompt, min_grade: int, progress: bool,
               language: str = "en") -> LLMRelevanceJudge:
    judge = LLMRelevanceJudge(llm=llm, prompt=load_prompt(prompt, language=language), progress=progress)
    grades = sorted(int(g) for g in judge.prompt.labels or {})
    if not grades or not grades[0] <= min_grade <= grades[-1]:
        raise InputError(f"must be one of the judge's grades {grades}, got {min_grade}", field="min_grade")
    return judge


def _pool_runs(judge_pool: Run | Sequence[Run] | None, depth: int, qids: list[str]) -> list[Run]:
    """The ``judge_pool`` runs, checked before anything is spent: they must be runs of the
    synthetic queries (ids ``synth-001``...), i.e. made from a previous run's queries.jsonl."""
    if judge_pool is None:
        return []
    runs = [judge_pool] if isinstance(judge_pool, Run) else list(judge_pool)
    possible = set(qids)
    if not runs or not any(set(r.query_ids) & possible for r in runs):
        raise InputError("the judge_pool runs share no query id with the synthetic queries "
                         f"({qids[0]}...; run the retrievers on queries.jsonl first)",
                         source=runs[0].source if runs else None, field="qid")
    return runs


def synthesize_sync(corpus: Mapping[str, str] | str | Path, n: int, **kwargs: Any) -> SynthResult:
    """Blocking :func:`synthesize` (same arguments); works inside a running event loop (Jupyter)."""
    llm = _llm(kwargs.pop("llm", None), kwargs.pop("model", None),
               {k: kwargs.pop(k) for k in list(kwargs) if k in _LLM_OPTIONS})

    async def main() -> SynthResult:
        try:
            return await synthesize(corpus, n, llm=llm, **kwargs)
        finally:
            await llm.aclose()

    return run_sync(main())


def estimate_synth(
    corpus: Mapping[str, str] | str | Path,
    n: int,
    *,
    llm: LLM | None = None,
    model: str | None = None,
    options: SynthOptions | None = None,
    **kwargs: Any,
) -> SynthPlan:
    """Dry run of :func:`synthesize` (same arguments): calls, tokens and cost; nothing is sent.
    Judge calls are an upper bound (every candidate judged, with a typical query length)."""
    session = {k: kwargs.pop(k) for k in list(kwargs) if k in _LLM_OPTIONS}
    for k in ("judge_pool", "progress"):
        kwargs.pop(k, None)
    unknown = set(kwargs) - set(SynthOptions.names())
    if unknown:
        raise TypeError(f"unexpected argument(s): {', '.join(sorted(unknown))}")
    opts = SynthOptions.merge(options, **kwargs)
    llm = _llm(llm, model, session)
    job = _prepare(corpus, n, llm, opts)
    for d in job.draws:
        if d.as_of is not None:
            _pair_draw(job, d, job.index.now())
    judge = _judge_for(llm, opts.judge_prompt, opts.min_grade, False, opts.language)
    live = [d for d in job.draws if d.cands[0].pending]
    gen = {style: llm.estimate(st.prompt, [d.variables for d in live if d.style == style])
           for style, st in job.styles.items()}
    # every candidate judged: a draw writes up to its prompt's maxItems (3 when unbounded)
    per = {d.id: job.styles[d.style].per_call or 3 for d in live}
    typical = "a typical synthetic query of about twelve words for estimating tokens"
    judged = llm.estimate(judge.prompt, [{"query": f"{typical} {d.id}-{j}",
                                          "passage": "\n\n".join(job.corpus[s] for s in d.sources)}
                                         for d in live for j in range(per[d.id])])
    return SynthPlan(len(live), sum(per.values()), gen, judged, job.pool.report, llm.model)


# The keyword arguments of LLM (its endpoint fields and session options), read from LLM itself
# so a new option cannot be forgotten here.
_LLM_OPTIONS = frozenset(inspect.signature(LLM).parameters) - {"model", "seed"}  # seed: the sampling seed of synth itself
