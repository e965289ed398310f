"""``ragjudge judge``: grade the pooled top documents of runs with an LLM and write qrels.

Only argument parsing and output here; the work is
:class:`ragjudge.judges.LLMRelevanceJudge` on :class:`ragjudge.llm.LLM`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._sync import run_sync
from ..data import Qrels
from ..errors import InputError, LLMError
from ..io import read_corpus, read_queries, write_qrels
from ..judges.options import COMBINE_RULES, JudgeOptions
from ._inputs import (
    add_beir_options,
    add_format_options,
    add_option,
    beir_from_args,
    check_inputs,
    options_from_args,
    read_qrels_arg,
    read_run_arg,
)
from ._llm import add_llm_options, llm_from_args
from .trust import run_panel

# Deferred imports: ragjudge.judges (the relevance judge), ragjudge.ray. They load the LLM stack
# (session, client, tenacity), which `judge --help` and a rejected command line never need.

__all__ = ["register"]

_EPILOG = """\
endpoint: OpenAI by default (key from OPENAI_API_KEY, or --api-key-env VAR); any
OpenAI-compatible server with --base-url (vLLM, Ollama, llama.cpp: e.g.
--base-url http://localhost:8080/v1); OPENAI_BASE_URL is honoured. Azure: --azure-endpoint
(key from AZURE_OPENAI_API_KEY; --model is the deployment name). The key is never written
to any output, log or cache.

cache: every successful judgment is committed to a SQLite cache as it arrives (default
$RAGJUDGE_CACHE or ~/.cache/ragjudge/judgments.sqlite), so rerunning costs nothing and a
killed run resumes where it stopped. Failed judgments are not cached and are retried by
the next run.

output: -o OUT writes TREC qrels, or JSON for .json, BEIR TSV for .tsv (.gz compresses);
missing directories are created, and ids the format cannot hold are refused before any
call is made.

progress: a bar on a terminal; a few plain lines when stderr is redirected (CI logs).

exit status: 0 done (failed judgments are listed and left out of the qrels); 3 most
judgments failed (the qrels are written, a summary says why); 4 --max-cost stopped the
run before every pair was judged (what was judged is written; the count is on stderr);
2 bad input or a non-retryable endpoint error (bad key, unknown model); 130 interrupted.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "judge",
        help="grade pooled run documents with an LLM and write qrels",
        description="Grade the top-DEPTH documents of one or more runs with an LLM (0-3 scale) "
                    "and write the grades as qrels for `ragjudge evaluate`.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    io = p.add_argument_group("input and output")
    io.add_argument("--queries", metavar="FILE",
                    help="queries: BEIR JSONL (_id, text) or TSV id<TAB>text (required "
                         "unless --beir)")
    io.add_argument("--corpus", metavar="FILE",
                    help="documents: BEIR JSONL (_id, title, text) or TSV id<TAB>text (required "
                         "unless --beir)")
    add_beir_options(io, "its queries and corpus, instead of --queries/--corpus")
    add_format_options(io)
    io.add_argument("--run", dest="runs", action="append", required=True, metavar="RUN",
                    help="TREC run to pool from; repeat for several runs")
    add_option(io, JudgeOptions, "depth", type=int, metavar="K")
    io.add_argument("--fill", metavar="QRELS",
                    help="human qrels: judge only the pooled pairs they lack; human labels win")
    add_option(io, JudgeOptions, "all_queries", action="store_true",
               help="with --fill, also judge queries the human qrels do not have")
    io.add_argument("-o", "--output", metavar="OUT.qrels",
                    help="write the qrels here: TREC, or JSON for .json, BEIR TSV for .tsv "
                         "(required unless --dry-run)")
    io.add_argument("--judgments", metavar="OUT.jsonl",
                    help="write every judgment with grade, reasoning, error and provenance")
    add_option(io, JudgeOptions, "prompt", metavar="NAME|FILE")
    add_llm_options(p, model=False)  # --model is this command's own: repeatable (a panel)
    panel = p.add_argument_group("judge panels")
    # Repeated, the models form a panel; args.model stays the first, so single-model code is
    # unchanged.
    panel.add_argument("--model", action=_ModelAction, default=os.environ.get("RAGJUDGE_MODEL"),
                       metavar="M", help="model name (or $RAGJUDGE_MODEL); repeat for a judge panel")
    add_option(panel, JudgeOptions, "combine", choices=COMBINE_RULES,
               help=JudgeOptions.help("combine") + " (default majority); --max-cost is shared "
                                                   "equally by the panel's models",
               default_note=False)
    bt = p.add_argument_group("batch mode")
    bt.add_argument("--batch", action="store_true",
                    help="use the OpenAI Batch API (half price, results within 24 h; resumable)")
    bt.add_argument("--batch-state", metavar="FILE",
                    help="with --batch: file recording the batch id, to resume polling")
    bt.add_argument("--export-batch", metavar="FILE",
                    help="write the pooled pairs (not cached) as an OpenAI batch input file for a "
                         "batch runner of your own (vllm run-batch, LiteLLM, OpenAI); nothing is sent")
    bt.add_argument("--import-batch", metavar="FILE", nargs="+",
                    help="read that batch's output (and error) files instead of calling the model: "
                         "replies are checked, cached and written with provenance like online ones")
    cl = p.add_argument_group("cluster")
    cl.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="local: this process (default); ray: a Ray Data pipeline, each worker "
                         "running this session (same prompts, parsing, cache; --max-cost split "
                         "evenly between the workers); needs pip install -e '.[ray]'")
    cl.add_argument("--ray-address", metavar="ADDR",
                    help="with --engine ray: an existing cluster (ray://host:10001, auto); "
                         "default a local one")
    cl.add_argument("--ray-workers", type=int, default=2, metavar="N",
                    help="with --engine ray: workers judging at once (default 2)")
    p.set_defaults(func=run)


