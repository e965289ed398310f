"""Evaluate runs against qrels: :func:`evaluate`, :func:`compare` and :func:`evaluate_lists`.

This module decides *which* queries are scored and how they are averaged; the metric math is
in :mod:`ragjudge.engine`, the statistics in :mod:`ragjudge.stats`, the output in
:mod:`ragjudge.report`.

Query semantics (the same as ``trec_eval -c``):

* a query that is only in the run is ignored (and counted in ``meta["num_ignored"]``);
* a qrels query missing from the run scores its empty-ranking value (0 for every measure
  but a few such as ``rbp_residual``), counted in ``meta["num_missing"]``;
* ``skip_missing=True`` instead averages over the queries present in both -- the numbers
  trec_eval 9 and pytrec_eval report.
"""

from __future__ import annotations

import inspect
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np

from ._version import __version__
from .data import Dedup, Qrels, Run
from .errors import InputError, MetricError
from .io.coerce import as_qrels, as_run
from .lists import check_gold, check_ranking, score_lists
from .measures import MIN_GEO_MEAN, Measure, canonical_measure, parse_measure, spec_of, split_metric_list
from .report import Comparison, CompareReport, Report
from .stats import bootstrap_cis, cohens_dz, holm, paired_t_test, randomization_tests, win_tie_loss
from .engine import compute

__all__ = [
    "EvaluationWarning",
    "DEFAULT_METRICS",
    "DEFAULT_LIST_METRICS",
    "evaluate",
    "compare",
    "compare_reports",
    "evaluate_lists",
    "MetricsArg",
]

#: Metrics used when none are given: a standard ad-hoc retrieval set.
DEFAULT_METRICS: tuple[str, ...] = ("map", "mrr", "ndcg@10", "p@10", "recall@100")
#: Metrics of :func:`evaluate_lists` (each expanded over ``k_list``).
DEFAULT_LIST_METRICS: tuple[str, ...] = ("hit", "recall", "precision", "mrr", "ndcg")

PathLike = Union[str, "os.PathLike[str]"]
# Also accepted (see ragjudge.io.coerce): pandas DataFrames, ranx Qrels / Run objects and
# ir_measures iterables of Qrel / ScoredDoc namedtuples.
QrelsLike = Union[Qrels, Mapping[str, Mapping[str, int]], PathLike, Any]
RunLike = Union[Run, Mapping[str, Mapping[str, float]], PathLike, Any]
MetricsArg = Union[str, Measure, Sequence[Union[str, Measure]], Mapping[str, Union[str, Measure]], None]


TestName = Literal["randomization", "t"]
TESTS: tuple[str, ...] = ("randomization", "t")


# ----------------------------------------------------------------------------- inputs
def _not_awaited(value: Any, field: str) -> None:
    """A coroutine where a value belongs is an async call without ``await``: say which."""
    if inspect.iscoroutine(value):
        fn = getattr(value, "__qualname__", "the function")
        value.close()  # never awaited, on purpose: no "never awaited" warning on top
        raise InputError(f"{field} is a coroutine: {fn}() is async; write `await {fn}(...)`, or "
                         f"call {fn}_sync(...) in blocking code", field=field)


def _load_qrels(qrels: QrelsLike, dedup: Dedup) -> Qrels:
    # Qrels, path, dict, DataFrame, ranx Qrels or ir_measures Qrel iterable: see io.coerce.
    _not_awaited(qrels, "qrels")
    return as_qrels(qrels, dedup=dedup)


def _load_run(run: RunLike, dedup: Dedup, name: str | None = None) -> Run:
    # Run, path, dict, DataFrame, ranx Run or ir_measures ScoredDoc iterable: see io.coerce.
    _not_awaited(run, "run")
    if isinstance(run, Mapping):
        _check_run_dict(run, name)
    return as_run(run, dedup=dedup, name=name)


_RUN_SHAPES = ("a Run, a path, a {qid: {docid: score}} dict, a DataFrame, a ranx Run, or several "
               "runs as {name: run} or [run, ...]")


def _check_run_dict(run: Mapping[Any, Any], name: str | None) -> None:
    """A dict run is ``{qid: {docid: score}}``; anything else is one line saying so."""
    where = f"run {name!r}" if name else "run"
    for qid, docs in run.items():
        if not isinstance(docs, Mapping):
            raise InputError(f"{where}: query {qid!r} maps to a {type(docs).__name__}, not "
                             f"{{docid: score}}; a run must be {_RUN_SHAPES}", field="run")
        for doc, score in docs.items():
            if isinstance(score, bool) or not isinstance(score, (int, float, np.number)):
                raise InputError(f"{where}: query {qid!r}, document {doc!r}: score is a "
                                 f"{type(score).__name__}, not a number; a run must be "
                                 f"{_RUN_SHAPES}", field="run")
            break


