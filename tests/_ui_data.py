"""A small workspace for the web page's tests: the examples collection (qrels, runs, queries,
corpus), a compare result, simulated LLM judgments with reasoning, one hostile passage, and a
to-label sample drawn by ``plan-labels --sample``'s library function."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ragjudge.evaluate import compare
from ragjudge.io import read_qrels, read_run
from ragjudge.llm.prompts import load_prompt
from ragjudge.trust.labelling import sample_to_label
from ragjudge.trust.simulate import simulate_qrels

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HOSTILE = "evil-01"
SCRIPT = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned=2\">"


def make_workspace(tmp: Path, *, sample: int = 10, depth: int = 5) -> dict[str, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    qrels = read_qrels(EXAMPLES / "qrels.txt")
    runs = [read_run(EXAMPLES / "runs" / f) for f in ("bm25_raw.run", "bm25_stemmed.run")]
    # the corpus with one passage that tries to run a script, retrieved first for q01
    corpus_lines = (EXAMPLES / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    corpus_lines.append(json.dumps({"_id": HOSTILE, "title": "<b>bold</b>", "text": SCRIPT}))
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("\n".join(corpus_lines) + "\n", encoding="utf-8")
    run_paths = []
    for r, f in zip(runs, ("bm25_raw.run", "bm25_stemmed.run")):
        text = (EXAMPLES / "runs" / f).read_text(encoding="utf-8")
        text = f"q01 Q0 {HOSTILE} 0 99.0 {r.name}\n" + text
        (tmp / f).write_text(text, encoding="utf-8")
        run_paths.append(tmp / f)
    runs = [read_run(p) for p in run_paths]
    result = compare(qrels, {r.name: r for r in runs}, ["ndcg@10", "recall@5"], n_resamples=500)
    (tmp / "compare.json").write_text(result.to_json(per_query=True), encoding="utf-8")
    llm = simulate_qrels(qrels, "noisy", seed=0)
    rows = list(llm.rows()) + [("q01", HOSTILE, 3)]
    llm_text = "".join(f"{q} 0 {d} {g}\n" for q, d, g in rows)
    (tmp / "llm.qrels").write_text(llm_text, encoding="utf-8")
    rng = random.Random(0)
    with (tmp / "judgments.jsonl").open("w", encoding="utf-8") as f:
        for q, d, g in rows:
            probs = {str(k): (0.7 if k == g else 0.1) for k in range(4)}
            f.write(json.dumps({
                "qid": q, "docid": d, "grade": g, "probs": probs,
                "expected": sum(int(k) * v for k, v in probs.items()),
                "reasoning": SCRIPT if d == HOSTILE else f"grade {g}: {rng.choice(['on topic', 'answers it'])}",
                "error": None, "failure": None, "model": "sim-judge", "prompt_id": "relevance",
                "prompt_version": "1", "prompt_sha": "0", "params": {}, "usage": {},
                "latency": 0.0, "cached": False}) + "\n")
    from ragjudge.io import read_corpus, read_queries

    todo = sample_to_label(runs, read_queries(EXAMPLES / "queries.jsonl"), read_corpus(corpus),
                           sample, depth=depth, seed=3, llm_qrels=read_qrels(tmp / "llm.qrels"),
                           labels=load_prompt("relevance.v1").labels,
                           extra={"metric": "ndcg@10", "llm_qrels": str(tmp / "llm.qrels"),
                                  "estimand": "collection"})
    (tmp / "to_label.jsonl").write_text(todo.to_jsonl(), encoding="utf-8")
    return {"result": tmp / "compare.json", "qrels": EXAMPLES / "qrels.txt",
            "run1": run_paths[0], "run2": run_paths[1], "queries": EXAMPLES / "queries.jsonl",
            "corpus": corpus, "judgments": tmp / "judgments.jsonl", "tolabel": tmp / "to_label.jsonl",
            "llm": tmp / "llm.qrels"}
