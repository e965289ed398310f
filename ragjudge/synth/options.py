"""The options of a synthetic test collection (:func:`ragjudge.synth.synthesize`), stated once:
the library's keyword defaults, ``ragjudge synth``'s flags and the service's ``/v1/synth``
request fields all read their defaults and help from :class:`SynthOptions`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..options import (OptionsValue, non_negative_int, number_at_least, option, positive_int,
                       unit_interval)

__all__ = ["SynthOptions", "DEFAULT_STYLES"]

# The default mix of query styles (weights summing to 1).
DEFAULT_STYLES: dict[str, float] = {"question": 0.6, "keyword": 0.3, "multi": 0.1}
_SPEC = ",".join(f"{k}={v:g}" for k, v in DEFAULT_STYLES.items())


@dataclass(frozen=True)
class SynthOptions(OptionsValue):
    """What a synthetic collection is made with (everything but the corpus, ``n``, the LLM
    session and the judge pool). Built once, validated once; errors name the parameter."""

    styles: str | Mapping[str, float] | None = option(
        None, f"mix of query styles, weights summing to 1 (default {_SPEC})")
    prompts: Mapping[str, Any] | None = option(
        None, "your own prompt template per style ({style: prompt name or file}); a new style "
              "name adds a style to use in styles")
    examples: Sequence[str] | str | Path | None = option(
        None, "example queries of your users (a list, or a file: one per line, queries "
              "JSONL/TSV); a few go into each prompt, InPars-style")
    oversample: float = option(
        1.5, "generation calls (draws of up to three candidates each) at most per requested query")
    seed: int = option(0, "seed of the passage sampling and of the few-shot example picks")
    min_words: int = option(12, "skip passages shorter than this many words")
    copy_span: int = option(
        7, "drop queries sharing this many consecutive words with their passage (0: off)")
    roundtrip_k: int | None = option(
        20, "BM25 must rank the source passage(s) in the top k (None: no round-trip filter)")
    min_grade: int = option(
        2, "answerability: the judge's grade of (query, source) must be at least this")
    min_confidence: float | None = option(
        None, "also drop candidates whose P(grade >= min_grade) from logprobs is below this")
    judge_prompt: Any = option(
        "relevance.v1", "relevance prompt of the answerability judge (name or file)")
    depth: int = option(20, "pool depth of the judge pool's runs")
    max_passage_chars: int = option(4000, "passages are cut to this many characters in prompts")
    language: str = option(
        "en", "language of the corpus (ISO code: en, es, fr...): the shipped prompt variants "
              "for it where there are some (the English prompts write in the passage's language)")

    def validate(self) -> None:
        number_at_least("oversample", self.oversample, 1)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InputError(f"must be an integer, got {self.seed!r}", field="seed")
        non_negative_int("min_words", self.min_words)
        non_negative_int("copy_span", self.copy_span)
        positive_int("roundtrip_k", self.roundtrip_k, optional=True)
        if isinstance(self.min_grade, bool) or not isinstance(self.min_grade, int):
            raise InputError(f"must be an integer, got {self.min_grade!r}", field="min_grade")
        unit_interval("min_confidence", self.min_confidence, optional=True)
        positive_int("depth", self.depth)
        positive_int("max_passage_chars", self.max_passage_chars)
        if not isinstance(self.language, str) or not re.fullmatch(r"[a-z]{2,3}", self.language):
            raise InputError(f"expected a lowercase language code such as en, es or fr, got "
                             f"{self.language!r}", field="language")
        if self.styles is not None and not isinstance(self.styles, (str, Mapping)):
            raise InputError(f"must be a spec such as {_SPEC!r} or a mapping, got "
                             f"{type(self.styles).__name__}", field="styles")
        if self.prompts is not None and not isinstance(self.prompts, Mapping):
            raise InputError("must map a style to a prompt name or file", field="prompts")
