"""Judging on demand: evaluate runs, letting an LLM judge exactly the documents nobody judged.

:func:`evaluate_with_judge` (and its blocking twin :func:`evaluate_with_judge_sync`) is the
entry point; it lives with the judge because it needs one, and calls
:func:`ragjudge.evaluate.evaluate` on the merged qrels, so the import graph only points down.

For each run, the unjudged documents in its top ``depth`` (default: the largest cutoff among
the metrics) are graded by the judge -- each distinct pair once across runs, through the
judge's session, cache, budget and failure rules -- merged *under* the human labels (a human
label always wins; provenance kept per pair), and the run is evaluated on the merged qrels.
With no human qrels at all the evaluation is label-free. The report's ``meta["judging"]``
says judged@depth before and after and how many labels came from the LLM.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from .._sync import run_sync
from ..data import Qrels, Run
from ..errors import InputError, LLMError
from ..evaluate import DEFAULT_METRICS, compare as compare_runs, evaluate
from ..io import read_corpus, read_queries, read_run, write_qrels
from ..io.coerce import as_qrels, as_run
from ..measures import parse_measure, spec_of, split_metric_list
from .pool import Pool, PoolRun, run_fingerprint

__all__ = ["DEFAULT_DEPTH", "LABEL_FREE_METRICS", "OnDemand", "default_depth", "judge_on_demand",
           "evaluate_with_judge", "evaluate_with_judge_sync", "pool_relative", "pool_caveat", "label_free_metrics", "Rescored",
           "rescore_pool", "pool_drift", "describe_rescored", "Pool", "run_depth", "query_origin",
           "judge_circularity"]

#: Judging depth when no metric has a cutoff (``map``, ``rprec``...): the judge's own default.
DEFAULT_DEPTH = 20
#: Default metrics without human labels: each needs only the grades of the run's own top 10
#: (nDCG normalised by the best DCG@10 the 0-3 scale allows), so a run scores the same alone
#: or beside others.
LABEL_FREE_METRICS = ("ndcg(ideal=max)@10", "p@10", "rbp(p=0.8)@10", "mrr@10")


def label_free_metrics(top_grade: int = 3) -> list[str]:
    """:data:`LABEL_FREE_METRICS` for a judge whose scale tops at ``top_grade`` (nDCG's ideal
    is ``top_grade`` at every rank: ``ndcg(ideal=max,top=G)@10`` when it is not 3)."""
    return [m if top_grade == 3 or not m.startswith("ndcg(ideal=max)") else
            m.replace("ideal=max", f"ideal=max,top={top_grade}") for m in LABEL_FREE_METRICS]


def scale_top(judge: Any) -> int:
    """The highest grade of the judge prompt's scale (its front-matter labels; 3 when unknown)."""
    labels = getattr(getattr(judge, "prompt", None), "labels", None) or {}
    grades = [int(k) for k in labels if str(k).lstrip("-").isdigit()]
    return max(grades) if grades else 3


def pool_relative(metrics: Sequence[str] | str | None, rel: int | None = None, *,
                  depth: int | None = None, run_depth: int | None = None) -> list[str]:
    """The metrics whose value depends on documents outside the run's own judged ranking: an
    ideal ranking or R, or -- for a pool-free measure -- ranks below the judge ``depth`` (a
    cutoff above it, or none, on runs deeper than it, ``run_depth``), where a document is
    judged only if another run pooled it. With labels judged on demand, they move with the
    pool."""
    items = [metrics] if isinstance(metrics, str) else list(metrics or ())
    out = []
    for item in items:
        for name in split_metric_list(str(item)):
            m = parse_measure(name, rel=rel)
            if not spec_of(m).is_pool_free(m) or _past_depth(m.k, depth, run_depth):
                out.append(name)
    return out


def _past_depth(k: int | None, depth: int | None, run_depth: int | None) -> bool:
    """Whether a cutoff ``k`` (None: the whole ranking) reaches below the judge depth on runs
    as deep as ``run_depth``."""
    if depth is None:
        return False
    reach = run_depth if k is None else (k if run_depth is None else min(k, run_depth))
    return reach is None or reach > depth


def run_depth(runs: Sequence[Run]) -> int:
    """The most documents any query of ``runs`` ranks."""
    deepest = 0
    for r in runs:
        offsets = r.arrays[1]  # query i's rows are offsets[i]:offsets[i + 1]
        if len(offsets) > 1:
            deepest = max(deepest, int(np.diff(offsets).max()))
    return deepest


