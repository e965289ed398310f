"""``ragjudge evaluate`` and ``ragjudge compare``: score runs against qrels from the shell.

Only argument parsing and output here; the work is :func:`ragjudge.evaluate.evaluate` /
:func:`ragjudge.evaluate.compare`, the output :mod:`ragjudge.report`.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from ..errors import InputError, MetricError
from ..evaluate import DEFAULT_METRICS, TESTS, EvaluationWarning, compare, evaluate
from ..data import Run
from ..render import html_note
from ..io import check_output_path, read_run
from ..integrations.mlflow import log_mlflow
from ..io.streams import is_fd_path
from ..measures import Measure, parse_measure, split_metric_list
from ..report import FORMATS, TREC_FORMAT, CompareReport, Report, render_reports
from ._plot import add_plot_options, check_plot_path, draw_panels, write_plot
from .gates import Check, JUnitReport, add_junit_option, below, parse_gate, report_failures, worse_than
from .trust import add_ppi_options, evaluate_judged, evaluate_ppi, evaluate_soft
from ._llm import add_llm_options
from ._inputs import (
    add_beir_options,
    add_format_options,
    beir_from_args,
    check_inputs,
    read_qrels_arg,
    read_run_arg,
    write_output,
)

__all__ = ["register"]

_OUTPUT_FORMATS = (*FORMATS, TREC_FORMAT)

_EPILOG = f"""\
metrics: -m takes a spec name[(param=value,...)][@k] (e.g. ndcg@10, map(rel=2), P_10,
rbp(p=0.8,gain=graded)@20); a value may list several, comma-separated (commas inside
parentheses belong to the parameters). Default: {', '.join(DEFAULT_METRICS)}.

queries: like trec_eval -c, qrels queries missing from a run score their empty-ranking value
(0 for most metrics) and run-only queries are ignored; --skip-missing averages over the
queries in both (trec_eval 9 / pytrec_eval numbers).

several runs: each is named by its file stem and tested against the baseline (default: the
first run) with a paired randomization or t test, Holm-adjusted per metric over the runs
compared with the baseline, with 95% percentile bootstrap intervals; beside each p-value the
paired effect size d_z (mean / sd of the per-query differences) and win/tie/loss counts.
--all-pairs tests every pair of runs instead (Holm over all pairs, per metric).

