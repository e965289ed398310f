"""``ragjudge retrieve``: a TREC run of BM25, dense or hybrid retrieval for a corpus and queries.

It only parses arguments and calls :mod:`ragjudge.retrieve`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._sync import run_sync
from ..errors import InputError
from ..io import format_run, read_corpus, read_queries, write_run
from ..retrieve import BM25_METHODS, estimate_dense, retrieve_bm25, retrieve_dense, retrieve_hybrid
from ._inputs import add_beir_options, beir_from_args, check_inputs, check_writable
from ._llm import add_llm_options, llm_from_args

__all__ = ["register"]

_EPILOG = """\
bm25 needs nothing but the files. dense embeds every document and query through the LLM
endpoint's /embeddings (--base-url, --api-key-env, ... as for `ragjudge judge`; --model is
not needed): vectors are cached per text, so a second run, or the dense half of a hybrid run
after a dense one, costs nothing; --dry-run prints the requests, tokens and cost first.
hybrid fuses the bm25 and dense runs by reciprocal rank fusion (k=60) and keeps the top -k.

output: TREC run (qid Q0 docid rank score name) on stdout or in -o FILE (.json writes JSON,
.gz compresses); evaluate it with `ragjudge evaluate QRELS FILE`.

exit status: 0 done; 2 bad input (one line naming the file, line and field) or a failed
embedding request; 130 interrupted.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "retrieve",
        help="make a run: BM25, dense (embeddings) or hybrid retrieval over a corpus",
        description="Retrieve the top -k documents of the corpus for every query and write a "
                    "TREC run, e.g. for the queries of `ragjudge synth`.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    io = p.add_argument_group("input and output")
    io.add_argument("--corpus", metavar="FILE",
                    help="documents: BEIR JSONL (_id, title, text) or TSV id<TAB>text (required unless --beir)")
    io.add_argument("--queries", metavar="FILE",
                    help="queries: BEIR JSONL (_id, text) or TSV id<TAB>text (required unless --beir)")
    add_beir_options(io, "its corpus and every query, instead of --corpus/--queries")
    io.add_argument("--method", choices=("bm25", "dense", "hybrid"), default="bm25",
                    help="bm25 (default), dense (embeddings, cosine) or hybrid (bm25 + dense by RRF)")
    io.add_argument("-k", type=int, default=100, metavar="K",
                    help="documents kept per query (default 100)")
    io.add_argument("-o", "--output", default=None, metavar="FILE",
                    help="write the run here (default stdout; .json writes JSON)")
    io.add_argument("--name", default=None, metavar="NAME",
                    help="run name, the TREC tag column (default: the method)")
    bm = p.add_argument_group("bm25")
    bm.add_argument("--k1", type=float, default=1.5, help="term frequency saturation (default 1.5)")
    bm.add_argument("--b", type=float, default=0.75, help="length normalisation (default 0.75)")
    bm.add_argument("--bm25-variant", choices=BM25_METHODS, default="lucene",
                    help="BM25 formula variant of bm25s (default lucene, as Lucene/Anserini)")
    bm.add_argument("--stemmer", default=None, metavar="LANG",
                    help="Snowball stemmer, e.g. english (needs PyStemmer; default none)")
    bm.add_argument("--stopwords", default=None, choices=("en",),
                    help="drop English stopwords (default: keep every word)")
    dn = p.add_argument_group("dense")
    dn.add_argument("--embedding-model", metavar="M", default=None,
                    help="embedding model for dense and hybrid, e.g. text-embedding-3-small")
    add_llm_options(p)
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.beir is None and (args.queries is None or args.corpus is None):
        missing = "--corpus" if args.corpus is None else "--queries"
        raise InputError(f"{missing} is required (or --beir DIR)", field=missing)
    if args.k < 1:
        raise InputError(f"must be a positive integer, got {args.k}", field="-k")
    name = args.name if args.name is not None else args.method
    if not name or any(c.isspace() for c in name):
        raise InputError(f"a run name is one word (the TREC tag column), got {name!r}", field="--name")
    dense = args.method in ("dense", "hybrid")
    if dense and not args.embedding_model:
        raise InputError(f"--method {args.method} needs --embedding-model M", field="--embedding-model")
    check_inputs([p for p in (args.corpus, args.queries) if p])
    beir = beir_from_args(args, corpus=args.corpus is None, all_queries=True)
    corpus = read_corpus(args.corpus) if args.corpus else beir.corpus  # type: ignore[union-attr]
    queries = read_queries(args.queries) if args.queries else beir.queries  # type: ignore[union-attr]

    if not dense:
        if args.dry_run:
            print("dry run: bm25 makes no LLM calls; nothing to estimate")
            return 0
        check_writable([args.output])
        result = _bm25(args, corpus, queries, name)
        _write(result, args.output)
        return 0

    if not args.model:  # only embeddings are asked for: the session's chat model is never used
        args.model = args.embedding_model
    llm = llm_from_args(args)
    if args.dry_run:
        plan = estimate_dense(corpus, queries, llm=llm, embedding_model=args.embedding_model)
        cost = "unknown (no price for this model; pass --prices)" if plan.cost is None else f"${plan.cost:.4f}"
        worst = "" if plan.worst_cost is None else f" (at most ${plan.worst_cost:.4f})"
        print(f"dry run: {plan.pairs} texts to embed, {plan.cached} already cached, {plan.duplicates} "
              f"duplicates -> {plan.calls} /embeddings requests to {plan.model}; ~{plan.prompt_tokens} "
              f"tokens; estimated cost {cost}{worst}\nassumed: {plan.assumptions}")
        return 0
    check_writable([args.output])

    async def main() -> Any:
        try:
            return await retrieve_dense(corpus, queries, llm=llm, embedding_model=args.embedding_model,
                                        k=args.k, name="dense" if args.method == "hybrid" else name)
        finally:
            await llm.aclose()

    result = run_sync(main())
    usage = llm.embedding_usage.get(args.embedding_model)
    cost = llm.prices.cost(args.embedding_model, usage) if usage is not None else 0.0
    _say(f"embedded with {args.embedding_model}: {usage.calls if usage else 0} requests, "
         f"{usage.prompt_tokens if usage else 0} tokens, {llm.stats.cache_hits} texts from cache, "
         + ("unknown price" if cost is None else f"${cost:.4f}"))
    if args.method == "hybrid":
        lexical = _bm25(args, corpus, queries, "bm25")
        result = retrieve_hybrid([lexical, result], k=args.k, name=name)
    _write(result, args.output)
    return 0


def _bm25(args: argparse.Namespace, corpus: Any, queries: Any, name: str) -> Any:
    try:
        return retrieve_bm25(corpus, queries, k=args.k, k1=args.k1, b=args.b, method=args.bm25_variant,
                             stemmer=args.stemmer, stopwords=args.stopwords, name=name)
    except InputError as exc:
        if exc.field in ("k1", "b", "stemmer", "stopwords"):  # the user typed the flag
            exc.field = "--" + exc.field
        raise


def _write(result: Any, output: str | None) -> None:
    if output is None:
        sys.stdout.write(format_run(result, "trec"))
        sys.stdout.flush()
    else:
        write_run(result, output)
        _say(f"wrote {output}: {result.num_queries} queries, {len(result)} documents")