def pool_caveat(metrics: Sequence[str] | str | None, info: Mapping[str, Any], *, label_free: bool,
                rel: int | None = None) -> str | None:
    """One line naming the pool that pool-relative metrics are relative to, when their values
    would move with it (label-free, or labels filled on demand); ``None`` when none is. A
    pool-free measure counts as pool-relative past the judge depth (``info["depth"]``, on runs
    ``info["run_depth"]`` deep): it keeps its value, and the line says so."""
    depth, deep = info.get("depth"), info.get("run_depth")
    moving = pool_relative(metrics, rel, depth=depth, run_depth=deep)
    if not moving:
        return None
    below = [m for m in moving if m not in pool_relative(metrics, rel)]
    runs = info.get("pool_runs") or []
    alone = " (a single run: it is measured against its own top documents only)" if len(runs) == 1 else ""
    kept = info.get("pool")
    where = (f"the pool {kept['file']}: {kept['labels']} labels, {len(runs)} run(s)" if kept else
             f"the pool judged in this command: depth {info.get('depth')}, {len(runs)} run(s), "
             f"{info.get('pairs')} pairs")
    past = (f" ({', '.join(below)} {'reach' if len(below) > 1 else 'reaches'} below the judge "
            f"depth {depth}, where a document is judged only if another run pooled it; cut them "
            f"at @{depth} or judge deeper with --judge-depth)" if below else "")
    return (f"{', '.join(moving)} {'are' if len(moving) > 1 else 'is'} relative to {where}"
            f"{alone}{past}; values are comparable only with runs judged in the same pool. "
            f"Pool-free alternatives: {', '.join(LABEL_FREE_METRICS)}"
            + ("" if label_free else " (human labels fill part of the pool)"))


def default_depth(metrics: Sequence[str] | str | None, rel: int | None = None) -> int:
    """The largest cutoff among ``metrics`` (``ndcg@10,p@20`` -> 20); :data:`DEFAULT_DEPTH`
    when none has one."""
    if metrics is None:
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
    #: the kept pool the labels came from (``--pool FILE``), and how many labels this call added
    pool: Pool | None = None
    pool_added: int = 0

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
            "pool_runs": (list(dict.fromkeys([*self.pool.runs, *self.pool_runs]))
                          if self.pool is not None else list(self.pool_runs)),
            "pool": (None if self.pool is None
                     else {**self.pool.info(), "added": self.pool_added}),
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
    pool: Pool | None = None,
) -> OnDemand:
    """Grade the unjudged top-``depth`` pairs of ``runs`` with ``judge`` (an
    :class:`~ragjudge.judges.LLMRelevanceJudge`) and merge them under ``qrels`` (``None``:
    label-free, every pooled pair is judged). ``all_queries`` (default: only when there are no
    human qrels) also judges run queries the human qrels lack.

    With a kept ``pool`` (:class:`~ragjudge.judges.pool.Pool`), only the pairs it lacks are
    judged, the new labels are added to it and saved (also when the run stops half-way), and
    the merged qrels hold every label of the pool: pool-relative measures are then relative to
    all the runs ever judged into it."""
    if depth < 1:
        raise InputError(f"depth must be a positive integer, got {depth}", field="depth")
    runs = list(runs)
    known: Qrels | None = None
    if pool is not None:
        pool.check_judge(judge.llm.model, _prompt_name(judge))
        pool.check_scale(judge.prompt.label_values)
        known = pool.qrels()
        if qrels is not None and not all_queries:
            known = known.filter(qrels.query_ids)  # the queries the human qrels cover, as without a pool
    try:
        if qrels is None and (known is None or len(known) == 0):
            result = await judge.judge_run(queries, corpus, runs, depth)
        else:
            skip = known if qrels is None else (qrels if known is None else qrels.merge(known))
            result = await judge.fill_holes(skip, queries, corpus, runs, depth,
                                            all_queries=qrels is None or bool(all_queries))
    except LLMError as exc:
        if pool is not None and getattr(exc.partial, "judgments", None):
            pool.add(exc.partial.judgments)  # paid for: kept for the rerun
            pool.save()
        raise
    added = 0
    merged = result.qrels
    if pool is not None:
        added = pool.add(result.judgments)
        pool.save()
        labels = pool.qrels()
        if qrels is not None and not all_queries:
            labels = labels.filter(qrels.query_ids)
        merged = labels if qrels is None else qrels.merge(labels)
    human = 0 if qrels is None else len(qrels)
    final = merged.query_ids
    before = _judged(qrels, runs, depth, final)
    after = _judged(merged, runs, depth, final)
    return OnDemand(merged, result, depth, before, after, human, tuple(r.name for r in runs),
                    pool=pool, pool_added=added)