exit status: 0 ok; 1 a gate failed (--fail-under, --fail-if-worse; one stderr line each);
2 bad input (one-line message).
"""


def _add_arguments(p: argparse.ArgumentParser, *, min_runs: int) -> None:
    p.add_argument("qrels", metavar="QRELS", help="relevance judgments (TREC, BEIR TSV or JSON; .gz, "
                   "- for stdin); with --beir, the first run")
    p.add_argument("runs", metavar="RUN", nargs="*",
                   help="run file(s) (TREC, MS MARCO qid/docid/rank or JSON; .gz, pipes ok)")
    add_format_options(p)
    add_beir_options(p, "its qrels replace QRELS")
    p.set_defaults(parser=p)  # usage errors found after parsing (RUN missing) exit like argparse's
    p.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC",
                   help="metric spec (ndcg@10, map(rel=2)) or a list separated by commas or "
                        "spaces; repeatable; trec_eval (P_10, P.5,10, all_trec), ir_measures (AP, "
                        "nDCG@10) and ranx (hit_rate@5, map-l2) names are read too")
    p.add_argument("-q", "--per-query", action="store_true",
                   help="also print per-query values (json always has them)")
    p.add_argument("--skip-missing", action="store_true",
                   help="average over queries in both qrels and run (trec_eval 9 / pytrec_eval)")
    p.add_argument("--rel", type=int, metavar="N",
                   help="minimum grade counted as relevant by binary metrics (default 1)")
    p.add_argument("-J", "--judged-only", action="store_true",
                   help="drop unjudged documents (no qrels entry or a negative label) from every "
                        "ranking first, moving the others up (trec_eval -J)")
    p.add_argument("-M", "--max-depth", type=int, metavar="N",
                   help="keep only the top N documents of every query (trec_eval -M)")
    p.add_argument("--dedup", choices=("error", "first"), default="error",
                   help="duplicate (query, doc) lines: error (default) or keep the first")
    p.add_argument("-f", "--format", choices=_OUTPUT_FORMATS, default="table",
                   help="output format (default: table)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE instead of stdout")
    p.add_argument("--mlflow", action="store_true",
                   help="also log the result to MLflow (metrics with intervals, settings, JSON) at the "
                        "tracking URI MLflow is configured with (MLFLOW_TRACKING_URI); needs "
                        "pip install -e '.[mlflow]' in the ragjudge checkout")
    p.add_argument("--digits", type=int, default=4, metavar="N",
                   help="decimals in human formats (default 4)")
    p.add_argument("--baseline", metavar="NAME",
                   help="run (file stem) the others are compared with (default: the first)")
    p.add_argument("--test", choices=TESTS, default="randomization",
                   help="paired significance test (default: randomization)")
    p.add_argument("--resamples", type=int, default=10_000, metavar="N",
                   help="randomization / bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level after Holm correction (default 0.05)")
    p.add_argument("--all-pairs", action="store_true",
                   help="test every pair of runs (Holm over all pairs, per metric), not only "
                        "each run against the baseline")
    if min_runs < 2:
        p.add_argument("--no-stats", action="store_true",
                       help="with several runs, print means only (no tests or intervals)")
        _add_trust_options(p)
    p.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE",
                   help="exit 1 if a run's mean METRIC is below VALUE (CI gate); repeatable")
    add_plot_options(p, ("means", "differences", "hist", "box", "pr"),
                     "means (forest plot, the default with several runs), differences (per-query "
                     "wins/ties/losses vs the baseline; every tested pair with --all-pairs), hist "
                     "(the default with one run), box, pr (11-point interpolated precision-recall "
                     "curves); a panel per metric")
    p.add_argument("--fail-if-worse", metavar="BASELINE",
                   help="exit 1 if any run is significantly worse (Holm-adjusted p <= --alpha, "
                        "lower mean) than run BASELINE (file stem) on any metric (CI gate); "
                        "BASELINE becomes the baseline unless --all-pairs")
    add_junit_option(p)
    p.set_defaults(func=_run, min_runs=min_runs)


def _add_trust_options(p: argparse.ArgumentParser) -> None:
    """``evaluate``'s options for LLM labels: --human/--ppi (prediction-powered estimates),
    --soft (expected values under per-grade probabilities), --judge (judging on demand).
    ``compare`` has none of them: each mode reports its own kind of result, not paired tests."""
    g = p.add_argument_group(
        "trusting LLM labels",
        "--human/--ppi: QRELS are LLM labels on all queries and --human the human labels\n"
        "of a random subset; each run's prediction-powered mean is reported with its interval\n"
        "beside the LLM-only and human-only ones (PPI++ unless --ppi-classic).\n"
        "--soft: expected metric values under the judge's per-grade probabilities\n"
        "(QRELS: certain human labels, or none).")
    g.add_argument("--human", metavar="QRELS", help="human qrels of a random subset of the queries")
    g.add_argument("--ppi", action="store_true",
                   help="prediction-powered estimates (PPI++ by default; needs --human)")
    g.add_argument("--scale", metavar="LOW-HIGH",
                   help="label scale, e.g. 0-3: a grade outside it in either qrels is an error")
    add_ppi_options(g)
    g.add_argument("--soft", metavar="JUDGMENTS.jsonl",
                   help="judgments with per-grade probabilities (ragjudge judge --judgments): "
                        "score each metric's expected value E[f(g)]")
    g.add_argument("--samples", type=int, default=256, metavar="N",
                   help="--soft: exact up to N grade combinations per query, else N seeded "
                        "Monte-Carlo draws (default 256)")
    j = p.add_argument_group(
        "judging on demand",
        "--judge MODEL grades exactly the unjudged documents in the top --judge-depth of each run\n"
        "(human labels win) before evaluating; QRELS may be 'none' or left out (label-free).\n"
        "Same cache, budget and failure rules as `ragjudge judge`; exit 3 if most failed, 4 if\n"
        "--max-cost stopped it before every pair was judged.")
    j.add_argument("--judge", metavar="MODEL", help="LLM judge model")
    j.add_argument("--queries", metavar="FILE", help="query texts (BEIR JSONL or TSV)")
    j.add_argument("--corpus", metavar="FILE", help="document texts (BEIR JSONL or TSV)")
    j.add_argument("--judge-depth", "--depth", dest="judge_depth", type=int, metavar="K",
                   help="judge each run's top K (default: the largest metric cutoff, else 20)")
    j.add_argument("--all-queries", action="store_true",
                   help="also judge run queries the human qrels do not have")
    j.add_argument("--query-set", metavar="FILE",
                   help="label-free: score every run on these queries (a queries file or one id "
                        "a line; a query a run lacks scores 0) instead of each run's own")
    j.add_argument("--prompt", default="relevance.v1", metavar="NAME|FILE",
                   help="judge prompt (default relevance.v1)")
    j.add_argument("--judgments", metavar="OUT.jsonl", help="write every judgment with provenance")
    j.add_argument("--save-qrels", metavar="OUT.qrels", help="write the merged qrels")
    j.add_argument("--pool", metavar="FILE",
                   help="keep the pool in FILE (TREC qrels of every LLM label, with provenance "
                        "and the runs scored): judge only the pairs it lacks, add them, and "
                        "score again the runs recorded in it, saying whose scores changed")
    # The same LLM options as `ragjudge judge` (one definition); --judge names the model and
    # --seed stays the bootstrap's.
    add_llm_options(p, model=False, group=j, skip=("--seed",))


def register(subparsers: Any) -> None:
    """Add the ``evaluate`` and ``compare`` subcommands."""
    ev = subparsers.add_parser(
        "evaluate",
        help="score run(s) against qrels (trec_eval-compatible); compare several runs",
        description="Score one or more runs against qrels. With several runs, test each against "
        "the baseline.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(ev, min_runs=1)
    cmp_ = subparsers.add_parser(
        "compare",
        help="compare runs: paired tests, Holm correction, bootstrap intervals",
        description="Compare two or more runs on the same qrels: paired tests of each run against "
        "the baseline (or of every pair with --all-pairs), effect sizes, intervals, CI gates.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(cmp_, min_runs=2)


# ----------------------------------------------------------------------------- helpers
def _run_names(paths: list[str], args: argparse.Namespace) -> tuple[list[str], dict[str, Run]]:
    """The runs' names, and the runs already read, by name.

    File stems (``runs/bm25.trec.gz`` -> ``bm25.trec``); the file name, then the path as given,
    where stems collide. A ``/dev/fd/N`` path (bash's ``<(zcat bm25.run.gz)``) says nothing: it
    is read here, once (a pipe cannot be read again), and named by its run tag (the sixth
    column; ``TAG-N`` when another run already has that name)."""
    names = _stem_names(paths)
    early: dict[str, Run] = {}
    for i, path in enumerate(paths):
        if not is_fd_path(path):
            continue
        run = read_run_arg(path, args, dedup=args.dedup)  # named by its tag, if it has one
        if run.name != names[i] and run.name != "stdin":
            taken = set(names[:i] + names[i + 1:])
            names[i] = run.name if run.name not in taken else f"{run.name}-{Path(path).name}"
        early[names[i]] = run.with_name(names[i])
    return names, early


def _read(name: str, path: str, args: argparse.Namespace, early: dict[str, Run]) -> Run:
    """Run ``name`` from ``path``, or as read already by :func:`_run_names`."""
    return early[name] if name in early else read_run_arg(path, args, name=name, dedup=args.dedup)


def _stem_names(paths: list[str]) -> list[str]:

    def stem(p: str) -> str:
        name = Path(p).name
        if name.lower().endswith(".gz"):
            name = name[:-3]
        return Path(name).stem or name

    names = [stem(p) for p in paths]
    for alt in (lambda p: Path(p).name, lambda p: p):
        dup = {n for n in names if names.count(n) > 1}
        names = [alt(p) if n in dup else n for p, n in zip(paths, names)]
    if len(set(names)) != len(names):
        raise InputError("the same run file is given twice", field="RUN")
    return names


def _metric_list(
    args: argparse.Namespace, gates: list[tuple[str, float]]
) -> tuple[dict[str, Measure], list[str]]:
    """``{metric key: Measure}`` to evaluate (parsed here, once), and for each gate the key it is
    checked against.

    A gate on a metric not requested with -m is evaluated as well (matched by canonical form,
    so ``--fail-under P_10=0.3`` checks ``-m p@10``).
    """
    keys: list[str] = []
    for value in args.metrics or list(DEFAULT_METRICS):
        keys.extend(split_metric_list(value))
    if not keys:
        raise MetricError("no metrics given")
    measures: dict[str, Measure] = {}
    canon: dict[Measure, str] = {}
    for k in keys:
        measures[k] = parse_measure(k, rel=args.rel)
        canon.setdefault(measures[k], k)
    gate_keys: list[str] = []
    for metric, _ in gates:
        if metric in measures:
            gate_keys.append(metric)
            continue
        m = parse_measure(metric, rel=args.rel)
        if m not in canon:
            canon[m] = metric
            measures[metric] = m
        gate_keys.append(canon[m])
    return measures, gate_keys


def _render(result: Report | CompareReport | list[Report], args: argparse.Namespace) -> str:
    fmt, pq, digits = args.format, args.per_query, args.digits
    if isinstance(result, CompareReport):
        if fmt == "json":
            return result.render("json", per_query=True)
        text = result.render(fmt, per_query=pq, digits=digits)
        # the footnote (test, correction, what * means) under every human table
        if fmt == "table":
            text += result.footer() + "\n"
        elif fmt == "markdown":
            text += "\n" + result.footer().replace("*", "\\*") + "\n"
        elif fmt == "html":
            text += html_note(result.footer()) + "\n"
        if pq and fmt not in ("trec", "json", "csv", "latex"):
            text += ("\n" if fmt == "table" else "") + render_reports(
                list(result.reports.values()), fmt, per_query=True, digits=digits)
        return text
    reports = result if isinstance(result, list) else [result]
    if fmt == "json":
        return render_reports(reports, "json")
    text = render_reports(reports, fmt, per_query=pq, digits=digits)
    if fmt == "table":
        text += "".join(
            (f"{r.run}: " if len(reports) > 1 else "") + r.footer() + "\n" for r in reports
        )
    return text


def _check_gates(
    reports: list[Report], gates: list[tuple[str, float]], gate_keys: list[str]
) -> list[Check]:
    return [(f"run {r.run}: {typed} >= {threshold:g}",
             below(f"run {r.run}: {typed}", r.mean.get(key), threshold))
            for (typed, threshold), key in zip(gates, gate_keys) for r in reports]


def _draw(plots: Any, args: argparse.Namespace, result: Report | CompareReport | list[Report],
          qrels: Any, names: list[str], early: dict[str, Run]) -> Any:
    """The ``--plot`` figure; ``pr`` evaluates the 11 interpolated-precision points itself so the
    printed table keeps the metrics asked for."""
    kind = args.plot_kind or ("means" if isinstance(result, CompareReport) else "hist")
    metrics = list(result.metrics if not isinstance(result, list) else result[0].metrics)
    if kind == "pr":
        pr = [evaluate(qrels, _read(name, path, args, early),
                       list(plots.PR_METRICS), rel=args.rel, skip_missing=args.skip_missing,
                       judged_only=args.judged_only, max_depth=args.max_depth, dedup=args.dedup,
                       name=name)
              for name, path in zip(names, args.runs)]
        return plots.plot_pr(pr)
    # Every metric gets a panel; differences get one row per tested pair of runs (against the
    # baseline, or every pair with --all-pairs).
    if kind == "means" and isinstance(result, CompareReport):
        return draw_panels(plots, lambda item, ax: plots.plot_means(result, item[1], ax=ax),
                           metrics, panel=(6.0, 0.5 * len(result.runs) + 1.5))
    if kind == "differences" and isinstance(result, CompareReport):
        pairs = ([(c.run, c.baseline) for c in result.comparisons if c.metric == metrics[0]]
                 if result.all_pairs else
                 [(r, result.baseline) for r in result.runs if r != result.baseline])
        return draw_panels(
            plots, lambda item, ax: plots.plot_differences(result, item[0][0], item[1],
                                                           vs=item[0][1], ax=ax),
            metrics, rows=pairs, panel=(5.0, 3.0))
    return draw_panels(plots, lambda item, ax: plots.plot_distribution(result, item[1], kind=kind,
                                                                       ax=ax),
                       metrics, panel=(6.0, 4.0))


def _gate_baseline(args: argparse.Namespace, names: list[str]) -> str | None:
    """Check ``--fail-if-worse`` against the other options; the baseline compare() must use."""
    worse = args.fail_if_worse
    if worse is None:
        return args.baseline
    if worse not in names:
        raise InputError(f"{worse!r} is not one of the runs: {', '.join(names)}",
                         field="--fail-if-worse")
    if len(names) < 2:
        raise InputError("needs at least 2 runs (the baseline and a run to test)",
                         field="--fail-if-worse")
    if getattr(args, "no_stats", False):
        raise InputError("cannot gate without the tests: drop --no-stats", field="--fail-if-worse")
    if args.baseline is not None and args.baseline != worse and not args.all_pairs:
        raise InputError(f"gates on {worse} but --baseline is {args.baseline}: drop --baseline "
                         "or add --all-pairs", field="--fail-if-worse")
    return args.baseline if args.all_pairs and args.baseline is not None else worse


def _looks_like_run(path: str) -> bool:
    """A TREC run line has six fields (``qid Q0 docid rank score tag``), a qrels line four."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    return len(line.split()) == 6
    except OSError:
        return False
    return False


def _trust_modes(args: argparse.Namespace) -> list[str]:
    """The LLM-label modes asked for (``evaluate`` only; ``compare`` has none of the options)."""
    return [flag for flag, on in (
        ("--ppi/--human", getattr(args, "ppi", False) or getattr(args, "human", None)),
        ("--soft", getattr(args, "soft", None)),
        ("--judge", getattr(args, "judge", None))) if on]


def _run_trust(args: argparse.Namespace, used: list[str]) -> int:
    """``evaluate`` with --human/--ppi, --soft or --judge; the work is in :mod:`.trust`."""
    if not 0 <= args.digits <= 17:
        raise InputError(f"--digits must be between 0 and 17, got {args.digits}", field="--digits")
    metrics = _metric_list(args, [])[0]
    names, early = _run_names(args.runs, args)
    if len(used) > 1:
        raise InputError(f"{' and '.join(used)} cannot be combined", field=used[1].split("/")[0])
    if args.fail_under:
        raise InputError(f"--fail-under does not apply to {used[0]} results", field="--fail-under")
    if args.format == "trec":
        raise InputError("trec output cannot carry these results; use table, json, csv, "
                         "markdown, latex or html", field="--format")
    runs = {n: early[n] if n in early else read_run(path, name=n, dedup=args.dedup)
            for n, path in zip(names, args.runs)}
    if args.judge:
        # Label-free without -m: measures of the run's own judged top k, which do not move with
        # the pool (which other runs were judged in the same command); set from the prompt's scale.
        label_free = not args.metrics and args.qrels == "none"
        return evaluate_judged(args, None if label_free else metrics, runs)
    if args.soft:
        return evaluate_soft(args, metrics, runs)
    return evaluate_ppi(args, metrics, runs)


# ----------------------------------------------------------------------------- command
def _run(args: argparse.Namespace) -> int:
    if args.output is not None:
        check_output_path(args.output)  # before any work, not after it
    check_plot_path(args)
    if args.beir is not None:  # every positional is a run
        args.runs = [args.qrels, *args.runs]
    if getattr(args, "judge", None) and args.qrels.lower() != "none" and _looks_like_run(args.qrels):
        # `evaluate RUN --judge M` (no QRELS) is label-free: the one file is then the run.
        args.runs = [args.qrels, *args.runs]
        args.qrels = "none"
    if not args.runs:
        # What argparse says when RUN is missing (RUN is optional only for that label-free case).
        print(f"ragjudge {args.command}: error: the following arguments are required: RUN",
              file=sys.stderr)
        raise SystemExit(2)
    used = _trust_modes(args)
    if used:
        return _run_trust(args, used)
    if args.plot_kind in ("means", "differences") and (
            len(args.runs) < 2 or getattr(args, "no_stats", False)):
        raise InputError("needs several runs with statistics (not --no-stats)", field="--plot-kind")
    if len(args.runs) < args.min_runs:
        raise InputError(f"compare needs at least {args.min_runs} runs, got {len(args.runs)}",
                         field="RUN")
    if args.digits < 0 or args.digits > 17:
        raise InputError(f"--digits must be between 0 and 17, got {args.digits}", field="--digits")
    if args.resamples < 1:
        raise InputError(f"--resamples must be positive, got {args.resamples}", field="--resamples")
    gates = [parse_gate(g) for g in args.fail_under]
    metrics, gate_keys = _metric_list(args, gates)
    names, early = _run_names(args.runs, args)
    if args.baseline is not None and args.baseline not in names:
        raise InputError(
            f"baseline {args.baseline!r} is not one of the runs: {', '.join(names)}",
            field="--baseline",
        )
    baseline = _gate_baseline(args, names)
    if args.all_pairs and (len(args.runs) < 2 or getattr(args, "no_stats", False)):
        raise InputError("needs at least 2 runs and the tests (no --no-stats)", field="--all-pairs")
    # A clear message before any parsing work for the commonest mistake.
    check_inputs(args.runs if args.beir is not None else [args.qrels, *args.runs])
    beir = beir_from_args(args, corpus=False, dedup=args.dedup)
    # Read once for every run.
    qrels = beir.qrels if beir is not None else read_qrels_arg(args.qrels, args, dedup=args.dedup)

    result: Report | CompareReport | list[Report]
    # The reports carry their warnings (meta["warnings"]), printed once each below.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EvaluationWarning)
        if len(args.runs) > 1 and not getattr(args, "no_stats", False):
            result = compare(
                qrels,
                {name: _read(name, path, args, early) for name, path in zip(names, args.runs)},
                metrics,
                baseline=baseline,
                test=args.test,
                n_resamples=args.resamples,
                seed=args.seed,
                alpha=args.alpha,
                rel=args.rel,
                skip_missing=args.skip_missing,
                judged_only=args.judged_only,
                max_depth=args.max_depth,
                dedup=args.dedup,
                all_pairs=args.all_pairs,
            )
            reports = list(result.reports.values())
        else:
            reports = [
                evaluate(qrels, _read(name, path, args, early), metrics,
                         rel=args.rel, skip_missing=args.skip_missing, judged_only=args.judged_only,
                         max_depth=args.max_depth, dedup=args.dedup, name=name)
                for name, path in zip(names, args.runs)
            ]
            result = reports[0] if len(reports) == 1 else reports
    write_output(_render(result, args), args.output)
    if args.mlflow:
        print(f"ragjudge: logged to MLflow run {log_mlflow(result)}", file=sys.stderr)
    write_plot(args, lambda plots: _draw(plots, args, result, qrels, names, early))
    for r in reports:
        if r.meta.get("num_missing") == r.meta.get("num_q_qrels"):
            # Almost always mismatched query ids (e.g. "q1" vs "1"), not a system scoring 0.
            print(f"ragjudge: warning: no query of run {r.run} is in the qrels; check the query ids",
                  file=sys.stderr)
        for text in r.meta.get("warnings", ()):
            print(f"ragjudge: warning: {text}", file=sys.stderr)
    junit = JUnitReport(args.command) if args.junit else None
    status = report_failures("--fail-under", _check_gates(reports, gates, gate_keys), junit)
    if args.fail_if_worse is not None and isinstance(result, CompareReport):
        status = report_failures("--fail-if-worse", worse_than(result, args.fail_if_worse, args.digits),
                                 junit) or status
    if junit is not None:
        junit.write(args.junit)
    return status
