"""``context_recall@k``: how much of the reference answer the top-k contexts support.

One call (``context_recall.v1``) splits the reference into statements and attributes each to
the contexts or not; context_recall@k = attributed statements / statements (RAGAS's LLM
context recall). In a run that also grades the chunks listwise, that one call is the review
call (``context_review.v2``): it sees every chunk and names the passages supporting each
statement, and a statement counts for @k when one of its passages is in the top k.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..report import Score
from ..samples import Sample
from .base import (
    LLMMetric, RagMetric, Request, Setup, chat, format_passages, fraction_true, missing_text,
    present, prompt, register, review_request
)

__all__ = ["ContextRecall"]


@register
class ContextRecall(LLMMetric):
    names = ("context_recall",)
    needs = ("contexts", "reference")
    takes_k = True

    def shares(self, m: RagMetric) -> frozenset[str]:
        return frozenset({"statements"})

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        if not present(s.reference):
            return missing_text("reference", s.reference)
        texts = s.context_texts
        if not texts:
            return "no retrieved texts"
        review = review_request(s, setup)
        if review is not None:
            return [review]
        return [chat("statements", "context_recall", prompt("context_recall.v1"),
                     {"question": s.question or "", "reference": s.reference or "",
                      "contexts": format_passages(texts[:k])},
                     lambda obj: [(st["statement"], bool(st["attributed"])) for st in obj["statements"]])]

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        if "review" in got:
            statements = [(st, any(j <= k for j in sources)) for st, sources in got["review"]["statements"]]
        else:
            statements = got["statements"]
        if not statements:
            return Score(None, "no statements in the reference")
        return Score(fraction_true([a for _, a in statements]), detail={"k": k, "statements": statements})

    def definition(self, m: RagMetric) -> str:
        return "reference statements attributed to the top-k contexts / reference statements"