def _prompt_name(judge: Any) -> str:
    return f"{judge.prompt.name}@{judge.prompt.sha256[:12]}"


@dataclass
class Rescored:
    """A run recorded in a kept pool, scored again after the pool grew (``labels_before`` ->
    ``labels_after`` labels); ``after`` is ``None`` when it could not be (``reason``)."""

    run: str
    labels_before: int
    labels_after: int
    before: dict[str, float | None]
    after: dict[str, float | None] | None
    reason: str | None = None

    @property
    def changed(self) -> list[str]:
        """The metrics whose value moved because the pool grew."""
        if self.after is None:
            return []
        return [m for m, v in self.before.items() if not _same(v, self.after.get(m))]

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "labels_before": self.labels_before,
                "labels_after": self.labels_after, "before": self.before, "after": self.after,
                "changed": self.changed, "reason": self.reason}

    def describe(self) -> str:
        if self.after is None:
            return (f"  {self.run}: not re-scored ({self.reason}); its scores are against "
                    f"{self.labels_before} labels")
        if not self.changed:
            return f"  {self.run}: unchanged"
        same = [m for m in self.before if m not in self.changed]
        return f"  {self.run}: " + ", ".join(
            f"{m} {_fmt(self.before[m])} -> {_fmt(self.after.get(m))}" for m in self.changed) + (
            f"; unchanged: {', '.join(same)}" if same else "")


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def rescore_pool(pool: Pool, qrels: Qrels, *, skip: Sequence[str] = (),
                 earlier: Mapping[str, PoolRun] | None = None, rel: int | None = None,
                 skip_missing: bool = False) -> list[Rescored]:
    """Score again, on ``qrels`` (the pool's labels, under any human ones), every run recorded
    in ``pool`` that was scored against fewer labels than it now holds (except ``skip``, the
    runs just scored), on the metrics recorded with it; the records are updated. A run whose
    file is gone or no longer holds the same run cannot be: it is listed with its reason.
    ``earlier``: the records the runs in ``skip`` had before this call, so a run evaluated
    again is compared with its own earlier scores too."""
    out = []
    for name in skip:
        was, now = (earlier or {}).get(name), pool.runs.get(name)
        if was is None or now is None or was.labels >= now.labels or was.fingerprint != now.fingerprint:
            continue
        common = [m for m in was.mean if m in now.mean]
        if common:
            out.append(Rescored(name, was.labels, now.labels, {m: was.mean[m] for m in common},
                                {m: now.mean[m] for m in common}))
    for name, rec in list(pool.runs.items()):
        if name in skip or rec.labels >= len(pool):
            continue
        reason = None
        run = None
        if rec.path is None:
            reason = "it was not read from a file"
        elif not os.path.isfile(rec.path):
            reason = f"{rec.path} is gone"
        else:
            run = read_run(rec.path, name=name, dedup="first")
            if run_fingerprint(run) != rec.fingerprint:
                reason, run = f"{rec.path} holds another run now", None
        if run is None:
            out.append(Rescored(name, rec.labels, len(pool), dict(rec.mean), None, reason))
            continue
        report = evaluate(qrels, run, list(rec.mean), rel=rel, skip_missing=skip_missing)
        after = {k: (None if v is None else float(v)) for k, v in report.mean.items()}
        out.append(Rescored(name, rec.labels, len(pool), dict(rec.mean), after))
        pool.record(run, path=rec.path, depth=rec.depth, mean=after)
    return out


def pool_drift(rescored: Sequence[Rescored], pool: Pool) -> str | None:
    """One line when some runs recorded in the pool keep scores from a smaller pool (they
    could not be re-scored): their pool-relative values are not comparable with the others'."""
    stale = [r for r in rescored if r.after is None]
    if not stale:
        return None
    return (f"runs in the pool {pool.path} were judged in different pools: "
            + ", ".join(f"{r.run} against {r.labels_before} labels ({r.reason})" for r in stale)
            + f", the others against {len(pool)}; compare their pool-free measures only, or "
            "evaluate them again with this pool")


def describe_rescored(rescored: Sequence[Rescored], pool: Pool) -> str:
    """Lines saying which earlier runs' scores changed because the pool grew."""
    if not rescored:
        return ""
    moved = sum(1 for r in rescored if r.changed)
    return "\n".join([f"the pool {pool.path} grew to {len(pool)} labels; {len(rescored)} earlier "
                      f"run(s) scored again, {moved} changed:", *(r.describe() for r in rescored)])


