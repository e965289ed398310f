"""``ragjudge nuggets``: answer-level evaluation with nuggets, from the shell.

Only argument parsing and output here; the work is in :mod:`ragjudge.nuggets`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import InputError, LLMError
from ..nuggets import (
    LABELS,
    LABELS_2,
    METRICS,
    AssignResult,
    CreateResult,
    assign_nuggets_sync,
    cite_support_sync,
    create_nuggets_sync,
    estimate_assign,
    estimate_cite,
    estimate_create,
    label_importance_sync,
    nugget_agreement,
    read_answers,
    read_assignments,
    read_nuggets,
    read_support,
    score_assignments,
)
from ..nuggets.labelling import human_from_files
from ..nuggets.options import NuggetOptions
from ..report import FORMATS, render_reports
from ._inputs import add_option, check_writable, options_from_args, write_output
from ._llm import add_llm_options, llm_from_args
from ._plot import add_plot_options, check_plot_path, draw_panels, write_plot
from .gates import JUnitReport, add_junit_option, below, parse_gate, report_failures, worse_than

__all__ = ["register"]

_SCORES = """\
scores per answer (N nuggets, V the vital ones; support 1, partial_support 0.5 except in the
strict scores, not_support 0):
  strict_vital  supported vital nuggets / |V|
  vital         (supported + 0.5 partially supported vital nuggets) / |V|
  strict_all    supported nuggets / N
  all           (supported + 0.5 partially supported nuggets) / N
  weighted      sum of weight x credit / sum of weights (vital 1, okay 0.5)
A run's score is the mean over the queries it answered, with a bootstrap interval; each run is
tested against the baseline (paired, Holm-adjusted). An answer whose nuggets were not all
assigned, or a vital score of a query without vital nuggets, is undetermined (counted, never 0).
"""

_EPILOG = """\
steps:
  create   nuggets from each query's relevant passages (qrels >= --min-grade, or the answers'
           cited passages), then their importance (vital / okay)
  assign   each query's nuggets to each answer: support / partial_support / not_support
  score    per-run scores with intervals and paired tests from assignment files
  cite     citation support of each answer sentence by each passage it cites; ALCE citation
           precision and recall
  agree    agreement of LLM assignments with human ones (kappa with intervals), run-level
           Kendall tau, and a PPI interval for each run's score

