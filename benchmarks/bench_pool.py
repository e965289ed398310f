"""Label-free scores and the company a run keeps: each bundled run judged on demand alone, then
beside the other two (the same judge, one cache), for the pool-free measures (the label-free
defaults) and for pool-relative ones (nDCG with the judged ideal, MAP).

Prints, per run and measure, the value alone, the value pooled and their difference. A
pool-free measure must not move (difference 0); a pool-relative one moves with the pool, which
is why ragjudge warns about it and defaults to the pool-free ones.

The judge is the loopback simulator (``benchmarks/simulator.py``, ``judge="overlap"``): figures
from the simulator check plumbing, not quality.

Usage::

    python benchmarks/bench_pool.py
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import ragjudge  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))

from ragjudge.testing.simulator import SimConfig, SimulatorThread  # noqa: E402

from ragjudge import read_corpus, read_queries, read_run  # noqa: E402
from ragjudge.judges import LLMRelevanceJudge, evaluate_with_judge_sync  # noqa: E402
from ragjudge.llm import LLM  # noqa: E402

EX = HERE.parent / "examples"
POOL_FREE = ["ndcg(ideal=max)@10", "p@10", "rbp(p=0.8)@10", "mrr@10"]
POOL_RELATIVE = ["ndcg@10", "map@10"]


def main() -> None:
    queries, corpus = read_queries(EX / "queries.jsonl"), read_corpus(EX / "corpus.jsonl")
    runs = {p.stem: read_run(p) for p in sorted((EX / "runs").glob("*.run"))}
    metrics = POOL_FREE + POOL_RELATIVE
    sim = SimulatorThread(SimConfig(latency=0.0, judge="overlap")).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def judge() -> LLMRelevanceJudge:
                llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=Path(tmp) / "c.sqlite")
                return LLMRelevanceJudge(llm=llm, progress=False)

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the pool caveat is the point of this script
                alone = {name: evaluate_with_judge_sync(judge(), run, metrics, queries=queries, corpus=corpus,
                                                        judge_depth=10, name=name)
                         for name, run in runs.items()}
                pooled = evaluate_with_judge_sync(judge(), runs, metrics, queries=queries, corpus=corpus,
                                                  judge_depth=10)
    finally:
        sim.stop()
    pooled_by = {r.run: r for r in pooled} if isinstance(pooled, list) else pooled
    print(f"{'run':<14} {'measure':<20} {'alone':>8} {'pooled':>8} {'moved':>8}  kind")
    worst = {"pool-free": 0.0, "pool-relative": 0.0}
    for name in runs:
        for m in metrics:
            a, b = alone[name].mean[m], pooled_by[name].mean[m]
            kind = "pool-free" if m in POOL_FREE else "pool-relative"
            worst[kind] = max(worst[kind], abs(a - b))
            print(f"{name:<14} {m:<20} {a:>8.4f} {b:>8.4f} {b - a:>+8.4f}  {kind}")
    print(f"largest move: pool-free {worst['pool-free']:.4f}, pool-relative {worst['pool-relative']:.4f}")


if __name__ == "__main__":
    main()
