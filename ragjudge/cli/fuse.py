"""``ragjudge fuse``: combine runs (RRF, CombSUM, CombMNZ, weighted sum), optionally tuning the
weights on a qrels split. It only parses arguments and calls :mod:`ragjudge.fuse`."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..fuse import FUSION_METHODS, NORMALIZATIONS, fuse, tune_weights
from ..io import format_run, read_qrels, read_run, write_run

__all__ = ["register"]


def _weights(text: str) -> list[float]:
    # Only the shape is read here; fuse() checks the values (finite, >= 0, one per run).
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"weights must be comma-separated numbers, got {text!r}") from None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "fuse",
        help="fuse several runs into one (rrf, combsum, combmnz, wsum)",
        description=(
            "Fuse runs into one TREC run. rrf: sum of w/(k + rank); combsum/wsum: sum of w * "
            "normalised score; combmnz: combsum times the number of runs that retrieved the "
            "document. With --tune-qrels the weights are grid-searched on those qrels (tune on "
            "one split of queries, evaluate the fused run on another)."
        ),
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="two or more runs (TREC or JSON)")
    p.add_argument("--method", choices=FUSION_METHODS, default="rrf", help="fusion method (default rrf)")
    p.add_argument("--norm", choices=NORMALIZATIONS, default=None,
                   help="per-query score normalisation (default: none for rrf, minmax otherwise)")
    p.add_argument("--weights", type=_weights, default=None, metavar="W1,W2,...",
                   help="one weight per run (default all 1)")
    p.add_argument("--rrf-k", type=float, default=60.0, help="the k of rrf (default 60)")
    p.add_argument("--depth", type=int, default=None,
                   help="fuse only each run's top DEPTH documents per query")
    p.add_argument("--name", default=None, help="run name / tag of the fused run")
    p.add_argument("--tune-qrels", default=None, metavar="QRELS",
                   help="grid-search the weights on these qrels (then --weights is not allowed)")
    p.add_argument("--metric", default="ndcg@10", help="metric maximised by --tune-qrels (default ndcg@10)")
    p.add_argument("--step", type=float, default=0.1, help="weight grid step for --tune-qrels (default 0.1)")
    p.add_argument("-o", "--output", default="-", help="output file (default stdout; .json writes JSON)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.tune_qrels and args.weights is not None:
        raise InputError("--weights and --tune-qrels exclude each other: tuning chooses the weights")
    if args.name is not None and (not args.name or any(c.isspace() for c in args.name)):
        # The name is the run file's tag column: one token, or it would be cut at the space.
        raise InputError(f"a run name is one word (the TREC tag column), got {args.name!r}", field="--name")
    runs = [read_run(path) for path in args.runs]
    weights = args.weights
    if args.tune_qrels:
        tuning = tune_weights(runs, read_qrels(args.tune_qrels), args.metric, method=args.method,
                              norm=args.norm, step=args.step, rrf_k=args.rrf_k, depth=args.depth)
        print(f"ragjudge: {tuning}", file=sys.stderr)
        weights = list(tuning.weights)
    fused = fuse(runs, method=args.method, norm=args.norm, weights=weights, rrf_k=args.rrf_k,
                 depth=args.depth, name=args.name)
    if args.output == "-":
        sys.stdout.write(format_run(fused, "trec"))
    else:
        write_run(fused, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