RunsArg = Union[Run, Mapping[str, Any], str, "os.PathLike[str]", Sequence[Any], Any]


def _several(runs: Any) -> bool:
    """Whether ``runs`` holds several runs (a list of runs, or ``{name: Run or path}``) rather
    than one run (a :class:`Run`, a path, ``{qid: {docid: score}}``, a DataFrame...)."""
    if isinstance(runs, (Run, str, os.PathLike)):
        return False
    if isinstance(runs, Mapping):
        return bool(runs) and all(isinstance(v, (Run, str, os.PathLike)) for v in runs.values())
    return isinstance(runs, (list, tuple)) and bool(runs) and all(
        isinstance(v, (Run, str, os.PathLike, Mapping)) for v in runs)


def _load_runs(runs: RunsArg, dedup: Any, name: str | None) -> tuple[list[Run], list[str | None]]:
    """The runs and the file each was read from (``None``: not read from a file)."""
    if isinstance(runs, Mapping) and _several(runs):
        items: list[tuple[Any, str | None]] = [(v, str(k)) for k, v in runs.items()]
    elif _several(runs):
        items = [(v, None) for v in runs]
    else:
        items = [(runs, name)]
    loaded = [as_run(v, dedup=dedup, name=n) for v, n in items]
    names = [r.name for r in loaded]
    if len(set(names)) != len(names):
        raise InputError(f"two runs are named {next(n for n in names if names.count(n) > 1)!r}; "
                         "give distinct names ({name: run})", field="runs")
    paths = [str(v) if isinstance(v, (str, os.PathLike)) else None for v, _ in items]
    return loaded, paths


