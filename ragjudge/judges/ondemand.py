"""Judging on demand: evaluate runs, letting an LLM judge exactly the documents nobody judged.

It lives with the judge (not in :mod:`ragjudge.evaluate`, which sits below the LLM layer):
``evaluate(..., judge=j)`` calls :meth:`LLMRelevanceJudge.evaluate_on_demand`, which calls
:func:`evaluate_with_judge` here, so the import graph only points down.

For each run, the unjudged documents in its top ``depth`` (default: the largest cutoff among
the metrics) are graded by the judge -- each distinct pair once across runs, through the
judge's session, cache, budget and failure rules -- merged *under* the human labels (a human
label always wins; provenance kept per pair), and the run is evaluated on the merged qrels.
With no human qrels at all the evaluation is label-free. The report's ``meta["judging"]``
says judged@depth before and after and how many labels came from the LLM.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..data import Qrels, Run
from ..errors import InputError
from ..measures import parse_measure, spec_of, split_metric_list

__all__ = ["DEFAULT_DEPTH", "LABEL_FREE_METRICS", "OnDemand", "default_depth", "judge_on_demand",
           "evaluate_with_judge", "pool_relative", "pool_caveat"]

#: Judging depth when no metric has a cutoff (``map``, ``rprec``...): the judge's own default.
DEFAULT_DEPTH = 20
#: Default metrics without human labels: each needs only the grades of the run's own top 10
#: (nDCG normalised by the best DCG@10 the 0-3 scale allows), so a run scores the same alone
#: or beside others.
LABEL_FREE_METRICS = ("ndcg(ideal=max)@10", "p@10", "rbp(p=0.8)@10", "mrr@10")


def pool_relative(metrics: Sequence[str] | str | None, rel: int | None = None) -> list[str]:
    """The metrics whose value depends on documents outside the run's own ranking (an ideal
    ranking, R): with labels judged on demand, they move with the pool."""
    items = [metrics] if isinstance(metrics, str) else list(metrics or ())
    out = []
    for item in items:
        for name in split_metric_list(str(item)):
            m = parse_measure(name, rel=rel)
            if not spec_of(m).is_pool_free(m):
                out.append(name)
    return out


def pool_caveat(metrics: Sequence[str] | str | None, info: Mapping[str, Any], *, label_free: bool,
                rel: int | None = None) -> str | None:
    """One line naming the pool that pool-relative metrics are relative to, when their values
    would move with it (label-free, or labels filled on demand); ``None`` when none is."""
    moving = pool_relative(metrics, rel)
    if not moving:
        return None
    runs = info.get("pool_runs") or []
    alone = " (a single run: it is measured against its own top documents only)" if len(runs) == 1 else ""
    return (f"{', '.join(moving)} {'are' if len(moving) > 1 else 'is'} relative to the pool judged in this "
            f"command: depth {info.get('depth')}, {len(runs)} run(s), {info.get('pairs')} pairs"
            f"{alone}; values are comparable only with runs judged in the same pool. "
            f"Pool-free alternatives: {', '.join(LABEL_FREE_METRICS)}"
            + ("" if label_free else " (human labels fill part of the pool)"))


def default_depth(metrics: Sequence[str] | str | None, rel: int | None = None) -> int:
    """The largest cutoff among ``metrics`` (``ndcg@10,p@20`` -> 20); :data:`DEFAULT_DEPTH`
    when none has one."""
    if metrics is None:
        from ..evaluate import DEFAULT_METRICS

        metrics = list(DEFAULT_METRICS)
    items = [metrics] if isinstance(metrics, str) else list(metrics)
    cuts = [parse_measure(m, rel=rel).k for item in items for m in split_metric_list(str(item))]
    ks = [k for k in cuts if k is not None]
    return max(ks) if ks else DEFAULT_DEPTH


@dataclass
class OnDemand:
    """The merged qrels and what judging did (``info()`` goes into report meta)."""

    qrels: Qrels
    result: Any  # ragjudge.judges.JudgeResult
    depth: int
    judged_before: dict[str, float]
    judged_after: dict[str, float]
    human_labels: int
    pool_runs: tuple[str, ...] = ()

    @property
    def llm_labels(self) -> int:
        return len(self.qrels) - self.human_labels

    def info(self) -> dict[str, Any]:
        s = self.result.summary()
        return {
            "depth": self.depth,
            "judged_before": self.judged_before,
            "judged_after": self.judged_after,
            "human_labels": self.human_labels,
            "llm_labels": self.llm_labels,
            # the pool the labels came from: pool-relative metrics are relative to it
            "pool_runs": list(self.pool_runs),
            "model": self.result.judgments[0].model if self.result.judgments else None,
            "prompt": (f"{self.result.judgments[0].prompt_id}@{self.result.judgments[0].prompt_sha[:12]}"
                       if self.result.judgments else None),
            **{k: s[k] for k in ("pairs", "judged", "cached", "failed", "skipped_budget",
                                 "failure_reasons", "calls", "cost_usd")},
        }

    def describe(self) -> str:
        i = self.info()
        lines = [f"judged on demand at depth {self.depth}: {i['judged']}/{i['pairs']} new pairs "
                 f"graded ({i['cached']} from cache, {i['failed']} failed"
                 + (f", {i['skipped_budget']} skipped: budget" if i["skipped_budget"] else "")
                 + f"); labels: {self.human_labels} human + {self.llm_labels} LLM"]
        if i["failed"]:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(i["failure_reasons"].items()))
            lines.append(f"  failed judgments ({reasons}) are left unjudged; rerun to retry them")
        for run, before in self.judged_before.items():
            lines.append(f"  {run}: judged@{self.depth} {before:.4f} -> {self.judged_after[run]:.4f}")
        return "\n".join(lines)


def _judged(qrels: Qrels | None, runs: Sequence[Run], depth: int,
            queries: Sequence[str]) -> dict[str, float]:
    """Mean judged@depth of each run over ``queries`` (the queries evaluated after judging),
    by the engine's own definition; a query ``qrels`` lacks counts as judging nothing."""
    from ..evaluate import evaluate

    if not queries:
        return {r.name: 0.0 for r in runs}
    have = qrels.filter(queries) if qrels is not None else None
    lacking = [q for q in queries if have is None or q not in have]
    # A placeholder judgment no run retrieves gives such a query a judged@k of 0 (and the
    # engine the query to score).
    pad = Qrels.from_arrays(lacking, ["\x00none"] * len(lacking), [0] * len(lacking))
    base = pad if have is None or len(have) == 0 else have.merge(pad)
    key = f"judged@{depth}"
    return {r.name: float(evaluate(base, r, [key]).mean[key] or 0.0) for r in runs}


