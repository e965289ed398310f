"""The LLM relevance judge: graded (query, passage) labels that become ordinary :class:`Qrels`.

Built entirely on a :class:`~ragjudge.llm.StructuredSession` (by default
:class:`ragjudge.llm.LLM`); this module only pools pairs from runs, turns outcomes into
:class:`Judgment` records and judgments into qrels. Batch API mode: :mod:`.batch`. The label
scale lives in the prompt's front-matter (``prompts/relevance.v1.md``), nowhere here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._sync import run_sync
from ..data import Qrels, Run
from ..errors import InputError, LLMError
from ..llm.cost import Usage
from ..llm.prompts import Prompt, load_prompt
from ..llm.protocols import StructuredSession
from ..llm.provenance import FailureKind, Provenance, Traced
from ..llm.session import LLM
from ..llm.values import DryRun, Outcome
from ..render import ResultSurface, render_table
from .._lazy import optional

__all__ = ["LLMRelevanceJudge", "Judgment", "JudgeResult", "Pair", "as_pair", "pool_pairs", "holes",
           "qrels_from_judgments"]

T = TypeVar("T")


@dataclass(frozen=True)
class Pair:
    """One (query, passage) pair to grade, with the ids it is reported under."""

    qid: str
    docid: str
    query: str
    passage: str


@dataclass(frozen=True, eq=False)
class Judgment(Traced):
    """One graded pair with full provenance: the pair's ids and the structured call's
    :class:`~ragjudge.llm.Outcome`, the one record of that call (grade, probabilities,
    reasoning, usage, latency, cache hit and provenance are read from it, never copied).
    ``grade is None`` exactly when ``error`` is set (``failure`` then says which kind of
    failure). ``reasoning_dropped``: the model kept running out of tokens, so the grade was
    asked for alone."""

    qid: str
    docid: str
    outcome: Outcome

    def __post_init__(self) -> None:  # the outcome has settled its failure kind already
        return None

    # Equal when their records are: a judgment read back from its JSONL line equals the one
    # written (the outcome's transport details, such as the raw text, are not part of it).
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Judgment):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.qid, self.docid, self.grade, self.error))

    @classmethod
    def from_outcome(cls, pair: Pair, out: Outcome, label_field: str = "") -> Judgment:
        """The judgment of ``pair`` from its call's outcome."""
        return cls(pair.qid, pair.docid, out)

    @classmethod
    def record(cls, qid: str, docid: str, grade: int | None, probs: Mapping[int, float] | None,
               reasoning: str | None, provenance: Provenance, usage: Usage, latency: float,
               error: str | None, failure: FailureKind | None = None, expected: float | None = None,
               cached: bool = False, reasoning_dropped: bool = False) -> Judgment:
        """A judgment from its recorded fields (a JSONL line, a stored job): the outcome they
        describe."""
        out = Outcome(value=grade if error is None else None, error=error, failure=failure,
                      probs=None if probs is None else {str(k): float(v) for k, v in probs.items()},
                      expected=expected, usage=usage, latency=latency, cached=cached,
                      provenance=provenance, dropped=("reasoning",) if reasoning_dropped else (),
                      obj=None if reasoning is None else {"reasoning": reasoning})
        return cls(qid, docid, out)

    @property
    def grade(self) -> int | None:
        return self.outcome.value if self.outcome.ok else None

    @property
    def probs(self) -> dict[int, float] | None:
        probs = self.outcome.probs
        return None if probs is None else {int(k): float(v) for k, v in probs.items()}

    @property
    def reasoning(self) -> str | None:
        value = (self.outcome.obj or {}).get("reasoning")
        return value if isinstance(value, str) else None

    @property
    def provenance(self) -> Provenance:  # type: ignore[override]
        return self.outcome.provenance

    @property
    def usage(self) -> Usage:
        return self.outcome.usage

    @property
    def latency(self) -> float:
        return self.outcome.latency

    @property
    def error(self) -> str | None:  # type: ignore[override]
        return self.outcome.error

    @property
    def failure(self) -> FailureKind | None:  # type: ignore[override]
        return self.outcome.failure

    @property
    def expected(self) -> float | None:
        return self.outcome.expected

    @property
    def cached(self) -> bool:
        return self.outcome.cached

    @property
    def reasoning_dropped(self) -> bool:
        return "reasoning" in self.outcome.dropped

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record (one line of ``--judgments OUT.jsonl``)."""
        d: dict[str, Any] = {
            "qid": self.qid,
            "docid": self.docid,
            "grade": self.grade,
            "probs": None if self.probs is None else {str(k): v for k, v in self.probs.items()},
            "expected": self.expected,
            "reasoning": self.reasoning,
            "error": self.error,
            "failure": None if self.failure is None else self.failure.value,
        }
        d.update(self.provenance.to_dict())
        d.update({"usage": self.usage.to_dict(), "latency": self.latency, "cached": self.cached})
        if self.reasoning_dropped:
            d["reasoning_dropped"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Judgment:
        """The judgment of one ``--judgments`` record (:meth:`to_dict`'s inverse)."""
        probs = d.get("probs")
        return cls.record(
            str(d["qid"]), str(d["docid"]), d.get("grade"),
            None if probs is None else {int(k): float(v) for k, v in probs.items()},
            d.get("reasoning"), Provenance.from_dict(d), Usage.from_dict(d.get("usage") or {}),
            float(d.get("latency") or 0.0), d.get("error"),
            failure=FailureKind.parse(d.get("failure")) if d.get("error") is not None else None,
            expected=d.get("expected"), cached=bool(d.get("cached")),
            reasoning_dropped=bool(d.get("reasoning_dropped")),
        )


def qrels_from_judgments(judgments: Iterable[Judgment], source: str) -> Qrels:
    """Qrels of the successful judgments (the first grade of a repeated pair wins)."""
    ok = [j for j in judgments if j.grade is not None]
    return Qrels.from_arrays([j.qid for j in ok], [j.docid for j in ok],
                             np.array([j.grade for j in ok], dtype=np.int64), source=source,
                             dedup="first")


@dataclass
class JudgeResult(ResultSurface):
    """Qrels built from the successful judgments (merged with human labels by
    :meth:`LLMRelevanceJudge.fill_holes`), every judgment, and run totals."""

    qrels: Qrels
    judgments: list[Judgment]
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    human_pairs: frozenset[tuple[str, str]] = frozenset()  # labels kept from human qrels

    @classmethod
    def build(cls, judgments: list[Judgment], usage: Usage, cost: float | None, source: str, *,
              human: Qrels | None = None) -> JudgeResult:
        """The qrels of the successful judgments (named ``source``), merged under ``human``
        labels when given (human labels win)."""
        llm_qrels = qrels_from_judgments(judgments, source=source)
        if human is None:
            return cls(llm_qrels, judgments, usage, cost)
        return cls(human.merge(llm_qrels), judgments, usage, cost,
                   human_pairs=frozenset((q, d) for q, d, _ in human.rows()))

    @property
    def human(self) -> int:
        return len(self.human_pairs)

    @property
    def failed(self) -> list[Judgment]:
        return [j for j in self.judgments if not j.ok and j.failure is not FailureKind.BUDGET]

    @property
    def skipped(self) -> list[Judgment]:
        return [j for j in self.judgments if j.failure is FailureKind.BUDGET]

    @property
    def mostly_failed(self) -> bool:
        """More than half of the judgments attempted (budget skips aside) failed: the qrels
        say little, and the CLI exits non-zero."""
        attempted = len(self.judgments) - len(self.skipped)
        return attempted > 0 and 2 * len(self.failed) > attempted

    def provenance(self, qid: str, docid: str) -> str | None:
        """Where the label of a pair came from: ``"human"``, ``"llm"`` or ``None`` (no label)."""
        if (qid, docid) in self.human_pairs:
            return "human"
        return "llm" if docid in self.qrels.get(qid) else None

    def summary(self) -> dict[str, Any]:
        """Counts for reports: every failure is counted, with its reason."""
        reasons = Counter(str(j.failure) for j in self.failed)
        return {
            "pairs": len(self.judgments),
            "judged": sum(1 for j in self.judgments if j.ok),
            "cached": sum(1 for j in self.judgments if j.ok and j.cached),
            "failed": len(self.failed),
            "skipped_budget": len(self.skipped),
            "failure_reasons": dict(reasons),
            "human_labels": self.human,
            "qrels_pairs": len(self.qrels),
            "calls": self.usage.calls,
            "prompt_tokens": self.usage.prompt_tokens,
            "cached_prompt_tokens": self.usage.cached_tokens,
            "cache_write_prompt_tokens": self.usage.cache_write_tokens + self.usage.cache_write_1h_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "cost_usd": self.cost,
            "reasoning_dropped": sum(1 for j in self.judgments if j.reasoning_dropped),
            "usage_unknown": self.usage.unknown,
        }

    # -- rendering (notebooks, reports) ---------------------------------------------------
    def table(self) -> tuple[list[str], list[list[Any]]]:
        """Headers and rows of the summary: counts, failures by reason, grades, usage, cost."""
        d = self.summary()
        rows: list[list[Any]] = [[k, d[k]] for k in ("pairs", "judged", "cached", "failed",
                                                       "skipped_budget", "human_labels", "qrels_pairs")]
        rows += [[f"failed: {reason}", n] for reason, n in sorted(d["failure_reasons"].items())]
        grades = Counter(j.grade for j in self.judgments if j.ok)
        rows += [[f"grade {g}", n] for g, n in sorted(grades.items(), key=lambda x: str(x[0]))]
        rows += [[k, d[k]] for k in ("calls", "prompt_tokens", "cached_prompt_tokens",
                                     "cache_write_prompt_tokens", "completion_tokens", "cost_usd")]
        return ["", "value"], rows

    def to_dict(self, *, judgments: bool = True) -> dict[str, Any]:
        """``{"summary": summary(), "judgments": [one record per judgment]}`` (JSON-ready)."""
        out: dict[str, Any] = {"summary": self.summary()}
        if judgments:
            out["judgments"] = [j.to_dict() for j in self.judgments]
        return out

    def to_dataframe(self) -> Any:
        """One row per judgment (the ``--judgments`` record: qid, docid, grade, failure, model,
        prompt, usage, latency, cached, ...). Needs the ``pandas`` extra."""
        pd = optional("pandas", extra="pandas", what="to_dataframe()")
        columns = ["qid", "docid", "grade", "failure", "error", "cached", "latency"]
        rows = [j.to_dict() for j in self.judgments]
        df = pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)
        return df.astype({"grade": "Int64"}) if rows else df

    def to_latex(self) -> str:
        """The summary as a booktabs LaTeX table (``\\usepackage{booktabs}``)."""
        return render_table(*self.table(), "latex")

    def __str__(self) -> str:
        return render_table(*self.table(), "table", title=self._title())

    def __repr__(self) -> str:
        d = self.summary()
        return (f"<JudgeResult {d['judged']}/{d['pairs']} judged, {d['failed']} failed, "
                f"{d['cached']} from cache, {d['calls']} calls>\n{self}")

    def _repr_html_(self) -> str:
        return render_table(*self.table(), "html", title=self._title())

    def _title(self) -> str:
        return f"ragjudge judge: {len(self.judgments)} pairs, {len(self.qrels)} labels"

    def write_judgments(self, path: str | Path) -> None:
        """One JSON object per line, in pooling order."""
        try:
            with open(path, "w", encoding="utf-8") as f:
                for j in self.judgments:
                    f.write(json.dumps(j.to_dict(), ensure_ascii=False) + "\n")
        except OSError as exc:
            raise InputError(f"cannot write judgments: {exc.strerror}", source=str(path)) from None


