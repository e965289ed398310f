"""Dicts in, numbers out: ``ragjudge.evaluate(qrels_dict, run_dict, ...)`` against pytrec_eval's
``RelevanceEvaluator(qrels_dict, ...).evaluate(run_dict)`` on the same in-memory dicts (1,000
queries x 1,000 documents = 1M run rows; 5 measures), conversions included on both sides.

Interleaved repetitions; prints each side's median seconds, the median ratio (ragjudge /
pytrec_eval; below 1 is faster) and checks that the two agree on every query.
Usage: ``python benchmarks/bench_dicts.py [REPEATS]``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

import pytrec_eval

import ragjudge

MEASURES = {"ndcg@10": "ndcg_cut_10", "map": "map", "recall@100": "recall_100", "P@10": "P_10",
            "recip_rank": "recip_rank"}
TREC = {"ndcg_cut.10", "map", "recall.100", "P.10", "recip_rank"}


def collection(nq: int = 1000, nd: int = 1000, seed: int = 0) -> tuple[dict, dict]:
    rng = random.Random(seed)
    run = {f"q{i}": {f"doc{rng.randrange(200_000)}": rng.random() for _ in range(nd)} for i in range(nq)}
    qrels: dict[str, dict[str, int]] = {}
    for q, docs in run.items():
        top = list(docs)[:30]
        qrels[q] = {d: rng.randrange(4) for d in top[:rng.randrange(5, 30)]}
        qrels[q].update({f"doc{rng.randrange(200_000)}": rng.randrange(1, 4) for _ in range(20)})
    return qrels, run


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    qrels, run = collection()
    ours, theirs, ratios = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        report = ragjudge.evaluate(qrels, run, list(MEASURES))
        a = time.perf_counter() - t
        t = time.perf_counter()
        res = pytrec_eval.RelevanceEvaluator(qrels, TREC).evaluate(run)
        b = time.perf_counter() - t
        ours.append(a), theirs.append(b), ratios.append(a / b)
    worst = max(abs(report.per_query[q][m] - res[q][k]) for m, k in MEASURES.items() for q in res)
    print(f"1M run rows, {len(qrels)} queries, 5 measures, {repeats} interleaved repeats")
    print(f"ragjudge.evaluate(dicts)        {statistics.median(ours):.3f} s")
    print(f"pytrec_eval RelevanceEvaluator  {statistics.median(theirs):.3f} s")
    print(f"ratio (median of pairs)         {statistics.median(ratios):.2f}")
    print(f"largest per-query difference    {worst:.2e}")


if __name__ == "__main__":
    main()
