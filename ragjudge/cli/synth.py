"""``ragjudge synth``: a synthetic test collection (queries, qrels, RAG samples) from a corpus.

Only argument parsing and output here; the work is :func:`ragjudge.synth.synthesize` on the
same :class:`ragjudge.llm.LLM` session options as ``judge`` and ``rag``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._sync import run_sync
from ..errors import InputError, LLMError
from ..io import read_corpus, read_run
from ..synth.options import SynthOptions
from ..synth.result import SynthResult
from ._inputs import add_option, check_writable, flags_named, options_from_args
from ._llm import add_llm_options, llm_from_args

__all__ = ["register", "synth_options"]

_EPILOG = """\
pipeline: sample passages (seeded by --seed, stratified by source/title and length; too short,
boilerplate and near-duplicate passages skipped) -> one call per draw (a style and its
passage) writing three candidate queries, each with its reference answer (v1 prompts: one)
-> filters: copy (long spans of the passage), round trip (BM25 over the corpus must rank the
source in the top --roundtrip-k), duplicates, answerability (the relevance judge grades query
vs source >= --min-grade; a draw's candidates in the model's order, stopping at the first
that passes: at most one query per draw), optional --min-confidence. Draws are generated and
judged in rounds until N are kept or --oversample x N draws have been tried.

outputs in DIR: queries.jsonl (_id, text, style), qrels.txt (sources at grade 3; with
--judge-pool also the judged pooled top --depth of the runs), samples.jsonl (RAGAS fields
user_input, reference, reference_context_ids, reference_contexts), synth.jsonl (every
candidate, kept or dropped, with scores, drop reason and provenance), summary.json.

cache: every answer is committed to the SQLite cache as it arrives, so a rerun (after a
crash, a kill, or --max-cost) pays only for what is missing.

exit status: 0 done; 1 fewer than N queries survived (outputs are still written; pass
--allow-fewer to accept them); 4 --max-cost stopped it before N queries were made (outputs
are written); 2 bad input or a non-retryable endpoint error; 130 interrupted.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "synth",
        help="generate synthetic queries, qrels and RAG samples from a corpus",
        description="Make a synthetic test collection from a corpus alone: N filtered queries with "
                    "reference answers, qrels and RAG samples, with an account of every candidate.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    io = p.add_argument_group("input and output")
    io.add_argument("--corpus", required=True, metavar="FILE",
                    help="documents: BEIR JSONL (_id, title, text) or TSV id<TAB>text")
    io.add_argument("-n", type=int, required=True, metavar="N", help="number of queries to keep")
    io.add_argument("-o", "--output", metavar="DIR", help="output directory (required unless --dry-run)")
    gen = p.add_argument_group("generation")
    add_option(gen, SynthOptions, "styles", metavar="SPEC")
    gen.add_argument("--prompt", dest="prompts", action="append", default=[], metavar="[STYLE=]FILE",
                     help="your own prompt template for a style (default style: question); "
                          "a new STYLE name adds a style to use in --styles; repeatable")
    add_option(gen, SynthOptions, "examples", metavar="FILE",
               help="example queries of your users (one per line, or queries JSONL/TSV); "
                    "a few go into each prompt, InPars-style")
    add_option(gen, SynthOptions, "oversample", type=float, metavar="X")
    add_option(gen, SynthOptions, "min_words", type=int, metavar="N")
    add_option(gen, SynthOptions, "language", metavar="CODE")
    flt = p.add_argument_group("filters")
    add_option(flt, SynthOptions, "roundtrip_k", type=int, metavar="K",
               help=SynthOptions.help("roundtrip_k").replace("None:", "0:"))
    add_option(flt, SynthOptions, "copy_span", type=int, metavar="N")
    add_option(flt, SynthOptions, "min_grade", type=int, metavar="G")
    add_option(flt, SynthOptions, "min_confidence", type=float, metavar="P")
    add_option(flt, SynthOptions, "judge_prompt", metavar="NAME|FILE")
    flt.add_argument("--allow-fewer", action="store_true",
                     help="exit 0 even if fewer than N queries survive")
    pool = p.add_argument_group("pooled qrels")
    pool.add_argument("--judge-pool", nargs="+", metavar="RUN",
                      help="runs of the synthetic queries: judge their pooled top --depth documents "
                           "into the qrels (sources stay at grade 3)")
    add_option(pool, SynthOptions, "depth", type=int, metavar="K",
               help="pool depth of --judge-pool")
    add_llm_options(p)
    p.set_defaults(func=run)


