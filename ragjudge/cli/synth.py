"""``ragjudge synth``: a synthetic test collection (queries, qrels, RAG samples) from a corpus.

Only argument parsing and output here; the work is :func:`ragjudge.synth.synthesize` on the
same :class:`ragjudge.llm.LLM` session options as ``judge`` and ``rag``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._sync import run_sync
from ..errors import InputError
from ._inputs import flags_named
from ._llm import add_llm_options, llm_from_args

__all__ = ["register"]

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
--allow-fewer to accept them); 2 bad input or a non-retryable endpoint error; 130 interrupted.
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
    gen.add_argument("--styles", metavar="SPEC", default="question=0.6,keyword=0.3,multi=0.1",
                     help="mix of query styles, weights summing to 1 (default "
                          "question=0.6,keyword=0.3,multi=0.1)")
    gen.add_argument("--prompt", dest="prompts", action="append", default=[], metavar="[STYLE=]FILE",
                     help="your own prompt template for a style (default style: question); "
                          "a new STYLE name adds a style to use in --styles; repeatable")
    gen.add_argument("--examples", metavar="FILE",
                     help="example queries of your users (one per line, or queries JSONL/TSV); "
                          "a few go into each prompt, InPars-style")
    gen.add_argument("--oversample", type=float, default=1.5, metavar="X",
                     help="generation calls (draws of up to three candidates each) at most per "
                          "requested query (default 1.5)")
    gen.add_argument("--min-words", type=int, default=12, metavar="N",
                     help="skip passages shorter than N words (default 12)")
    flt = p.add_argument_group("filters")
    flt.add_argument("--roundtrip-k", type=int, default=20, metavar="K",
                     help="BM25 must rank the source passage(s) in the top K (default 20; 0: off)")
    flt.add_argument("--copy-span", type=int, default=7, metavar="N",
                     help="drop queries sharing N consecutive words with their passage (default 7; 0: off)")
    flt.add_argument("--min-grade", type=int, default=2, metavar="G",
                     help="answerability: the judge's grade of (query, source) must be >= G (default 2)")
    flt.add_argument("--min-confidence", type=float, metavar="P",
                     help="also drop candidates whose P(grade >= G) from logprobs is below P")
    flt.add_argument("--judge-prompt", default="relevance.v1", metavar="NAME|FILE",
                     help="relevance prompt of the answerability judge (default relevance.v1)")
    flt.add_argument("--allow-fewer", action="store_true",
                     help="exit 0 even if fewer than N queries survive")
    pool = p.add_argument_group("pooled qrels")
    pool.add_argument("--judge-pool", nargs="+", metavar="RUN",
                      help="runs of the synthetic queries: judge their pooled top --depth documents "
                           "into the qrels (sources stay at grade 3)")
    pool.add_argument("--depth", type=int, default=20, metavar="K",
                      help="pool depth of --judge-pool (default 20)")
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


def run(args: argparse.Namespace) -> int:
    from ..io import read_corpus, read_run
    from ..synth import estimate_synth, synthesize

    llm = llm_from_args(args)
    if not args.output and not args.dry_run:
        raise InputError("no output directory (pass -o DIR, or --dry-run)", field="-o")
    if args.n <= 0:
        raise InputError(f"must be a positive integer, got {args.n}", field="-n")
    if args.roundtrip_k < 0 or args.copy_span < 0 or args.min_words < 0:
        raise InputError("--roundtrip-k, --copy-span and --min-words must be >= 0", field="synth")
    if args.depth < 1:
        raise InputError(f"must be a positive integer, got {args.depth}", field="--depth")
    options = dict(
        styles=args.styles, prompts=_prompts(args.prompts), examples=args.examples,
        oversample=args.oversample, seed=args.seed, min_words=args.min_words,
        copy_span=args.copy_span, roundtrip_k=args.roundtrip_k or None, min_grade=args.min_grade,
        min_confidence=args.min_confidence, judge_prompt=args.judge_prompt,
    )
    corpus = read_corpus(args.corpus)
    # Every input is read before planning, a dry run included: a missing file is an error now.
    runs = [read_run(path) for path in args.judge_pool] if args.judge_pool else None
    named = flags_named("n", "depth", *options)
    if args.dry_run:
        with named:
            print(estimate_synth(corpus, args.n, llm=llm, **options).describe())
        return 0

    async def main() -> Any:
        try:
            return await synthesize(corpus, args.n, llm=llm, judge_pool=runs, depth=args.depth,
                                    progress=not args.no_progress, **options)
        finally:
            await llm.aclose()

    with named:
        result = run_sync(main())
    paths = result.write(args.output)
    print(result)
    if llm.stats.fallbacks:
        _say("server fallbacks: " + "; ".join(llm.stats.fallbacks))
    _say("wrote " + ", ".join(str(p) for p in paths))
    if not result.ok:
        kept = len(result.kept)
        hint = "" if args.allow_fewer else "; pass --allow-fewer to accept them"
        budget = any(c.dropped_by == "budget" for c in result.candidates)
        _say(f"only {kept} of {args.n} requested queries survived the filters (see the table above"
             + (", --max-cost was reached" if budget else "")
             + f"); raise --oversample (now {args.oversample}) or loosen a filter{hint}")
        return 0 if args.allow_fewer else 1
    return 0


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)
