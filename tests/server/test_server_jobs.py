"""Background jobs over HTTP against the loopback LLM simulator: judge, RAG and synth jobs,
results identical to the library's, cancellation, budget, and a server restart that resumes a
job without paying for anything twice."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real uvicorn processes and the loopback simulator

pytest.importorskip("fastapi", reason="the server tests need the server extra")
pytest.importorskip("uvicorn", reason="the server tests need the server extra")

from _loopback import simulator_thread  # noqa: E402
from _server import ROOT, ServerProcess, wait_job  # noqa: E402

from ragjudge import read_corpus, read_queries  # noqa: E402
from ragjudge.judges import LLMRelevanceJudge  # noqa: E402
from ragjudge.llm import LLM  # noqa: E402
from ragjudge.rag import evaluate_samples_sync  # noqa: E402

EX = ROOT / "examples"
QUERIES = read_queries(EX / "queries.jsonl")
CORPUS = read_corpus(EX / "corpus.jsonl")
RUN = (EX / "runs/bm25_raw.run").read_text()
KEY = "sk-sim-secret-0123456789abcdef"


def _server(tmp: Path, sim: object, *args: str) -> ServerProcess:
    return ServerProcess(tmp, "--base-url", sim.base_url, "--model", "sim-model",
                         "--timeout", "10", *args, env={"OPENAI_API_KEY": KEY})


def _judge_body(depth: int, **settings: object) -> dict:
    return {"queries": QUERIES, "corpus": CORPUS, "runs": {"bm25": RUN}, "depth": depth,
            "settings": settings}


def _library_judgments(sim: object, depth: int) -> dict[tuple[str, str], int]:
    from ragjudge import parse_run

    llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=False)
    res = LLMRelevanceJudge(llm=llm, progress=False).judge_run_sync(
        QUERIES, CORPUS, [parse_run(RUN, name="bm25")], depth)
    return {(j.qid, j.docid): j.grade for j in res.judgments}


def test_judge_job_matches_the_library(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0, api_key=None) as sim, _server(tmp_path, sim) as srv, \
            srv.client() as c:
        r = c.post("/v1/judge", json=_judge_body(2))
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["status"] in ("queued", "running") and job["kind"] == "judge"
        assert job["progress"]["total"] == 120  # 60 queries x depth 2
        state = wait_job(c, job["id"])
        assert state["status"] == "done", state
        res = state["result"]
        assert state["progress"] == {"done": 120, "total": 120, "fraction": 1.0}
        assert res["summary"]["judged"] == state["counts"]["judged"] == 120
        assert state["usage"]["calls"] == 120 and sim.stats()["duplicate_paid"] == 0
        got = {(j["qid"], j["docid"]): j["grade"] for j in res["judgments"]}
        assert got == _library_judgments(sim, 2)  # the library, asked directly, agrees
        lines = res["qrels"].splitlines()
        assert len(lines) == 120 and all(len(line.split()) == 4 for line in lines)
        # the same job again costs nothing: every answer is in the cache
        before = sim.stats()["paid"]
        again = wait_job(c, c.post("/v1/judge", json=_judge_body(2)).json()["id"])
        assert again["result"]["summary"]["cached"] == 120 and sim.stats()["paid"] == before
        listed = c.get("/v1/jobs").json()
        assert {j["id"] for j in listed} >= {job["id"], again["id"]}
        assert all(j["result"] is None for j in listed)
        assert c.delete(f"/v1/jobs/{job['id']}").status_code == 409  # already done
        db = sqlite3.connect(tmp_path / "jobs.sqlite")
        spec = json.loads(db.execute("SELECT spec FROM jobs WHERE id = ?", (job["id"],)).fetchone()[0])
        db.close()
        assert spec["model"] == "sim-model"  # the job's own: a restart cannot switch it


def test_explicit_pairs_and_failures_never_leak_the_key(tmp_path: Path) -> None:
    # The provider refuses the server's key: the job fails with a reason, and no response
    # anywhere contains the key.
    with simulator_thread(latency=0.0, api_key="another-key") as sim, _server(tmp_path, sim) as srv, \
            srv.client() as c:
        pairs = [{"qid": "q1", "docid": "d1", "query": "what is lava", "passage": KEY}]
        r = c.post("/v1/judge", json={"pairs": pairs})
        assert r.status_code == 202, r.text
        state = wait_job(c, r.json()["id"])
        assert state["status"] == "failed" and state["error"]
        assert "Traceback" not in state["error"]
        texts = [r.text, json.dumps(state), c.get("/v1/jobs").text]
        assert not any(KEY in t for t in texts)


def test_model_required_and_checked_before_accepting(tmp_path: Path) -> None:
    with ServerProcess(tmp_path) as srv, srv.client() as c:
        pairs = [{"qid": "q1", "docid": "d1", "query": "a", "passage": "b"}]
        r = c.post("/v1/judge", json={"pairs": pairs})
        assert r.status_code == 400 and r.json()["detail"].startswith("settings.model: no model given")
        r = c.post("/v1/judge", json={"pairs": pairs, "runs": {"a": "q1 Q0 d1 1 1 x"}})
        assert r.status_code == 400 and r.json()["detail"].startswith("pairs: ")


def test_cancel_keeps_what_is_judged(tmp_path: Path) -> None:
    with simulator_thread(latency=0.3, api_key=None) as sim, \
            _server(tmp_path, sim) as srv, srv.client() as c:
        job = c.post("/v1/judge", json=_judge_body(3, concurrency=2)).json()
        wait_job(c, job["id"], until=lambda s: s["counts"].get("judged", 0) >= 4)
        r = c.delete(f"/v1/jobs/{job['id']}")
        assert r.status_code == 200 and r.json()["cancel_requested"]
        state = wait_job(c, job["id"], timeout=30)
        assert state["status"] == "cancelled"
        judged = state["result"]["summary"]["judged"]
        assert 4 <= judged < 179 and len(state["result"]["qrels"].splitlines()) == judged
        assert c.delete(f"/v1/jobs/{job['id']}").status_code == 409
        # what was judged is kept: the same work again pays only for the rest
        again = wait_job(c, c.post("/v1/judge", json=_judge_body(3)).json()["id"],
                         timeout=120)
        assert again["status"] == "done"
        assert again["result"]["summary"]["judged"] == state["progress"]["total"] == 179
        assert again["result"]["summary"]["cached"] >= judged
        assert sim.stats()["duplicate_paid"] == 0


def _interrupt(tmp: Path, sim: object, *, depth: int, concurrency: int, after: int,
               sig: int) -> tuple[ServerProcess, dict]:
    """Start a server and a judge job, stop the server with ``sig`` once ``after`` pairs are
    judged; returns the stopped server (same state) and the job."""
    srv = _server(tmp, sim, "--concurrency", str(concurrency)).start()
    try:
        with srv.client() as c:
            job = c.post("/v1/judge", json=_judge_body(depth)).json()
            wait_job(c, job["id"], until=lambda s: s["progress"]["done"] >= after)
    finally:
        code = srv.stop(sig)
    if sig == signal.SIGTERM:
        assert code in (0, -signal.SIGTERM)  # graceful: calls land, the job is requeued
        assert "Application shutdown complete" in srv.log()
    return srv, job


def test_restart_resumes_without_paying_twice(tmp_path: Path) -> None:
    with simulator_thread(latency=0.3, api_key=None) as sim:
        srv, job = _interrupt(tmp_path, sim, depth=2, concurrency=4, after=12, sig=signal.SIGTERM)
        db = sqlite3.connect(tmp_path / "jobs.sqlite")
        status, done = db.execute("SELECT status, done FROM jobs WHERE id = ?",
                                  (job["id"],)).fetchone()
        stored = db.execute("SELECT COUNT(*) FROM judgments WHERE job = ?", (job["id"],)).fetchone()[0]
        db.close()
        assert status == "queued" and 12 <= done < 120 and stored == done
        assert sim.stats()["paid"] == stored  # nothing in flight was lost
        with srv, srv.client() as c:  # same state: the job resumes by itself
            state = wait_job(c, job["id"], timeout=120)
        assert state["status"] == "done", state
        assert state["result"]["summary"]["judged"] == 120
        stats = sim.stats()
        assert stats["paid"] == 120 and stats["duplicate_paid"] == 0
        assert state["usage"]["calls"] == 120  # usage counts both runs


def test_crash_resumes_after_the_lease(tmp_path: Path) -> None:
    with simulator_thread(latency=0.2, api_key=None) as sim:
        srv, job = _interrupt(tmp_path, sim, depth=1, concurrency=2, after=6, sig=signal.SIGKILL)
        with srv, srv.client() as c:
            state = wait_job(c, job["id"], timeout=120)
        assert state["status"] == "done" and state["result"]["summary"]["judged"] == 60
        stats = sim.stats()
        # only calls in flight at the kill (at most the concurrency) can be paid twice
        assert stats["duplicate_paid"] <= 2 and stats["paid"] <= 62


def test_budget_is_never_exceeded(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": 100.0, "output": 100.0}}))
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _server(tmp_path, sim, "--prices", str(prices), "--max-cost", "1.0") as srv, \
            srv.client() as c:
        state = wait_job(c, c.post("/v1/judge", json=_judge_body(3, max_cost=0.5)).json()["id"])
        assert state["status"] == "done"
        s = state["result"]["summary"]
        assert s["skipped_budget"] > 0 and s["judged"] > 0
        assert state["cost_usd"] is not None and 0 < state["cost_usd"] <= 0.5
        assert state["counts"]["skipped_budget"] == s["skipped_budget"]


def test_rag_llm_metrics_run_as_a_job(tmp_path: Path) -> None:
    samples = [json.loads(line) for line in (EX / "rag_samples.jsonl").read_text().splitlines() if line][:6]
    metrics = ["faithfulness", "context_precision", "hit@3"]
    with simulator_thread(latency=0.0, api_key=None) as sim, _server(tmp_path, sim) as srv, \
            srv.client() as c:
        r = c.post("/v1/rag", json={"samples": samples, "metrics": metrics})
        assert r.status_code == 202, r.text
        state = wait_job(c, r.json()["id"])
        assert state["status"] == "done", state
        assert state["progress"]["done"] == state["progress"]["total"] > 0
        llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=False)
        lib = json.loads(json.dumps(evaluate_samples_sync(samples, metrics, judge=llm).to_dict()))
        got = state["result"]
        assert got["samples"] == lib["samples"]
        assert [a["mean"] for a in got["aggregates"]] == [a["mean"] for a in lib["aggregates"]]
        # the job's result also says what the run said about its numbers (no price for the
        # simulator's model), which the library's report leaves to the log
        assert set(got) - {"warnings"} == set(lib)
        assert all("'sim-model'" in w for w in got.get("warnings", []))


def test_workers_share_jobs_and_each_runs_once(tmp_path: Path) -> None:
    with simulator_thread(latency=0.05, api_key=None) as sim, \
            _server(tmp_path, sim, "--workers", "2") as srv, srv.client() as c:
        bodies = [{"pairs": [{"qid": f"q{k}", "docid": f"d{i}", "query": f"query {k}",
                              "passage": f"passage {i} of job {k}"} for i in range(30)]}
                  for k in range(4)]
        ids = [c.post("/v1/judge", json=b).json()["id"] for b in bodies]
        states = [wait_job(c, i, timeout=120) for i in ids]  # any worker answers any job
        assert all(s["status"] == "done" and s["result"]["summary"]["judged"] == 30 for s in states)
        stats = sim.stats()
        assert stats["paid"] == 120 and stats["duplicate_paid"] == 0  # no job ran twice
        db = sqlite3.connect(tmp_path / "jobs.sqlite")
        per_job = dict(db.execute("SELECT job, COUNT(*) FROM judgments GROUP BY job").fetchall())
        db.close()
        assert per_job == {i: 30 for i in ids}
        r = c.post("/v1/evaluate", json={"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}})
        assert r.status_code == 200


def test_dry_run_estimates_without_a_key_or_a_job(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, "--model", "sim-model", "--base-url", "http://127.0.0.1:9/v1",
                       "--api-key-env", "RAGJUDGE_TEST_UNSET_KEY") as srv, srv.client() as c:
        r = c.post("/v1/judge", json={**_judge_body(2), "dry_run": True})
        assert r.status_code == 200, r.text
        est = r.json()
        assert est["pairs"] == est["calls"] == 120 and est["cached"] == 0
        assert est["prompt_tokens"] > 0 and est["model"] == "sim-model"
        assert est["description"].startswith("dry run: 120 requests")
        assert c.get("/v1/jobs").json() == []  # nothing was started
        # without dry_run the missing key is refused before any job exists
        r = c.post("/v1/judge", json=_judge_body(2))
        assert r.status_code == 400 and "RAGJUDGE_TEST_UNSET_KEY" in r.json()["detail"]
        assert c.get("/v1/jobs").json() == []


def test_job_state_without_the_result_and_embedding_check(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0, api_key=None) as sim, _server(tmp_path, sim) as srv, \
            srv.client() as c:
        pairs = [{"qid": "q1", "docid": "d1", "query": "what is lava", "passage": "molten rock"}]
        job = wait_job(c, c.post("/v1/judge", json={"pairs": pairs}).json()["id"])
        assert job["result"]["summary"]["judged"] == 1
        light = c.get(f"/v1/jobs/{job['id']}", params={"result": "false"}).json()
        assert light["result"] is None and light["status"] == "done"
        samples = [{"user_input": "q", "retrieved_contexts": ["a"], "response": "r"}]
        r = c.post("/v1/rag", json={"samples": samples, "metrics": ["answer_relevance(by=embedding)"]})
        assert r.status_code == 400 and "embeddings model" in r.json()["detail"]


def _stopped_mid_job(tmp: Path, sim: object, path: str, body: dict, done: int) -> tuple:
    """Start a server with 2 LLM slots, post a job, SIGTERM the server once ``done`` requests
    are answered: ``(server, job, state before the stop)``."""
    srv = _server(tmp, sim, "--concurrency", "2").start()
    try:
        with srv.client() as c:
            job = c.post(path, json=body).json()
            first = wait_job(c, job["id"], until=lambda s: s["progress"]["done"] >= done)
    finally:
        srv.stop(signal.SIGTERM)
    return srv, job, first


def test_rag_job_resumes_after_a_restart(tmp_path: Path) -> None:
    samples = [json.loads(line) for line in (EX / "rag_samples.jsonl").read_text().splitlines() if line]
    with simulator_thread(latency=0.2, api_key=None) as sim:
        srv, job, first = _stopped_mid_job(tmp_path, sim, "/v1/rag",
                                           {"samples": samples, "metrics": ["context_relevance"]}, 4)
        assert first["progress"]["total"] >= len(samples)
        paid_before = sim.stats()["paid"]
        with srv, srv.client() as c:
            state = wait_job(c, job["id"], timeout=120)
        assert state["status"] == "done", state
        agg = state["result"]["aggregates"][0]
        assert agg["metric"] == "context_relevance" and agg["n"] == len(samples)
        stats = sim.stats()
        # answers that landed before the stop come from the cache; only the (at most 2) calls
        # cut off in flight are asked again
        assert 4 <= paid_before and stats["duplicate_paid"] <= 2
        assert stats["distinct_paid_bodies"] == stats["paid"] - stats["duplicate_paid"]


# ----------------------------------------------------------------------------- synth jobs
def _synth_body(n: int, **extra: object) -> dict:
    return {"corpus": CORPUS, "n": n, "oversample": 3, **extra}


def _library_synth(sim: object, n: int, **options: object) -> object:
    from ragjudge.synth import synthesize_sync

    llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=False)
    return synthesize_sync(CORPUS, n, llm=llm, oversample=3, progress=False, **options)


def test_synth_job_matches_the_library(tmp_path: Path) -> None:
    from ragjudge.io import format_qrels

    with simulator_thread(latency=0.0, api_key=None) as sim, _server(tmp_path, sim) as srv, \
            srv.client() as c:
        r = c.post("/v1/synth", json=_synth_body(6, styles="question=0.5,keyword=0.5"))
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["kind"] == "synth" and job["progress"]["total"] > 0
        state = wait_job(c, job["id"], timeout=120)
        assert state["status"] == "done", state
        res = state["result"]
        assert state["progress"]["fraction"] == 1.0
        assert res["summary"]["kept"] == state["counts"]["kept"] == 6 and res["summary"]["ok"]
        assert len(res["queries"]) == len(res["samples"]) == 6
        assert {f["filter"] for f in res["filters"]} and res["params"]["n"] == 6
        assert sum(c_["status"] == "kept" for c_ in res["candidates"]) == 6
        assert state["usage"]["calls"] == res["summary"]["calls"] > 0
        assert sim.stats()["duplicate_paid"] == 0
        paid = sim.stats()["paid"]
        # the library, asked directly with the same inputs, makes the same collection
        lib = _library_synth(sim, 6, styles="question=0.5,keyword=0.5")
        assert res["queries"] == lib.queries
        assert res["qrels"] == format_qrels(lib.qrels)
        assert res["samples"] == json.loads(json.dumps(lib.samples))
        # the same job again costs nothing: every answer is in the server's cache
        before = sim.stats()["paid"]
        again = wait_job(c, c.post("/v1/synth", json=_synth_body(
            6, styles="question=0.5,keyword=0.5")).json()["id"], timeout=120)
        assert again["status"] == "done" and sim.stats()["paid"] == before
        assert again["counts"]["calls"] == 0 and again["counts"]["cache_hits"] == paid
        assert again["result"]["queries"] == res["queries"]
        db = sqlite3.connect(tmp_path / "jobs.sqlite")
        spec = json.loads(db.execute("SELECT spec FROM jobs WHERE id = ?", (job["id"],)).fetchone()[0])
        db.close()
        assert spec["model"] == "sim-model"  # the job's own: a restart cannot switch it


def test_synth_dry_run_sends_nothing_and_starts_no_job(tmp_path: Path) -> None:
    from ragjudge.synth import estimate_synth

    with simulator_thread(latency=0.0, api_key=None) as sim, _server(tmp_path, sim) as srv, \
            srv.client() as c:
        r = c.post("/v1/synth", json={**_synth_body(10), "dry_run": True})
        assert r.status_code == 200, r.text
        est = r.json()
        plan = estimate_synth(CORPUS, 10, model="sim-model", cache=False, check_key=False,
                              oversample=3)
        assert est["draws"] == plan.draws == 30 and est["calls"] == plan.calls > 30
        assert est["candidates"] == plan.candidates and est["model"] == "sim-model"
        assert est["cost"] is None and est["description"] == plan.describe()
        assert set(est["generation"]) == {"question", "keyword", "multi"}
        assert est["sampling"]["corpus"] == len(CORPUS)
        assert c.get("/v1/jobs").json() == []  # nothing was started
        assert sim.stats()["requests"] == 0  # nothing was sent


def test_synth_bad_input_is_a_one_line_4xx(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _server(tmp_path, sim, "--max-pairs", "1000") as srv, srv.client() as c:
        small = dict(list(CORPUS.items())[:20])
        cases = [
            ({"corpus": small, "n": 0}, 422, "n: Input should be greater than or equal to 1"),
            ({"corpus": {}, "n": 1}, 422, "corpus: "),
            ({"corpus": small, "n": 1, "oversample": 0.5}, 422, "oversample: "),
            ({"corpus": small, "n": 1, "styles": "question=0.5,keyword=0.3"}, 400,
             "styles: style weights sum to 0.8, not 1"),
            ({"corpus": small, "n": 1, "styles": "poem=1"}, 400,
             "styles: unknown style 'poem' (known: keyword, multi, question)"),
            ({"corpus": small, "n": 1, "min_grade": 9}, 400, "min_grade: must be one of the judge's grades"),
            ({"corpus": {"doc 1": "some text"}, "n": 1}, 400, "corpus: doc id 'doc 1' cannot be written"),
            ({"corpus": small, "n": 40}, 413, "request has 1,200 corpus documents x draws"),
            ({"corpus": small, "n": 1, "prompts": {"question": "/etc/passwd"}}, 422, "prompts: "),
        ]
        for body, status, start in cases:
            for dry in (False, True):
                r = c.post("/v1/synth", json={**body, "dry_run": dry})
                assert r.status_code == status, (body, r.text)
                detail = r.json()["detail"]
                assert detail.startswith(start) and "\n" not in detail, detail
        assert c.get("/v1/jobs").json() == [] and sim.stats()["requests"] == 0


def test_synth_job_resumes_after_a_restart(tmp_path: Path) -> None:
    with simulator_thread(latency=0.2, api_key=None) as sim:
        srv, job, first = _stopped_mid_job(tmp_path, sim, "/v1/synth", _synth_body(8), 6)
        assert first["status"] == "running"
        paid_before = sim.stats()["paid"]
        with srv, srv.client() as c:
            state = wait_job(c, job["id"], timeout=120)
        assert state["status"] == "done", state
        assert state["result"]["summary"]["kept"] == 8
        stats = sim.stats()
        # answers that landed before the stop come from the cache; only the (at most 2) calls
        # cut off in flight are asked again
        assert 6 <= paid_before < stats["paid"] and stats["duplicate_paid"] <= 2
        assert stats["distinct_paid_bodies"] == stats["paid"] - stats["duplicate_paid"]
        # usage counts both runs; a call cut off by the stop is counted at its worst case (as
        # "unknown" usage) whether or not the server got to bill it: never fewer than paid
        usage = state["usage"]
        assert usage["calls"] - usage.get("unknown", 0) <= stats["paid"] <= usage["calls"]
        assert state["result"]["summary"]["calls"] == stats["paid"] - paid_before
        # an interrupted job makes the collection an uninterrupted run makes
        assert state["result"]["queries"] == _library_synth(sim, 8).queries


def test_synth_cancel_stops_the_calls(tmp_path: Path) -> None:
    import time

    with simulator_thread(latency=0.3, api_key=None) as sim, \
            _server(tmp_path, sim, "--concurrency", "2") as srv, srv.client() as c:
        job = c.post("/v1/synth", json=_synth_body(8)).json()
        wait_job(c, job["id"], until=lambda s: s["progress"]["done"] >= 2)
        assert c.delete(f"/v1/jobs/{job['id']}").status_code == 200
        state = wait_job(c, job["id"], timeout=30)
        assert state["status"] == "cancelled" and state["result"] is None
        paid = sim.stats()["paid"]
        time.sleep(1.0)  # the job's own event loop (a worker thread) stopped too
        assert sim.stats()["paid"] == paid and sim.stats()["inflight"] == 0
        assert c.get("/v1/health").json()["jobs_running"] == 0
