"""Regenerate the LLM answer caches the example notebooks replay (``examples/cache/*.jsonl.gz``).

The answers come from the project's simulator (``ragjudge.testing.simulator``): a local
OpenAI-compatible server whose replies are valid, deterministic -- and meaningless -- instances
of each prompt's JSON schema. They let the notebooks show the whole LLM path offline, with no
API key, at zero cost; the LLM numbers they print say nothing about the examples' quality. To
use a real model instead, run the notebooks' cells with your own ``LLM(...)`` session.

Each line of a (gzipped) cache file is ``{"key": ..., "record": ...}``: one answer as the LLM session
stores it (key = sha256 of model, prompt sha, parameters and messages). Run from the
repository root: ``python examples/make_caches.py``.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import ragjudge  # noqa: E402
from ragjudge.rag import evaluate_samples_sync  # noqa: E402
from ragjudge.llm import LLM, NullCache  # noqa: E402
from ragjudge.testing.simulator import SimConfig, SimulatorThread  # noqa: E402

EX = ROOT / "examples"
MODEL = "sim-model"
#: The LLM metrics of examples/rag.ipynb.
RAG_METRICS = ["faithfulness", "context_relevance", "context_recall", "answer_relevance"]
#: The pool judged in examples/label_free.ipynb: the top JUDGE_DEPTH documents of every run.
JUDGE_DEPTH = 5
#: examples/synthetic.ipynb: the settings of examples/synth/make_synth.py (same queries,
#: same simulated judge: grades from the query's words found in the passage).
SYNTH_N, SYNTH_OVERSAMPLE, SYNTH_JUDGE = 40, 1.5, "overlap"


class Recorder(NullCache):
    """An in-memory cache that keeps every answer the session stores, in arrival order."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def put(self, key: str, record: dict[str, Any]) -> None:
        self.records[key] = record

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def write(self, path: Path) -> None:
        lines = [json.dumps({"key": key, "record": self.records[key]}, sort_keys=True) + "\n"
                 for key in sorted(self.records)]  # stable order
        # gzip without a timestamp: the same answers give the same bytes
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write("".join(lines).encode("utf-8"))
        print(f"{path.relative_to(ROOT)}: {len(self.records)} answers")


def main() -> None:
    with SimulatorThread(SimConfig(latency=0.0, model=MODEL, seed=0)) as sim:
        rec = Recorder()
        llm = LLM(MODEL, base_url=sim.base_url, api_key="sim", cache=rec)
        evaluate_samples_sync(EX / "rag_samples.jsonl", RAG_METRICS, judge=llm)
        rec.write(EX / "cache" / "rag.jsonl.gz")

        rec = Recorder()
        llm = LLM(MODEL, base_url=sim.base_url, api_key="sim", cache=rec)
        queries = ragjudge.read_queries(EX / "queries.jsonl")
        corpus = ragjudge.read_corpus(EX / "corpus.jsonl")
        runs = [ragjudge.read_run(p) for p in sorted((EX / "runs").glob("*.run"))]
        judge = ragjudge.LLMRelevanceJudge(llm=llm)
        judge.judge_run_sync(queries, corpus, runs, depth=JUDGE_DEPTH)
        rec.write(EX / "cache" / "judge.jsonl.gz")

        try:  # ragjudge.synth (the synthetic test collection) may be absent from old checkouts
            from ragjudge.synth import synthesize_sync
        except ImportError:
            return
    with SimulatorThread(SimConfig(latency=0.0, model=MODEL, seed=0, judge=SYNTH_JUDGE)) as sim:
        rec = Recorder()
        llm = LLM(MODEL, base_url=sim.base_url, api_key="sim", cache=rec)
        synthesize_sync(corpus, SYNTH_N, llm=llm, oversample=SYNTH_OVERSAMPLE, seed=0, progress=False)
        rec.write(EX / "cache" / "synth.jsonl.gz")


if __name__ == "__main__":
    main()
