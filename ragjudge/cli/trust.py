"""``ragjudge plan-labels`` / ``ragjudge ppi-samples`` and the trust options of ``evaluate``.

``evaluate`` gets an extra option group from :func:`add_evaluate_options`; when one of them
is used, :func:`run_evaluate` does the work (prediction-powered estimates with ``--human``,
expected metrics under per-grade probabilities with ``--soft``, judging on demand with
``--judge``). Only argument handling here; the work is :mod:`ragjudge.trust`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import InputError

__all__ = ["register", "add_evaluate_options", "trust_requested", "run_evaluate"]


def _write(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        with open(output, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise InputError(f"cannot write output ({exc.strerror or exc})", source=output) from None


def _add_ppi_options(p: argparse.ArgumentParser | Any) -> None:
    p.add_argument("--ppi-classic", action="store_true",
                   help="classic PPI (lambda = 1) instead of PPI++ power tuning")
    p.add_argument("--population", choices=("finite", "infinite"), default="finite",
                   help="estimand: the mean over these queries (finite, default) or over the "
                        "population they were sampled from (infinite)")
    p.add_argument("--confidence", type=float, default=0.95,
                   help="interval confidence level (default 0.95)")


def _method(args: argparse.Namespace) -> str:
    if not 0.0 < args.confidence < 1.0:
        raise InputError(f"must be in (0, 1), got {args.confidence}", field="--confidence")
    return "ppi" if args.ppi_classic else "ppi++"


# ----------------------------------------------------------------------------- evaluate hooks
def add_evaluate_options(p: argparse.ArgumentParser) -> None:
    """The ``evaluate`` options of issue 9 (LLM labels with human anchors)."""
    g = p.add_argument_group(
        "trusting LLM labels",
        "QRELS are LLM labels on all queries and --human the human labels of a random subset: "
        "--ppi reports each run's prediction-powered mean with its interval beside the "
        "LLM-only and human-only ones.")
    g.add_argument("--human", metavar="QRELS", help="human qrels of a random subset of the queries")
    g.add_argument("--ppi", action="store_true",
                   help="prediction-powered estimates (PPI++ by default; needs --human)")
    _add_ppi_options(g)


def trust_requested(args: argparse.Namespace) -> bool:
    """Whether ``evaluate`` was called with one of the trust options."""
    return bool(getattr(args, "human", None) or getattr(args, "ppi", False))


def run_evaluate(args: argparse.Namespace, metrics: list[str], names: list[str]) -> int:
    """``evaluate`` with trust options; ``names`` are the run names ``evaluate`` chose."""
    from ..io import read_qrels, read_run
    from ..trust.ppi import ppi_evaluate

    if not args.human:
        raise InputError("--ppi needs the human labels of some queries (--human QRELS)",
                         field="--ppi")
    if args.format == "trec":
        raise InputError("trec output has no place for intervals; use table, json, csv, "
                         "markdown, latex or html", field="--format")
    method = _method(args)
    llm = read_qrels(args.qrels, dedup=args.dedup)
    human = read_qrels(args.human, dedup=args.dedup)
    runs = {n: read_run(path, name=n, dedup=args.dedup) for n, path in zip(names, args.runs)}
    report = ppi_evaluate(llm, runs, metrics, human, method=method,  # type: ignore[arg-type]
                          confidence=args.confidence, population=args.population,
                          baseline=args.baseline, rel=args.rel)
    text = report.render(args.format, digits=args.digits)
    if args.format == "table":
        text += report.footer()
    _write(text, args.output)
    return 0


# ----------------------------------------------------------------------------- commands
def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan-labels",
        help="how many human-labelled queries a target interval width needs (from a pilot)",
        description="From LLM qrels on all queries and a pilot of human qrels on a few, the number "
                    "of human-labelled queries that gives a PPI (and a human-only) interval of "
                    "the target full width, per run and metric.",
    )
    p.add_argument("qrels", metavar="LLM_QRELS", help="LLM qrels covering all queries")
    p.add_argument("runs", metavar="RUN", nargs="+", help="run file(s)")
    p.add_argument("--human", required=True, metavar="QRELS", help="pilot human qrels")
    p.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC",
                   help="metric spec or comma list (default ndcg@10)")
    p.add_argument("--width", type=float, required=True,
                   help="target full interval width (high - low), e.g. 0.05")
    p.add_argument("--rel", type=int, metavar="N", help="relevance threshold of binary metrics")
    p.add_argument("-f", "--format", choices=("table", "json", "csv", "markdown", "html"),
                   default="table")
    p.add_argument("-o", "--output", metavar="FILE")
    _add_ppi_options(p)
    p.set_defaults(func=_plan)

    s = sub.add_parser(
        "ppi-samples",
        help="prediction-powered estimates of RAG sample metrics from a human-scored subset",
        description="LLM scores of every sample (the JSON of `ragjudge rag -f json`, JSONL or "
                    "CSV with an id column) and human scores of a random subset (same formats): "
                    "each metric's PPI mean with its interval, beside LLM-only and human-only.",
    )
    s.add_argument("scores", metavar="LLM_SCORES", help="per-sample LLM scores")
    s.add_argument("--human", required=True, metavar="FILE", help="per-sample human scores")
    s.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC",
                   help="metric(s) to estimate (default: every metric in both files)")
    s.add_argument("-f", "--format", choices=("table", "json", "csv", "markdown", "html"),
                   default="table")
    s.add_argument("-o", "--output", metavar="FILE")
    _add_ppi_options(s)
    s.set_defaults(func=_samples)


def _plan(args: argparse.Namespace) -> int:
    from ..io import read_qrels, read_run
    from ..measures import parse_measure, split_metric_list
    from ..report import render_table
    from ..trust.ppi import plan_evaluation

    method = _method(args)
    metrics = [m for v in (args.metrics or ["ndcg@10"]) for m in split_metric_list(v)]
    for m in metrics:
        parse_measure(m, rel=args.rel)
    llm = read_qrels(args.qrels)
    pilot = read_qrels(args.human)
    runs = [read_run(path) for path in args.runs]
    plans = plan_evaluation(llm, runs, metrics, pilot, args.width, method=method,  # type: ignore[arg-type]
                            confidence=args.confidence, population=args.population, rel=args.rel)
    if args.format == "json":
        _write(json.dumps(plans, indent=2, allow_nan=False) + "\n", args.output)
        return 0
    heads = ["run", "metric", "pilot n", "corr(human, LLM)", "lambda", "pilot width",
             f"n for width {args.width:g} ({method})", "n human only"]
    rows = [[p["run"], p["metric"], p["n_pilot"], p["correlation"], p["lambda"], p["pilot_width"],
             _n(p["n_ppi"]), _n(p["n_human_only"])] for p in plans]
    text = render_table(heads, rows, args.format)
    if args.format == "table":
        text += (f"{int(100 * args.confidence)}% intervals over {plans[0]['n_llm']} LLM-labelled "
                 "queries; the pilot's variances are estimates, so add a margin\n")
    _write(text, args.output)
    return 0


def _n(value: int | None) -> Any:
    return "unreachable" if value is None else value


def _samples(args: argparse.Namespace) -> int:
    from ..report import render_table
    from ..trust.ppi import ppi_samples, read_scores

    method = _method(args)
    llm = read_scores(args.scores)
    human = read_scores(args.human)
    metrics = None
    if args.metrics:
        metrics = [m.strip() for v in args.metrics for m in v.split(",") if m.strip()]
    est = ppi_samples(llm, human, metrics, method=method, confidence=args.confidence,
                      population=args.population)
    if args.format == "json":
        _write(json.dumps({"ppi": {m: e.to_dict() for m, e in est.items()}}, indent=2,
                          allow_nan=False) + "\n", args.output)
        return 0
    heads = ["metric", "LLM only", "human only", method.upper(), "ci_low", "ci_high", "lambda",
             "n_human", "n_llm"]
    rows = [[m, e.llm_only.value, e.human_only.value, e.mean, e.ci_low, e.ci_high, e.lam,
             e.n_human, e.n_llm] for m, e in est.items()]
    _write(render_table(heads, rows, args.format), args.output)
    return 0
