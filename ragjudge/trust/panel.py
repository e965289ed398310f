"""Judge panels: several models (or prompts) grade the same pairs; their agreement and a
combined label.

Each judge keeps its own LLM session, so its cache entries are its own: the cache key holds
the model name and the prompt's sha256, so two models (or two prompts) never share an answer,
and re-running a panel costs nothing.

Combination rules (stated, so a combined label can be reproduced by hand):

* ``majority`` -- the grade most judges gave; a tie goes to the *lowest* tied grade (LLM judges
  err lenient, so a split panel is read conservatively);
* ``mean`` -- the mean grade rounded half up (floor(mean + 0.5): 1.5 -> 2, 1.25 -> 1).

A pair only some judges graded (the others failed) is combined from the grades it has.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._sync import run_sync
from ..data import Qrels, Run
from ..errors import InputError, LLMError
from ..render import render_table
from .agreement import AgreementReport, krippendorff_alpha_raters, label_agreement

__all__ = ["RULES", "combine_grades", "combine_qrels", "PanelResult", "judge_panel",
           "judge_panel_sync", "panel_agreement"]

#: Combination rules of a panel's grades.
RULES: tuple[str, ...] = ("majority", "mean")


def combine_grades(grades: Sequence[int], rule: str = "majority") -> int:
    """One grade from several judges' grades by ``rule`` (see the module docstring)."""
    if not grades:
        raise ValueError("no grade to combine")
    if rule == "majority":
        counts = Counter(grades)
        top = max(counts.values())
        return min(g for g, c in counts.items() if c == top)
    if rule == "mean":
        return int(math.floor(sum(grades) / len(grades) + 0.5))
    raise InputError(f"unknown combination rule {rule!r}; expected one of {', '.join(RULES)}",
                     field="rule")


def _grid(per_judge: Mapping[str, Qrels]) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Every pair any judge graded, and a ``(judges, pairs)`` grade matrix (-1: no grade)."""
    dicts = [q.to_dict() for q in per_judge.values()]
    pairs = list(dict.fromkeys((q, d) for dd in dicts for q, docs in dd.items() for d in docs))
    grid = np.full((len(dicts), len(pairs)), -1, dtype=np.int64)
    for i, dd in enumerate(dicts):
        for k, (q, d) in enumerate(pairs):
            g = dd.get(q, {}).get(d)
            if g is not None:
                grid[i, k] = max(int(g), 0)
    return pairs, grid


def combine_qrels(per_judge: Mapping[str, Qrels], rule: str = "majority") -> Qrels:
    """The panel's qrels: each pair any judge graded, its grades combined by ``rule``."""
    if rule not in RULES:
        raise InputError(f"unknown combination rule {rule!r}; expected one of {', '.join(RULES)}",
                         field="rule")
    pairs, grid = _grid(per_judge)
    grades = [combine_grades([int(g) for g in grid[:, k] if g >= 0], rule) for k in range(len(pairs))]
    return Qrels.from_arrays([q for q, _ in pairs], [d for _, d in pairs],
                             np.array(grades, dtype=np.int64), source=f"panel:{rule}")


def panel_agreement(per_judge: Mapping[str, Qrels], *, n_resamples: int = 1000,
                    seed: int | None = 0) -> tuple[dict[str, AgreementReport], float | None]:
    """Pairwise :func:`label_agreement` of the judges (``"a vs b"``, a as reference) and
    Krippendorff's ordinal alpha over all of them (missing grades allowed)."""
    names = list(per_judge)
    pairwise = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairwise[f"{a} vs {b}"] = label_agreement(per_judge[a], per_judge[b],
                                                      n_resamples=n_resamples, seed=seed)
    _, grid = _grid(per_judge)
    return pairwise, krippendorff_alpha_raters(grid)