exit status: 0 ok; 1 a gate failed; 2 bad input (one-line message), or a run-stopping endpoint
error (a spend limit, a bad key: create and assign write what was made before it and name the
rest; a rerun pays only for the rest); 3 most LLM requests failed; 4 stopped by --max-cost
before the end (assign).
"""


def register(subparsers: Any) -> None:
    """Add the ``nuggets`` command and its steps."""
    p = subparsers.add_parser(
        "nuggets", help="answer-level evaluation as TREC RAG does it: nuggets, scores, citation support",
        description="Nugget evaluation of RAG answers (TREC RAG 2024/2025): create nuggets, assign "
                    "them to answers, score runs with intervals, check citation support.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = p.add_subparsers(dest="step", metavar="STEP")
    steps.required = True
    _create_parser(steps)
    _assign_parser(steps)
    _score_parser(steps)
    _cite_parser(steps)
    _agree_parser(steps)
    p.set_defaults(func=lambda args: args.step_func(args))


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--format", choices=FORMATS, default="table", help="output format")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE")
    p.add_argument("--digits", type=int, default=4, metavar="N", help="decimals (default 4)")


def _stats_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", metavar="RUN", help="run the others are tested against (default: the first)")
    p.add_argument("--test", choices=("randomization", "t"), default="randomization",
                   help="paired test (default randomization)")
    p.add_argument("--resamples", type=int, default=10_000, metavar="N",
                   help="bootstrap / randomization resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    p.add_argument("--all-pairs", action="store_true", help="test every pair of runs")


def _emit(text: str, args: argparse.Namespace) -> None:
    write_output(text if text.endswith("\n") else text + "\n", args.output)


# ----------------------------------------------------------------------------- score
def _score_parser(steps: Any) -> None:
    p = steps.add_parser(
        "score", help="per-run nugget scores with intervals and paired tests",
        description="Score runs from assignment files: one JSON object per answer with qid, run_id "
                    "and nuggets (text, importance, assignment), as `ragjudge nuggets assign` and the "
                    "reference implementation write them.",
        epilog=_SCORES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", metavar="FILE", nargs="+", help="assignment files (JSONL; .gz, - too)")
    p.add_argument("-m", "--metric", dest="metrics", action="append", metavar="SCORE",
                   help="strict_vital, vital, strict_all, all, weighted (default all five); repeatable")
    p.add_argument("-q", "--per-query", action="store_true", help="also print per-query scores")
    p.add_argument("--two-grade", action="store_true",
                   help="assignments are support / not_support only (refuse partial_support)")
    _output_options(p)
    _stats_options(p)
    p.add_argument("--fail-under", action="append", default=[], metavar="SCORE=VALUE",
                   help="exit 1 if a run's mean SCORE is below VALUE (CI gate); repeatable")
    p.add_argument("--fail-if-worse", metavar="BASELINE",
                   help="exit 1 if a run is significantly worse than run BASELINE on any score")
    add_junit_option(p)
    add_plot_options(p, ("means", "differences", "hist", "box"),
                     "means (forest plot, the default), differences, hist, box")
    p.set_defaults(step_func=_score)


def _score(args: argparse.Namespace) -> int:
    check_writable([args.output])
    check_plot_path(args)
    metrics = [m.strip() for spec in (args.metrics or []) for m in spec.split(",") if m.strip()] or list(METRICS)
    gates = [parse_gate(g) for g in args.fail_under]
    for m, _ in gates:
        if m not in metrics:
            if m not in METRICS:
                raise InputError(f"unknown nugget score {m!r}; expected {', '.join(METRICS)}",
                                 field="--fail-under")
            metrics.append(m)
    labels = LABELS_2 if args.two_grade else LABELS
    assignments = [a for f in args.files for a in read_assignments(f, labels=labels)]
    report = score_assignments(assignments, baseline=args.baseline or args.fail_if_worse,
                               metrics=metrics, test=args.test, n_resamples=args.resamples,
                               seed=args.seed, alpha=args.alpha, all_pairs=args.all_pairs)
    if args.format == "json":
        text = report.render("json", per_query=args.per_query)
    else:
        text = report.render(args.format, per_query=args.per_query, digits=args.digits)
        if args.per_query:
            text += ("\n" if args.format == "table" else "") + render_reports(
                list(report.reports.values()), args.format, per_query=True, digits=args.digits)
    _emit(text, args)
    for run, rep in report.reports.items():
        for qid, why in rep.meta.get("reasons", {}).items():
            print(f"ragjudge: {run} {qid}: undetermined: {why}", file=sys.stderr)
    write_plot(args, lambda plots: _draw(plots, report, args))
    junit = JUnitReport("nuggets score") if args.junit else None
    status = report_failures("--fail-under", [
        (f"run {run}: {metric} >= {threshold:g}", below(f"run {run}: {metric}", rep.mean.get(metric), threshold))
        for metric, threshold in gates for run, rep in report.reports.items()], junit)
    if args.fail_if_worse:
        if args.fail_if_worse not in report.reports:
            raise InputError(f"no run named {args.fail_if_worse!r}", field="--fail-if-worse")
        status = report_failures("--fail-if-worse", worse_than(report, args.fail_if_worse, args.digits),
                                 junit) or status
    if junit is not None:
        junit.write(args.junit)
    return status


def _draw(plots: Any, report: Any, args: argparse.Namespace) -> Any:
    kind = args.plot_kind or "means"
    return draw_panels(plots, lambda key, ax: report.plot(key[1], kind=kind, ax=ax), report.metrics)


# ----------------------------------------------------------------------------- LLM steps
def _answers(paths: list[str]) -> list[Any]:
    """The answers of every file; a file without any is an error naming it (a truncated file
    or a wrong path, never an evaluation of nothing)."""
    out = []
    for p in paths:
        got = read_answers(p)
        if not got:
            raise InputError("no answers in this file", source=p)
        out.extend(got)
    return out


def _check_assignable(nuggets: list[Any], answers_of: dict[str, list[Any]], source: str) -> None:
    """Refuse, before any call, inputs that would assign nothing: a nuggets file without a
    nugget, or an answers file none of whose queries has nuggets (mismatched ids: both sides'
    first ids are shown)."""
    if not any(s.nuggets for s in nuggets):
        raise InputError("no nuggets to assign", source=source)
    have = {s.qid for s in nuggets if s.nuggets}
    for path, answers in answers_of.items():
        qids = list(dict.fromkeys(a.qid for a in answers))
        if not have.intersection(qids):
            raise InputError(
                f"none of its {len(qids)} queries ({', '.join(qids[:3])}{', ...' if len(qids) > 3 else ''}) "
                f"has nuggets in {source} (queries {', '.join(sorted(have)[:3])}"
                f"{', ...' if len(have) > 3 else ''}); are the query ids the same?", source=path)


def _print_usage(what: str, usage: dict[str, Any], per: int, unit: str) -> None:
    cost = usage.get("cost_usd")
    print(f"ragjudge: {what}: {usage.get('calls', 0)} calls ({usage.get('cache_hits', 0)} cached, "
          f"{usage.get('retries', 0)} retries, {usage.get('failed_calls', 0)} failed), "
          f"{usage.get('total_tokens', 0)} tokens ({usage.get('total_tokens', 0) / max(1, per):.0f}/{unit})"
          + ("" if cost is None else f", ${cost:.4f}"), file=sys.stderr)


def _print_dry(dry: Any) -> int:
    print(dry.describe())
    return 0


def _assign_parser(steps: Any) -> None:
    p = steps.add_parser(
        "assign", help="assign each query's nuggets to each answer with an LLM",
        description="Grade every nugget of a query against every answer to it (support, "
                    "partial_support, not_support; several nuggets per call) and write the "
                    "assignments, one JSON object per answer.",
        epilog=_SCORES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("nuggets", metavar="NUGGETS", help="nuggets file (JSONL, one query per line)")
    p.add_argument("answers", metavar="ANSWERS", nargs="+",
                   help="answer files: TREC RAG 2024/2025 JSONL, {query_id, answer} records or RAG samples")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="assignments file to write (JSONL)")
    add_option(p, NuggetOptions, "grades", type=int, choices=(2, 3))
    add_option(p, NuggetOptions, "assign_window", type=int, metavar="N")
    p.add_argument("--score", action="store_true", help="also print the per-run scores")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this process (default); ray: a Ray Data pipeline, each worker assigning "
                        "batches of answers with this session (--max-cost split evenly between the "
                        "workers; --ray-address/--ray-workers as for judge); needs pip install -e '.[ray]'")
    p.add_argument("--ray-address", metavar="ADDR", help="with --engine ray: an existing cluster; default a local one")
    p.add_argument("--ray-workers", type=int, default=2, metavar="N", help="with --engine ray: workers (default 2)")
    add_llm_options(p)
    p.set_defaults(step_func=_assign)


def _assign(args: argparse.Namespace) -> int:
    check_writable([args.output])
    options = options_from_args(NuggetOptions, args)
    nuggets = read_nuggets(args.nuggets)
    answers_of = {p: _answers([p]) for p in args.answers}
    _check_assignable(nuggets, answers_of, args.nuggets)
    answers = [a for got in answers_of.values() for a in got]
    llm = llm_from_args(args)
    if args.dry_run:
        return _print_dry(estimate_assign(nuggets, answers, llm=llm, options=options))
    try:
        if args.engine == "ray":
            from ..ray import assign_nuggets_ray_sync  # deferred: loads Ray, only for --engine ray

            res = assign_nuggets_ray_sync(nuggets, answers, llm=llm, options=options,
                                          workers=args.ray_workers, address=args.ray_address)
        else:
            res = assign_nuggets_sync(nuggets, answers, llm=llm, options=options, progress=not args.no_progress)
    except LLMError as exc:
        _write_stopped_assign(exc, args, llm)
        raise
    res.write(args.output)
    for run, qid in res.missing:
        print(f"ragjudge: {run} {qid}: no nuggets for this query; not assigned", file=sys.stderr)
    _print_usage("assign", res.usage, len(res.assignments), "answer")
    if args.score and res.assignments:
        sys.stdout.write(res.score().render("table") + "\n")
    if res.budget_cut:
        print(f"ragjudge: error: stopped by --max-cost {args.max_cost:g}: {res.budget_cut} of {res.total} "
              "nugget grades not made; rerun with a higher budget to continue (exit status 4)",
              file=sys.stderr)
        return 4
    if res.mostly_failed:
        reasons: dict[str, int] = {}
        for a in res.assignments:
            for n in a.failed:
                reasons[n.failure or "?"] = reasons.get(n.failure or "?", 0) + 1
        top = "; ".join(f"{r} ({k}x)" for r, k in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
        print(f"ragjudge: error: {res.failed} of {res.total} nugget grades failed; most common: {top}",
              file=sys.stderr)
        return 3
    return 0


def _resume_hint(llm: Any) -> str:
    return ("a rerun resumes from the cache without paying for them again" if llm.cache.path is not None
            else "--no-cache was given: a rerun pays for them again")


def _write_stopped_assign(exc: LLMError, args: argparse.Namespace, llm: Any) -> None:
    """The run stopped (a spend limit, a revoked key): write the assignments made before it
    (the other nuggets failed with the stop as reason), so nothing paid for is lost, and say
    how many are incomplete."""
    res = exc.partial
    if not isinstance(res, AssignResult):
        return
    res.write(args.output)
    incomplete = sum(1 for a in res.assignments if a.failed)
    print(f"ragjudge: the run stopped; wrote {len(res.assignments)} answers to {args.output}: "
          f"{res.total - res.failed} of {res.total} nugget grades made, {res.stopped} not made, "
          f"{incomplete} answers incomplete; {_resume_hint(llm)}", file=sys.stderr)


def _create_parser(steps: Any) -> None:
    p = steps.add_parser(
        "create", help="nuggets of each query from its relevant passages, then vital/okay",
        description="Create nuggets (atomic facts a good answer holds) from each query's relevant "
                    "passages: graded at least --min-grade in QRELS (human, or an LLM judge's pool), "
                    "or cited by the answers; then label them vital or okay. Writes a nuggets file a "
                    "person can read and edit (JSONL, one query per line).")
    p.add_argument("--queries", metavar="FILE", help="query texts (BEIR JSONL or TSV); default: the "
                                                      "answers' topics")
    p.add_argument("--qrels", metavar="QRELS", help="relevance judgments choosing the passages")
    p.add_argument("--corpus", metavar="FILE", help="passage texts (BEIR JSONL or TSV)")
    p.add_argument("--answers", metavar="FILE", nargs="+", help="answer files: their cited passages")
    p.add_argument("--label", metavar="NUGGETS",
                   help="only label the importance of a nuggets file's unlabelled nuggets")
    p.add_argument("--no-importance", action="store_true", help="leave importance unlabelled")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="nuggets file to write (JSONL)")
    for name in ("create_window", "max_nuggets", "importance_window", "min_grade", "max_passages"):
        add_option(p, NuggetOptions, name, type=int, metavar="N")
    add_llm_options(p)
    p.set_defaults(step_func=_create)


def _create(args: argparse.Namespace) -> int:
    check_writable([args.output])
    options = options_from_args(NuggetOptions, args)
    if args.label:
        sets = read_nuggets(args.label)
        llm = llm_from_args(args)
        if args.dry_run:
            print("dry run: label importance of the unlabelled nuggets of "
                  f"{sum(1 for s in sets if any(n.importance is None for n in s.nuggets))} queries")
            return 0
        try:
            res = label_importance_sync(sets, llm=llm, options=options, progress=not args.no_progress)
        except LLMError as exc:
            _write_stopped_create(exc, args, llm)
            raise
    else:
        if args.qrels and not args.corpus:
            raise InputError("--qrels needs --corpus (the passages' texts)", field="--corpus")
        if not args.qrels and not args.answers:
            raise InputError("give --qrels QRELS --corpus FILE, or --answers FILE...", field="--qrels")
        answers = _answers(args.answers) if args.answers else None
        if args.queries:
            queries: Any = args.queries
        elif answers:
            queries = {a.qid: a.query for a in answers if a.query}
        else:
            raise InputError("--queries is needed with --qrels", field="--queries")
        llm = llm_from_args(args)
        kw = dict(llm=llm, qrels=args.qrels, corpus=args.corpus, answers=answers,
                  importance=not args.no_importance, options=options)
        if args.dry_run:
            return _print_dry(estimate_create(queries, **kw))
        try:
            res = create_nuggets_sync(queries, progress=not args.no_progress, **kw)
        except LLMError as exc:
            _write_stopped_create(exc, args, llm)
            raise
    res.write(args.output)
    for q, why in res.failures.items():
        for w in why:
            print(f"ragjudge: {q}: {w}", file=sys.stderr)
    print(f"ragjudge: {res.describe()}", file=sys.stderr)
    if res.mostly_failed:
        print(f"ragjudge: error: {res.failed} of {res.calls} calls failed", file=sys.stderr)
        return 3
    return 0


def _write_stopped_create(exc: LLMError, args: argparse.Namespace, llm: Any) -> None:
    """The run stopped (a spend limit, a revoked key): write the nugget sets made before it and
    name the queries left unfinished (their nuggets, or their importance)."""
    res = exc.partial
    if not isinstance(res, CreateResult):
        return
    made = {s.qid for s in res.sets}
    no_set = [q for q in res.stopped if q not in made]
    unlabelled = [s.qid for s in res.sets if any(n.importance is None for n in s.nuggets)]

    def some(qids: list[str]) -> str:
        return ", ".join(qids[:5]) + (f" and {len(qids) - 5} more" if len(qids) > 5 else "")

    left = "; ".join(([f"the nuggets of {some(no_set)}"] if no_set else [])
                     + ([f"the importance of {some(unlabelled)}"] if unlabelled else []))
    if res.sets:  # an empty file would only replace an earlier one
        res.write(args.output)
    wrote = f"wrote the nuggets of {len(res.sets)} queries to {args.output}" if res.sets else "nothing to write"
    print(f"ragjudge: the run stopped; {wrote}" + (f"; not made: {left}" if left else "")
          + f"; {_resume_hint(llm)}", file=sys.stderr)


_ALCE = """\
citation support (ALCE, Gao et al. 2023), one call per answer:
  citation recall     share of an answer's sentences its cited passages together fully
                      support; a sentence citing nothing counts as unsupported
  citation precision  share of its citations that are relevant: of a fully supported sentence,
                      supporting it fully or partly alone
