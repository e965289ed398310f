"""``ragjudge agree``: how well one qrels (an LLM judge's) agrees with another (human)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..io import check_output_path
from ._inputs import add_format_options, check_inputs, read_qrels_arg, read_run_arg

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "agree",
        help="label and system-ranking agreement between two qrels (e.g. human vs LLM judge)",
        description=(
            "Compare a candidate qrels (for instance written by `ragjudge judge`) with a reference "
            "qrels (human labels): confusion matrix, Cohen's kappa (plain, linear and quadratic "
            "weighted), binary kappa/precision/recall at --rel, and with --run, Kendall's tau-b "
            "between the system orderings each qrels induces."
        ),
    )
    p.add_argument("reference", help="reference qrels (TREC, BEIR TSV or JSON)")
    p.add_argument("candidate", help="candidate qrels to check against the reference")
    p.add_argument("--run", action="append", default=[], metavar="RUN",
                   help="a TREC run; repeat for several systems to compare system orderings")
    p.add_argument("-m", "--metric", action="append", default=[], metavar="METRIC",
                   help="metric(s) for the system ordering (default ndcg@10); comma lists allowed")
    p.add_argument("--rel", type=int, default=1, help="binary relevance threshold (default 1)")
    p.add_argument("-f", "--format", choices=("text", "json"), default="text",
                   help="output format (default text)")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    add_format_options(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..agreement import label_agreement, ranking_agreement
    from ..measures import parse_measure, split_metric_list

    check_inputs([args.reference, args.candidate, *args.run])
    if args.output:
        check_output_path(args.output)
    reference = read_qrels_arg(args.reference, args)
    candidate = read_qrels_arg(args.candidate, args)
    if args.run:
        metrics = [m for value in (args.metric or ["ndcg@10"]) for m in split_metric_list(value)]
        for m in metrics:
            parse_measure(m)  # fail on a bad spec before any work
        runs = {}
        for path in args.run:
            run = read_run_arg(path, args)
            runs[run.name if run.name not in runs else Path(path).name] = run
        report = ranking_agreement(reference, candidate, runs, metrics, rel=args.rel)
    else:
        report = label_agreement(reference, candidate, rel=args.rel)
    text = report.to_json() if args.format == "json" else str(report)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")
    return 0