# ----------------------------------------------------------------------------- pooling
def _as_runs(runs: Run | Sequence[Run]) -> list[Run]:
    if isinstance(runs, Run):
        return [runs]
    out = list(runs)
    if not out:
        raise InputError("no run given to pool documents from", field="run")
    return out


def holes(qrels: Qrels, runs: Run | Sequence[Run], depth: int, *,
          all_queries: bool = False) -> list[tuple[str, str]]:
    """Pairs in the top ``depth`` of the runs that ``qrels`` does not judge, in pooling order
    (query id, then run order, then rank). Only queries ``qrels`` has, unless ``all_queries``."""
    known = qrels.to_dict()
    seen: set[tuple[str, str]] = set()
    out: list[tuple[str, str]] = []
    for run in _as_runs(runs):
        for qid in run.query_ids:
            if qid not in known and not all_queries:
                continue
            judged = known.get(qid, {})
            for docid, _ in run.ranked(qid, depth):
                if docid in judged or (qid, docid) in seen:
                    continue
                seen.add((qid, docid))
                out.append((qid, docid))
    out.sort(key=lambda p: p[0].encode("utf-8"))  # stable: rank order kept within a query
    return out


def pool_pairs(
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    runs: Run | Sequence[Run],
    depth: int,
    *,
    skip: Qrels | None = None,
    all_queries: bool = True,
) -> list[Pair]:
    """The deduplicated top-``depth`` pool of one or several runs as :class:`Pair` objects.

    Raises :class:`InputError` for a query with no text or a document missing from the corpus
    (naming the run file), so a typo is not silently judged as an empty passage.
    """
    if depth < 1:
        raise InputError(f"depth must be a positive integer, got {depth}", field="depth")
    runs = _as_runs(runs)
    if skip is None:
        ids: list[tuple[str, str]] = []
        seen: set[tuple[str, str]] = set()
        for run in runs:
            for qid in run.query_ids:
                for docid, _ in run.ranked(qid, depth):
                    if (qid, docid) not in seen:
                        seen.add((qid, docid))
                        ids.append((qid, docid))
        ids.sort(key=lambda p: p[0].encode("utf-8"))
    else:
        ids = holes(skip, runs, depth, all_queries=all_queries)
    where = {}
    for run in runs:
        for qid in run.query_ids:
            for docid, _ in run.ranked(qid, depth):
                where.setdefault((qid, docid), run)
    pairs: list[Pair] = []
    for qid, docid in ids:
        run = where[(qid, docid)]
        query = queries.get(qid)
        if query is None or not str(query).strip():
            raise InputError(f"query {qid!r} has no text in the queries file", source=run.source,
                             field="qid")
        passage = corpus.get(docid)
        if passage is None:
            raise InputError(f"document {docid!r} (query {qid!r}) is not in the corpus",
                             source=run.source, field="docid")
        pairs.append(Pair(qid, docid, str(query), str(passage)))
    return pairs


