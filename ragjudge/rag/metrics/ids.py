"""Deterministic metrics (no LLM): ranking measures on ids or matched contents, containment@k.

The ranking measures (``hit, recall, recall_all, precision, mrr, map, ndcg, err, rbp`` and the
rest of :func:`ragjudge.measures.known_measures`) are not re-implemented: each sample becomes
one example of :func:`ragjudge.lists.score_lists` (gold from
:func:`~ragjudge.rag.matching.gold_and_ranking`), the same path and semantics as
:func:`ragjudge.evaluate_lists`, computed by the ranking core, so a sample's ``ndcg@5`` is
trec_eval's ``ndcg_cut_5`` to the last bit. A repeated id counts once without moving later
ranks; a sample whose gold holds no relevant document is undetermined with that reason; a
graded measure without ``max_grade`` uses the sample's own top grade, never the batch's.

The cutoff of a sample is its ``metadata.k``, else the metric's ``@k``, else the default (5).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...errors import MetricError
from ...lists import score_lists
from ...measures import parse_measure
from ..matching import MATCH_MODES, gold_and_ranking, normalize_text
from ..report import Score, undetermined
from ..samples import DEFAULT_K, Sample
from .base import DeterministicMetric, RagMetric, register, units

__all__ = ["Ranking", "Containment", "containment", "REFERENCE_MAX_WORDS"]

#: containment@k matches a sample's whole ``reference`` only when it has at most this many
#: words (a short answer such as "Paris" or "1889"); a longer reference, without ``answers``,
#: is undetermined: a long answer is almost never verbatim in a passage, and a 0 would lie.
REFERENCE_MAX_WORDS = 8


@register
class Ranking(DeterministicMetric):
    """Any ranking measure of the core, with ``match=auto|id|text|normalized|chunk``."""

    names = ("*",)
    takes_k = True

    def parse(self, name: str, raw: dict[str, str], k: int | None, spec: str) -> list[RagMetric]:
        match = raw.pop("match", "auto").lower()
        if match not in MATCH_MODES:
            raise MetricError(f"match must be one of {', '.join(MATCH_MODES)} in {spec!r}")
        inner = name + ("(" + ",".join(f"{a}={b}" for a, b in raw.items()) + ")" if raw else "")
        try:
            m = parse_measure(inner)
        except MetricError as exc:
            msg = str(exc)
            if "unknown metric" in msg:
                msg += ", " + ", ".join(n for n in sorted(units()) if n != "*")
            raise MetricError(msg) from None
        if m.k is not None:  # trec_eval spellings carry the cutoff in the name (P_10)
            if k is not None:
                raise MetricError(f"metric spec {spec!r} gives the cutoff twice")
            k, m = m.k, dataclasses.replace(m, k=None)
        params = list(m.params) + ([("match", match)] if match != "auto" else [])
        return [RagMetric(m.name, tuple(sorted(params)), k, m)]

    def scores(self, m: RagMetric, samples: Sequence[Sample], *, match: str | None,
               default_k: int = DEFAULT_K) -> list[Score]:
        assert m.measure is not None
        mode = m.get("match", match or "auto")
        out: list[Score | None] = [None] * len(samples)
        # Samples sharing a cutoff are evaluated in one call of the core.
        groups: dict[int, list[tuple[int, dict[str, int], list[str]]]] = {}
        for i, s in enumerate(samples):
            got = gold_and_ranking(s, mode)
            if isinstance(got, str):
                out[i] = undetermined(got)
                continue
            groups.setdefault(s.cutoff(m.k, default_k), []).append((i, *got))
        for k, items in groups.items():
            measure = dataclasses.replace(m.measure, k=k)
            values = score_lists([g for _, g, _ in items], [r for _, _, r in items], [measure])[measure]
            for (i, _, _), v in zip(items, values):
                out[i] = Score(v, detail={"k": k}) if isinstance(v, float) else undetermined(v)
        return [s for s in out if s is not None]

    def definition(self, m: RagMetric) -> str:
        return f"{m.measure} of the ranking core, retrieved chunks matched to gold by {m.get('match', 'auto')}"


def containment(answers: Sequence[str], passages: Sequence[str]) -> bool:
    """True when some answer, case- and whitespace-normalised, occurs in some passage."""
    keys = [a for a in (normalize_text(a) for a in answers) if a]
    texts = [normalize_text(p) for p in passages]
    return any(a in t for a in keys for t in texts)


@register
class Containment(DeterministicMetric):
    names = ("containment",)
    takes_k = True

    def scores(self, m: RagMetric, samples: Sequence[Sample], *, match: str | None,
               default_k: int = DEFAULT_K) -> list[Score]:
        return [self.one(s, s.cutoff(m.k, default_k)) for s in samples]

    @staticmethod
    def one(s: Sample, cut: int) -> Score:
        if s.answers is not None:
            answers, source = list(s.answers), "answers"
        elif s.reference is not None:
            words = len(normalize_text(s.reference).split())
            if words > REFERENCE_MAX_WORDS:
                return undetermined(
                    f"no short answers (answers) and the reference has {words} words (more than "
                    f"{REFERENCE_MAX_WORDS}): containment would match the whole reference")
            answers, source = [s.reference], "reference"
        else:
            return undetermined("no expected answer (answers / reference)")
        if not any(normalize_text(a) for a in answers):
            return undetermined("expected answer is empty")
        texts = s.context_texts
        if texts is None:
            return undetermined(
                "no retrieved texts" if s.contexts is None else "some retrieved chunks have no text")
        hit = containment(answers, texts[:cut])
        return Score(1.0 if hit else 0.0, detail={"k": cut, "matched": source})

    def definition(self, m: RagMetric) -> str:
        return (f"1 if an expected answer (answers, else the whole reference when it has at most "
                f"{REFERENCE_MAX_WORDS} words) occurs, case/whitespace normalised, in a top-k passage")