"""


def _cite_parser(steps: Any) -> None:
    p = steps.add_parser(
        "cite", help="citation support of answer sentences; ALCE citation precision and recall",
        description="Check each answer sentence against the passages it cites (full / partial / none) "
                    "and report citation precision and recall per run with intervals.",
        epilog=_ALCE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("answers", metavar="ANSWERS", nargs="+", help="answer files in the TREC RAG layout")
    p.add_argument("--corpus", metavar="FILE", help="texts of the cited passages (BEIR JSONL or TSV)")
    p.add_argument("--labels", metavar="FILE", help="write the support labels (JSONL, one answer per line)")
    _output_options(p)
    _stats_options(p)
    add_llm_options(p, skip=("--seed",))  # --seed is the resampling's (and the sampling seed too)
    p.set_defaults(step_func=_cite)


def _cite(args: argparse.Namespace) -> int:
    check_writable([args.output, args.labels])
    answers = _answers(args.answers)
    llm = llm_from_args(args)
    if args.dry_run:
        return _print_dry(estimate_cite(answers, llm=llm, corpus=args.corpus))
    res = cite_support_sync(answers, llm=llm, corpus=args.corpus, progress=not args.no_progress)
    if args.labels:
        res.write(args.labels)
    report = res.score(baseline=args.baseline, test=args.test, n_resamples=args.resamples,
                       seed=args.seed, alpha=args.alpha, all_pairs=args.all_pairs)
    _emit(report.render(args.format) if args.format == "json"
          else report.render(args.format, digits=args.digits), args)
    for run, rep in report.reports.items():
        for qid, why in rep.meta.get("reasons", {}).items():
            print(f"ragjudge: {run} {qid}: undetermined: {why}", file=sys.stderr)
    _print_usage("cite", res.usage, len(res.answers), "answer")
    if res.mostly_failed:
        print(f"ragjudge: error: {res.failed} of {res.calls} citation calls failed", file=sys.stderr)
        return 3
    return 0


def _agree_parser(steps: Any) -> None:
    p = steps.add_parser(
        "agree", help="LLM vs human assignments: kappa, run-level Kendall tau, PPI per run",
        description="Agreement of LLM nugget assignments with human ones on the nuggets both assigned "
                    "(kappa, weighted kappa, Krippendorff's alpha with bootstrap intervals), Kendall's "
                    "tau between the run orderings under each, and a PPI interval for each run's "
                    "score over all its answers from the few people assessed.")
    p.add_argument("llm", metavar="LLM", help="LLM assignments (JSONL)")
    p.add_argument("human", metavar="HUMAN", nargs="?",
                   help="human assignments of some answers (same layout); or give --to-label and --labels")
    p.add_argument("--to-label", metavar="FILE",
                   help="the to-label file of `ragjudge plan-labels --nuggets` (with --labels)")
    p.add_argument("--labels", metavar="LOG",
                   help="its labels log (written by `ragjudge ui`): the human assignments of the "
                        "completed queries")
    p.add_argument("--metric", default="all", choices=("strict_vital", "vital", "strict_all", "all", "weighted"),
                   help="score of the run-level correlation and PPI (default all)")
    p.add_argument("--support-llm", metavar="FILE", help="support labels of `nuggets cite --labels`")
    p.add_argument("--support-human", metavar="FILE", help="human support labels (one line per pair)")
    p.add_argument("-f", "--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE")
    p.add_argument("--resamples", type=int, default=1000, metavar="N", help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    p.set_defaults(step_func=_agree)


def _human(args: argparse.Namespace) -> Any:
    """HUMAN, or the human assignments a labels log holds for a nugget to-label file."""
    if bool(args.to_label) != bool(args.labels):
        raise InputError("give both --to-label and --labels", field="--labels")
    if bool(args.human) == bool(args.labels):
        raise InputError("give HUMAN, or --to-label FILE --labels LOG (not both)", field="HUMAN")
    if args.human:
        return args.human
    human = human_from_files(args.to_label, args.labels)
    print(f"ragjudge: {len(human)} answers assigned by hand in {args.labels} (completed queries only)",
          file=sys.stderr)
    return human


def _agree(args: argparse.Namespace) -> int:
    if bool(args.support_llm) != bool(args.support_human):
        raise InputError("give both --support-llm and --support-human", field="--support-human")
    check_writable([args.output])
    rep = nugget_agreement(args.llm, _human(args), metric=args.metric,
                           support_llm=read_support(args.support_llm) if args.support_llm else None,
                           support_human=read_support(args.support_human) if args.support_human else None,
                           n_resamples=args.resamples, seed=args.seed)
    _emit(rep.render(args.format), args)
    for n in rep.notes:
        print(f"ragjudge: {n}", file=sys.stderr)
    return 0
