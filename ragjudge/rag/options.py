"""The options of a RAG evaluation (:func:`ragjudge.rag.evaluate_samples`), stated once: the
library's keyword defaults, ``ragjudge rag``'s flags and the service's ``/v1/rag`` request
fields all read their defaults and help from :class:`RagOptions`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError
from ..options import OptionsValue, one_of, option, positive_int

__all__ = ["RagOptions", "DEFAULT_GRADING", "GRADING_MODES", "DEFAULT_K", "MATCH_MODES"]

GRADING_MODES = ("listwise", "pointwise")
#: Listwise by default: one grading call per sample instead of one per chunk.
DEFAULT_GRADING = "listwise"
#: The cutoff when neither the sample nor the metric gives one.
DEFAULT_K = 5
#: How ranking metrics match retrieved chunks to the gold ones.
MATCH_MODES = ("auto", "id", "text", "normalized", "chunk")


@dataclass(frozen=True)
class RagOptions(OptionsValue):
    """How RAG samples are evaluated (everything but the samples, the metrics and the judge).
    Built once, validated once; errors name the parameter."""

    grading: str = option(
        DEFAULT_GRADING, "chunk grading: listwise (all chunks of a sample in one call) or "
                         "pointwise (one call per chunk, shared with ragjudge judge's cache)")
    match: str | None = option(
        None, "how ranking metrics match chunks to gold (default auto: ids if present, else "
              "normalised text)")
    default_k: int = option(DEFAULT_K, "cutoff when neither the sample nor the metric sets one")
    skip_invalid: bool = option(False, "skip bad samples (reported) instead of stopping")
    embedding_model: str | None = option(
        None, "embeddings model of the metrics that use one, such as "
              "answer_relevance(by=embedding) (served by the judge's endpoint)")
    separate_calls: bool = option(
        False, "grade the chunks and attribute the reference's sentences (context_recall) in "
               "two calls per sample; by default a run asking both makes one call "
               "(context_review.v3), whose grader also sees the reference")
    language: str = option(
        "en", "language of the samples (ISO code: en, es, fr...): sentence rules of "
              "context_recall and the shipped prompt variants for it where there are some")

    def validate(self) -> None:
        one_of("grading", self.grading, GRADING_MODES)
        if self.match is not None:
            one_of("match", self.match, MATCH_MODES)
        positive_int("default_k", self.default_k)
        if not isinstance(self.language, str) or not re.fullmatch(r"[a-z]{2,3}", self.language):
            raise InputError(f"expected a lowercase language code such as en, es or fr, got "
                             f"{self.language!r}", field="language")
        for name in ("skip_invalid", "separate_calls"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise InputError(f"must be true or false, got {value!r}", field=name)
        if self.embedding_model is not None and (not isinstance(self.embedding_model, str)
                                                 or not self.embedding_model.strip()):
            raise InputError("must be a model name", field="embedding_model")
