"""The nuggets job of the HTTP service (in-process apps, the loopback simulator, no network):
per-run scores with intervals equal to the library's, the dry run sends nothing and starts no
job, an idempotency key finds its job, a rerun is all cache hits, a budget is never exceeded
(failures kept as data), a restart mid-job resumes paying nothing twice, and bad input is one
line naming the request field and record."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.llm import Endpoint  # noqa: E402
from ragjudge.server import ServerSettings, create_app  # noqa: E402

pytestmark = pytest.mark.slow  # a simulator thread and in-process job runs

EX = Path(__file__).resolve().parents[2] / "examples" / "nuggets"
PRICE = 100.0  # USD per 1M tokens, input and output
SCORES = ("strict_vital", "vital", "strict_all", "all", "weighted")


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _body(**extra: Any) -> dict[str, Any]:
    answers = [r for x in "abc" for r in _records(EX / "runs" / f"run_{x}.jsonl")]
    return {"answers": answers, "nuggets": _records(EX / "nuggets.jsonl"), "resamples": 200, **extra}


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    monkeypatch.delenv("RAGJUDGE_CACHE", raising=False)


def _settings(tmp: Path, sim: Any, **kw: Any) -> ServerSettings:
    kw.setdefault("model", "sim-model")
    kw.setdefault("cpu_processes", 0)  # jobs only: no evaluation process to start
    return ServerSettings(endpoints=(Endpoint(kw["model"], base_url=sim.base_url, concurrency=2),),
                          jobs_db=str(tmp / "jobs.sqlite"), cache=str(tmp / "cache.sqlite"), **kw)


@contextmanager
def _app(settings: ServerSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def _wait(c: TestClient, job: str, until: Any = None, timeout: float = 90.0) -> dict[str, Any]:
    until = until or (lambda s: s["status"] in ("done", "failed", "cancelled"))
    deadline = time.monotonic() + timeout
    while True:
        r = c.get(f"/v1/jobs/{job}")
        if r.status_code == 200 and until(r.json()):
            return r.json()
        assert time.monotonic() < deadline, f"job did not get there: {r.text[:300]}"
        time.sleep(0.05)


def _library(sim: Any, tmp: Path, **kw: Any) -> Any:
    from ragjudge.llm import LLM
    from ragjudge.nuggets import evaluate_answers_sync

    body = _body()
    answers = tmp / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in body["answers"]))
    llm = LLM("sim-model", base_url=sim.base_url, cache=False)
    return evaluate_answers_sync(answers, llm=llm, nuggets=EX / "nuggets.jsonl", cite=False,
                                 n_resamples=200, **kw)


def test_nuggets_job_is_the_librarys_evaluation(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    with simulator_thread(latency=0.0, api_key=None) as sim, _app(_settings(tmp_path, sim)) as c:
        r = c.post("/v1/nuggets", json=_body(), headers={"Idempotency-Key": "k1"})
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["kind"] == "nuggets" and job["progress"]["total"] == 12
        state = _wait(c, job["id"])
        assert state["status"] == "done", state
        assert c.post("/v1/nuggets", json=_body(), headers={"Idempotency-Key": "k1"}).json()["id"] == job["id"]
        res = state["result"]
        runs = {x["run"]: x for x in res["scores"]["runs"]}
        assert set(runs) == {"run_a", "run_b", "run_c"}
        for x in runs.values():
            assert set(x["mean"]) == set(SCORES) and all(len(x["ci"][m]) == 2 for m in SCORES)
        assert res["scores"]["comparisons"] and res["mostly_failed"] is False
        assert len(res["assignments"]) == 12 and res["usage"]["assign"]["calls"] == 12
        assert state["usage"]["prompt_tokens"] > 0 and state["counts"]["calls"] == 12
        assert sim.stats()["paid"] == 12
        lib = _library(sim, tmp_path)
        for run, rep in lib.scores.reports.items():
            for m in SCORES:
                assert runs[run]["mean"][m] == pytest.approx(rep.mean[m], nan_ok=True)
        # a second job of the same request: every call from the cache, nothing paid again
        again = _wait(c, c.post("/v1/nuggets", json=_body()).json()["id"])
        assert again["result"]["usage"]["assign"]["cache_hits"] == 12
        assert sim.stats()["paid"] == 12 + 12  # (the library call above used no cache)
        assert sim.stats()["duplicate_paid"] == 12  # ...only the library's own calls repeat


def test_dry_run_human_agreement_and_bad_input(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    with simulator_thread(latency=0.0, api_key=None) as sim, _app(_settings(tmp_path, sim)) as c:
        r = c.post("/v1/nuggets", json=_body(dry_run=True))
        assert r.status_code == 200, r.text
        est = r.json()
        assert est["calls"] == 12 and est["prompt_tokens"] > 0 and "calls" in est["description"]
        assert sim.stats()["paid"] == 0 and c.get("/v1/jobs").json() == []
        bad = _body()
        bad["answers"][1] = {"run_id": "run_a", "answer": "no topic"}
        r = c.post("/v1/nuggets", json=bad)
        assert r.status_code == 400 and r.json()["detail"].startswith("answers:2: topic_id:"), r.text
        r = c.post("/v1/nuggets", json=_body(qrels={"t1": {"p1": 2}}, nuggets=None))
        assert r.status_code == 400 and "corpus" in r.json()["detail"]
        assert c.post("/v1/nuggets", json=_body(grades=4)).status_code == 422
        human = _records(EX / "human_assignments.jsonl")
        state = _wait(c, c.post("/v1/nuggets", json=_body(human=human)).json()["id"])
        assert state["status"] == "done", state
        agree = state["result"]["agreement"]
        assert agree["metric"] == "all" and agree["assignments"] is not None
        assert set(agree["ppi"]) <= {"run_a", "run_b", "run_c"} and agree["ppi"]
        for e in agree["ppi"].values():
            assert e["ci_low"] <= e["mean"] <= e["ci_high"]


def test_budget_is_never_exceeded_and_failures_are_data(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": PRICE, "output": PRICE}}))
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _app(_settings(tmp_path, sim, prices=str(prices))) as c:
        body = _body(settings={"max_cost": 0.4, "max_tokens": 400})
        state = _wait(c, c.post("/v1/nuggets", json=body).json()["id"])
        assert state["status"] == "done", state
        s = sim.stats()
        spent = (s["prompt_tokens"] + s["completion_tokens"]) * PRICE / 1e6
        assert 0 < s["paid"] < 12 and spent <= 0.4 + 1e-9
        assert state["cost_usd"] >= spent - 1e-9
        failed = [n for a in state["result"]["assignments"] for n in a["nuggets"] if n["assignment"] is None]
        assert failed and all(n["failure"] for n in failed)
        assert state["counts"]["skipped_budget"] > 0


def test_a_restart_mid_job_resumes_paying_nothing_twice(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    with simulator_thread(latency=0.3, api_key=None) as sim:
        settings = _settings(tmp_path, sim, drain_seconds=0.5)
        with _app(settings) as c:
            job = c.post("/v1/nuggets", json=_body()).json()["id"]
            deadline = time.monotonic() + 30
            while sim.stats()["paid"] < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
        first = sim.stats()["paid"]
        assert 3 <= first < 12
        with _app(settings) as c:  # a new server on the same store and cache
            state = _wait(c, job)
        assert state["status"] == "done", state
        assert len(state["result"]["assignments"]) == 12
        assert all(n["assignment"] for a in state["result"]["assignments"] for n in a["nuggets"])
        s = sim.stats()
        # nothing answered before the stop is paid again (beyond the calls then in flight)
        assert s["duplicate_paid"] <= 2 and s["paid"] <= 12 + 2


def test_a_server_killed_mid_job_is_resumed_after_its_lease(tmp_path: Path) -> None:
    import signal

    from _loopback import simulator_thread
    from _server import ServerProcess, wait_job

    with simulator_thread(latency=0.3, api_key=None) as sim:
        srv = ServerProcess(tmp_path, "--base-url", sim.base_url, "--model", "sim-model", "--timeout", "10",
                            "--concurrency", "2", env={"OPENAI_API_KEY": "sk-sim"}).start()
        try:
            with srv.client() as c:
                job = c.post("/v1/nuggets", json=_body()).json()
            deadline = time.monotonic() + 60
            while sim.stats()["paid"] < 4 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            srv.stop(signal.SIGKILL)
        assert 4 <= sim.stats()["paid"] < 12
        with srv, srv.client() as c:  # the same state: its lease runs out, then it is resumed
            state = wait_job(c, job["id"], timeout=120)
        assert state["status"] == "done", state
        assert all(n["assignment"] for a in state["result"]["assignments"] for n in a["nuggets"])
        s = sim.stats()
        # only calls in flight at the kill (at most the concurrency) can be paid twice
        assert s["duplicate_paid"] <= 2 and s["paid"] <= 14 and s["distinct_paid_bodies"] == 12


def test_cancel_stops_the_job(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    with simulator_thread(latency=0.5, api_key=None) as sim, _app(_settings(tmp_path, sim)) as c:
        job = c.post("/v1/nuggets", json=_body()).json()["id"]
        _wait(c, job, lambda s: s["status"] == "running")
        assert c.delete(f"/v1/jobs/{job}").status_code == 200
        state = _wait(c, job)
        assert state["status"] == "cancelled"
        paid = sim.stats()["paid"]
        time.sleep(1.0)
        assert sim.stats()["paid"] == paid < 12  # no call starts after the cancel