@dataclass
class PanelResult:
    """What a panel did: each judge's :class:`~ragjudge.judges.JudgeResult` and LLM-only qrels,
    the combined qrels (under the human labels, when given), and the agreement."""

    rule: str
    results: dict[str, Any]
    per_judge: dict[str, Qrels]
    qrels: Qrels
    pairwise: dict[str, AgreementReport]
    alpha: float | None
    human_pairs: frozenset[tuple[str, str]] = frozenset()
    notes: list[str] = field(default_factory=list)

    def table(self) -> tuple[list[str], list[list[Any]]]:
        heads = ["judges", "pairs", "exact", "kappa", "kappa CI", "weighted kappa (quad.)",
                 "leniency (2nd - 1st)"]
        rows = []
        for name, rep in self.pairwise.items():
            k = rep.stats["cohen_kappa"]
            ci = "-" if k.ci_low is None else f"[{k.ci_low:.3f}, {k.ci_high:.3f}]"
            rows.append([name, rep.common_pairs, rep.exact_agreement, k.value, ci,
                         rep.weighted_kappa_quadratic, rep.leniency])
        return heads, rows

    def summary(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "judges": {n: r.summary() for n, r in self.results.items()},
            "pairs": len(self.qrels),
            "human_labels": len(self.human_pairs),
            "krippendorff_alpha": self.alpha,
            "pairwise": {n: {k: v.to_dict() for k, v in r.stats.items()}
                         for n, r in self.pairwise.items()},
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        h, r = self.table()
        alpha = "undetermined" if self.alpha is None else f"{self.alpha:.4f}"
        return (render_table(h, r, "table")
                + f"Krippendorff's alpha (ordinal) over {len(self.per_judge)} judges: {alpha}\n"
                + f"combined label: {_RULE_TEXT[self.rule]}\n")

    def _repr_html_(self) -> str:
        h, r = self.table()
        return render_table(h, r, "html", title=f"judge panel ({self.rule})")


_RULE_TEXT = {"majority": "majority grade, ties to the lowest tied grade",
              "mean": "mean grade rounded half up"}


def _name(judge: Any, taken: Mapping[str, Any]) -> str:
    name = str(judge.llm.model)
    if name in taken:
        name = f"{name}:{judge.prompt.name}"
    if name in taken:
        raise InputError(f"two panel judges are the same model and prompt ({name})", field="model")
    return name


def _llm_qrels(judgments: Sequence[Any], name: str) -> Qrels:
    ok = [j for j in judgments if j.grade is not None]
    return Qrels.from_arrays([j.qid for j in ok], [j.docid for j in ok],
                             np.array([j.grade for j in ok], dtype=np.int64), source=name,
                             dedup="first")


async def judge_panel(
    judges: Sequence[Any],
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    runs: Run | Sequence[Run],
    depth: int = 20,
    *,
    rule: str = "majority",
    human: Qrels | None = None,
    all_queries: bool = False,
    n_resamples: int = 1000,
    seed: int | None = 0,
) -> PanelResult:
    """Every :class:`~ragjudge.judges.LLMRelevanceJudge` in ``judges`` grades the same pooled
    pairs (only the pairs ``human`` lacks, when given); returns their agreement and the
    combined qrels (human labels win). Each judge spends under its own session's cap
    (``max_cost``): give each a share of the panel's budget."""
    if len(judges) < 2:
        raise InputError("a panel needs at least two judges", field="model")
    if rule not in RULES:
        raise InputError(f"unknown combination rule {rule!r}; expected one of {', '.join(RULES)}",
                         field="rule")
    named: dict[str, Any] = {}
    for j in judges:
        named[_name(j, named)] = j

    async def one(j: Any) -> Any:
        if human is not None:
            return await j.fill_holes(human, queries, corpus, runs, depth, all_queries=all_queries)
        return await j.judge_run(queries, corpus, runs, depth)

    results = dict(zip(named, await asyncio.gather(*(one(j) for j in named.values()))))
    per_judge = {n: _llm_qrels(r.judgments, n) for n, r in results.items()}
    notes = [f"{n}: {len(r.failed)} judgments failed" for n, r in results.items() if r.failed]
    working = {n: q for n, q in per_judge.items() if len(q)}
    for n in per_judge:
        if n not in working:
            notes.append(f"{n} produced no grade at all and is left out of the panel")
    if not working:
        raise LLMError("every judge of the panel failed on every pair: " + "; ".join(notes))
    combined = combine_qrels(working, rule)
    pairwise: dict[str, AgreementReport] = {}
    alpha = None
    if len(working) > 1:
        pairwise, alpha = panel_agreement(working, n_resamples=n_resamples, seed=seed)
    human_pairs: frozenset[tuple[str, str]] = frozenset()
    if human is not None:
        combined = human.merge(combined)
        human_pairs = frozenset((q, d) for q, d, _ in human.rows())
    return PanelResult(rule, results, per_judge, combined, pairwise, alpha, human_pairs, notes)


def judge_panel_sync(judges: Sequence[Any], *args: Any, **kwargs: Any) -> PanelResult:
    """Blocking :func:`judge_panel` (works inside Jupyter's running loop); closes the judges'
    HTTP clients at the end."""

    async def main() -> PanelResult:
        try:
            return await judge_panel(judges, *args, **kwargs)
        finally:
            for j in judges:
                await j.llm.aclose()

    return run_sync(main())
