"""Benchmark ``ragjudge retrieve``'s BM25 against rank_bm25 and bm25s used directly: the same
top 100? and time per 1,000 queries.

    PYTHONPATH=. python benchmarks/bench_retrieve.py                    # bundled corpus, 1,000 queries
    PYTHONPATH=. python benchmarks/bench_retrieve.py --copies 64        # 20,160 passages

Every implementation gets the same terms (``ragjudge.retrieve.analyzer()``: lower-cased word
tokens, no stemming, no stopwords) and the same BM25: k1=1.5, b=0.75, Lucene's idf
``log(1 + (N - n + 0.5) / (n + 0.5))`` (rank_bm25's ``BM25Okapi`` with that idf; its scores are
the same times ``k1 + 1``). The 60 bundled queries are cycled to ``--queries`` (1,000) for the
timings; ``--copies N`` repeats the corpus N times under new ids (ties then come in groups of
N, which exercises the tie order at the cut).

Top-100 agreement is per query against rank_bm25's complete ranking cut at 100 (documents
sharing a term with the query; trec_eval order, ties by doc id descending):

* ``same list`` -- identical documents in identical order;
* ``same within ties`` -- identical rank by rank once documents of (near-)equal score are
  taken as interchangeable (score within 1e-5 relative: float32 vs float64);
* ``overlap`` -- mean |top-100 of A  and  top-100 of rank_bm25| / |top-100 of rank_bm25|.

bm25s's own ``retrieve(k=100)`` picks among tied documents at the cut in no stated order, so
its lists agree within ties only. The machine is shared: times are indicative.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ragjudge.io import read_corpus, read_queries
from ragjudge.retrieve import analyzer, retrieve_bm25

ROOT = Path(__file__).resolve().parents[1]
K = 100


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def trec_order(items: list[tuple[str, float]]) -> list[tuple[str, float]]:
    by_id = sorted(items, key=lambda x: x[0].encode(), reverse=True)
    return sorted(by_id, key=lambda x: -x[1])  # stable: equal scores keep doc id descending


def same_within_ties(a: list[tuple[str, float]], b: list[tuple[str, float]], rel: float = 1e-5) -> bool:
    if len(a) != len(b):
        return False
    if any(not math.isclose(x[1], y[1], rel_tol=rel, abs_tol=rel) for x, y in zip(a, b)):
        return False
    # group by (near-)equal scores of b; each group must hold the same documents, except the
    # last group, cut at k, where any of the tied documents may be the ones kept
    i = 0
    while i < len(b):
        j = i
        while j + 1 < len(b) and math.isclose(b[j + 1][1], b[i][1], rel_tol=rel, abs_tol=rel):
            j += 1
        if j + 1 < len(b) and {d for d, _ in a[i:j + 1]} != {d for d, _ in b[i:j + 1]}:
            return False
        i = j + 1
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=1000, help="queries timed (the 60 bundled ones cycled)")
    ap.add_argument("--copies", type=int, default=1, help="repeat the bundled corpus N times")
    ap.add_argument("--repeat", type=int, default=3, help="timing repetitions (best of)")
    args = ap.parse_args()

    base = read_corpus(ROOT / "examples" / "corpus.jsonl")
    corpus = {f"{d}#{c}" if args.copies > 1 else d: t for c in range(args.copies) for d, t in base.items()}
    human = read_queries(ROOT / "examples" / "queries.jsonl")
    items = list(human.items())
    queries = {f"{items[i % len(items)][0]}.{i // len(items)}": items[i % len(items)][1] for i in range(args.queries)}
    analyze = analyzer()
    ids = list(corpus)
    print(f"corpus: {len(corpus)} passages; {len(queries)} queries ({len(human)} distinct texts); top {K}")

    # -- rank_bm25: the reference ---------------------------------------------------------
    from rank_bm25 import BM25Okapi

    class LuceneIdf(BM25Okapi):
        def _calc_idf(self, nd: dict[str, int]) -> None:
            self.idf = {w: math.log(1 + (self.corpus_size - n + 0.5) / (n + 0.5)) for w, n in nd.items()}

    docs_terms = [analyze(corpus[d]) for d in ids]
    ref_index, ref_build = timed(lambda: LuceneIdf(docs_terms, k1=1.5, b=0.75))

    def ref_run() -> dict[str, list[tuple[str, float]]]:
        out = {}
        for qid, text in queries.items():
            s = ref_index.get_scores(analyze(text))
            out[qid] = trec_order([(ids[i], float(s[i]) / 2.5) for i in np.flatnonzero(s > 0)])[:K]
        return out

    # -- ragjudge -------------------------------------------------------------------------
    def ours() -> dict[str, list[tuple[str, float]]]:
        run = retrieve_bm25(corpus, queries, k=K)
        return {q: run.ranked(q) for q in queries}

    # -- bm25s directly: index + retrieve(k) ---------------------------------------------
    import bm25s

    def direct() -> dict[str, list[tuple[str, float]]]:
        index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        index.index([analyze(corpus[d]) or [""] for d in ids], show_progress=False)
        q_terms = [[t for t in analyze(text) if t in index.vocab_dict] or [""] for text in queries.values()]
        k = min(K, len(ids))
        docs, scores = index.retrieve(q_terms, k=k, show_progress=False)
        out = {}
        for qid, row_d, row_s in zip(queries, docs, scores):
            out[qid] = trec_order([(ids[int(i)], float(s)) for i, s in zip(row_d, row_s) if s > 0])
        return out

    results: dict[str, dict[str, list[tuple[str, float]]]] = {}
    times: dict[str, float] = {}
    for name, fn in (("rank_bm25", ref_run), ("ragjudge", ours), ("bm25s direct", direct)):
        best = math.inf
        for _ in range(1 if name == "rank_bm25" else args.repeat):  # the slow reference: once
            out, dt = timed(fn)
            best = min(best, dt)
        results[name], times[name] = out, best
    times["rank_bm25"] += ref_build  # ragjudge and bm25s direct include their indexing

    ref = results["rank_bm25"]
    print(f"\n{'implementation':<14} {'s / 1k queries':>15} {'vs ragjudge':>12} {'same list':>10} "
          f"{'same within ties':>17} {'overlap@100':>12}")
    for name in ("ragjudge", "bm25s direct", "rank_bm25"):
        got = results[name]
        exact = sum([d for d, _ in got[q]] == [d for d, _ in ref[q]] for q in queries)
        ties = sum(same_within_ties(got[q], ref[q]) for q in queries)
        overlap = np.mean([len({d for d, _ in got[q]} & {d for d, _ in ref[q]}) / max(1, len(ref[q]))
                           for q in queries])
        per_1k = times[name] / len(queries) * 1000
        ratio = times[name] / times["ragjudge"]
        print(f"{name:<14} {per_1k:>15.3f} {ratio:>11.2f}x {exact:>5}/{len(queries):<4} "
              f"{ties:>11}/{len(queries):<5} {overlap:>12.4f}")
    print(f"\n(rank_bm25: {ref_build:.3f} s of indexing included; ragjudge and bm25s direct index the "
          "corpus inside the timed call; best of "
          f"{args.repeat}, rank_bm25 once)")


if __name__ == "__main__":
    main()
