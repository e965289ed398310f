"""Deterministic sample metrics: ranking measures at k on ids or contents, and containment@k.

The ranking measures (``hit, recall, recall_all, precision, mrr, map, ndcg, err, rbp`` and the
rest of :func:`ragjudge.measures.known_measures`) are not re-implemented here: each sample
becomes one query of a :class:`~ragjudge.data.Qrels` / :class:`~ragjudge.data.Run` pair (gold
from :func:`~ragjudge.rag.matching.gold_and_ranking`) and :func:`ragjudge.engine.compute`
evaluates them, so a sample's ``ndcg@5`` is trec_eval's ``ndcg_cut_5`` to the last bit.

The cutoff of a sample is its ``metadata.k``, else the metric's ``@k``, else the default (5).
A sample that lacks the gold the metric needs, or whose gold holds no relevant document, is
undetermined with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..data import Qrels, Run
from ..measures import Measure
from .matching import gold_and_ranking, normalize_text
from .report import Score, undetermined
from .samples import DEFAULT_K, Sample

__all__ = ["ranking_scores", "containment", "containment_scores"]


def ranking_scores(
    samples: Sequence[Sample],
    measure: Measure,
    *,
    match: str = "auto",
    default_k: int = DEFAULT_K,
) -> list[Score]:
    """``measure`` on every sample (``measure.k`` is the metric's own cutoff, may be ``None``)."""
    from ..engine import compute

    out: list[Score | None] = [None] * len(samples)
    # Samples sharing a cutoff are evaluated in one engine call.
    groups: dict[int, list[tuple[int, dict[str, int], list[str]]]] = {}
    rel = _threshold(measure)
    for i, s in enumerate(samples):
        got = gold_and_ranking(s, match)
        if isinstance(got, str):
            out[i] = undetermined(got)
            continue
        gold, ranking = got
        if not any(g >= rel for g in gold.values()):
            out[i] = undetermined(
                "no relevant gold document" if rel <= 1 else f"no gold document with gain >= {rel}"
            )
            continue
        groups.setdefault(s.cutoff(measure.k, default_k), []).append((i, gold, ranking))
    for k, items in groups.items():
        m = dataclasses.replace(measure, k=k)
        qids = [f"{i:09d}" for i, _, _ in items]
        qrels = Qrels.from_lists([g for _, g, _ in items], qids)
        run = Run.from_lists([r for _, _, r in items], qids)
        values = compute(qrels, run, [m], qids=qids)[m]
        for (i, _, _), v in zip(items, values.tolist()):
            out[i] = Score(float(v), detail={"k": k})
    done = [s for s in out if s is not None]
    assert len(done) == len(out)  # every branch above fills its slot
    return done


def _threshold(measure: Measure) -> int:
    try:
        rel = measure.get("rel")
    except KeyError:
        return 1
    return int(rel) if rel is not None else 1


def containment(answers: Sequence[str], passages: Sequence[str]) -> bool:
    """True when some answer, case- and whitespace-normalised, occurs in some passage."""
    keys = [normalize_text(a) for a in answers]
    keys = [a for a in keys if a]
    texts = [normalize_text(p) for p in passages]
    return any(a in t for a in keys for t in texts)


def containment_scores(
    samples: Sequence[Sample], k: int | None, *, default_k: int = DEFAULT_K
) -> list[Score]:
    """``containment@k``: 1 if an expected answer (``answers``, else ``reference``) appears in one
    of the top-k retrieved passages (after :func:`~ragjudge.rag.matching.normalize_text`), else 0.
    """
    out: list[Score] = []
    for s in samples:
        answers = list(s.answers) if s.answers is not None else (
            [s.reference] if s.reference is not None else None
        )
        if answers is None:
            out.append(undetermined("no expected answer (answers / reference)"))
            continue
        if not any(normalize_text(a) for a in answers):
            out.append(undetermined("expected answer is empty"))
            continue
        texts = s.context_texts
        if texts is None:
            out.append(undetermined(
                "no retrieved texts" if s.contexts is None else "some retrieved chunks have no text"
            ))
            continue
        cut = s.cutoff(k, default_k)
        out.append(Score(1.0 if containment(answers, texts[:cut]) else 0.0, detail={"k": cut}))
    return out
