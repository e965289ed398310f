"""``ragjudge rag``: RAG metrics on samples from the shell.

Only argument parsing and output here; the work is :func:`ragjudge.rag.evaluate_samples`.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from ..errors import InputError, LLMError, MetricError
from ..integrations.mlflow import log_mlflow
from ..llm.provenance import FailureKind
from ..rag import SampleSet, evaluate_samples_sync, read_samples, read_traces
from ..rag.evaluate import STOPPED, check_embedding_model, needs_embeddings, plan_requests
from ..rag.metrics import parse_rag_metric, parse_rag_metrics
from ..rag.options import GRADING_MODES, MATCH_MODES, RagOptions
from ..rag.traces import span_scores
from ._inputs import add_option, check_writable, options_from_args, write_output
from ._llm import add_llm_options, llm_from_args
from ._plot import add_plot_options, check_plot_path, write_plot
from .gates import Check, JUnitReport, add_junit_option, below, parse_gate, report_failures

__all__ = ["register"]

_FORMATS = ("table", "json", "csv", "markdown", "html")

_EPILOG = """\
metrics (-m, repeatable, comma lists allowed):
  no LLM:   hit, recall, recall_all, precision, mrr, map, ndcg, err, rbp (any ranking metric)
            with @k and match=auto|id|text|normalized|chunk; containment@k
  LLM:      context_relevance, context_precision(threshold=T, norm=ragas|ir, by=relevance|reference),
            context_recall, faithfulness(steps=2|1), answer_relevance(by=llm|embedding),
            answer_correctness(beta=1, similarity=W), context_ndcg / context_err / context_rbp
  grading scale: the top grade and the default relevance threshold T come from the grading
  prompt's labels (0-3 and 2 with the shipped prompts).
  answer_relevance(by=embedding) (RAGAS-style): the LLM writes 3 questions the response answers;
  the score is their mean cosine similarity to the question, with --embedding-model M served
  by the same endpoint (e.g. text-embedding-3-small).
  answer_correctness (RAGAS-style): response and reference statements sorted into TP/FP/FN in
  one call; F1 = TP / (TP + (FP + FN) / 2); similarity=W blends in the embedding cosine.
  containment@k: an expected answer (answers, else a reference of at most 8 words) occurs in a
  top-k passage; a longer reference alone is undetermined, never a silent 0.
  context_precision without norm= prints both normalisations: RAGAS's (divide by the relevant
  chunks retrieved in the top k) and the IR one, context_precision(norm=ir) (divide by the
  relevant chunks known).

cutoff k: the sample's metadata.k, else the metric's @k, else -k (default 5).

