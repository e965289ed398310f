"""``ragjudge synth`` end to end against the loopback simulator (benchmarks/simulator.py):
outputs, accounting, exit codes, dry run, resume from the cache (also after kill -9), empty,
tiny, duplicated and non-English corpora, and bad input as one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge.cli import main
from ragjudge.io import read_qrels, read_queries, write_run
from ragjudge.rag import read_samples

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CORPUS = REPO / "examples" / "corpus.jsonl"


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("RAGJUDGE_MODEL", raising=False)
    with simulator_thread(latency=0.0) as s:
        yield s


def synth(sim: Any, tmp: Path, *extra: str, corpus: Path = EXAMPLE_CORPUS, n: int = 8,
          cache: str = "cache.sqlite") -> list[str]:
    return ["synth", "--corpus", str(corpus), "-n", str(n), "--model", "sim-model", "--base-url",
            sim.base_url, "-o", str(tmp / "out"), "--cache", str(tmp / cache), "--no-progress", *extra]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def write_corpus(path: Path, docs: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}, ensure_ascii=False) + "\n"
                            for k, v in docs.items()), encoding="utf-8")
    return path


def test_synth_writes_every_output(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(synth(sim, tmp_path, "--oversample", "4", "--examples", str(REPO / "examples" / "queries.jsonl"))) == 0
    out = tmp_path / "out"
    queries = jsonl(out / "queries.jsonl")
    assert len(queries) == 8 and {q["style"] for q in queries} <= {"question", "keyword", "multi"}
    assert set(queries[0]) == {"_id", "text", "style"}
    qrels = read_qrels(out / "qrels.txt")
    assert sorted(qrels.query_ids) == sorted(q["_id"] for q in queries)
    assert all(set(qrels.get(q).values()) == {3} for q in qrels.query_ids)
    samples = jsonl(out / "samples.jsonl")
    assert [s["user_input"] for s in samples] == [q["text"] for q in queries]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rag reads synth's samples with no unknown-field warning
        assert len(read_samples(out / "samples.jsonl")) == 8
    records = jsonl(out / "synth.jsonl")
    kept = [r for r in records if r["status"] == "kept"]
    assert len(kept) == 8
    for r in records:
        assert r["status"] in ("kept", "dropped", "unused")
        assert r["source_ids"]
        if r["status"] == "dropped":
            assert r["dropped_by"] and r["reason"]
        if r["generation"]:
            g = r["generation"]
            assert g["model"] == "sim-model" and g["prompt_id"].startswith("synth_") and len(g["prompt_sha"]) == 64
            assert "temperature" in g["params"]
    assert any(r["dropped_by"] in ("copy", "roundtrip") for r in records)  # the simulator misbehaves on purpose
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["kept"] == 8 and summary["params"]["examples"] == 60
    printed = capsys.readouterr()
    assert "8/8 queries kept" in printed.out and "roundtrip" in printed.out
    assert "wrote" in printed.err
    # the outputs plug into `rag` (deterministic id metrics) and `evaluate`
    run = {s["id"]: {d: 1.0 for d in s["reference_context_ids"]} for s in samples}
    from ragjudge import Run
    write_run(Run.from_dict(run, name="oracle"), tmp_path / "oracle.run")
    assert main(["evaluate", str(out / "qrels.txt"), str(tmp_path / "oracle.run"), "-m", "mrr", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"]["mrr"] == 1.0


def test_rerun_is_free_and_identical(sim: Any, tmp_path: Path) -> None:
    assert main(synth(sim, tmp_path, "--oversample", "4")) == 0
    first = (tmp_path / "out" / "synth.jsonl").read_text()
    paid = sim.stats()["paid"]
    assert main(synth(sim, tmp_path, "--oversample", "4")) == 0
    assert sim.stats()["paid"] == paid  # everything from the cache
    again = jsonl(tmp_path / "out" / "synth.jsonl")
    assert [(r["id"], r["status"], r["query"]) for r in again] == \
        [(r["id"], r["status"], r["query"]) for r in map(json.loads, first.splitlines())]
    assert all(r["generation"]["cached"] for r in again if r["generation"])


def test_fewer_than_n_exits_1_unless_allowed(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = synth(sim, tmp_path, "--oversample", "1", n=30)
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "of 30 requested queries survived" in err and "--allow-fewer" in err
    assert (tmp_path / "out" / "synth.jsonl").exists()  # nothing is lost
    assert main(args + ["--allow-fewer"]) == 0


def test_dry_run_sends_nothing(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(synth(sim, tmp_path, "--dry-run", "--prices", str(_prices(tmp_path)))) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: at most 12 generation calls") and "estimated cost at most $" in out
    assert sim.stats()["requests"] == 0
    assert not (tmp_path / "out").exists()


def _prices(tmp: Path) -> Path:
    p = tmp / "prices.json"
    p.write_text(json.dumps({"sim-model": {"input": 0.15, "output": 0.6}}))
    return p


def test_max_cost_is_never_exceeded(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "prices.json"
    p.write_text(json.dumps({"sim-model": {"input": 1000.0, "output": 1000.0}}))
    assert main(synth(sim, tmp_path, "--prices", str(p), "--max-cost", "4")) == 4
    captured = capsys.readouterr()
    assert "stopped by --max-cost 4:" in captured.err and "queries made" in captured.err and "candidates left incomplete" in captured.err
    assert "budget" in captured.out
    s = sim.stats()
    assert 0 < (s["prompt_tokens"] + s["completion_tokens"]) * 1000.0 / 1e6 <= 4.0


def test_judge_pool_adds_judged_documents(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(synth(sim, tmp_path, "--oversample", "4", n=5)) == 0
    queries = read_queries(tmp_path / "out" / "queries.jsonl")
    from ragjudge import Run
    from ragjudge.io import read_corpus
    from ragjudge.synth import LexicalIndex

    index = LexicalIndex(read_corpus(EXAMPLE_CORPUS))
    run = Run.from_dict({q: dict(index.top(t, 5)) for q, t in queries.items()}, name="bm25")
    write_run(run, tmp_path / "bm25.run")
    capsys.readouterr()
    assert main(synth(sim, tmp_path, "--oversample", "4", "--judge-pool", str(tmp_path / "bm25.run"),
                      "--depth", "5", n=5)) == 0
    qrels = read_qrels(tmp_path / "out" / "qrels.txt")
    sources = {r["qid"]: r["source_ids"] for r in jsonl(tmp_path / "out" / "synth.jsonl") if r["qid"]}
    assert len(qrels) > sum(len(v) for v in sources.values())  # not one-relevant-per-query
    for qid, docs in sources.items():
        assert all(qrels.get(qid)[d] == 3 for d in docs)  # sources keep grade 3
    assert "judge pool:" in capsys.readouterr().out
    # a run of other queries is an error, not silently nothing
    other = tmp_path / "other.run"
    other.write_text("q01 Q0 volc-01 1 1.0 x\n")
    paid = sim.stats()["paid"]
    assert main(synth(sim, tmp_path, "--oversample", "4", "--judge-pool", str(other), n=5,
                      cache="other.sqlite")) == 2
    err = capsys.readouterr().err
    assert "other.run" in err and "share no query id" in err
    assert sim.stats()["paid"] == paid  # checked before anything is spent


def test_empty_and_tiny_corpora(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(synth(sim, tmp_path, corpus=empty)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty" in err and "Traceback" not in err
    short = write_corpus(tmp_path / "short.jsonl", {"a": "Too short.", "b": "Also short here."})
    # No passage can anchor a query: refused before planning (a dry run too), with the count.
    assert main(synth(sim, tmp_path, corpus=short)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2 shorter than 12 words" in err and "--min-words" in err
    tiny = write_corpus(tmp_path / "tiny.jsonl", {
        "a": "Glaciers form where snow accumulates faster than it melts, compressing into dense ice over centuries.",
        "b": "Coral reefs grow from colonies of tiny animals that build limestone skeletons in warm shallow seas.",
    })
    assert main(synth(sim, tmp_path, "--allow-fewer", "--oversample", "3", corpus=tiny, n=4)) == 0
    records = jsonl(tmp_path / "out" / "synth.jsonl")
    # two passages, three styles: every (passage, style) at most once
    draws = {r["draw"]: (r["source_ids"][0], r["style"]) for r in records}  # siblings share a draw
    anchors = list(draws.values())
    assert len(anchors) == len(set(anchors)) and len(draws) <= 6


def test_corpus_with_duplicates(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [json.loads(x) for x in EXAMPLE_CORPUS.read_text().splitlines()[:40]]
    docs = {d["_id"]: d["text"] for d in base}
    for d in base[:15]:
        docs[d["_id"] + "-copy"] = d["text"]  # exact duplicate
        docs[d["_id"] + "-near"] = d["text"] + " (Archived copy.)"  # near duplicate
    corpus = write_corpus(tmp_path / "dups.jsonl", docs)
    assert main(synth(sim, tmp_path, "--oversample", "4", "--allow-fewer", corpus=corpus, n=8)) == 0
    out = capsys.readouterr().out
    assert "15 duplicates" in out
    draws = {r["draw"]: r["source_ids"][0] for r in jsonl(tmp_path / "out" / "synth.jsonl")}
    anchors = list(draws.values())
    stems = [a.removesuffix("-copy").removesuffix("-near") for a in anchors]
    assert len(anchors) == 32  # 32 draws < 40 distinct texts: no passage needs reusing
    assert len(stems) == len(set(stems))  # each text sampled once, whichever copy was drawn


def test_non_english_text(sim: Any, tmp_path: Path) -> None:
    docs = {
        "de-1": "Der Rhein entspringt in den Schweizer Alpen und mündet nach über tausend Kilometern in die Nordsee.",
        "de-2": "Die Zugspitze ist mit knapp dreitausend Metern der höchste Berg Deutschlands an der Grenze zu Österreich.",
        "ru-1": "Байкал — самое глубокое озеро на планете, его глубина превышает полторы тысячи метров в Сибири.",
        "ru-2": "Транссибирская магистраль соединяет Москву и Владивосток и является самой длинной железной дорогой.",
        "ja-1": "富士山は日本で最も高い山であり、静岡県と山梨県にまたがる活火山として知られている。",
        "ja-2": "東京の地下鉄は世界で最も利用者が多い鉄道網の一つで、毎日数百万人が通勤に利用している。",
        "el-1": "Η Ακρόπολη της Αθήνας είναι αρχαία ακρόπολη πάνω σε βραχώδη λόφο με τον Παρθενώνα στην κορυφή.",
    }
    corpus = write_corpus(tmp_path / "intl.jsonl", docs)
    assert main(synth(sim, tmp_path, "--oversample", "3", "--allow-fewer", "--styles", "question=0.5,keyword=0.5",
                      corpus=corpus, n=4)) == 0
    records = jsonl(tmp_path / "out" / "synth.jsonl")
    assert records and all(r["generation"] for r in records if r["status"] != "unused")
    kept = [r for r in records if r["status"] == "kept"]
    assert kept, [r["reason"] for r in records]
    for r in kept:
        assert r["scores"]["roundtrip_ranks"][r["source_ids"][0]] <= 20
    texts = (tmp_path / "out" / "samples.jsonl").read_text(encoding="utf-8")
    assert "\\u" not in texts  # written as UTF-8, not escaped


@pytest.mark.parametrize("change, message", [
    (["-n", "0"], "-n: must be a positive integer"),
    (["-n", "-2"], "-n: must be a positive integer"),
    (["--styles", "question=0.7,poem=0.3"], "unknown style 'poem'"),
    (["--styles", "question=0.7,keyword=0.2"], "style weights sum to 0.9, not 1"),
    (["--oversample", "0.5"], "--oversample: must be a number >= 1, got 0.5"),
    (["--depth", "0"], "--depth"),
    (["--min-confidence", "1.5"], "--min-confidence"),
    (["--min-grade", "4"], "--min-grade: must be one of the judge's grades [0, 1, 2, 3], got 4"),
])
def test_bad_input_is_one_line(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               change: list[str], message: str) -> None:
    assert main(synth(sim, tmp_path, *change)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("ragjudge: error:")
    assert sim.stats()["requests"] == 0


def test_bad_prompt_files_are_one_line(sim: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "mine.md"
    bad.write_text("---\n" + json.dumps({
        "id": "mine", "version": "1", "variables": ["text"],
        "output_schema": {"type": "object", "properties": {"query": {"type": "string"},
                                                           "answer": {"type": "string"}}}})
        + "\n---\n<!-- role: user -->\nAsk about {{text}}\n")
    assert main(synth(sim, tmp_path, "--prompt", str(bad), "--styles", "question=1")) == 2
    err = capsys.readouterr().err
    assert "mine.md" in err and "lacks the variable(s) passage" in err and err.count("\n") == 1
    # a user style: a new name with its own prompt
    good = tmp_path / "faq.md"
    good.write_text(bad.read_text().replace('"text"]', '"passage"]').replace("{{text}}", "{{passage}}"))
    assert main(synth(sim, tmp_path, "--prompt", f"faq={good}", "--styles", "faq=1", "--oversample", "4",
                      "--allow-fewer", n=3)) == 0
    assert {r["style"] for r in jsonl(tmp_path / "out" / "synth.jsonl")} == {"faq"}
    missing = tmp_path / "nope.txt"
    assert main(synth(sim, tmp_path, "--examples", str(missing))) == 2
    assert "nope.txt" in capsys.readouterr().err


# ----------------------------------------------------------------------------- kill -9
@pytest.mark.slow  # subprocess killed with SIGKILL
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_kill_9_then_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with simulator_thread(latency=0.05) as sim:
        args = synth(sim, tmp_path, "--oversample", "2", "--concurrency", "4", n=40)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-m", "ragjudge", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while sim.stats()["paid"] < 20 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        time.sleep(0.3)  # requests the dead client left behind finish on the server
        before = sim.stats()
        assert before["paid"] >= 20
        code = main(args + ["--allow-fewer"])
        assert code == 0
        after = sim.stats()
        # resumed: at most the calls in flight at the kill are paid twice
        assert after["duplicate_paid"] <= 4
        resumed = jsonl(tmp_path / "out" / "synth.jsonl")
    # the same collection as an uninterrupted run with a fresh cache
    with simulator_thread(latency=0.0) as sim2:
        clean = synth(sim2, tmp_path, "--oversample", "2", "--allow-fewer", n=40, cache="fresh.sqlite")
        clean[clean.index("-o") + 1] = str(tmp_path / "clean")
        assert main(clean) == 0
    fresh = jsonl(tmp_path / "clean" / "synth.jsonl")
    assert [(r["id"], r["status"], r["query"]) for r in resumed] == [(r["id"], r["status"], r["query"]) for r in fresh]


# ----------------------------------------------------------------------------- the bundled set
def test_bundled_example_set_is_consistent(capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.llm import load_prompt

    d = REPO / "examples" / "synth"
    queries = jsonl(d / "queries.jsonl")
    records = jsonl(d / "synth.jsonl")
    kept = [r for r in records if r["status"] == "kept"]
    assert [q["_id"] for q in queries] == [r["qid"] for r in kept] and len(queries) == 40
    assert [q["text"] for q in queries] == [r["query"] for r in kept]
    qrels = read_qrels(d / "qrels.txt")
    assert qrels.to_dict() == {r["qid"]: {s: 3 for s in r["source_ids"]} for r in kept}
    from ragjudge.synth import STYLE_PROMPTS

    shas = {load_prompt(name).id: load_prompt(name).sha256 for name in STYLE_PROMPTS.values()}
    for r in records:  # made with the prompts shipped today (regenerate after editing a prompt)
        if r["generation"]:
            assert r["generation"]["prompt_sha"] == shas[r["generation"]["prompt_id"]], r["id"]
            assert r["generation"]["model"] == "sim-model"
    summary = json.loads((d / "summary.json").read_text())
    assert summary["summary"]["kept"] == 40 and summary["summary"]["candidates"] == len(records)
    for name in ("rag_bm25_stemmed", "rag_bm25_raw"):
        samples = jsonl(d / f"{name}.jsonl")
        assert len(samples) == 40 and all(len(s["retrieved_context_ids"]) <= 5 for s in samples)
    # the README's flows
    runs = sorted(str(p) for p in (d / "runs").glob("*.run"))
    assert len(runs) == 3
    assert main(["evaluate", str(d / "qrels.txt"), *runs, "-m", "ndcg@10,mrr,recall@20",
                 "--baseline", "term_overlap"]) == 0
    assert "baseline" in capsys.readouterr().out
    assert main(["rag", str(d / "rag_bm25_raw.jsonl"), "-m", "hit@5,recall@5,mrr,ndcg@5"]) == 0


def test_server_faults_are_accounted_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # malformed JSON content, refusals and truncated replies on a good share of the calls
    with simulator_thread(latency=0.0, p_malformed=0.3, p_refusal=0.1, p_truncate=0.1, seed=3) as sim:
        code = main(synth(sim, tmp_path, "--oversample", "4", "--allow-fewer", "--max-attempts", "2", n=10))
    assert code == 0
    records = jsonl(tmp_path / "out" / "synth.jsonl")
    failed = [r for r in records if r["dropped_by"] == "generation"]
    for r in failed:  # a failure is a value with its reason and provenance, never a crash
        assert r["reason"] and r["generation"]["error"] == r["reason"] and r["query"] is None
    refused = [r for r in records if r["reason"] and "refusal" in r["reason"]]
    assert failed and refused  # the faults reached the accounting
    out = capsys.readouterr().out
    assert "generation" in out and "queries kept" in out