def _is_one_run(value: Any) -> bool:
    """Whether ``value`` can be one run among several (a mapping's value, a list's item)."""
    if isinstance(value, (Run, str, os.PathLike)):
        return True
    if isinstance(value, Mapping):  # {qid: {docid: score}}: its values are mappings
        return bool(value) and all(isinstance(v, Mapping) for v in value.values())
    return hasattr(value, "columns") or type(value).__module__.startswith("ranx")


def several_runs(run: Any) -> bool:
    """Whether ``run`` holds several runs: ``{name: run}`` (its values are runs, paths or
    ``{qid: {docid: score}}`` dicts, not ``{docid: score}``) or a list/tuple of runs (not of
    ir_measures ``ScoredDoc`` records)."""
    if isinstance(run, Mapping):
        return bool(run) and all(_is_one_run(v) for v in run.values())
    if isinstance(run, (list, tuple)):
        return bool(run) and all(_is_one_run(v) for v in run)
    return False


def _metric_keys(metrics: MetricsArg, rel: int | None) -> dict[str, Measure]:
    """``{key as the user typed it: Measure}``: the API edge, where a user's spec string is
    parsed (with ``rel``), once; a :class:`Measure` is checked and kept as it is (in canonical
    form: one built by hand may not be; its key is its spec as given). A string may be a comma-separated list; a mapping gives the keys itself
    (``{"P@10": Measure}``, how the CLI passes what it parsed)."""
    if isinstance(metrics, Mapping):
        out = {str(key): _measure(spec, rel) for key, spec in metrics.items()}
        if not out:
            raise MetricError("no metrics given")
        return out
    if metrics is None:
        items: list[str | Measure] = list(DEFAULT_METRICS)
    elif isinstance(metrics, (str, Measure)) or hasattr(metrics, "NAME"):
        items = [metrics]  # type: ignore[list-item]
    else:
        items = list(metrics)
    out: dict[str, Measure] = {}
    for item in items:
        if isinstance(item, Measure):
            key = str(item)
            if key not in out:
                out[key] = canonical_measure(item)
            continue
        if isinstance(item, str):
            specs = list(split_metric_list(item))
        elif hasattr(item, "NAME"):  # an ir_measures measure object: str() is its spec
            specs = [str(item)]
        else:
            raise MetricError(f"a metric must be a spec string or a Measure, got {item!r}")
        for spec in specs:
            key = spec.strip()
            if key not in out:
                out[key] = parse_measure(spec, rel=rel)
    if not out:
        raise MetricError("no metrics given")
    return out


def _measure(spec: str | Measure, rel: int | None) -> Measure:
    """One metric of a ``{key: metric}`` mapping: a Measure as it is, a spec parsed with ``rel``."""
    return canonical_measure(spec) if isinstance(spec, Measure) else parse_measure(spec, rel=rel)


def _check_max_depth(max_depth: int | None) -> None:
    if max_depth is not None and (
        isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1
    ):
        raise InputError(f"max_depth must be a positive integer, got {max_depth!r}",
                         field="max_depth")


def _check_rel(rel: int | None) -> None:
    if rel is not None and (isinstance(rel, bool) or not isinstance(rel, int) or rel < 1):
        raise InputError(f"relevance threshold must be an integer >= 1, got {rel!r}", field="rel")


#: What evaluate() took before judging on demand had its own entry point.
_JUDGING_OPTIONS = ("judge", "queries", "corpus", "judge_depth", "depth", "pool")


def _refuse_judging(options: Mapping[str, Any]) -> None:
    moved = [k for k in options if k in _JUDGING_OPTIONS]
    if moved:
        raise TypeError(f"evaluate() does not judge ({', '.join(moved)}=): use "
                        "ragjudge.evaluate_with_judge_sync(judge, run, metrics, qrels=..., "
                        "queries=..., corpus=...), or await ragjudge.evaluate_with_judge(...)")
    raise TypeError(f"evaluate() got an unexpected keyword argument {next(iter(options))!r}")


# ----------------------------------------------------------------------------- sanity
class EvaluationWarning(UserWarning):
    """A number computed as asked that may still mislead (ids that never meet the qrels,
    rankings shorter than the cutoff, ties that decide a value); also in ``meta["warnings"]``."""


