"""The options of judging pooled documents (:class:`ragjudge.judges.LLMRelevanceJudge`), stated
once: the library's keyword defaults, ``ragjudge judge``'s flags and the service's
``/v1/judge`` request fields all read their defaults and help from :class:`JudgeOptions`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..options import OptionsValue, one_of, option, positive_int

__all__ = ["JudgeOptions", "COMBINE_RULES"]

#: How a judge panel's grades become one label.
COMBINE_RULES = ("majority", "mean")


@dataclass(frozen=True)
class JudgeOptions(OptionsValue):
    """What pooled pairs are judged with and how (everything but the inputs and the LLM
    session). Built once, validated once; errors name the parameter."""

    prompt: Any = option("relevance.v1", "prompt template: a shipped name or a file")
    depth: int = option(20, "pool this many top documents of each run")
    all_queries: bool = option(
        False, "with human qrels to fill, also judge queries the human qrels do not have")
    combine: str = option(
        "majority", "panel label: majority grade (ties to the lowest tied grade) or mean grade "
                    "rounded half up")

    def validate(self) -> None:
        positive_int("depth", self.depth)
        if not isinstance(self.all_queries, bool):
            raise InputError(f"must be true or false, got {self.all_queries!r}", field="all_queries")
        one_of("combine", self.combine, COMBINE_RULES)
        # a name or file (loaded, and refused if unknown, when the judge is built) or a Prompt
        named = isinstance(self.prompt, (str, os.PathLike)) and str(self.prompt).strip()
        if not named and not hasattr(self.prompt, "sha256"):
            raise InputError(f"must be a prompt name, file or Prompt, got {self.prompt!r}",
                             field="prompt")
