"""Candidates and the filters that decide which synthetic queries are kept (pure logic).

Every candidate ends in exactly one state: ``kept``, ``dropped`` (by the first filter that
rejected it, with a reason) or ``unused`` (it passed every filter it met, but was not needed:
enough queries were already kept, or a sibling from the same generation call was kept). The filters run cheap-first so the only paid
filter, the answerability judge, sees only candidates that survived the free ones:

1. ``pairing``      -- a two-passage style found no second passage;
2. ``generation``   -- the model call failed or the reply was unusable (failures as data);
3. ``budget``       -- not generated/judged because ``max_cost`` was reached;
4. ``copy``         -- the query copies a long span of its passage (``copy_span`` tokens);
5. ``roundtrip``    -- BM25 over the whole corpus does not rank every source in the top
                       ``roundtrip_k`` (Promptagator's round-trip consistency);
6. ``duplicate``    -- same normalised query, or token-set Jaccard >= ``near_duplicate``,
                       as an earlier surviving candidate (near: not a sibling from the
                       same generation call, since siblings are never both kept);
7. ``answerability``-- the relevance judge grades (query, sources) below ``min_grade``;
8. ``confidence``   -- optional: the judge's probability of a grade >= ``min_grade`` (from
                       logprobs) is below ``min_confidence`` (InPars keeps the candidates the
                       model is most sure of).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .lexical import LexicalIndex
from .text import longest_common_span, normalize, tokens

__all__ = ["Candidate", "FilterLine", "FILTERS", "SeenQueries", "text_filters", "judge_filter", "accounting"]

FILTERS: dict[str, str] = {
    "pairing": "no second passage for a two-passage question",
    "generation": "model call failed or reply unusable",
    "budget": "not sent: --max-cost reached",
    "copy": "query copies a long span of its passage",
    "roundtrip": "BM25 does not rank the source(s) in the top k",
    "duplicate": "same or nearly the same query as an earlier one",
    "answerability": "judge grades (query, source) too low",
    "confidence": "judge not confident enough (logprobs)",
}
_EXAMPLES = 3
#: The filters that cost nothing, run on a draw's candidates before any judge call.
_FREE = frozenset({"copy", "roundtrip", "duplicate"})


@dataclass
class Candidate:
    """One generated (or attempted) synthetic query with everything known about it."""

    id: str
    style: str
    sources: list[str]
    query: str | None = None
    reference: str | None = None
    pairing: str | None = None
    status: str = "pending"  # pending -> kept | dropped | unused
    dropped_by: str | None = None
    reason: str | None = None
    qid: str | None = None
    draw: str | None = None  # the generation call it came from (siblings share one call)
    scores: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    judgment: dict[str, Any] | None = None
    checked: bool = field(default=False, repr=False)  # the free filters have seen it

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @property
    def kept(self) -> bool:
        return self.status == "kept"

    def drop(self, by: str, reason: str) -> None:
        self.status, self.dropped_by, self.reason = "dropped", by, reason

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "qid": self.qid, "draw": self.draw or self.id, "status": self.status,
            "style": self.style,
            "query": self.query, "reference": self.reference, "source_ids": list(self.sources),
            "pairing": self.pairing, "dropped_by": self.dropped_by, "reason": self.reason,
            "scores": dict(self.scores), "generation": dict(self.generation),
            "judgment": None if self.judgment is None else dict(self.judgment),
        }


@dataclass(frozen=True)
class FilterLine:
    """One line of the accounting: how many candidates reached a filter and how many it dropped."""

    name: str
    description: str
    seen: int
    dropped: int
    examples: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"filter": self.name, "description": self.description, "seen": self.seen,
                "dropped": self.dropped, "examples": list(self.examples)}


def text_filters(
    candidates: Iterable[Candidate],
    passage_tokens: Callable[[str], Sequence[str]],
    index: LexicalIndex | None,
    *,
    copy_span: int = 7,
    roundtrip_k: int | None = 20,
    near_duplicate: float = 0.8,
    seen: SeenQueries | None = None,
) -> None:
    """The free filters (copy, round-trip, duplicate), in place, on candidates in order.

    Idempotent: candidates checked by an earlier call are not checked again, but the survivors
    among them count as earlier queries for the duplicate check (draws are filtered one after
    the other, in draw order). ``seen``: the earlier survivors kept across calls, so a caller
    filtering draw after draw passes each draw's candidates alone (the checked ones passed again
    are then already in it) instead of every candidate so far, which made a run quadratic.

    ``index=None`` or ``roundtrip_k=None`` skips the round trip. Duplicates are checked last,
    against earlier candidates that passed the free filters, so a query is not dropped as the
    duplicate of one that the copy or round-trip filter dropped. An earlier query's judge
    verdict does not matter (it may not have come yet: draws overlap), so what is a duplicate
    never depends on timing.
    """
    fresh = seen is None
    seen = SeenQueries() if seen is None else seen
    for c in candidates:
        if c.query is None:
            continue
        if c.checked:  # checked before: a free-filter survivor is an earlier query to dedup against
            if fresh and c.dropped_by not in _FREE:
                seen.add(c)
            continue
        if c.status == "dropped":
            continue
        c.checked = True
        qt = tokens(c.query)
        span = max((longest_common_span(qt, passage_tokens(s)) for s in c.sources), default=0)
        c.scores["copy_span"] = span
        if copy_span and span >= copy_span:
            c.drop("copy", f"copies {span} consecutive words of its passage (limit {copy_span - 1})")
            continue
        if index is not None and roundtrip_k is not None:
            ranks = index.rank_of(c.query, c.sources)
            c.scores["roundtrip_ranks"] = dict(zip(c.sources, ranks))
            bad = [(s, r) for s, r in zip(c.sources, ranks) if r is None or r > roundtrip_k]
            if bad:
                s, r = bad[0]
                where = "not retrieved (no shared term)" if r is None else f"at BM25 rank {r}"
                c.drop("roundtrip", f"source {s} {where}, needs top {roundtrip_k}")
                continue
        reason = seen.duplicate(c, near_duplicate)
        if reason is not None:
            c.drop("duplicate", reason)
        else:
            seen.add(c)


class SeenQueries:
    """The queries that passed the free filters so far, for the duplicate check: exact (after
    :func:`normalize`), then near (word-set Jaccard via an inverted index). Siblings (one
    generation call) are never kept together, so among them only an exact repeat is a
    duplicate (it would get the same verdict); a close rewording may still pass where its
    sibling fails."""

    def __init__(self) -> None:
        self._exact: dict[str, str] = {}
        self._sets: dict[str, frozenset[str]] = {}
        self._postings: dict[str, list[str]] = {}
        self._draw_of: dict[str, str] = {}

    def duplicate(self, c: Candidate, threshold: float) -> str | None:
        """Why ``c`` duplicates an earlier query, or ``None``."""
        norm = normalize(c.query or "")
        if norm in self._exact:
            return f"same query as {self._exact[norm]}"
        mine = frozenset(norm.split())
        if len(mine) <= 3:  # short keyword queries differ by one word on purpose
            return None
        draw = c.draw or c.id
        counts: dict[str, int] = {}
        for t in mine:
            for other in self._postings.get(t, ()):
                counts[other] = counts.get(other, 0) + 1
        for other, inter in counts.items():
            if self._draw_of[other] != draw and \
                    inter / (len(mine) + len(self._sets[other]) - inter) >= threshold:
                return f"nearly the same query as {other}"
        return None

    def add(self, c: Candidate) -> None:
        """``c`` passed: later queries are checked against it."""
        norm = normalize(c.query or "")
        mine = frozenset(norm.split())
        self._exact[norm] = c.id
        self._draw_of[c.id] = c.draw or c.id
        self._sets[c.id] = mine
        for t in mine:
            self._postings.setdefault(t, []).append(c.id)


def judge_filter(c: Candidate, grade: int | None, probs: Mapping[int, float] | None, error: str | None,
                 *, min_grade: int = 2, min_confidence: float | None = None,
                 budget: bool = False) -> None:
    """Apply the judge's verdict on ``(c.query, c.sources)``: answerability, then confidence."""
    if grade is None:
        c.drop("budget" if budget else "answerability", f"judge failed: {error}")
        return
    c.scores["grade"] = grade
    if grade < min_grade:
        c.drop("answerability", f"judge grade {grade} < {min_grade}")
        return
    if probs:
        conf = sum(p for g, p in probs.items() if g >= min_grade)
        c.scores["confidence"] = round(conf, 6)
        if min_confidence is not None and conf < min_confidence:
            c.drop("confidence", f"P(grade >= {min_grade}) = {conf:.2f} < {min_confidence}")
            return
    else:
        c.scores["confidence"] = None
    c.status = "kept"


def accounting(candidates: Sequence[Candidate]) -> list[FilterLine]:
    """Per filter, in pipeline order: candidates that reached it, dropped, example reasons."""
    remaining = len(candidates)
    out = []
    for name, desc in FILTERS.items():
        dropped = [c for c in candidates if c.dropped_by == name]
        out.append(FilterLine(name, desc, remaining, len(dropped),
                              tuple(f"{c.id}: {c.reason}" for c in dropped[:_EXAMPLES])))
        remaining -= len(dropped)
    return out