#: Below this share of ranked queries meeting a judged document, the ids probably differ.
FEW_MEETING = 0.1
#: From this percent of ranked ids shaped unlike every qrels id, the ids probably differ.
FOREIGN_PCT = 50
#: Below this share of the judged rows a run's top k could hold, its ids mostly miss the
#: judgments. The share is of what the qrels can fill, min(k, ranking's length, the query's
#: judgments) per query, not of the top k: sparse qrels leave most of a top k unjudged by
#: design (MS MARCO judges about one document per query; the bundled synthetic collection has
#: 9-15% of its runs' top-10 rows judged), and unjudged documents are normal in pooled
#: collections too. Measured when this was set, the lowest share of the bundled runs at
#: k = 5, 10, 20, 100 and 1000 is 0.54 (examples/runs), 0.52 (examples/synth/runs) and 0.49
#: (trec_eval's test runs, at k = 1000): 0.1 is far below any of them.
FEW_JUDGED = 0.1


#: The package's folder: a warning names the first line outside it (the caller's).
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _callers_level() -> int:
    """``stacklevel`` of the first frame outside ragjudge, seen from the function that calls
    this: a warning then names the user's line whichever path (one run, several, a judge) led
    to it. (Python 3.12's ``skip_file_prefixes`` does this; 3.10 and 3.11 lack it.)"""
    here = inspect.currentframe()  # this function; its caller's caller is level 2
    frame = here.f_back.f_back if here is not None and here.f_back is not None else None
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def sanity_warnings(notes: Mapping[str, Any], run: str, measures: Mapping[str, Measure]) -> list[str]:
    """One line per thing that may make ``run``'s numbers mislead, from the engine's counts."""
    out: list[str] = []
    ranked = notes.get("queries_ranked", 0)
    if not ranked:
        return out  # no evaluated query is in the run: the query accounting says so
    meeting = notes.get("queries_meeting_qrels", 0)
    if meeting == 0:
        out.append(f"run {run}: none of its document ids is in the qrels ({ranked} queries "
                   "ranked): its scores are 0; check the document ids (e.g. the corpus ids, not "
                   "content hashes)")
    elif meeting < FEW_MEETING * ranked:
        out.append(f"run {run}: only {meeting} of {ranked} queries rank any judged document; "
                   "check the document ids match the qrels")
    elif notes.get("ids_foreign_pct", 0) >= FOREIGN_PCT:
        out.append(f"run {run}: about {notes['ids_foreign_pct']}% of its ranked document ids are "
                   f"shaped unlike any qrels id (e.g. {notes['id_example']!r} against "
                   f"{notes['qrels_id_example']!r}); they count as non-relevant: check the ids")
    elif notes.get("judged_fillable", 0) and notes["judged_top"] < FEW_JUDGED * notes["judged_fillable"]:
        k, top = notes["judged_cutoff"], notes["judged_top"]
        pct = 100 * top / notes["judged_rows"]
        out.append(f"run {run}: only {pct:.2g}% of its top-{k} rows are judged ({top} of "
                   f"{notes['judged_rows']}, where its queries' judgments could fill "
                   f"{notes['judged_fillable']}); unjudged documents count as non-relevant: check "
                   "the ids or the pool depth")
    short, cutoff = notes.get("queries_short", 0), notes.get("cutoff")
    if cutoff is not None and short * 2 > ranked:
        deep = [key for key, m in measures.items() if m.k == cutoff]
        out.append(f"run {run}: {short} of {ranked} queries have fewer than {cutoff} documents "
                   f"({', '.join(deep)} counts the missing ranks as non-relevant); retrieve at "
                   f"least {cutoff} per query")
    tied = notes.get("queries_tied", 0)
    if tied and meeting:  # with nothing judged, no order of ties changes a value
        out.append(f"run {run}: {notes.get('queries_tied_any', tied)} of {ranked} queries have "
                   f"tied scores, {tied} between documents of different grades, where the order "
                   "decides the value: ragjudge keeps trec_eval's (document id descending); "
                   "tools that order ties otherwise differ")
    return out


