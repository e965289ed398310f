"""Regenerate the bundled synthetic test collection of the example corpus.

    python examples/synth/make_synth.py            # rewrites the files of examples/synth/
    python examples/synth/make_synth.py --check    # exits 1 if the kept queries on disk differ

MADE WITH THE PROJECT'S DETERMINISTIC SIMULATOR (``ragjudge.testing.simulator``), NOT A REAL
MODEL: its "queries" are a few words of the passage in a question template (three per call,
with the shipped ``synth_*.v2`` prompts) and its relevance judge grades by the share of the
query's words found in the passage, with 15% of grades moved one step at random
(``SimConfig(judge="overlap")``), so this set shows the plumbing and the file formats -- it
says nothing about any model's quality. Make a real one with
``ragjudge synth --corpus examples/corpus.jsonl -n 40 --model gpt-4o-mini -o my-synth``.

Steps: start the simulator on 127.0.0.1, run :func:`ragjudge.synth.synthesize` (n=40,
the default oversampling 1.5, seed 0, no cache), write the outputs here, then run the three bundled BM25/term-overlap
variants of ``examples/make_dataset.py`` on the synthetic queries (``runs/``) and make RAG
samples from the two BM25 runs' top 5 (``rag_bm25_stemmed.jsonl``, ``rag_bm25_raw.jsonl``).
Needs aiohttp (dev extra) and rank_bm25 (example-only), like the rest of examples/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EX = HERE.parent
ROOT = EX.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(EX))

from make_dataset import build_runs  # noqa: E402

from ragjudge.io import format_run, read_corpus  # noqa: E402
from ragjudge.llm import LLM  # noqa: E402
from ragjudge.synth import synthesize_sync  # noqa: E402

N, OVERSAMPLE, RAG_DEPTH = 40, 1.5, 5


def build(out: Path) -> dict[str, str]:
    from ragjudge.testing.simulator import SimConfig, SimulatorThread

    corpus = read_corpus(EX / "corpus.jsonl")
    with SimulatorThread(SimConfig(latency=0.0, max_lifetime=300, judge="overlap")) as sim:
        llm = LLM("sim-model", base_url=sim.base_url, api_key="sk-simulator", cache=False)
        result = synthesize_sync(corpus, N, llm=llm, oversample=OVERSAMPLE, seed=0, progress=False)
    result.write(out)
    queries = result.queries
    runs = build_runs(corpus, queries)
    files: dict[str, str] = {}
    for name, run in runs.items():
        files[f"runs/{name}.run"] = format_run(run, "trec")
    for name in ("bm25_stemmed", "bm25_raw"):
        rows = []
        for s in result.samples:
            top = [d for d, _ in runs[name].ranked(s["id"], RAG_DEPTH)]
            rows.append({**s, "retrieved_context_ids": top, "retrieved_contexts": [corpus[d] for d in top]})
        files[f"rag_{name}.jsonl"] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    print(result)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="regenerate into a temporary directory and compare")
    args = ap.parse_args(argv)
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            build(Path(tmp))
            new = (Path(tmp) / "queries.jsonl").read_text(encoding="utf-8")
        old = (HERE / "queries.jsonl").read_text(encoding="utf-8")
        if new != old:
            print("differs: examples/synth/queries.jsonl")
            return 1
        return 0
    files = build(HERE)
    (HERE / "runs").mkdir(exist_ok=True)
    for rel, text in files.items():
        (HERE / rel).write_text(text, encoding="utf-8")
        print(f"wrote examples/synth/{rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