class _ModelAction(argparse.Action):
    """``--model``, repeatable: ``args.models`` lists every model, ``args.model`` is the first."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        models = list(getattr(namespace, "models", None) or [])
        models.append(values)
        namespace.models = models
        namespace.model = models[0]


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ..judges import LLMRelevanceJudge, pool_pairs

    options = options_from_args(JudgeOptions, args)
    if len(getattr(args, "models", None) or []) > 1:  # several --model: a judge panel
        return run_panel(args, options)
    if args.export_batch or args.import_batch:
        # Writing or reading batch files sends nothing: no API key needed.
        args.dry_run, dry_run = True, args.dry_run
        llm = llm_from_args(args)
        args.dry_run = dry_run
        if args.export_batch and (args.import_batch or args.batch):
            raise InputError("--export-batch writes the requests; give --import-batch or --batch "
                             "in another command", field="--export-batch")
        if args.import_batch and args.batch:  # which of the two was meant is not ours to guess
            raise InputError("--import-batch reads results made elsewhere, --batch sends the pairs "
                             "to the Batch API: give one of them", field="--import-batch")
    else:
        llm = llm_from_args(args)
    if getattr(args, "engine", "local") == "ray" and (args.batch or args.import_batch or args.export_batch):
        flag = "--batch" if args.batch else "--import-batch" if args.import_batch else "--export-batch"
        raise InputError(f"{flag} sends nothing through Ray workers: give it or --engine ray, not both",
                         field="--engine")
    if not args.output and not args.dry_run and not args.export_batch:
        raise InputError("no output file (pass -o OUT.qrels, or --dry-run)", field="-o")
    if options.all_queries and not args.fill:
        raise InputError("--all-queries only makes sense with --fill", field="--all-queries")

    if args.beir is None and (args.queries is None or args.corpus is None):
        missing = "--queries" if args.queries is None else "--corpus"
        raise InputError(f"{missing} is required (or --beir DIR)", field=missing)
    check_inputs([p for p in (args.queries, args.corpus, *args.runs, args.fill) if p])
    # Every query of the folder: the runs decide which are judged (--split checks the qrels).
    beir = beir_from_args(args, corpus=args.corpus is None, all_queries=True)
    queries = read_queries(args.queries) if args.queries else beir.queries  # type: ignore[union-attr]
    corpus = read_corpus(args.corpus) if args.corpus else beir.corpus  # type: ignore[union-attr]
    runs = [read_run_arg(path, args) for path in args.runs]
    human = read_qrels_arg(args.fill, args) if args.fill else None

    judge = LLMRelevanceJudge(llm=llm, prompt=options.prompt, progress=not args.no_progress)

    if args.dry_run:
        plan = judge.estimate(queries, corpus, runs, options.depth, qrels=human,
                              all_queries=options.all_queries)
        print(plan.describe())
        return 0
    if args.export_batch:
        from ..judges import export_judge_batch  # deferred: the Batch API loads the openai SDK

        _say(export_judge_batch(judge, queries, corpus, runs, options.depth, args.export_batch, qrels=human,
                                all_queries=options.all_queries).describe())
        return 0

    # Everything that could fail after the money is spent is checked first: the output
    # paths are writable, and every id can be written in the output's format.
    pairs = pool_pairs(queries, corpus, runs, options.depth, skip=human, all_queries=options.all_queries)
    _check_outputs(args.output, args.judgments, pairs, human)

    if args.import_batch:
        from ..judges import import_judge_batch  # deferred: the Batch API loads the openai SDK

        result = import_judge_batch(judge, queries, corpus, runs, options.depth, args.import_batch,
                                    qrels=human, all_queries=options.all_queries)
    elif args.batch:
        result = _run_batch(args, options, judge, queries, corpus, runs, human)
    elif args.engine == "ray":
        from ..ray import judge_ray_sync

        result = judge_ray_sync(pairs, llm=llm, prompt=options.prompt, workers=args.ray_workers,
                                address=args.ray_address, human=human)
    else:
        async def main() -> Any:
            try:
                if human is not None:
                    return await judge.fill_holes(human, queries, corpus, runs, options.depth,
                                                  all_queries=options.all_queries)
                return await judge.judge_run(queries, corpus, runs, options.depth)
            finally:
                await llm.aclose()

        try:
            result = run_sync(main())
        except LLMError as exc:
            _write_partial(exc, args, llm)
            raise

    write_qrels(result.qrels, args.output)
    if args.judgments:
        result.write_judgments(args.judgments)
    _report(result, args, llm)
    if result.summary()["skipped_budget"]:
        return 4  # cut short by the budget: not a finished result (said by _report)
    return 3 if result.mostly_failed else 0  # 1 is for gates; 3 = most LLM calls failed (as rag)


def _write_partial(exc: LLMError, args: argparse.Namespace, llm: Any) -> None:
    """The run stopped (a revoked key, a vanished model): write what was judged before it, so
    nothing paid for is lost, and say how to go on."""
    result = exc.partial
    if result is None or not getattr(result, "judgments", None):
        return
    write_qrels(result.qrels, args.output)
    if args.judgments:
        result.write_judgments(args.judgments)
    ok = sum(1 for j in result.judgments if j.ok)
    resume = ("a rerun resumes from the cache without paying for them again" if llm.cache.path is not None
              else "--no-cache was given: a rerun pays for them again")
    _say(f"the run stopped; wrote the {ok} judgments made before it to {args.output}"
         + (f" and {args.judgments}" if args.judgments else "") + f"; {resume}")


def _check_outputs(output: str, judgments: str | None, pairs: Sequence[Any], human: Any) -> None:
    """Create missing output directories and write a probe of the qrels (every pooled id,
    and the human labels kept) beside each output in its own format, then remove it: a bad
    path or an id the format cannot hold is a one-line error before the first call."""
    probe_qrels = Qrels.from_arrays([p.qid for p in pairs], [p.docid for p in pairs],
                                    np.zeros(len(pairs), dtype=np.int64), dedup="first")
    if human is not None:
        probe_qrels = human.merge(probe_qrels)
    for path, what in ((output, "qrels"), (judgments, "judgments")):
        if not path:
            continue
        target = Path(path)
        if target.is_dir():
            raise InputError("is a directory; give a file name", source=str(path))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the output directory ({exc.strerror or exc})",
                             source=str(path)) from None
        probe = target.with_name(f".ragjudge-probe-{target.name}")  # same suffix, same format
        try:
            if what == "qrels":
                write_qrels(probe_qrels, probe)  # same suffix rules as the real write
            else:
                probe.write_text("", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write here ({exc.strerror or exc})", source=str(path)) from None
        except InputError as exc:
            raise InputError(f"{exc.message}; nothing was judged", source=str(path),
                             field=exc.field) from None
        finally:
            probe.unlink(missing_ok=True)


def _run_batch(args: argparse.Namespace, options: JudgeOptions, judge: Any, queries: Any,
               corpus: Any, runs: Any, human: Any) -> Any:
    from ..judges import batch  # deferred: the Batch API loads the openai SDK

    return batch.judge_with_batch_sync(judge, queries, corpus, runs, options.depth, qrels=human,
                                       all_queries=options.all_queries, state_path=args.batch_state)


def _report(result: Any, args: argparse.Namespace, llm: Any) -> None:
    s = result.summary()
    cost = "unknown price" if s["cost_usd"] is None else f"${s['cost_usd']:.4f}"
    _say(f"judged {s['judged']}/{s['pairs']} pairs ({s['cached']} from cache); "
         f"{s['calls']} calls, {s['prompt_tokens']} prompt tokens ({s['cached_prompt_tokens']} cached"
         + (f", {s['cache_write_prompt_tokens']} written to the prompt cache" if s["cache_write_prompt_tokens"] else "")
         + "), "
         f"{s['completion_tokens']} completion tokens, {cost}")
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(s["failure_reasons"].items()))
    if s["failed"]:
        _say(f"{s['failed']} judgments failed and are not in the qrels ({reasons}); "
             "rerun to retry them")
    if s["skipped_budget"]:
        _say(f"ragjudge: error: stopped by --max-cost {args.max_cost:g}: {s['skipped_budget']} of "
             f"{s['pairs']} pairs not judged; rerun with a higher budget to continue (exit status 4)")
    if s["human_labels"]:
        _say(f"kept {s['human_labels']} human labels; wrote {s['qrels_pairs']} labels in total")
    if s["reasoning_dropped"]:
        _say(f"{s['reasoning_dropped']} replies kept running out of tokens: graded without reasoning")
    if s["usage_unknown"]:
        _say(f"{s['usage_unknown']} replies carried no readable usage: counted at their worst case")
    if llm.stats.fallbacks:
        _say("server fallbacks: " + "; ".join(llm.stats.fallbacks))
    _say(f"wrote {args.output}" + (f" and {args.judgments}" if args.judgments else ""))
    if result.mostly_failed:
        _say(f"ragjudge: error: {s['failed']} of {s['pairs'] - s['skipped_budget']} judgments failed "
             f"({reasons}); the qrels hold only the {s['judged']} that succeeded (exit status 3)")