# ----------------------------------------------------------------------------- evaluate
def _member(keys: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in the sorted unique byte column ``table``."""
    if len(table) == 0:
        return np.zeros(len(keys), dtype=bool)
    i = np.searchsorted(table, keys)
    i[i == len(table)] = 0
    return table[i] == keys


def _decode_all(ids: np.ndarray) -> list[str]:
    return [b.decode("utf-8") for b in ids.tolist()]


def _judged_probe(measures: Mapping[str, Measure], judged_only: bool) -> list[Measure]:
    """``judged@k`` at the deepest cutoff asked, computed with the measures (one more
    reduction of the same layout) for the sanity check; none without a cutoff or with
    ``judged_only`` (every ranked document is judged then)."""
    cutoffs = [m.k for m in measures.values() if m.k is not None and spec_of(m).cutoff]
    return [] if judged_only or not cutoffs else [Measure("judged", (), max(cutoffs))]


def _judged_coverage(qrels: Qrels, run: Run, evaluated: np.ndarray, judged: np.ndarray,
                     k: int) -> dict[str, Any]:
    """The judged rows in the top ``k`` of the ``evaluated`` queries (sorted byte ids, as
    ``judged``, their ``judged@k``), all their top-``k`` rows, and the rows the qrels could
    fill: min(k, the ranking's length, the query's judgments) per query."""
    qq, qoff = qrels.arrays[0], qrels.arrays[1]
    rq, roff = run.arrays[0], run.arrays[1]
    counts = np.diff(qoff)[np.searchsorted(qq, evaluated)]
    lengths = np.zeros(len(evaluated), dtype=np.int64)
    ranked = _member(evaluated, rq)
    lengths[ranked] = np.diff(roff)[np.searchsorted(rq, evaluated[ranked])]
    top = np.minimum(lengths, k)
    return {"judged_cutoff": k, "judged_rows": int(top.sum()),
            "judged_top": int(np.rint(judged * top).sum()),
            "judged_fillable": int(np.minimum(top, counts).sum())}


def _evaluate_loaded(
    qrels: Qrels,
    run: Run,
    measures: dict[str, Measure],
    *,
    rel: int | None,
    skip_missing: bool,
    judged_only: bool = False,
    max_depth: int | None = None,
) -> Report:

    # Query bookkeeping on the sorted byte columns: on 100,000 queries, sets of decoded strings
    # cost more than the whole evaluation of some metrics.
    qq = qrels.arrays[0]
    rq = run.arrays[0]
    if len(qq) == 0:
        raise InputError("the qrels contain no queries", source=qrels.source)
    q_in_run = _member(qq, rq)
    r_in_qrels = _member(rq, qq)
    missing = _decode_all(qq[~q_in_run])
    ignored = _decode_all(rq[~r_in_qrels])
    if skip_missing:
        target = qq[q_in_run]
        qids = _decode_all(target)
        compute_qids: list[str] | None = qids
    else:
        qids = _decode_all(qq)
        compute_qids = None  # all qrels queries in qrels order: the engine's gather-free path
    if not qids:
        raise InputError(
            f"no query of run {run.name!r} is in the qrels (skip_missing leaves nothing to evaluate)",
            source=run.source,
        )
    unique = list(dict.fromkeys(measures.values()))
    if max_depth is not None:
        run = run.top(max_depth)
    notes: dict[str, Any] = {}
    probe = _judged_probe(measures, judged_only)
    computed = compute(qrels, run, unique + probe, qids=compute_qids, judged_only=judged_only,
                       notes=notes)
    if probe:
        notes.update(_judged_coverage(qrels, run, qq if compute_qids is None else target,
                                      np.asarray(computed[probe[0]]), probe[0].k or 0))
    values = {key: np.asarray(computed[m], dtype=np.float64) for key, m in measures.items()}
    meta: dict[str, Any] = {
        "num_q": len(qids),
        "num_q_qrels": len(qq),
        "num_q_run": len(rq),
        "num_missing": len(missing),
        "num_ignored": len(ignored),
        "missing_queries": missing,
        "ignored_queries": ignored,
        "skip_missing": skip_missing,
        "judged_only": judged_only,
        "max_depth": max_depth,
        "rel": rel,
        # The scale of rbp(gain=graded) without max_grade: the largest grade of these qrels.
        "qrels_max_grade": qrels.max_grade,
        "measures": {key: str(m) for key, m in measures.items()},
        "qrels_source": qrels.source,
        "run_source": run.source,
        "ragjudge_version": __version__,
    }
    found = sanity_warnings(notes, run.name, measures)
    if found:
        meta["warnings"] = found
        level = _callers_level()
        for text in found:
            warnings.warn(text, EvaluationWarning, stacklevel=level)
    kinds = {key: spec_of(m).aggregate for key, m in measures.items()}
    return Report(run.name, qids, values, meta,
                  summed=[k for k, a in kinds.items() if a == "sum"],
                  geometric=[k for k, a in kinds.items() if a == "gmean"])


def evaluate(
    qrels: QrelsLike,
    run: RunLike,
    metrics: MetricsArg = None,
    *,
    rel: int | None = None,
    skip_missing: bool = False,
    judged_only: bool = False,
    max_depth: int | None = None,
    dedup: Dedup = "error",
    name: str | None = None,
    **judging: Any,
) -> Report | CompareReport:
    """Evaluate one run: ``evaluate(qrels, run, ["ndcg@10", "map"]) -> Report``.

    Several runs, ``{name: run}`` or ``[run, ...]``, are compared as the CLI compares several
    files: ``evaluate(qrels, {"bm25": a, "dense": b})`` is ``compare(qrels, {...})`` with its
    defaults (a :class:`CompareReport`; the first run is the baseline).

    ``qrels`` / ``run``: :class:`Qrels` / :class:`Run`, pytrec_eval-style dicts, or file paths
    (read with :func:`ragjudge.io.read_qrels` / :func:`~ragjudge.io.read_run`, ``dedup``
    applying to files). ``metrics``: spec strings (a string may be a comma-separated list) or
    :class:`Measure` objects; report keys are the specs exactly as given; default
    :data:`DEFAULT_METRICS`. ``rel``: default relevance threshold of the spec strings' measures
    that take one and do not set it (a :class:`Measure` is used as it is).
    ``skip_missing``: average over the queries in both qrels and run instead of scoring qrels
    queries missing from the run as empty rankings. ``judged_only`` (trec_eval ``-J``): drop
    the documents without a qrels entry (or with a negative label) from every ranking first,
    moving the others up. ``max_depth`` (trec_eval ``-M``): keep only each query's top
    ``max_depth`` documents (before ``judged_only``). ``name`` renames the run.

    Judging on demand (an LLM grading the unjudged documents first) is not done here: it is
    :func:`ragjudge.evaluate_with_judge` (``_sync`` in blocking code).
    """
    if judging:
        _refuse_judging(judging)
    if several_runs(run):
        if name is not None:
            raise InputError("name= renames one run; several runs are named by their keys",
                             field="name")
        runs = _named_runs(run, dedup)
        if len(runs) > 1:  # as the CLI does with several runs: compared, with statistics
            return compare(qrels, runs, metrics, rel=rel, skip_missing=skip_missing,
                           judged_only=judged_only, max_depth=max_depth, dedup=dedup)
        run = next(iter(runs.values()))
    _check_rel(rel)
    _check_max_depth(max_depth)
    measures = _metric_keys(metrics, rel)
    q = _load_qrels(qrels, dedup)
    r = _load_run(run, dedup, name)
    return _evaluate_loaded(q, r, measures, rel=rel, skip_missing=skip_missing,
                            judged_only=judged_only, max_depth=max_depth)


# ----------------------------------------------------------------------------- compare
def _named_runs(runs: Mapping[str, RunLike] | Sequence[RunLike], dedup: Dedup) -> dict[str, Run]:
    out: dict[str, Run] = {}
    if isinstance(runs, Mapping):
        pairs = [(str(k), _load_run(v, dedup, str(k))) for k, v in runs.items()]
    elif isinstance(runs, (str, os.PathLike, Run)):
        pairs = [(None, _load_run(runs, dedup))]  # type: ignore[list-item]
    elif isinstance(runs, (list, tuple)) and all(_is_one_run(v) for v in runs):
        pairs = [(None, _load_run(v, dedup)) for v in runs]  # type: ignore[misc]
    else:
        pairs = [(None, _load_run(runs, dedup))]
    for _, run in pairs:
        if run.name in out:
            raise InputError(
                f"two runs are named {run.name!r}; give distinct names ({{name: run}})", field="runs"
            )
        out[run.name] = run
    if not out:
        raise InputError("no runs to compare", field="runs")
    return out


def compare(
    qrels: QrelsLike,
    runs: Mapping[str, RunLike] | Sequence[RunLike],
    metrics: MetricsArg = None,
    baseline: str | None = None,
    *,
    test: TestName = "randomization",
    n_resamples: int = 10_000,
    seed: int | None = 0,
    alpha: float = 0.05,
    confidence: float = 0.95,
    rel: int | None = None,
    skip_missing: bool = False,
    judged_only: bool = False,
    max_depth: int | None = None,
    dedup: Dedup = "error",
    all_pairs: bool = False,
) -> CompareReport:
    """Evaluate several runs and test each against ``baseline`` (default: the first run), or
    every pair of runs with ``all_pairs=True``.

    For every metric and every other run: the mean per-query difference (run - baseline), its
    percentile bootstrap interval, and a paired two-sided test -- ``"randomization"`` (sign
    flipping, :func:`ragjudge.stats.randomization_test`) or ``"t"`` (paired t test). p-values
    are Holm-adjusted per metric over the runs compared with the baseline (a family of
    ``len(runs) - 1`` tests); ``significant`` means adjusted p <= ``alpha``. Each run's mean gets
    a bootstrap interval too. All resampling uses ``seed`` (the same seed for every test, so a
    result does not depend on the order of runs or metrics).

    Beside each p-value: ``wins``/``ties``/``losses`` (queries where run > = < baseline) and the
    paired effect size ``effect_size`` = Cohen's d_z = mean(d) / sd(d) (n - 1).

    ``all_pairs=True`` tests every pair of runs: for runs in order ``[baseline, r2, r3, ...]``
    each pair (earlier, later) becomes a :class:`Comparison` with ``run`` = the later and
    ``baseline`` = the earlier run, and Holm's correction runs per metric over the family of all
    ``k (k - 1) / 2`` pairs (``report.comparison(run, metric, vs=other)`` finds either order).

    Tests pair queries: with ``skip_missing=False`` (default) every run is scored on all qrels
    queries; with ``skip_missing=True`` a comparison uses the queries both runs retrieved for.
    """
    if test not in TESTS:
        raise InputError(f"unknown test {test!r}; expected one of {', '.join(TESTS)}", field="test")
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha}", field="alpha")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence}", field="confidence")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise InputError(f"n_resamples must be a positive integer, got {n_resamples!r}",
                         field="n_resamples")
    _check_rel(rel)
    _check_max_depth(max_depth)
    measures = _metric_keys(metrics, rel)
    q = _load_qrels(qrels, dedup)
    loaded = _named_runs(runs, dedup)
    if baseline is None:
        baseline = next(iter(loaded))
    if baseline not in loaded:
        raise InputError(
            f"baseline {baseline!r} is not one of the runs: {', '.join(loaded)}", field="baseline"
        )
    # Baseline first, then the others in the given order.
    order = [baseline] + [n for n in loaded if n != baseline]
    reports = {
        n: _evaluate_loaded(q, loaded[n], measures, rel=rel, skip_missing=skip_missing,
                            judged_only=judged_only, max_depth=max_depth)
        for n in order
    }

    meta = {
        "skip_missing": skip_missing,
        "judged_only": judged_only,
        "max_depth": max_depth,
        "rel": rel,
        "qrels_source": q.source,
        "ragjudge_version": __version__,
    }
    return compare_reports(reports, baseline, measures, test=test, n_resamples=n_resamples,
                           seed=seed, alpha=alpha, confidence=confidence, all_pairs=all_pairs,
                           meta=meta)


def compare_reports(
    reports: Mapping[str, Report],
    baseline: str,
    measures: Sequence[str],
    *,
    test: TestName = "randomization",
    n_resamples: int = 10_000,
    seed: int | None = 0,
    alpha: float = 0.05,
    confidence: float = 0.95,
    all_pairs: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> CompareReport:
    """Intervals and paired tests of per-query values already computed (one :class:`Report` per
    run, baseline first): what :func:`compare` does once the runs are scored, for any per-query
    scores (nugget scores, say). ``meta`` is added to the report's settings."""
    order = [baseline] + [n for n in reports if n != baseline]
    reports = {n: reports[n] for n in order}
    boot = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)
    # Intervals of every run's mean.
    ci_vectors: list[np.ndarray] = []
    ci_slots: list[tuple[str, str, int]] = []
    ci: dict[str, dict[str, tuple[float, float] | None]] = {}
    for n, rep in reports.items():
        ci[n] = {}
        for key in rep.metrics:
            v = rep.values[key]
            v = v[np.isfinite(v)]
            ci[n][key] = None
            if len(v):
                # A summed count's interval is the interval of the mean scaled by the count; a
                # geometric mean's is exp of the interval of the mean log (percentile bootstrap
                # intervals follow monotone transforms).
                ci_slots.append((n, key, len(v) if key in rep.summed else 1))
                ci_vectors.append(_log_floor(v) if key in rep.geometric else v)
    for (n, key, scale), (lo, hi) in zip(ci_slots, _batched(bootstrap_cis, ci_vectors, **boot)):
        geo = key in reports[n].geometric
        ci[n][key] = (math.exp(lo), math.exp(hi)) if geo else (lo * scale, hi * scale)

    # Paired differences: each later run against the baseline, or every (earlier, later) pair.
    base = reports[baseline]
    pairs = ([(order[i], order[j]) for i in range(len(order)) for j in range(i + 1, len(order))]
             if all_pairs else [(baseline, n) for n in order[1:]])
    entries: list[dict[str, Any]] = []
    diffs: list[np.ndarray] = []
    for key in measures:
        for ref, n in pairs:
            a, b = _paired(reports[n], reports[ref], key)
            if key in base.geometric:  # gm_map: paired on logs, delta = log(gm_run / gm_base)
                a, b = _log_floor(a), _log_floor(b)
            d = a - b
            entry: dict[str, Any] = {"metric": key, "run": n, "baseline": ref, "n": len(d),
                                     "test": test, "delta": None, "delta_ci": None,
                                     "statistic": None, "p_value": None, "note": None}
            if len(d) == 0:
                entry["note"] = "no query scored by both runs"
            else:
                if key in base.geometric:
                    entry["note"] = "geometric mean: delta is log(run / baseline), tested on logs"
                entry["delta"] = float(d.mean()) * (len(d) if key in base.summed else 1)
                entry["wins"], entry["ties"], entry["losses"] = win_tie_loss(a, b)
                entry["effect_size"] = cohens_dz(d)
                diffs.append(d)
            entries.append(entry)
    with_d = [e for e in entries if e["delta"] is not None]
    for e, d, (lo, hi) in zip(with_d, diffs, _batched(bootstrap_cis, diffs, **boot)):
        scale = len(d) if e["metric"] in base.summed else 1
        e["delta_ci"] = (lo * scale, hi * scale)
    if test == "t":
        for e, d in zip(with_d, diffs):
            if len(d) < 2:
                e["note"] = "the t test needs at least 2 paired queries"
            else:
                e["statistic"], e["p_value"] = paired_t_test(d)
    else:
        results = _batched(randomization_tests, diffs, n_resamples=n_resamples, seed=seed)
        for e, res in zip(with_d, results):
            e["statistic"], e["p_value"] = res

    # Holm within each metric's family: the pairs tested on that metric.
    comparisons: list[Comparison] = []
    for key in measures:
        fam = [e for e in entries if e["metric"] == key]
        tested = [e for e in fam if e["p_value"] is not None]
        adjusted = holm([e["p_value"] for e in tested]) if tested else []
        for e in fam:
            e["p_adjusted"] = None
            e["significant"] = None
        for e, adj in zip(tested, adjusted):
            e["p_adjusted"] = adj
            e["significant"] = bool(adj <= alpha)
        comparisons.extend(Comparison(**e) for e in fam)

    meta = {
        "baseline": baseline,
        "test": test,
        "n_resamples": n_resamples,
        "seed": seed,
        "alpha": alpha,
        "confidence": confidence,
        "correction": "holm",
        "family": ("per metric: every pair of runs" if all_pairs
                   else "per metric: every run compared with the baseline"),
        "all_pairs": all_pairs,
        "ci_method": "percentile bootstrap",
        **(meta or {}),
    }
    found = [text for rep in reports.values() for text in rep.meta.get("warnings", ())]
    if found:
        meta["warnings"] = found
    return CompareReport(reports, baseline, ci, comparisons, meta)


