"""``faithfulness``: the share of the response's claims that the retrieved contexts support.

Two calls by default: the response's atomic claims (``faithfulness_claims.v2``, without the
contexts in view), then all claims verified together against every retrieved chunk -- what the
generator saw (``faithfulness_verify.v2``). faithfulness = supported claims / claims (RAGAS's
faithfulness). ``faithfulness(steps=1)`` does both in one call (``faithfulness_check.v1``):
one request fewer per sample, at a cost in independence -- a model that sees the contexts
while it lists the claims may leave out the unsupported ones, the failure the metric exists
to catch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..report import Score
from ..samples import Sample
from ...measures.grammar import Param, int_at_least
from .base import (
    LLMMetric, RagMetric, Request, Setup, chat, format_context, format_numbered, format_passages,
    fraction_true, missing_text, present, prompt, register, sized
)

__all__ = ["Faithfulness"]


@register
class Faithfulness(LLMMetric):
    names = ("faithfulness",)
    needs = ("contexts", "response")
    params = {"steps": Param(2, int_at_least(1, 2), "2 (claims, then verdicts) or 1 (both in one call)")}

    def requests(self, m: RagMetric, s: Sample, k: int, setup: Setup,
                 got: Mapping[str, Any]) -> list[Request] | str:
        if not present(s.response):
            return missing_text("response", s.response)
        texts = s.context_texts
        if not texts:
            return "no retrieved texts"
        if m.get("steps", 2) == 1:
            return [chat("checked", "claim check", setup.prompt("faithfulness_check.v1"),
                         {"question": s.question or "", "response": s.response or "",
                          "contexts": format_passages(texts)},
                         lambda obj: [(c["claim"].strip(), bool(c["supported"]))
                                      for c in obj["claims"] if c["claim"].strip()])]
        if "claims" not in got:
            # Unknown to a dry run until answered: the response stands in for one claim.
            return [chat("claims", "claim extraction", setup.prompt("faithfulness_claims.v2"),
                         {"question": s.question or "", "response": s.response or ""},
                         lambda obj: [c.strip() for c in obj["claims"] if c.strip()],
                         assume=[s.response])]
        claims = got["claims"]
        if not claims:
            return "no claims in the response"
        return [chat("verdicts", "claim verification", setup.sized("faithfulness_verify.v2", "verdicts", len(claims)),
                     {"contexts": format_context(texts), "claims": format_numbered(claims),
                      "count": str(len(claims))},
                     lambda obj: [bool(v) for v in obj["verdicts"]])]

    def score(self, m: RagMetric, s: Sample, k: int, setup: Setup, got: Mapping[str, Any]) -> Score:
        if "checked" in got:
            if not got["checked"]:
                return Score(None, "no claims in the response")
            claims, verdicts = [c for c, _ in got["checked"]], [v for _, v in got["checked"]]
            return Score(fraction_true(verdicts), detail={"claims": list(zip(claims, verdicts))})
        claims, verdicts = got["claims"], got["verdicts"]
        return Score(fraction_true(verdicts), detail={"claims": list(zip(claims, verdicts))})

    def definition(self, m: RagMetric) -> str:
        how = " (claims listed and checked in one call)" if m.get("steps", 2) == 1 else ""
        return f"response claims supported by the retrieved contexts / response claims{how}"