def _texts(value: Mapping[str, str] | str | os.PathLike[str] | None, what: str) -> Mapping[str, str]:
    if value is None:
        raise InputError(f"judging on demand needs the {what} texts ({what}=...)", field=what)
    if isinstance(value, Mapping):
        return value
    from ..io import read_corpus, read_queries

    return read_queries(value) if what == "queries" else read_corpus(value)


async def judge_on_demand(
    judge: Any,
    qrels: Qrels | None,
    runs: Sequence[Run],
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    depth: int,
    *,
    all_queries: bool | None = None,
) -> OnDemand:
    """Grade the unjudged top-``depth`` pairs of ``runs`` with ``judge`` (an
    :class:`~ragjudge.judges.LLMRelevanceJudge`) and merge them under ``qrels`` (``None``:
    label-free, every pooled pair is judged). ``all_queries`` (default: only when there are no
    human qrels) also judges run queries the human qrels lack."""
    if depth < 1:
        raise InputError(f"depth must be a positive integer, got {depth}", field="depth")
    runs = list(runs)
    if qrels is None:
        result = await judge.judge_run(queries, corpus, runs, depth)
        human = 0
    else:
        result = await judge.fill_holes(qrels, queries, corpus, runs, depth,
                                        all_queries=bool(all_queries))
        human = result.human
    final = result.qrels.query_ids
    before = _judged(qrels, runs, depth, final)
    after = _judged(result.qrels, runs, depth, final)
    return OnDemand(result.qrels, result, depth, before, after, human,
                    tuple(r.name for r in runs))


def evaluate_with_judge(
    judge: Any,
    qrels: Any,
    run: Any,
    metrics: Any = None,
    *,
    queries: Mapping[str, str] | str | os.PathLike[str] | None = None,
    corpus: Mapping[str, str] | str | os.PathLike[str] | None = None,
    judge_depth: int | None = None,
    all_queries: bool | None = None,
    **options: Any,
) -> Any:
    """:func:`ragjudge.evaluate.evaluate` with judging on demand (what ``evaluate(...,
    judge=...)`` calls): ``qrels`` may be ``None`` (label-free); the run's top ``judge_depth``
    documents are judged (default: the largest metric cutoff). The report's
    ``meta["judging"]`` holds :meth:`OnDemand.info`."""
    from .._sync import run_sync
    from ..evaluate import evaluate
    from ..io import read_qrels, read_run

    dedup = options.get("dedup", "error")
    human = None
    if qrels is not None:
        human = qrels if isinstance(qrels, Qrels) else (
            read_qrels(qrels, dedup=dedup) if isinstance(qrels, (str, os.PathLike))
            else Qrels.from_dict(qrels))
    r = run if isinstance(run, Run) else (
        read_run(run, dedup=dedup, name=options.get("name")) if isinstance(run, (str, os.PathLike))
        else Run.from_dict(run, name=options.get("name") or "run"))
    if metrics is None and human is None:
        metrics = list(LABEL_FREE_METRICS)  # label-free defaults: they do not move with the pool
    k = judge_depth if judge_depth is not None else default_depth(metrics, options.get("rel"))
    q_texts, c_texts = _texts(queries, "queries"), _texts(corpus, "corpus")

    async def main() -> OnDemand:
        try:
            return await judge_on_demand(judge, human, [r], q_texts, c_texts, k,
                                         all_queries=all_queries)
        finally:
            await judge.llm.aclose()

    done = run_sync(main())
    if len(done.qrels) == 0:
        raise InputError("no labels to evaluate with: every judgment failed "
                         f"({done.result.summary()['failure_reasons']})", field="judge")
    report = evaluate(done.qrels, r, metrics, **options)
    info = done.info()
    info["pool_caveat"] = pool_caveat(metrics if metrics is not None else list(report.metrics), info,
                                      label_free=human is None, rel=options.get("rel"))
    report.meta["judging"] = info
    if info["pool_caveat"]:
        warnings.warn(info["pool_caveat"], stacklevel=2)
    return report