def as_pair(item: Any, i: int) -> Pair:
    """One pair as :meth:`LLMRelevanceJudge.judge_many` takes it: a :class:`Pair`, a mapping
    with ``query`` and ``passage`` (``qid``, ``docid`` optional), or a 2- or 4-tuple."""
    if isinstance(item, Pair):
        return item
    if isinstance(item, Mapping):
        try:
            return Pair(str(item.get("qid", i)), str(item.get("docid", i)), str(item["query"]),
                        str(item["passage"]))
        except KeyError as exc:
            raise InputError(f"pair {i} lacks {exc.args[0]!r}", field=str(exc.args[0])) from None
    if isinstance(item, (tuple, list)):
        if len(item) == 2:
            return Pair(str(i), str(i), str(item[0]), str(item[1]))
        if len(item) == 4:
            return Pair(str(item[0]), str(item[1]), str(item[2]), str(item[3]))
    raise InputError(f"pair {i} must be (query, passage), (qid, docid, query, passage), "
                     "a mapping or a Pair", field="pairs")


# ----------------------------------------------------------------------------- the judge
class LLMRelevanceJudge:
    """Grades (query, passage) pairs with an LLM on the prompt's label scale (0-3 by default).

    ``LLMRelevanceJudge("gpt-4o-mini")`` or ``LLMRelevanceJudge(llm=LLM(...))``; extra keyword
    arguments go to :class:`ragjudge.llm.LLM` (``base_url``, ``concurrency``, ``cache``...).
    Every method is async, with one blocking twin ``<method>_sync`` that also works inside
    Jupyter's running loop.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        llm: StructuredSession | None = None,
        prompt: str | Path | Prompt = "relevance.v1",
        progress: bool = True,
        **llm_options: Any,
    ) -> None:
        if llm is None:
            if not model:
                raise InputError("no model given (pass --model)", field="model")
            llm = LLM(model, **llm_options)  # the default session; any StructuredSession works
        elif llm_options or (model and model != llm.model):
            raise InputError("pass either llm= or model/options, not both", field="llm")
        self.llm = llm
        self.prompt = load_prompt(prompt)
        if not self.prompt.labels or not self.prompt.label_field:
            raise InputError("a relevance prompt needs 'labels' and 'label_field' in its front-matter",
                             source=self.prompt.source, field="labels")
        if set(self.prompt.variables) != {"query", "passage"}:
            raise InputError("a relevance prompt must use exactly the variables 'query' and 'passage'",
                             source=self.prompt.source, field="variables")
        self._grades = {}
        for label in self.prompt.labels:
            try:
                self._grades[label] = int(label)
            except ValueError:
                raise InputError(f"relevance labels must be integers, got {label!r}",
                                 source=self.prompt.source, field="labels") from None
        self.progress = progress

    def __repr__(self) -> str:
        return f"LLMRelevanceJudge({self.llm!r}, prompt={self.prompt.name!r})"

    def grade_of(self, obj: Any) -> int:
        """The grade in a reply object (the validator of every call this judge makes);
        ``ValueError`` naming the problem when it holds no valid grade."""
        value = obj.get(self.prompt.label_field) if isinstance(obj, dict) else None
        # bool is an int subclass in Python but not a JSON number
        if isinstance(value, bool) or str(value) not in self._grades:
            raise ValueError(f"{self.prompt.label_field} must be one of {sorted(self._grades.values())}, "
                             f"got {value!r}")
        return self._grades[str(value)]

    # -- async API -----------------------------------------------------------------------
    async def judge(self, query: str, passage: str, *, qid: str = "q", docid: str = "d") -> Judgment:
        """Grade one pair."""
        pair = Pair(qid, docid, query, passage)
        out = await self.llm.structured(self.prompt, {"query": query, "passage": passage},
                                        validate=self.grade_of)
        return Judgment.from_outcome(pair, out, self.prompt.label_field or "")

    async def judge_many(self, pairs: Iterable[Any], *, progress: bool | None = None) -> list[Judgment]:
        """Grade many pairs concurrently; results in input order. Items: ``(query, passage)``,
        ``(qid, docid, query, passage)``, ``{"qid", "docid", "query", "passage"}`` or :class:`Pair`."""
        items = [as_pair(p, i) for i, p in enumerate(pairs)]
        try:
            outs = await self.llm.structured_many(
                self.prompt,
                [{"query": p.query, "passage": p.passage} for p in items],
                validate=self.grade_of,
                desc=f"judging ({self.llm.model})",
                progress=self.progress if progress is None else progress,
            )
        except LLMError as exc:
            # The run stopped (a revoked key, a vanished model): keep what was judged.
            if isinstance(exc.partial, list):
                exc.partial = [Judgment.from_outcome(p, o, self.prompt.label_field or "")
                               for p, o in zip(items, exc.partial) if o is not None]
            raise
        return [Judgment.from_outcome(p, o, self.prompt.label_field or "") for p, o in zip(items, outs)]

    async def judge_run(
        self,
        queries: Mapping[str, str],
        corpus: Mapping[str, str],
        runs: Run | Sequence[Run],
        depth: int = 20,
    ) -> JudgeResult:
        """Pool the top ``depth`` documents of the run(s), judge each distinct pair once and
        return the qrels (successful judgments only) with every judgment."""
        pairs = pool_pairs(queries, corpus, runs, depth)
        return await self._result(pairs, human=None)

    async def fill_holes(
        self,
        qrels: Qrels,
        queries: Mapping[str, str],
        corpus: Mapping[str, str],
        runs: Run | Sequence[Run],
        depth: int = 20,
        *,
        all_queries: bool = False,
    ) -> JudgeResult:
        """Judge only the pooled pairs ``qrels`` lacks and merge: human labels always win.

        By default only queries the human qrels cover are filled (``all_queries=True`` also
        judges queries they do not have). ``result.provenance(qid, docid)`` says where each
        label came from; ``result.judgments`` holds only the LLM's.
        """
        pairs = pool_pairs(queries, corpus, runs, depth, skip=qrels, all_queries=all_queries)
        return await self._result(pairs, human=qrels)

    async def _result(self, pairs: list[Pair], human: Qrels | None) -> JudgeResult:
        before_usage = self.llm.usage
        source = f"llm:{self.llm.model}:{self.prompt.name}"
        try:
            judgments = await self.judge_many(pairs)
        except LLMError as exc:
            if isinstance(exc.partial, list):  # the judgments made before the run stopped
                usage = self.llm.usage - before_usage
                exc.partial = JudgeResult.build(exc.partial, usage, self.llm.cost_of(usage), source,
                                                human=human)
            raise
        usage = self.llm.usage - before_usage
        cost = self.llm.cost_of(usage)
        return JudgeResult.build(judgments, usage, cost, source, human=human)

    # -- planning -----------------------------------------------------------------------
    # -- blocking twins (each runs on its own event loop -- a worker thread's when the caller
    # already has one -- and closes that loop's HTTP client) -----------------------------
    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        llm = self.llm

        async def main() -> T:
            try:
                return await coro
            finally:
                await llm.aclose()

        return run_sync(main())

    def judge_sync(self, query: str, passage: str, *, qid: str = "q", docid: str = "d") -> Judgment:
        """Blocking :meth:`judge`."""
        return self._run(self.judge(query, passage, qid=qid, docid=docid))

    def judge_many_sync(self, pairs: Iterable[Any], *, progress: bool | None = None) -> list[Judgment]:
        """Blocking :meth:`judge_many`."""
        return self._run(self.judge_many(pairs, progress=progress))

    def judge_run_sync(self, queries: Mapping[str, str], corpus: Mapping[str, str],
                       runs: Run | Sequence[Run], depth: int = 20) -> JudgeResult:
        """Blocking :meth:`judge_run`."""
        return self._run(self.judge_run(queries, corpus, runs, depth))

    def fill_holes_sync(self, qrels: Qrels, queries: Mapping[str, str], corpus: Mapping[str, str],
                        runs: Run | Sequence[Run], depth: int = 20, *,
                        all_queries: bool = False) -> JudgeResult:
        """Blocking :meth:`fill_holes`."""
        return self._run(self.fill_holes(qrels, queries, corpus, runs, depth, all_queries=all_queries))

    def estimate(
        self,
        queries: Mapping[str, str],
        corpus: Mapping[str, str],
        runs: Run | Sequence[Run],
        depth: int = 20,
        *,
        qrels: Qrels | None = None,
        all_queries: bool = False,
    ) -> DryRun:
        """Dry run of :meth:`judge_run` (or :meth:`fill_holes` with ``qrels``): no network."""
        pairs = pool_pairs(queries, corpus, runs, depth, skip=qrels, all_queries=all_queries)
        return self.llm.estimate(self.prompt, [{"query": p.query, "passage": p.passage} for p in pairs])