async def evaluate_with_judge(
    judge: Any,
    runs: RunsArg,
    metrics: Any = None,
    *,
    qrels: Any = None,
    queries: Mapping[str, str] | str | os.PathLike[str] | None = None,
    corpus: Mapping[str, str] | str | os.PathLike[str] | None = None,
    judge_depth: int | None = None,
    all_queries: bool | None = None,
    pool: Pool | str | os.PathLike[str] | None = None,
    rel: int | None = None,
    skip_missing: bool = False,
    judged_only: bool = False,
    max_depth: int | None = None,
    dedup: Any = "error",
    name: str | None = None,
    query_set: Sequence[str] | None = None,
    compare: Mapping[str, Any] | None = None,
    run_paths: Sequence[str | None] | None = None,
    judgments: str | os.PathLike[str] | None = None,
    save_qrels: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> Any:
    """Judge on demand, then evaluate: the unjudged documents in each run's top
    ``judge_depth`` (default: the largest metric cutoff, else :data:`DEFAULT_DEPTH`) are graded
    by ``judge`` (an :class:`~ragjudge.judges.LLMRelevanceJudge`), merged *under* the human
    ``qrels`` (``None``: label-free, with pool-free default metrics), and each run is scored by
    :func:`ragjudge.evaluate.evaluate` on the merged qrels.

    ``runs``: one run (a :class:`Run`, a path, ``{qid: {docid: score}}``...; ``name`` renames
    it) gives one :class:`~ragjudge.report.Report`; several (a list, or ``{name: run}``) are
    judged together -- each distinct pair once, one pool -- and give a list of reports in the
    same order (``compare``: :func:`ragjudge.evaluate.compare`'s keyword arguments, to get its
    :class:`~ragjudge.report.CompareReport` instead). ``queries``/``corpus``: the texts (dicts
    or BEIR/TSV paths). ``all_queries`` (default: only without human qrels) also judges run
    queries the human qrels lack. ``rel``, ``skip_missing``, ``judged_only``, ``max_depth``,
    ``dedup`` are :func:`~ragjudge.evaluate.evaluate`'s.

    Which queries a label-free mean is over: each run's own (never the union of the judged
    runs' queries, where a query a run lacks would count 0 and its mean would move with the
    others), or ``query_set`` when given (a query of the set a run lacks scores 0). When runs
    cover different query sets, a warning says so, and paired comparisons use the queries both
    runs have (``n`` of each comparison). ``meta["judging"]["query_sets"]`` records it.

    Each report's ``meta["judging"]`` holds :meth:`OnDemand.info`. ``pool`` (a file, or a
    :class:`~ragjudge.judges.pool.Pool`) keeps the labels from call to call: only the pairs it
    lacks are judged, the runs are recorded in it (``run_paths``: the files they were read
    from), and the runs recorded earlier are scored again against the grown pool
    (``meta["judging"]["pool"]["rescored"]``; a warning when one could not be). A warning also
    names the pool that pool-relative metrics depend on, and, label-free, a judge that made or
    filtered the queries it grades (the ``synth.jsonl`` beside a ``queries`` file).
    ``judgments`` / ``save_qrels``: write every judgment (JSONL) / the merged qrels, also the
    ones made before the run stopped. ``log`` receives lines on what judging did; ``warn`` the
    warnings (default :func:`warnings.warn`).

    The judge's LLM session is left open (the caller owns it); the blocking twin
    :func:`evaluate_with_judge_sync` closes it."""
    def warned(line: str) -> None:
        if warn is None:
            warnings.warn(line, stacklevel=3)
        else:
            warn(line)

    human = None if qrels is None else as_qrels(qrels, dedup=dedup)
    loaded, paths = _load_runs(runs, dedup, name)
    if run_paths is not None:
        paths = list(run_paths)
    if metrics is None and human is None:
        # label-free defaults: they do not move with the pool
        metrics = label_free_metrics(scale_top(judge))
    k = judge_depth if judge_depth is not None else default_depth(metrics, rel)
    q_texts, c_texts = _texts(queries, "queries"), _texts(corpus, "corpus")
    kept = None if pool is None else (pool if isinstance(pool, Pool) else Pool.load(pool))
    try:
        done = await judge_on_demand(judge, human, loaded, q_texts, c_texts, k,
                                     all_queries=all_queries, pool=kept)
    except LLMError as exc:
        # The run stopped (a revoked key, a vanished model): keep what was judged before it.
        partial = exc.partial
        if partial is not None and getattr(partial, "judgments", None):
            if judgments is not None:
                partial.write_judgments(judgments)
            if save_qrels is not None:
                write_qrels(partial.qrels, save_qrels, format="trec")
        raise
    if judgments is not None:
        done.result.write_judgments(judgments)
    if save_qrels is not None:
        write_qrels(done.qrels, save_qrels, format="trec")
    if log is not None:
        log(done.describe())
    if len(done.qrels) == 0:
        raise InputError("no labels to evaluate with: every judgment failed "
                         f"({done.result.summary()['failure_reasons']})", field="judge")
    label_free = human is None
    scored, own = done.qrels, label_free and query_set is None
    if query_set is not None:
        scored = _with_queries(done.qrels, list(dict.fromkeys(query_set)))
    options: dict[str, Any] = {"rel": rel, "skip_missing": skip_missing or own,
                               "judged_only": judged_only, "max_depth": max_depth}
    info = done.info()
    info["run_depth"] = run_depth(loaded)
    if kept is not None:
        earlier = {r.name: kept.runs[r.name] for r in loaded if r.name in kept.runs}
        for r, path in zip(loaded, paths):
            kept.record(r, path=path, depth=k, mean=evaluate(scored, r, metrics, **options).mean)
        rescored = rescore_pool(kept, done.qrels, skip=[r.name for r in loaded], earlier=earlier,
                                rel=rel, skip_missing=skip_missing or label_free)
        kept.save()
        info["pool"]["rescored"] = [x.to_dict() for x in rescored]
        info["pool"]["runs"] = list(kept.runs)
        info["pool_runs"] = list(kept.runs)
        if rescored and log is not None:
            log(describe_rescored(rescored, kept))
        info["pool_warning"] = pool_drift(rescored, kept)
        if info["pool_warning"]:
            warned(info["pool_warning"])
    if compare is not None and len(loaded) > 1:
        result: Any = compare_runs(scored, {r.name: r for r in loaded}, metrics,
                                   **{**options, **compare})
        reports = list(result.reports.values())
    else:
        reports = [evaluate(scored, r, metrics, **options) for r in loaded]
        result = reports if _several(runs) else reports[0]
    info["query_sets"] = _query_sets(reports, query_set, label_free)
    named = metrics if metrics is not None else list(reports[0].metrics)
    # pool-free measures reaching below the judge depth: named in the caveat, never cut
    info["past_depth"] = [m for m in pool_relative(named, rel, depth=k, run_depth=info["run_depth"])
                          if m not in pool_relative(named, rel)]
    info["pool_caveat"] = pool_caveat(named, info, label_free=label_free, rel=rel)
    info["circularity"] = (judge_circularity(judge, queries) if label_free else None)
    for report in reports:
        report.meta["judging"] = info
    for line in (info["query_sets"].get("note"), info["pool_caveat"], info["circularity"]):
        if line:
            warned(line)
    return result


def _with_queries(qrels: Qrels, query_set: list[str]) -> Qrels:
    """``qrels`` over exactly ``query_set``: a query without labels gets a placeholder
    judgment no run retrieves, so it is scored (a run lacking it scores its empty ranking)."""
    have = qrels.filter(query_set)
    lacking = [q for q in query_set if q not in have]
    if not lacking:
        return have
    pad = Qrels.from_arrays(lacking, ["\x00none"] * len(lacking), [0] * len(lacking))
    return pad if len(have) == 0 else have.merge(pad)


def _query_sets(reports: Sequence[Any], query_set: Sequence[str] | None,
                label_free: bool) -> dict[str, Any]:
    """Which queries each mean is over, and one line when the runs' sets differ."""
    per_run = {r.run: len(r.qids) for r in reports}
    sets = [set(r.qids) for r in reports]
    common = len(set.intersection(*sets)) if sets else 0
    scope = "given" if query_set is not None else ("own" if label_free else "qrels")
    out: dict[str, Any] = {"scope": scope, "per_run": per_run, "common": common, "note": None}
    if scope == "own" and len({frozenset(x) for x in sets}) > 1:
        out["note"] = (
            "runs cover different query sets (" + ", ".join(f"{n}: {c}" for n, c in per_run.items())
            + f" queries): each mean is over the run's own queries; paired comparisons use the "
            f"queries both runs have ({common} common to all); give one query set to score all "
            "runs on the same queries")
    return out


def _same_model(a: str | None, b: str | None) -> bool:
    """The same model, also across a dated snapshot (``gpt-4o-mini`` and ``gpt-4o-mini-2024-07-18``)."""
    if not a or not b:
        return False
    a, b = a.lower().rsplit("/", 1)[-1], b.lower().rsplit("/", 1)[-1]
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")


def query_origin(queries: Any) -> dict[str, set[str]]:
    """The models (``generated``, ``filtered``) and judge prompt ids (``filter_prompts``) that
    made the queries of a ``queries`` file written by ``ragjudge synth`` (read from the
    ``synth.jsonl`` beside it; empty sets when there is none or ``queries`` is not a path)."""
    out: dict[str, set[str]] = {"generated": set(), "filtered": set(), "filter_prompts": set()}
    if not isinstance(queries, (str, os.PathLike)):
        return out
    where = os.path.join(os.path.dirname(os.fspath(queries)) or ".", "synth.jsonl")
    try:
        with open(where, encoding="utf-8") as f:
            for line in f:
                try:
                    c = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(c, dict) or c.get("status") != "kept":
                    continue
                gen, jd = c.get("generation") or {}, c.get("judgment") or {}
                if gen.get("model"):
                    out["generated"].add(str(gen["model"]))
                if jd.get("model"):
                    out["filtered"].add(str(jd["model"]))
                if jd.get("prompt_id"):
                    out["filter_prompts"].add(str(jd["prompt_id"]))
    except OSError:
        pass
    return out


def judge_circularity(judge: Any, queries: Any) -> str | None:
    """One line when ``judge`` is the model (or uses the prompt family) that generated or
    filtered the synthetic ``queries`` it grades: its scores then measure its own choices."""
    origin = query_origin(queries)
    model = getattr(getattr(judge, "llm", None), "model", None)
    prompt = getattr(getattr(judge, "prompt", None), "id", None)
    why = [f"it {verb} the queries" for verb in ("generated", "filtered")
           if any(_same_model(model, m) for m in origin[verb])]
    if prompt and prompt in origin["filter_prompts"]:
        why.append(f"its prompt family ({prompt}) filtered them")
    if not why:
        return None
    return (f"the judge {model} grades queries it chose: {' and '.join(why)}; label-free "
            "scores then measure agreement with its own choices (a perfect score is expected, not "
            "evidence): judge with another model family, or label a sample by hand")


def evaluate_with_judge_sync(judge: Any, runs: RunsArg, metrics: Any = None, **kwargs: Any) -> Any:
    """Blocking :func:`evaluate_with_judge` (same arguments); works inside a running event loop
    (Jupyter). The judge's HTTP client of the private loop is closed at the end."""

    async def main() -> Any:
        try:
            return await evaluate_with_judge(judge, runs, metrics, **kwargs)
        finally:
            await judge.llm.aclose()

    return run_sync(main())
