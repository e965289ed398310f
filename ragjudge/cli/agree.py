"""``ragjudge agree``: how well one qrels (an LLM judge's) agrees with another (human)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..io import check_output_path
from ..measures import parse_measure, split_metric_list
from ..trust.agreement import label_agreement, ranking_agreement
from ._inputs import add_format_options, check_inputs, read_qrels_arg, read_run_arg, write_output
from .trust import parse_scale
from ._plot import add_plot_options, check_plot_path, draw_panels, write_plot

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "agree",
        help="label and system-ranking agreement between two qrels, with bootstrap intervals",
        description=(
            "Compare a candidate qrels (for instance written by `ragjudge judge`) with a reference "
            "qrels (human labels): confusion matrix with row percentages, exact agreement, "
            "Cohen's kappa (plain, binary at --rel, linear and quadratic weighted), "
            "Krippendorff's ordinal alpha, leniency per grade; with --run, Kendall's tau-b, "
            "tau-ap, Spearman's rho, RBO between the system orderings each qrels induces and how "
            "many significantly different pairs swap. Every statistic has a 95% percentile "
            "bootstrap interval over queries (seeded)."
        ),
    )
    p.add_argument("reference", help="reference qrels, e.g. human labels (TREC, BEIR TSV or JSON)")
    p.add_argument("candidate", help="candidate qrels to check against the reference (e.g. LLM)")
    p.add_argument("--run", action="append", default=[], metavar="RUN",
                   help="a TREC run; repeat for several systems to compare system orderings")
    p.add_argument("-m", "--metric", action="append", default=[], metavar="METRIC",
                   help="metric(s) for the system ordering (default ndcg@10); comma lists allowed")
    p.add_argument("--rel", type=int, default=1,
                   help="binary relevance threshold: grade >= REL is relevant (default 1)")
    p.add_argument("--scale", metavar="LOW-HIGH",
                   help="label scale, e.g. 0-3; grades outside it are an error (default: the "
                        "grades present)")
    p.add_argument("--resamples", type=int, default=1000, metavar="N",
                   help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and tests (default 0)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level of the system-pair tests, after Holm (default 0.05)")
    p.add_argument("--test", choices=("t", "randomization"), default="t",
                   help="paired test of the system pairs under the reference labels (default t: "
                        "exact p-values, which Holm over many pairs needs)")
    p.add_argument("-f", "--format", choices=("text", "json", "html"), default="text",
                   help="output format (default text)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    add_format_options(p)
    add_plot_options(p, ("confusion", "systems"), "confusion (human vs LLM grades, the default), "
                     "systems (each --run's metric under both qrels, tau in the title; a panel "
                     "per metric)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    check_plot_path(args)
    if args.plot_kind == "systems" and not args.run:
        raise InputError("needs --run (two or more)", field="--plot-kind")
    if args.rel < 1:
        raise InputError(f"must be an integer >= 1, got {args.rel}", field="--rel")
    if args.resamples < 1:
        raise InputError(f"must be positive, got {args.resamples}", field="--resamples")
    if not 0.0 < args.alpha < 1.0:
        raise InputError(f"must be in (0, 1), got {args.alpha}", field="--alpha")
    scale = parse_scale(args.scale)
    check_inputs([args.reference, args.candidate, *args.run])
    if args.output:
        check_output_path(args.output)
    reference = read_qrels_arg(args.reference, args)
    candidate = read_qrels_arg(args.candidate, args)
    opts = dict(rel=args.rel, scale=scale, n_resamples=args.resamples, seed=args.seed)
    if args.run:
        metrics = [m for value in (args.metric or ["ndcg@10"]) for m in split_metric_list(value)]
        for m in metrics:
            parse_measure(m)  # fail on a bad spec before any work
        runs = {}
        for path in args.run:
            run = read_run_arg(path, args)
            runs[run.name if run.name not in runs else Path(path).name] = run
        report = ranking_agreement(reference, candidate, runs, metrics, alpha=args.alpha,
                                   test=args.test, **opts)
    else:
        report = label_agreement(reference, candidate, **opts)
    kind = args.plot_kind or "confusion"
    if kind == "systems":  # one panel per metric
        write_plot(args, lambda plots: draw_panels(
            plots, lambda item, ax: plots.plot_systems(report, item[1], ax=ax),
            list(next(iter(report.systems.values()), {})), panel=(5.0, 5.0)))
    else:
        write_plot(args, lambda plots: plots.plot_confusion(report))
    if args.format == "json":
        text = report.to_json()
    elif args.format == "html":
        text = report._repr_html_()
    else:
        text = str(report)
    write_output(text + "\n", args.output)
    return 0
