"""The whole answer-level evaluation as one library call: nuggets (given or created), their
assignment to every answer, per-run scores, citation support and, with human labels, the
agreement and PPI estimates.

A service job (or a notebook cell) is this one call: every LLM call goes through the session's
cache, so the same call run again after a kill resumes, paying only for what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._sync import run_sync
from ..errors import InputError
from ..llm.values import DryRun
from ..render import ResultSurface
from .agree import NuggetAgreement, nugget_agreement
from .assign import AssignResult, assign_nuggets, estimate_assign
from .cite import CiteResult, cite_support, estimate_cite, read_support, support_pairs
from .create import CreateResult, create_nuggets, estimate_create, label_importance
from .data import Answer, Nugget, NuggetSet, read_answers, read_nuggets
from .options import NuggetOptions, resolve

__all__ = ["NuggetEvaluation", "estimate_answers", "evaluate_answers", "evaluate_answers_sync"]


@dataclass
class NuggetEvaluation(ResultSurface):
    """Everything one evaluation made: ``nuggets`` (created or given), ``assigned``, ``scores``
    (per-run means with intervals and paired tests), ``citations`` and ``citation_scores``
    (when checked), ``agreement`` (with human assignments), and ``usage`` per step."""

    nuggets: list[NuggetSet]
    assigned: AssignResult
    scores: Any
    created: CreateResult | None = None
    citations: CiteResult | None = None
    citation_scores: Any = None
    agreement: NuggetAgreement | None = None
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def mostly_failed(self) -> bool:
        return any(x is not None and x.mostly_failed for x in (self.created, self.assigned, self.citations))

    def to_dict(self) -> dict[str, Any]:
        return {"nuggets": [s.to_dict() for s in self.nuggets],
                "assignments": [a.to_dict() for a in self.assigned.assignments],
                "scores": self.scores.to_dict(),
                "citation_scores": None if self.citation_scores is None else self.citation_scores.to_dict(),
                "agreement": None if self.agreement is None else self.agreement.to_dict(),
                "usage": self.usage}

    def __str__(self) -> str:
        parts = [str(self.scores)]
        if self.citation_scores is not None:
            parts.append(str(self.citation_scores))
        if self.agreement is not None:
            parts.append(str(self.agreement))
        parts.append("; ".join(f"{k}: {v.get('calls', 0)} calls, {v.get('total_tokens', 0)} tokens"
                               for k, v in self.usage.items()))
        return "\n\n".join(parts)


async def evaluate_answers(
    answers: Sequence[Answer] | str | Path | Sequence[str | Path],
    *,
    llm: Any,
    nuggets: Sequence[NuggetSet] | str | Path | None = None,
    queries: Mapping[str, str] | str | Path | None = None,
    qrels: Any = None,
    corpus: Mapping[str, str] | str | Path | None = None,
    cite: bool = True,
    human: Any = None,
    human_support: Any = None,
    metric: str = "all",
    options: NuggetOptions | None = None,
    progress: bool = False,
    n_resamples: int = 10_000,
    seed: int | None = 0,
    **kwargs: Any,
) -> NuggetEvaluation:
    """Nuggets (``nuggets`` as given -- unlabelled importance is labelled -- else created from
    ``qrels`` + ``corpus``, or from the passages the answers cite), assignment, per-run scores,
    citation support (``cite``) and agreement with ``human`` assignments (Kendall tau of
    ``metric``, PPI per run; ``human_support`` adds support-label agreement)."""
    opts = resolve(options, kwargs)
    ans = _answers(answers)
    usage: dict[str, dict[str, Any]] = {}
    created: CreateResult | None = None
    if nuggets is None:
        qs = queries if queries is not None else {a.qid: a.query for a in ans if a.query}
        if not qs:
            raise InputError("no query texts: pass queries= (the answers carry none)", field="queries")
        created = await create_nuggets(qs, llm=llm, qrels=qrels, corpus=corpus,
                                       answers=None if qrels is not None else ans, options=opts,
                                       progress=progress)
        sets = created.sets
        usage["create"] = created.usage
    else:
        sets = read_nuggets(nuggets) if isinstance(nuggets, (str, Path)) else list(nuggets)
        if any(n.importance is None for s in sets for n in s.nuggets):
            created = await label_importance(sets, llm=llm, options=opts, progress=progress)
            sets = created.sets
            usage["importance"] = created.usage
    labelled = [s for s in sets if all(n.importance is not None for n in s.nuggets)]
    assigned = await assign_nuggets(labelled, ans, llm=llm, options=opts, progress=progress)
    usage["assign"] = assigned.usage
    scores = assigned.score(n_resamples=n_resamples, seed=seed)
    citations = citation_scores = None
    if cite:
        citations = await cite_support(ans, llm=llm, corpus=corpus, progress=progress)
        usage["cite"] = citations.usage
        if citations.answers:
            citation_scores = citations.score(n_resamples=n_resamples, seed=seed)
    agreement = None
    if human is not None:
        sup_h = read_support(human_support) if isinstance(human_support, (str, Path)) else human_support
        agreement = nugget_agreement(assigned.assignments, human, metric=metric,
                                     support_llm=support_pairs(citations.answers) if citations and sup_h else None,
                                     support_human=sup_h if citations else None, seed=seed)
    return NuggetEvaluation(sets, assigned, scores, created, citations, citation_scores, agreement, usage)


def _answers(answers: Any) -> list[Answer]:
    if isinstance(answers, (str, Path)):
        return read_answers(answers)
    items = list(answers)
    if items and all(isinstance(x, (str, Path)) for x in items):
        return [a for x in items for a in read_answers(x)]
    return items


def evaluate_answers_sync(answers: Any, **kwargs: Any) -> NuggetEvaluation:
    """:func:`evaluate_answers` from synchronous code (Jupyter included)."""
    return run_sync(evaluate_answers(answers, **kwargs))


def estimate_answers(answers: Any, *, llm: Any, nuggets: Any = None, queries: Any = None,
                     qrels: Any = None, corpus: Any = None, cite: bool = True,
                     options: NuggetOptions | None = None, **kwargs: Any) -> Any:
    """The dry run of :func:`evaluate_answers`: one :class:`~ragjudge.llm.values.DryRun` for all
    steps. Without ``nuggets``, assignment is priced with ``max_nuggets`` nuggets per query of
    12 words (the created ones are not known before they are made)."""
    opts = resolve(options, kwargs)
    ans = _answers(answers)
    parts = []
    if nuggets is None:
        qs = queries if queries is not None else {a.qid: a.query for a in ans if a.query}
        parts.append(estimate_create(qs, llm=llm, qrels=qrels, corpus=corpus,
                                     answers=None if qrels is not None else ans, options=opts))
        filler = " ".join(["word"] * 12)
        sets = [NuggetSet(q, t, tuple(Nugget(f"{filler} {i}", "okay") for i in range(opts.max_nuggets)))
                for q, t in ({a.qid: a.query for a in ans}).items()]
    else:
        sets = read_nuggets(nuggets) if isinstance(nuggets, (str, Path)) else list(nuggets)
        sets = [NuggetSet(s.qid, s.query, tuple(Nugget(n.text, n.importance or "okay") for n in s.nuggets))
                for s in sets]
    parts.append(estimate_assign(sets, ans, llm=llm, options=opts))
    if cite:
        parts.append(estimate_cite(ans, llm=llm, corpus=corpus))
    return _sum(parts, llm)


def _sum(parts: list[Any], llm: Any) -> Any:
    keys = ("pairs", "cached", "duplicates", "calls", "prompt_tokens", "completion_tokens")
    total = {k: sum(getattr(p, k) for p in parts) for k in keys}
    cost = None if any(p.cost is None for p in parts) else sum(p.cost for p in parts)
    worst = None if any(p.worst_cost is None for p in parts) else sum(p.worst_cost for p in parts)
    return DryRun(**total, cost=cost, model=llm.model, worst_cost=worst,
                  assumptions="; ".join(p.assumptions for p in parts if p.assumptions))
