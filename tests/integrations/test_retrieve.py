"""``ragjudge retrieve`` and :mod:`ragjudge.retrieve`: BM25 checked against rank_bm25 on the same
terms, dense retrieval through a loopback ``/embeddings`` server (the simulator has none),
hybrid fusion, the CLI end to end, and bad input as one line with exit status 2."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ragjudge.cli import main
from ragjudge.errors import InputError, LLMError
from ragjudge.evaluate import evaluate
from ragjudge.fuse import fuse
from ragjudge.io import read_corpus, read_qrels, read_queries, read_run
from ragjudge.llm import LLM
from ragjudge.retrieve import (
    analyzer,
    estimate_dense,
    read_texts,
    retrieve_bm25,
    retrieve_dense,
    retrieve_dense_sync,
    retrieve_hybrid,
)
from ragjudge.synth.text import tokens

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "examples" / "corpus.jsonl"
QUERIES = ROOT / "examples" / "queries.jsonl"
QRELS = ROOT / "examples" / "qrels.txt"
KEY = "sk-retrieve-test-0000"


# ----------------------------------------------------------------------------- helpers
def ranked_reference(scores: dict[str, float], k: int) -> list[tuple[str, float]]:
    """trec_eval order: score descending, ties by doc id descending."""
    by_id = sorted(scores.items(), key=lambda x: x[0].encode(), reverse=True)
    return sorted(by_id, key=lambda x: -x[1])[:k]  # stable: equal scores keep doc id descending


def assert_same_top(got: list[tuple[str, float]], ref: list[tuple[str, float]], scale: float = 1.0,
                    tol: float = 1e-5) -> None:
    """Same scores rank by rank, and the same documents wherever the score is not a near-tie."""
    assert len(got) == len(ref)
    assert [s * scale for _, s in got] == pytest.approx([s for _, s in ref], rel=tol, abs=tol)
    if ref:
        last = ref[-1][1]
        clear = {d for d, s in ref if s > last + tol * max(1.0, abs(last))}
        assert clear <= {d for d, _ in got}


# ----------------------------------------------------------------------------- BM25
@pytest.mark.parametrize("method", ["lucene", "robertson"])
@pytest.mark.parametrize("stopwords", [None, "en"])
def test_bm25_matches_rank_bm25_on_the_same_terms(method: str, stopwords: str | None) -> None:
    from rank_bm25 import BM25Okapi

    class LuceneIdf(BM25Okapi):  # Lucene's idf, log(1 + (N - n + 0.5) / (n + 0.5)), never negative
        def _calc_idf(self, nd: dict[str, int]) -> None:
            self.idf = {w: math.log(1 + (self.corpus_size - n + 0.5) / (n + 0.5)) for w, n in nd.items()}

    corpus, queries = read_corpus(CORPUS), read_queries(QUERIES)
    analyze = analyzer(stopwords=stopwords)
    ids = list(corpus)
    # robertson: bm25s clamps a negative idf to 0, as BM25Okapi does with epsilon=0
    ref_index = (LuceneIdf if method == "lucene" else BM25Okapi)(
        [analyze(corpus[d]) for d in ids], k1=1.5, b=0.75, epsilon=0.0)
    run = retrieve_bm25(corpus, queries, k=10, method=method, stopwords=stopwords)
    assert run.num_queries == len(queries)
    exact = 0
    for qid, text in queries.items():
        raw = ref_index.get_scores(analyze(text))
        ref = ranked_reference({d: float(s) for d, s in zip(ids, raw) if s > 0}, 10)
        got = run.ranked(qid)
        # rank_bm25 multiplies every term by (k1 + 1): the same ranking, scaled
        assert_same_top(got, ref, scale=2.5)
        exact += [d for d, _ in got] == [d for d, _ in ref]
    assert exact >= len(queries) - 3  # float32 vs float64 may swap a near-tie or two


def test_bm25_sanity_a_copied_span_finds_its_passage_first() -> None:
    corpus = read_corpus(CORPUS)
    picks = ["volc-05", "bee-10", "bike-20", "cof-15", "light-07"]
    picks = [p for p in picks if p in corpus] or list(corpus)[:5]
    queries = {f"s-{d}": " ".join(tokens(corpus[d])[3:13]) for d in picks}
    run = retrieve_bm25(corpus, queries, k=5)
    for d in picks:
        assert run.ranked(f"s-{d}")[0][0] == d


def test_bm25_run_evaluates_and_is_deterministic_whatever_the_order() -> None:
    corpus, queries = read_corpus(CORPUS), read_queries(QUERIES)
    run = retrieve_bm25(str(CORPUS), str(QUERIES))
    again = retrieve_bm25(dict(reversed(list(corpus.items()))), dict(reversed(list(queries.items()))))
    assert run == again and run.name == "bm25"
    assert max(len(run.get(q)) for q in run.query_ids) == 100
    report = evaluate(read_qrels(QRELS), run, ["ndcg@10", "recall@100"])
    assert report.mean["ndcg@10"] > 0.6 and report.mean["recall@100"] > 0.85


def test_ties_at_the_cut_follow_trec_eval_order() -> None:
    corpus = {"a": "x y", "c": "x y", "b": "x y", "d": "z"}
    for order in (corpus, dict(reversed(list(corpus.items())))):
        run = retrieve_bm25(order, {"q": "x"}, k=2)
        assert [d for d, _ in run.ranked("q")] == ["c", "b"]  # equal scores: doc id descending
    assert retrieve_bm25(corpus, {"q": "x"}, k=10).ranked("q")[2][0] == "a"
    assert "d" not in retrieve_bm25(corpus, {"q": "x"}, k=10).get("q")  # no shared term: not retrieved


def test_queries_without_indexed_terms_are_absent() -> None:
    with pytest.warns(UserWarning, match="2 of 3 queries share no term with the corpus"):
        run = retrieve_bm25({"a": "volcano"}, {"q1": "volcano", "q2": "bicycle", "q3": "!!"})
    assert run.query_ids == ["q1"]
    with pytest.warns(UserWarning, match="1 of 1 queries"):
        empty = retrieve_bm25({"a": "volcano"}, {"q2": "bicycle"})
    assert len(empty) == 0


def test_a_corpus_without_a_word_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It wrote an empty run and exited 0.
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": ""}\n{"_id": "b", "text": "the of"}\n')
    (tmp_path / "q.tsv").write_text("q1\tvolcano\n")
    assert main(["retrieve", "--corpus", str(corpus), "--queries", str(tmp_path / "q.tsv"),
                 "--stopwords", "en", "-o", str(tmp_path / "r.run")]) == 2
    assert capsys.readouterr().err.strip() == ("ragjudge: error: corpus: no document has a word to index "
                                               "(every text is empty, or only stopwords)")


def test_stopwords_and_stemmer() -> None:
    corpus = {"a": "the volcanoes erupted", "b": "the of the and a"}
    assert "b" in retrieve_bm25(corpus, {"q": "the volcano"}).get("q")
    assert "b" not in retrieve_bm25(corpus, {"q": "the volcano"}, stopwords="en").get("q")
    assert retrieve_bm25(corpus, {"q": "volcano"}).get("q") == {}
    stem4 = retrieve_bm25(corpus, {"q": "volcano"}, stemmer=lambda w: w[:5])  # any word -> stem function
    assert list(stem4.get("q")) == ["a"]
    assert analyzer(stopwords=["Volcanoes"])("volcanoes erupted") == ["erupted"]


def test_english_stemmer_through_pystemmer() -> None:
    pytest.importorskip("Stemmer", reason="stemmer='english' needs PyStemmer")
    run = retrieve_bm25({"a": "volcanoes erupted", "b": "bees"}, {"q": "volcano eruption"}, stemmer="english")
    assert list(run.get("q")) == ["a"]


@pytest.mark.parametrize("kwargs, field", [
    ({"k": 0}, "k"), ({"k": 2.5}, "k"), ({"k1": -1}, "k1"), ({"k1": float("inf")}, "k1"), ({"b": 1.5}, "b"), ({"b": float("nan")}, "b"),
    ({"method": "tfidf"}, "method"), ({"name": "two words"}, "name"), ({"stopwords": "klingon"}, "stopwords"),
    ({"stemmer": 3}, "stemmer"),
])
def test_bad_bm25_options_name_their_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        retrieve_bm25({"a": "x"}, {"q": "x"}, **kwargs)
    assert err.value.field == field


def test_inputs_dicts_files_and_dataset_values(tmp_path: Path) -> None:
    beir_like = SimpleNamespace(corpus={"a": "x"}, queries={"q": "x"})
    assert read_texts(beir_like, "corpus") == {"a": "x"} and read_texts(beir_like, "queries") == {"q": "x"}
    assert retrieve_bm25(beir_like, beir_like).ranked("q")[0][0] == "a"
    assert read_texts(CORPUS, "corpus") == read_corpus(CORPUS)
    with pytest.raises(InputError, match="must be a string"):
        read_texts({"a": 3}, "corpus")
    with pytest.raises(InputError, match="no queries"):
        retrieve_bm25({"a": "x"}, {})
    with pytest.raises(InputError, match="dict or a file name"):
        retrieve_bm25(["x"], {"q": "x"})
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"_id": "q1", "text": "fine"}\n{"_id": "q2"}\n', encoding="utf-8")
    with pytest.raises(InputError) as err:
        retrieve_bm25(CORPUS, bad)
    assert (err.value.source, err.value.line, err.value.field) == (str(bad), 2, "text")


# ----------------------------------------------------------------------------- dense
DIM = 512


def bow_vector(text: str) -> list[float]:
    """A deterministic stand-in embedding: hashed bag of words (cosine ~ word overlap)."""
    v = [0.0] * DIM
    for t in tokens(text):
        v[zlib.crc32(t.encode()) % DIM] += 1.0
    return v


class _EmbeddingServer:
    def __init__(self) -> None:
        self.requests = 0
        self.texts = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                if not self.path.endswith("/embeddings") or body["model"] == "broken":
                    self._reply(500, {"error": {"message": "the embedding model is down", "type": "server_error"}})
                    return
                inputs = body["input"]
                server.texts += len(inputs)
                n = sum(len(tokens(t)) for t in inputs)
                self._reply(200, {"object": "list", "model": body["model"],
                                  "data": [{"object": "embedding", "index": i, "embedding": bow_vector(t)}
                                           for i, t in enumerate(inputs)],
                                  "usage": {"prompt_tokens": n, "total_tokens": n}})

            def _reply(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def emb_server() -> Iterator[_EmbeddingServer]:
    srv = _EmbeddingServer()
    try:
        yield srv
    finally:
        srv.close()


def make_llm(server: _EmbeddingServer, tmp_path: Path, **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    kw.setdefault("backoff_base", 0.001)
    return LLM("emb", base_url=server.url, api_key=KEY, **kw)


def test_dense_is_cosine_of_the_session_embeddings_and_cached(emb_server: _EmbeddingServer, tmp_path: Path) -> None:
    corpus, queries = read_corpus(CORPUS), read_queries(QUERIES)
    llm = make_llm(emb_server, tmp_path)
    plan = estimate_dense(corpus, queries, llm=llm, embedding_model="bow")
    assert (plan.pairs, plan.cached, plan.calls) == (len(corpus) + len(queries), 0, 3)
    run = retrieve_dense_sync(corpus, queries, llm=llm, embedding_model="bow", k=10)
    assert run.name == "dense" and run.num_queries == len(queries) and len(run) == 10 * len(queries)
    assert emb_server.texts == len(corpus) + len(set(queries.values()))
    assert llm.embedding_usage["bow"].calls == emb_server.requests == plan.calls
    D = np.array([bow_vector(corpus[d]) for d in corpus])
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    for qid, text in list(queries.items())[:20]:
        q = np.array(bow_vector(text))
        sims = D @ (q / np.linalg.norm(q))
        assert_same_top(run.ranked(qid), ranked_reference(dict(zip(corpus, sims.tolist())), 10))
    # everything is cached now: a second run sends nothing, and the dry run says so
    seen = emb_server.requests
    llm2 = make_llm(emb_server, tmp_path)
    assert estimate_dense(corpus, queries, llm=llm2, embedding_model="bow").calls == 0
    assert retrieve_dense_sync(corpus, queries, llm=llm2, embedding_model="bow", k=10) == run
    assert emb_server.requests == seen
    assert evaluate(read_qrels(QRELS), run, ["ndcg@10"]).mean["ndcg@10"] > 0.3


def test_dense_sync_inside_a_running_loop(emb_server: _EmbeddingServer, tmp_path: Path) -> None:
    corpus = {"a": "red bicycle wheels", "b": "honey bees in the hive"}

    async def notebook_cell() -> Any:  # Jupyter runs cells inside an event loop
        return retrieve_dense_sync(corpus, {"q": "bees"}, llm=make_llm(emb_server, tmp_path),
                                   embedding_model="bow", k=1)

    run = asyncio.run(notebook_cell())
    assert run.ranked("q")[0][0] == "b"


def test_dense_failure_is_one_line_naming_the_reason(emb_server: _EmbeddingServer, tmp_path: Path) -> None:
    llm = make_llm(emb_server, tmp_path, max_attempts=2, patience=0.5)

    async def go() -> Any:
        try:
            return await retrieve_dense({"a": "x"}, {"q": "x"}, llm=llm, embedding_model="broken")
        finally:
            await llm.aclose()

    with pytest.raises(LLMError) as err:
        asyncio.run(go())
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("embedding the corpus with broken failed: embedding call failed")
    with pytest.raises(InputError, match="embedding model"):
        asyncio.run(retrieve_dense({"a": "x"}, {"q": "x"}, llm=llm, embedding_model=""))


def test_dense_leaves_out_blank_texts(emb_server: _EmbeddingServer, tmp_path: Path) -> None:
    run = retrieve_dense_sync({"a": "bees", "b": "  "}, {"q": "bees", "blank": ""},
                              llm=make_llm(emb_server, tmp_path), embedding_model="bow")
    assert run.query_ids == ["q"] and list(run.get("q")) == ["a"]


# ----------------------------------------------------------------------------- hybrid
def test_hybrid_is_rrf_of_the_runs_cut_at_k(emb_server: _EmbeddingServer, tmp_path: Path) -> None:
    corpus, queries = read_corpus(CORPUS), read_queries(QUERIES)
    bm25 = retrieve_bm25(corpus, queries, k=50)
    dense = retrieve_dense_sync(corpus, queries, llm=make_llm(emb_server, tmp_path), embedding_model="bow", k=50)
    hybrid = retrieve_hybrid([bm25, dense], k=10)
    assert hybrid.name == "hybrid" and max(len(hybrid.get(q)) for q in hybrid.query_ids) == 10
    assert hybrid == fuse([bm25, dense], method="rrf", name="hybrid").top(10)
    means = {r.name: evaluate(read_qrels(QRELS), r, ["ndcg@10"]).mean["ndcg@10"] for r in (bm25, dense, hybrid)}
    assert means["hybrid"] > min(means["bm25"], means["dense"])
    assert retrieve_hybrid({"a": bm25, "b": dense}, method="combsum", k=5).name == "hybrid"
    with pytest.raises(InputError, match="fusion method"):
        retrieve_hybrid([bm25, dense], method="borda")


# ----------------------------------------------------------------------------- CLI
def test_cli_bm25_writes_a_run_that_evaluates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs" / "bm25.trec"
    assert main(["retrieve", "--corpus", str(CORPUS), "--queries", str(QUERIES), "--method", "bm25",
                 "-k", "20", "--k1", "1.2", "--b", "0.6", "--stopwords", "en", "-o", str(out)]) == 0
    run = read_run(out)
    assert run.num_queries == 60 and max(len(run.get(q)) for q in run.query_ids) == 20
    assert {ln.split()[5] for ln in out.read_text().splitlines()} == {"bm25"}
    assert run == retrieve_bm25(CORPUS, QUERIES, k=20, k1=1.2, b=0.6, stopwords="en")
    assert "wrote" in capsys.readouterr().err
    assert main(["evaluate", str(QRELS), str(out), "-m", "ndcg@10"]) == 0
    assert "ndcg@10" in capsys.readouterr().out
    # stdout, a chosen name
    assert main(["retrieve", "--corpus", str(CORPUS), "--queries", str(QUERIES), "-k", "1", "--name", "mine"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 60 and lines[0].split()[1:] == ["Q0", "volc-16", "1", lines[0].split()[4], "mine"]


def test_cli_beir_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(CORPUS.read_text(encoding="utf-8"), encoding="utf-8")
    (beir / "queries.jsonl").write_text(QUERIES.read_text(encoding="utf-8"), encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq01\tvolc-16\t1\n", encoding="utf-8")
    out = tmp_path / "run.trec"
    assert main(["retrieve", "--beir", str(beir), "-o", str(out)]) == 0
    assert read_run(out).num_queries == 60  # every query, not only the judged one


def _llm_flags(server: _EmbeddingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("RETRIEVE_TEST_KEY", KEY)
    monkeypatch.delenv("RAGJUDGE_MODEL", raising=False)
    return ["--base-url", server.url, "--api-key-env", "RETRIEVE_TEST_KEY", "--cache", str(tmp_path / "c.sqlite"),
            "--embedding-model", "bow", "--no-progress"]


def test_cli_dense_dry_run_then_hybrid(emb_server: _EmbeddingServer, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    flags = _llm_flags(emb_server, tmp_path, monkeypatch)
    common = ["retrieve", "--corpus", str(CORPUS), "--queries", str(QUERIES), *flags]
    assert main([*common, "--method", "dense", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "375 texts to embed, 0 already cached" in out and "3 /embeddings requests to bow" in out and emb_server.requests == 0
    dense_out = tmp_path / "dense.trec"
    assert main([*common, "--method", "dense", "-k", "10", "-o", str(dense_out)]) == 0
    err = capsys.readouterr().err
    assert "embedded with bow: 3 requests" in err and "unknown price" in err
    assert read_run(dense_out).name == "dense" and len(read_run(dense_out)) == 600
    hybrid_out = tmp_path / "hybrid.json"
    assert main([*common, "--method", "hybrid", "-k", "10", "-o", str(hybrid_out)]) == 0
    assert "embedded with bow: 0 requests" in capsys.readouterr().err  # all from the cache
    hybrid = read_run(hybrid_out)
    expected = retrieve_hybrid([retrieve_bm25(CORPUS, QUERIES, k=10), read_run(dense_out)], k=10)
    assert hybrid.name == "hybrid" and hybrid == expected
    assert main(["evaluate", str(QRELS), str(hybrid_out), str(dense_out), "-m", "ndcg@10"]) == 0


@pytest.mark.parametrize("argv, needle", [
    (["--queries", str(QUERIES)], "--corpus: --corpus is required (or --beir DIR)"),
    (["--corpus", str(CORPUS), "--queries", "nope.jsonl"], "nope.jsonl: file not found"),
    (["--corpus", str(CORPUS), "--queries", str(QRELS)], "qrels.txt:1: columns: expected 'id<TAB>text'"),
    (["--corpus", str(CORPUS), "--queries", str(QUERIES), "-k", "0"], "-k: must be a positive integer"),
    (["--corpus", str(CORPUS), "--queries", str(QUERIES), "--b", "2"], "--b: b must be a number in [0, 1]"),
    (["--corpus", str(CORPUS), "--queries", str(QUERIES), "--name", "a b"], "--name: a run name is one word"),
    (["--corpus", str(CORPUS), "--queries", str(QUERIES), "--method", "dense"], "needs --embedding-model"),
])
def test_cli_bad_input_is_one_line_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["retrieve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ragjudge: error: ") and needle in err


def test_cli_bad_corpus_line_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": 5}\n', encoding="utf-8")
    assert main(["retrieve", "--corpus", str(corpus), "--queries", str(QUERIES)]) == 2
    assert capsys.readouterr().err.strip() == f"ragjudge: error: {corpus}:2: text: must be a string, got int"


def test_cli_failed_embeddings_exit_2(emb_server: _EmbeddingServer, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    flags = _llm_flags(emb_server, tmp_path, monkeypatch)
    flags[flags.index("bow")] = "broken"
    out = tmp_path / "never.trec"
    assert main(["retrieve", "--corpus", str(CORPUS), "--queries", str(QUERIES), "--method", "dense",
                 *flags, "--max-attempts", "2", "--patience", "0.5", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    # the error is one line (a notice such as a missing price may come before it)
    assert "embedding the corpus with broken failed" in err.splitlines()[-1] and "Traceback" not in err
    assert not out.exists()