grading: listwise (default) grades all chunks of a sample in one call, and a run that also
asks context_recall gets the grades and the passages supporting each reference sentence from
that same call, so context_precision + context_recall + faithfulness cost 3 requests per
sample (4 with --separate-calls, which keeps the reference out of the grader's view);
pointwise grades each chunk alone (n + 3 requests), with the same prompt and cache as
`ragjudge judge` (TREC-comparable).

undetermined: a score that cannot be computed (no claims, empty response, failed call...) is
counted beside the mean with its reason (-q lists them per sample), never averaged as 0.

exit status: 0 ok; 1 a --fail-under gate failed; 2 bad input (one-line message);
3 most LLM requests failed (summary on stderr); 4 --max-cost stopped the run before every
sample was scored (the report is written; the count of incomplete samples is on stderr).
"""


def register(subparsers: Any) -> None:
    """Add the ``rag`` subcommand."""
    p = subparsers.add_parser(
        "rag",
        help="RAG metrics on samples (context precision/recall, faithfulness, hit@k...)",
        description="Evaluate RAG samples (JSONL, JSON or CSV with RAGAS, DeepEval or id+text "
        "fields) on deterministic and LLM-graded metrics.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("samples", metavar="SAMPLES", help="samples file (.jsonl, .json, .csv, each optionally .gz; - for stdin; "
                   "pipes such as <(zcat s.jsonl.gz) work; other names: format from the content)")
    p.add_argument("-m", "--metric", dest="metrics", action="append", metavar="METRIC", required=True,
                   help="metric spec or comma-separated list; repeatable")
    add_option(p, RagOptions, "default_k", "-k", type=int, metavar="K")
    add_option(p, RagOptions, "match", choices=MATCH_MODES)
    add_option(p, RagOptions, "grading", choices=GRADING_MODES)
    add_option(p, RagOptions, "skip_invalid", action="store_true")
    add_option(p, RagOptions, "separate_calls", action="store_true")
    add_option(p, RagOptions, "language", metavar="CODE")
    p.add_argument("-q", "--per-sample", action="store_true",
                   help="also print per-sample values and the reasons of undetermined ones")
    p.add_argument("-f", "--format", choices=_FORMATS, default="table", help="output format")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE")
    p.add_argument("--digits", type=int, default=4, metavar="N", help="decimals (default 4)")
    p.add_argument("--mlflow", action="store_true",
                   help="also log the report to MLflow (metrics with intervals, settings, JSON) at the "
                        "tracking URI MLflow is configured with (MLFLOW_TRACKING_URI); needs "
                        "pip install -e '.[mlflow]' in the ragjudge checkout")
    p.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE",
                   help="exit 1 when METRIC's mean is below VALUE (or not determined); repeatable; "
                   "a metric not given with -m is evaluated too")
    add_junit_option(p)
    p.add_argument("--trace-fraction", type=float, metavar="F",
                   help="SAMPLES is a trace export: evaluate each trace with probability F (stable "
                        "per trace id, so a rerun over a grown export pays only for new traces)")
    p.add_argument("--trace-limit", type=int, metavar="N",
                   help="SAMPLES is a trace export: evaluate its first N traces only")
    p.add_argument("--span-scores", metavar="FILE",
                   help="write each sample's scores as JSON lines keyed by trace and span id "
                        "(samples read from traces: OTLP JSON, Phoenix, Langfuse), to attach to them")
    add_llm_options(p)
    add_plot_options(p, ("box", "heatmap"), "box (per-metric distributions with undetermined "
                     "counts, the default), heatmap (per-sample scores)")
    add_option(p, RagOptions, "embedding_model", metavar="M",
               help=RagOptions.help("embedding_model") + ", e.g. text-embedding-3-small (same "
                                                         "endpoint and key as --model)")
    cl = p.add_argument_group("cluster")
    cl.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="local: this process (default); ray: a Ray Data pipeline, each worker "
                         "scoring batches of samples with this session (same metrics, prompts, "
                         "parsing, cache; --max-cost split evenly between the workers); SAMPLES "
                         "may then be .parquet (streamed; an id column is required); needs "
                         "pip install -e '.[ray]'")
    cl.add_argument("--ray-address", metavar="ADDR",
                    help="with --engine ray: an existing cluster (ray://host:10001, auto); "
                         "default a local one")
    cl.add_argument("--ray-workers", type=int, default=2, metavar="N",
                    help="with --engine ray: workers scoring at once (default 2)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    check_plot_path(args)
    # Before any paid call: a folder or an unwritable path given as an output is one line now,
    # not a traceback after the LLM was paid.
    check_writable([args.output, args.span_scores])
    options = options_from_args(RagOptions, args)
    gates = [parse_gate(g) for g in args.fail_under]
    metrics = parse_rag_metrics([*args.metrics, *(m for m, _ in gates)])
    needs_llm = [m for m in metrics if m.needs_llm]
    if needs_llm and not args.model:
        raise MetricError(
            f"{', '.join(str(m) for m in needs_llm)} need an LLM: pass --model M "
            "(and --base-url for a non-OpenAI endpoint)"
        )

    check_embedding_model(metrics, args.embedding_model)
    if args.embedding_model and not needs_embeddings(metrics):
        raise InputError("no metric uses it (e.g. answer_relevance(by=embedding) or "
                         "answer_correctness(similarity=0.25) does)",
                         field="--embedding-model")
    parquet = args.engine == "ray" and args.samples.endswith(".parquet")
    if parquet and (args.dry_run or args.span_scores or args.trace_fraction is not None
                    or args.trace_limit is not None):
        raise InputError("a Parquet file streams through the workers; --dry-run, --span-scores and "
                         "the trace options read a JSONL/JSON/CSV/trace file", field="SAMPLES")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if parquet:
            samples = SampleSet([])  # streamed by the workers, never read here
        elif args.trace_fraction is not None or args.trace_limit is not None:
            samples = read_traces(args.samples, fraction=args.trace_fraction, limit=args.trace_limit,
                                  skip_invalid=options.skip_invalid)
        else:
            samples = read_samples(args.samples, skip_invalid=options.skip_invalid)
    if args.span_scores and not any(s.metadata.get("trace_id") for s in samples):
        raise InputError("the samples were not read from traces (no trace ids to key scores by)",
                         field="--span-scores")
    for w in caught:
        print(f"ragjudge: warning: {w.message}", file=sys.stderr)
    for err in samples.invalid:
        print(f"ragjudge: skipped invalid sample: {err}", file=sys.stderr)
    llm = llm_from_args(args) if needs_llm else None

    if args.dry_run:
        return _dry_run(llm, samples, metrics, args, options, plan_requests)

    if args.engine == "ray":
        # Deferred: ragjudge.ray loads the LLM stack, which metrics without an LLM never need.
        from ..ray import rag_ray_sync

        report = rag_ray_sync(args.samples if parquet else samples, metrics, llm=llm, options=options,
                              workers=args.ray_workers, address=args.ray_address)
    else:
        try:
            report = evaluate_samples_sync(
                samples,
                metrics,
                judge=llm,
                options=options,
                progress=not args.no_progress,  # a bar on a terminal, a few lines when redirected
            )
        except LLMError as exc:
            _write_partial(exc, args, llm)
            raise
    text = report.render(args.format, per_sample=args.per_sample, digits=args.digits)
    write_output(text, args.output)
    write_plot(args, lambda plots: report.plot(kind=args.plot_kind or "box"))
    if args.span_scores:
        _write_span_scores(report, samples, args.span_scores)
    if args.mlflow:
        print(f"ragjudge: logged to MLflow run {log_mlflow(report)}", file=sys.stderr)
    if report.usage:
        u = report.usage
        n = max(1, len(report.sample_ids))
        cost = u.get("cost_usd")
        cost_text = "" if cost is None else f", ${cost:.4f}"
        print(
            f"ragjudge: {u['calls']} calls ({u['cache_hits']} cached, {u['retries']} retries, "
            f"{u['failed_calls']} failed), {u['total_tokens']} tokens "
            f"({u['total_tokens'] / n:.0f}/sample)"
            + (f", {u['embedding_tokens']} embedding tokens" if u.get("embedding_tokens") else "")
            + cost_text,
            file=sys.stderr,
        )
    if samples.invalid:
        print(f"ragjudge: {len(samples.invalid)} invalid sample(s) skipped", file=sys.stderr)
    junit = JUnitReport("rag") if args.junit else None
    incomplete = _over_budget(report)
    if incomplete:
        print(f"ragjudge: error: stopped by --max-cost {args.max_cost:g}: {incomplete} of "
              f"{len(report.sample_ids)} samples have values left undetermined by the budget; "
              "rerun with a higher budget to finish them (exit status 4)", file=sys.stderr)
        if junit is not None:
            junit.error("budget", f"stopped by --max-cost: {incomplete} samples incomplete")
            junit.write(args.junit)
        return 4
    asked, failed = report.usage.get("requests_asked", 0), report.usage.get("requests_failed", 0)
    if asked and failed * 2 > asked:
        reasons = _failure_reasons(report)
        message = f"{failed} of {asked} LLM requests failed; most common: {reasons}"
        print(f"ragjudge: error: {message}", file=sys.stderr)
        if junit is not None:
            junit.error("LLM requests", message)
            junit.write(args.junit)
        return 3
    status = report_failures("--fail-under", _check_gates(report, gates), junit)
    if junit is not None:
        junit.write(args.junit)
    return status


def _write_partial(exc: LLMError, args: argparse.Namespace, llm: Any) -> None:
    """The run stopped (a spend limit, a revoked key): write the report of what was scored
    before it (the other samples undetermined with the stop as reason), so nothing paid for
    is lost, and say how to go on."""
    report = exc.partial
    if report is None or not hasattr(report, "render"):
        return
    write_output(report.render(args.format, per_sample=args.per_sample, digits=args.digits), args.output)

    done = sum(1 for i in range(len(report.sample_ids))
               if not any((s[i].reason or "").startswith(STOPPED) for s in report.scores.values()))
    resume = ("a rerun resumes from the cache without paying for them again" if llm.cache.path is not None
              else "--no-cache was given: a rerun pays for them again")
    where = args.output or "stdout"
    print(f"ragjudge: the run stopped; wrote the report of the {done} of {len(report.sample_ids)} samples "
          f"scored before it to {where}; {resume}", file=sys.stderr)


def _check_gates(report: Any, gates: list[tuple[str, float]]) -> list[Check]:
    return [(f"{m} >= {threshold:g}", below(str(m), report.mean(str(m)), threshold, "has no determined value"))
            for spec, threshold in gates for m in parse_rag_metric(spec)]


def _write_span_scores(report: Any, samples: Any, path: str) -> None:
    records = span_scores(report, samples)
    write_output("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), path)
    print(f"ragjudge: {len(records)} span score record(s) written to {path}", file=sys.stderr)


def _over_budget(report: Any) -> int:
    """Samples with a value the budget left undetermined (a call skipped by --max-cost)."""
    cut = set()
    for scores in report.scores.values():
        for i, score in enumerate(scores):
            if score.failure is FailureKind.BUDGET:
                cut.add(i)
    return len(cut)


def _failure_reasons(report: Any) -> str:
    """The most frequent reasons of undetermined LLM values (what to fix first)."""
    counts: dict[str, int] = {}
    for scores in report.scores.values():
        for score in scores:
            if score.failure is not None:  # a failed LLM call, not an undeterminable sample
                counts[score.reason] = counts.get(score.reason, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return "; ".join(f"{reason} ({n}x)" for reason, n in top) or "see -q"


def _dry_run(llm: Any, samples: Any, metrics: Any, args: argparse.Namespace, options: RagOptions,
             plan: Any) -> int:
    if llm is None:
        print("dry run: no LLM metric requested; nothing would be sent")
        return 0
    calls = plan(samples, metrics, llm=llm, options=options)
    by_prompt: dict[str, list[tuple[Any, dict[str, str]]]] = {}
    for prompt, variables in calls:
        by_prompt.setdefault(prompt.name, []).append((prompt, variables))
    total_calls = total_cached = ptoks = ctoks = 0
    total_cost: float | None = 0.0
    for name, items in by_prompt.items():
        # Each sized variant of a prompt is estimated with its own schema.
        for prompt in {id(p): p for p, _ in items}.values():
            est = llm.estimate(prompt, [v for p, v in items if p is prompt])
            total_calls += est.calls
            total_cached += est.cached
            ptoks += est.prompt_tokens
            ctoks += est.completion_tokens
            total_cost = None if est.cost is None or total_cost is None else total_cost + est.cost
        print(f"  {name}: {len(items)} requests")
    cost = "unknown (no price for this model; pass --prices)" if total_cost is None else f"${total_cost:.4f}"
    print(f"dry run: {len(calls)} requests for {len(samples)} samples, {total_cached} already cached -> "
          f"{total_calls} calls to {llm.model}; ~{ptoks} prompt + ~{ctoks} completion tokens "
          f"(claim verification of uncached answers estimated with one claim each); estimated cost {cost}")
    return 0
