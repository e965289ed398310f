"""The example collection in ``examples/``: files load and validate, runs differ in quality in the
intended order, the generator reproduces the files, and the quickstart runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragjudge.data import Qrels, Run
from ragjudge.evaluate import evaluate
from ragjudge.io import read_corpus, read_qrels, read_queries, read_run

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
RUN_NAMES = ("bm25_stemmed", "bm25_raw", "term_overlap")  # best, medium, weak


@pytest.fixture(scope="module")
def corpus() -> dict[str, str]:
    return read_corpus(EX / "corpus.jsonl")


@pytest.fixture(scope="module")
def queries() -> dict[str, str]:
    return read_queries(EX / "queries.jsonl")


@pytest.fixture(scope="module")
def qrels() -> Qrels:
    # The default dedup="error" also validates: no duplicate (query, doc), integer grades.
    return read_qrels(EX / "qrels.txt")


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    return {n: read_run(EX / "runs" / f"{n}.run") for n in RUN_NAMES}


def test_corpus_and_queries_shape(corpus: dict[str, str], queries: dict[str, str]) -> None:
    assert 250 <= len(corpus) <= 400
    assert 40 <= len(queries) <= 60
    for line in (EX / "corpus.jsonl").read_text("utf-8").splitlines():
        doc = json.loads(line)
        assert set(doc) == {"_id", "title", "text"}
        assert doc["title"].strip() and len(doc["text"].split()) >= 15


def test_qrels_are_graded_and_refer_to_known_ids(
    qrels: Qrels, corpus: dict[str, str], queries: dict[str, str]
) -> None:
    assert set(qrels.query_ids) == set(queries)
    _, _, docids, grades = qrels.arrays
    assert {d.decode() for d in docids.tolist()} <= set(corpus)
    assert set(grades.tolist()) == {0, 1, 2, 3}
    counts = np.bincount(grades, minlength=4)
    assert counts[0] > 0 and counts[1] > 0 and counts[2] > 0 and counts[3] > 0
    for qid in queries:
        judged = qrels.get(qid)
        assert len(judged) >= 3, qid
        assert max(judged.values()) >= 2, f"{qid} has no answer-bearing passage"
        assert min(judged.values()) <= 1, f"{qid} has only relevant judgments"


def test_runs_are_valid_trec_runs(
    runs: dict[str, Run], queries: dict[str, str], corpus: dict[str, str]
) -> None:
    for name, run in runs.items():
        assert set(run.query_ids) == set(queries), name
        qids, offsets, docids, scores = run.arrays
        assert np.diff(offsets).max() <= 100
        assert {d.decode() for d in docids.tolist()} <= set(corpus)
        assert np.isfinite(scores).all() and (scores > 0).all()
        tags = {line.split()[5] for line in (EX / "runs" / f"{name}.run").open()}
        assert tags == {name}


def test_runs_differ_in_the_intended_order(qrels: Qrels, runs: dict[str, Run]) -> None:
    means = {n: evaluate(qrels, r, ["ndcg@10", "map", "mrr"]).mean for n, r in runs.items()}
    best, medium, weak = (means[n] for n in RUN_NAMES)
    for metric in ("ndcg@10", "map", "mrr"):
        assert best[metric] > medium[metric] > weak[metric], metric
    # "Clearly different": not a rounding-level gap.
    assert best["ndcg@10"] - medium["ndcg@10"] > 0.1
    assert medium["ndcg@10"] - weak["ndcg@10"] > 0.05


@pytest.mark.slow  # peer cross-check (pytrec_eval in a subprocess)
def test_example_numbers_agree_with_pytrec_eval(qrels: Qrels, runs: dict[str, Run]) -> None:
    pytest.importorskip("pytrec_eval")
    from _pytrec import pytrec_eval_isolated

    q = qrels.to_dict()
    for name, run in runs.items():
        ours = evaluate(qrels, run, ["ndcg@10", "map", "mrr", "recall@100"]).per_query
        theirs = pytrec_eval_isolated(q, run.to_dict(), {"ndcg_cut_10", "map", "recip_rank", "recall_100"})
        for qid, vals in theirs.items():
            assert ours[qid]["ndcg@10"] == pytest.approx(vals["ndcg_cut_10"], abs=1e-9)
            assert ours[qid]["map"] == pytest.approx(vals["map"], abs=1e-9)
            assert ours[qid]["mrr"] == pytest.approx(vals["recip_rank"], abs=1e-9)
            assert ours[qid]["recall@100"] == pytest.approx(vals["recall_100"], abs=1e-9)


def test_rag_samples_come_from_the_best_run(
    qrels: Qrels, runs: dict[str, Run], corpus: dict[str, str], queries: dict[str, str]
) -> None:
    lines = (EX / "rag_samples.jsonl").read_text("utf-8").splitlines()
    assert 24 <= len(lines) <= 60
    fields = {"id", "user_input", "retrieved_contexts", "retrieved_context_ids", "reference",
              "reference_context_ids", "response"}
    for line in lines:
        s = json.loads(line)
        assert set(s) == fields
        qid = s["id"]
        assert s["user_input"] == queries[qid]
        top = [d for d, _ in runs["bm25_stemmed"].ranked(qid, 5)]
        assert s["retrieved_context_ids"] == top
        assert s["retrieved_contexts"] == [corpus[d].split("\n", 1)[1] for d in top]
        gold = {d for d, g in qrels.get(qid).items() if g >= 2}
        assert set(s["reference_context_ids"]) == gold and gold
        assert s["reference"].strip() and s["response"].strip()


def test_rag_samples_load_with_the_rag_reader() -> None:
    samples_mod = pytest.importorskip("ragjudge.rag.samples")
    samples = samples_mod.read_samples(EX / "rag_samples.jsonl")
    assert len(samples) == len((EX / "rag_samples.jsonl").read_text("utf-8").splitlines())
    first = samples[0]
    assert first.question and first.response and first.reference
    assert first.context_ids and first.context_texts and first.relevant


@pytest.mark.slow  # subprocess
def test_generator_reproduces_the_files(tmp_path: Path) -> None:
    pytest.importorskip("rank_bm25")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(EX / "make_dataset.py"), "--check"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # subprocess
def test_quickstart_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(EX / "quickstart.py")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in RUN_NAMES:
        assert name in out
    assert "ndcg@10" in out and "baseline" in out and "RAG samples" in out


def test_examples_folder_is_small() -> None:
    total = sum(p.stat().st_size for p in EX.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total < 2_000_000
