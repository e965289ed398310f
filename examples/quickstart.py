"""Evaluate and compare the three example runs through the Python API.

    python examples/quickstart.py

The same numbers from the shell:

    ragjudge evaluate examples/qrels.txt examples/runs/*.run -m ndcg@10,map,mrr,recall@100
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import ragjudge  # noqa: E402

METRICS = ["ndcg@10", "map", "map(rel=2)", "mrr", "recall@100", "p@5"]


def main() -> None:
    qrels = ragjudge.read_qrels(HERE / "qrels.txt")
    runs = {p.stem: ragjudge.read_run(p) for p in sorted((HERE / "runs").glob("*.run"))}
    queries = ragjudge.read_queries(HERE / "queries.jsonl")
    print(f"{qrels!r}; runs: {', '.join(runs)}\n")

    # 1. One run: mean values, then the three hardest queries by ndcg@10.
    report = ragjudge.evaluate(qrels, runs["bm25_stemmed"], METRICS)
    print(report)
    print()
    hardest = sorted(report.per_query.items(), key=lambda kv: kv[1]["ndcg@10"])[:3]
    for qid, values in hardest:
        print(f"  {qid}  ndcg@10={values['ndcg@10']:.3f}  {queries[qid]}")
    print()

    # 2. All runs against the weakest one: paired randomization tests, Holm correction, and
    #    95% bootstrap intervals of the means and of the differences (seeded, so reproducible).
    comparison = ragjudge.compare(
        qrels, runs, ["ndcg@10", "map(rel=2)", "mrr"], baseline="term_overlap", seed=0
    )
    print(comparison)
    print()

    # 3. Coming from a RAG toolkit with gold/retrieved id lists instead of files.
    samples = [json.loads(line) for line in (HERE / "rag_samples.jsonl").open(encoding="utf-8")]
    pooled, per_example = ragjudge.evaluate_lists(
        [s["reference_context_ids"] for s in samples],
        [s["retrieved_context_ids"] for s in samples],
        ["hit", "recall", "mrr"],
        k_list=[1, 5],
    )
    print(f"{len(samples)} RAG samples, top-5 retrieval:",
          ", ".join(f"{k}={v:.3f}" for k, v in pooled.items()))


if __name__ == "__main__":
    main()