def _prompts(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        style, sep, path = v.partition("=")
        if not sep:
            style, path = "question", v
        style = style.strip()
        if not style or not path.strip():
            raise InputError(f"{v!r} is not [STYLE=]FILE", field="--prompt")
        if style in out:
            raise InputError(f"two prompts for style {style!r}", field="--prompt")
        out[style] = path.strip()
    return out


def synth_options(args: argparse.Namespace) -> SynthOptions:
    """The :class:`SynthOptions` of a parsed ``synth`` command line (``--prompt`` pairs become
    ``prompts``; ``--roundtrip-k 0`` is off, ``None``)."""
    if args.roundtrip_k is not None and args.roundtrip_k < 0:
        raise InputError(f"must be >= 0 (0: off), got {args.roundtrip_k}", field="--roundtrip-k")
    return options_from_args(SynthOptions, args, prompts=_prompts(args.prompts) or None,
                             roundtrip_k=args.roundtrip_k or None)


def run(args: argparse.Namespace) -> int:
    # Deferred: the generator loads the LLM stack (session, client, tenacity), which
    # `synth --help` and a rejected command line never need.
    from ..synth import estimate_synth, synthesize

    llm = llm_from_args(args)
    if not args.output and not args.dry_run:
        raise InputError("no output directory (pass -o DIR, or --dry-run)", field="-o")
    if args.n <= 0:
        raise InputError(f"must be a positive integer, got {args.n}", field="-n")
    if args.output and not args.dry_run:
        # Before any paid call: the outputs were written after the run, so a file in the way
        # was one line after the money was spent.
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise InputError("is a file; give a folder for the outputs", source=args.output)
        check_writable([os.path.join(args.output, "summary.json")])
    options = synth_options(args)
    corpus = read_corpus(args.corpus)
    # Every input is read before planning, a dry run included: a missing file is an error now.
    runs = [read_run(path) for path in args.judge_pool] if args.judge_pool else None
    named = flags_named("n", *SynthOptions.names())
    if args.dry_run:
        with named:
            print(estimate_synth(corpus, args.n, llm=llm, options=options).describe())
        return 0

    async def main() -> Any:
        try:
            return await synthesize(corpus, args.n, llm=llm, judge_pool=runs, options=options,
                                    progress=not args.no_progress)
        finally:
            await llm.aclose()

    with named:
        try:
            result = run_sync(main())
        except LLMError as exc:
            # The run stopped (a spend limit, a revoked key): write the queries made before it.
            if isinstance(exc.partial, SynthResult):
                paths = exc.partial.write(args.output)
                resume = ("a rerun resumes from the cache without paying for them again"
                          if llm.cache.path is not None else "--no-cache was given: a rerun pays for them again")
                _say(f"ragjudge: the run stopped; wrote the {len(exc.partial.kept)} of {args.n} queries made "
                     f"before it to {', '.join(str(p) for p in paths)}; {resume}")
            raise
    paths = result.write(args.output)
    print(result)
    if llm.stats.fallbacks:
        _say("server fallbacks: " + "; ".join(llm.stats.fallbacks))
    _say("wrote " + ", ".join(str(p) for p in paths))
    if not result.ok:
        kept = len(result.kept)
        hint = "" if args.allow_fewer else "; pass --allow-fewer to accept them"
        budget = sum(1 for c in result.candidates if c.dropped_by == "budget")
        if budget:
            _say(f"ragjudge: error: stopped by --max-cost {args.max_cost:g}: {kept} of {args.n} queries "
                 f"made, {budget} candidates left incomplete; rerun with a higher budget to finish "
                 "(exit status 4)")
            return 4
        _say(f"only {kept} of {args.n} requested queries survived the filters (see the table above"
             f"); raise --oversample (now {args.oversample}) or loosen a filter{hint}")
        return 0 if args.allow_fewer else 1
    return 0


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)
