"""``context_recall@k``: how much of the reference answer the top-k contexts support.

The units are the reference's sentences, split by ragjudge (:func:`.base.split_sentences`)
and sent numbered, so a reply gives one verdict per sentence instead of restating the
reference: context_recall@k = sentences supported by the top-k contexts / sentences (RAGAS's
sentence-level context recall). One call (``context_recall.v2``) says of each sentence
whether the top-k contexts state or imply all of it. In a run that also grades the chunks
listwise, that call is the review call (``context_review.v3``): it sees every chunk and names
the passages supporting each sentence, and a sentence counts for @k when one of its passages
is in the top k.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..report import Score
from ..samples import Sample
from .base import (
    LLMMetric, RagMetric, Request, Setup, chat, format_context, format_numbered, fraction_true,
    missing_text, present, register, review_request, sized, split_sentences
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
        sentences = setup.sentences(s.reference or "")
        # The verdicts never cite a passage: the contexts go unnumbered.
        return [chat("statements", "context_recall", setup.sized("context_recall.v2", "attributed", len(sentences)),
                     {"question": s.question or "", "reference": format_numbered(sentences),
                      "contexts": format_context(texts[:k]), "count": str(len(sentences))},
                     lambda obj: list(zip(sentences, (bool(a) for a in obj["attributed"]), strict=True)))]

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        if "review" in got:
            statements = [(st, any(j <= k for j in sources)) for st, sources in got["review"]["statements"]]
        else:
            statements = got["statements"]
        return Score(fraction_true([a for _, a in statements]), detail={"k": k, "statements": statements})

    def definition(self, m: RagMetric) -> str:
        return "reference sentences supported by the top-k contexts / reference sentences"