def _log_floor(v: np.ndarray) -> np.ndarray:
    """log(max(v, 1e-5)): the per-query terms of trec_eval's geometric means."""
    return np.log(np.maximum(v, MIN_GEO_MEAN))


def _batched(fn: Any, vectors: list[np.ndarray], **kwargs: Any) -> list[Any]:
    """Apply a row-wise stats function (bootstrap_cis / randomization_tests) to vectors of
    possibly different lengths, one matrix per length; results in input order."""
    out: list[Any] = [None] * len(vectors)
    by_len: dict[int, list[int]] = {}
    for i, v in enumerate(vectors):
        by_len.setdefault(len(v), []).append(i)
    for idx in by_len.values():
        for i, r in zip(idx, fn(np.stack([vectors[i] for i in idx]), **kwargs)):
            out[i] = r
    return out


def _paired(a: Report, b: Report, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-query values of two reports on the queries both scored (both determined)."""
    va, vb = a.values[key], b.values[key]
    if a.qids == b.qids:
        ok = np.isfinite(va) & np.isfinite(vb)
        return va[ok], vb[ok]
    ib = {q: i for i, q in enumerate(b.qids)}
    pairs = [(i, ib[q]) for i, q in enumerate(a.qids) if q in ib]
    ia = np.array([p[0] for p in pairs], dtype=np.int64)
    jb = np.array([p[1] for p in pairs], dtype=np.int64)
    xa, xb = va[ia], vb[jb]
    ok = np.isfinite(xa) & np.isfinite(xb)
    return xa[ok], xb[ok]


# ----------------------------------------------------------------------------- lists
def evaluate_lists(
    gold_docs: Sequence[Sequence[str] | Mapping[str, int]],
    retrieved_docs: Sequence[Sequence[str]],
    metrics: MetricsArg = None,
    k_list: Sequence[int] | None = (1, 3, 5, 10),
    *,
    rel: int | None = None,
) -> tuple[dict[str, float | None], list[dict[str, float | None]]]:
    """Evaluate parallel lists, the shape RAG toolkits use: one entry per example.

    ``gold_docs[i]``: the relevant ids of example ``i`` (or ``{id: grade}``);
    ``retrieved_docs[i]``: its ranked ids, best first. Metric specs without a cutoff are
    expanded over ``k_list`` (``"recall"`` -> ``recall@1, recall@3, ...``); specs with ``@k``
    are kept as is; ``k_list=None`` expands nothing. Default metrics: :data:`DEFAULT_LIST_METRICS`.

    The semantics are those of the RAG samples (:mod:`ragjudge.lists`): a repeated id keeps
    its rank and counts once; an example whose gold has no relevant id (none with grade >= the
    measure's ``rel``) is undetermined -- its value is ``None``, it is left out of the pooled
    mean (``None`` if no example is determined) and a warning gives the reason; a ``None``
    entry or id is an :class:`InputError`; a value never depends on the other examples.

    Returns ``(pooled, per_example)``: ``{metric: mean}`` and a list (input order) of
    ``{metric: value}``.
    """
    if isinstance(gold_docs, (str, bytes)) or isinstance(retrieved_docs, (str, bytes)):
        raise InputError("gold_docs and retrieved_docs must be lists of lists", field="gold_docs")
    n = len(gold_docs)
    if len(retrieved_docs) != n:
        raise InputError(
            f"{n} gold lists but {len(retrieved_docs)} retrieved lists", field="retrieved_docs"
        )
    if k_list is not None:
        for k in k_list:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
                raise MetricError(f"every k in k_list must be a positive integer, got {k!r}")
    base = list(DEFAULT_LIST_METRICS) if metrics is None else _spec_list(metrics)
    specs: list[str] = []
    for spec in base:
        if k_list and _expandable(spec, rel):
            specs.extend(_with_cutoff(spec, k, rel) for k in k_list)
        else:
            specs.append(spec)
    measures = _metric_keys(specs, rel)
    gold = [check_gold(g, f"gold_docs[{i}]") for i, g in enumerate(gold_docs)]
    rankings = [check_ranking(r, f"retrieved_docs[{i}]") for i, r in enumerate(retrieved_docs)]
    got = score_lists(gold, rankings, list(dict.fromkeys(measures.values())))
    columns = [[v if isinstance(v, float) else None for v in got[m]] for m in measures.values()]
    per_example: list[dict[str, float | None]] = [dict(zip(measures, row)) for row in zip(*columns)]
    if not columns:
        per_example = [{} for _ in range(n)]
    pooled: dict[str, float | None] = {}
    reasons: dict[str, int] = {}
    for key, m in measures.items():
        values = [v for v in got[m] if isinstance(v, float)]
        pooled[key] = float(np.mean(values)) if values else None
        for v in got[m]:
            if isinstance(v, str):
                reasons[v] = reasons.get(v, 0) + 1
    if reasons:
        why = "; ".join(f"{reason}: {count}" for reason, count in reasons.items())
        warnings.warn(f"evaluate_lists: undetermined values (None, left out of the means): {why}",
                      stacklevel=2)
    return pooled, per_example


def _spec_list(metrics: MetricsArg) -> list[str]:
    if isinstance(metrics, (str, Measure)):
        metrics = [metrics]
    out: list[str] = []
    for m in metrics or []:
        out.extend([str(m)] if isinstance(m, Measure) else split_metric_list(m))
    return out


def _with_cutoff(spec: str, k: int, rel: int | None) -> str:
    """``spec`` at cutoff ``k``: ``spec@k`` when that parses (``ndcg@5``, ``P@5``), else the
    canonical spec with the cutoff (ranx's ``rbp.80`` -> ``rbp(gain=raw,p=0.8)@5``)."""
    naive = f"{spec}@{k}"
    try:
        parse_measure(naive, rel=rel)
    except MetricError:
        m = parse_measure(spec, rel=rel)
        return str(Measure(m.name, m.params, k))
    return naive


def _expandable(spec: str, rel: int | None) -> bool:
    """Whether ``spec`` has no cutoff yet (``P_10`` carries one in its name) but takes one
    (``rprec`` / ``bpref`` do not)."""
    m = parse_measure(spec, rel=rel)
    return m.k is None and spec_of(m).cutoff
