"""Dicts in, numbers out: ``ragjudge.evaluate(qrels_dict, run_dict, ...)`` against pytrec_eval's
``RelevanceEvaluator(qrels_dict, ...).evaluate(run_dict)`` on the same in-memory dicts (1,000
queries x 1,000 documents = 1M run rows; 5 measures), conversions included on both sides.
A second row gives ragjudge the same data as long pandas DataFrames (string id columns, as
pandas holds them) against pytrec_eval on the dicts (it takes no DataFrame).

Interleaved repetitions; prints each side's median seconds, the median ratio (ragjudge /
pytrec_eval; below 1 is faster) and checks that the two agree on every query.
Usage: ``python benchmarks/bench_dicts.py [REPEATS]``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

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


def frames(qrels: dict, run: dict) -> tuple[Any, Any]:
    import pandas as pd

    q = pd.DataFrame([(q, d, g) for q, docs in qrels.items() for d, g in docs.items()],
                     columns=["query_id", "doc_id", "relevance"])
    r = pd.DataFrame([(q, d, s) for q, docs in run.items() for d, s in docs.items()],
                     columns=["query_id", "doc_id", "score"])
    return q, r


def pairs(ours: Callable[[], Any], theirs: Callable[[], Any], repeats: int) -> tuple[list[float], ...]:
    a, b, ratio = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        ours()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs()
        b.append(time.perf_counter() - t)
        ratio.append(a[-1] / b[-1])
    return a, b, ratio


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    qrels, run = collection()
    qdf, rdf = frames(qrels, run)
    report = ragjudge.evaluate(qrels, run, list(MEASURES))
    res = pytrec_eval.RelevanceEvaluator(qrels, TREC).evaluate(run)
    framed = ragjudge.evaluate(qdf, rdf, list(MEASURES))
    worst = max(abs(r.per_query[q][m] - res[q][k]) for r in (report, framed) for m, k in MEASURES.items()
                for q in res)
    peer = lambda: pytrec_eval.RelevanceEvaluator(qrels, TREC).evaluate(run)  # noqa: E731
    rows = [("dicts", pairs(lambda: ragjudge.evaluate(qrels, run, list(MEASURES)), peer, repeats)),
            ("DataFrames", pairs(lambda: ragjudge.evaluate(qdf, rdf, list(MEASURES)), peer, repeats))]
    print(f"1M run rows, {len(qrels)} queries, 5 measures, {repeats} interleaved repeats")
    print(f"{'ragjudge input':<12} {'ragjudge s':>10} {'pytrec_eval s':>13} {'ratio':>6}  (median of pairs; below 1 is faster)")
    for label, (a, b, ratio) in rows:
        print(f"{label:<12} {statistics.median(a):>10.3f} {statistics.median(b):>13.3f} "
              f"{statistics.median(ratio):>6.2f}")
    print(f"largest per-query difference    {worst:.2e}")


if __name__ == "__main__":
    main()
