"""Jobs survive their store and own their money (in-process apps, the loopback simulator, a job
store that fails on demand): a store outage is 503 with Retry-After and one log line each way,
the running job goes on and nothing is paid twice; an idempotency key finds its job from a
replica started with another model; a failed job resubmitted with its key runs again; a job's
budget and model are its own whichever replica runs it, and a takeover counts what earlier
runs paid; ``serve`` refuses a store it cannot open before listening."""

from __future__ import annotations

import json
import logging
import threading
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
from ragjudge.server.store import SqliteJobStore, StoreUnavailable, open_job_store  # noqa: E402

PRICE = 100.0  # USD per 1M tokens, input and output: a call costs about a cent


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    monkeypatch.delenv("RAGJUDGE_CACHE", raising=False)


@pytest.fixture()
def outage(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set: every SQLite job store call fails as an unreachable store would."""
    down = threading.Event()
    real = SqliteJobStore._execute

    def flaky(self: SqliteJobStore, sql: str, args: Any) -> Any:
        if down.is_set():
            raise StoreUnavailable("simulated outage")
        return real(self, sql, args)

    monkeypatch.setattr(SqliteJobStore, "_execute", flaky)
    return down


def _pairs(n: int) -> dict[str, Any]:
    return {"pairs": [{"qid": f"q{i // 4}", "docid": f"d{i}", "query": f"query {i // 4}",
                       "passage": f"passage number {i}"} for i in range(n)]}


def _settings(tmp: Path, sim: Any, **kw: Any) -> ServerSettings:
    kw.setdefault("model", "sim-model")
    kw.setdefault("cpu_processes", 0)  # jobs only: no evaluation process to start
    return ServerSettings(endpoints=(Endpoint(kw["model"], base_url=sim.base_url, concurrency=2),),
                          jobs_db=str(tmp / "jobs.sqlite"), cache=str(tmp / "cache.sqlite"), **kw)


@contextmanager
def _app(settings: ServerSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def _wait(c: TestClient, job: str, until: Any = None, timeout: float = 60.0) -> dict[str, Any]:
    until = until or (lambda s: s["status"] in ("done", "failed", "cancelled"))
    deadline = time.monotonic() + timeout
    while True:
        r = c.get(f"/v1/jobs/{job}")
        if r.status_code == 200 and until(r.json()):
            return r.json()
        assert time.monotonic() < deadline, f"job did not get there: {r.text[:300]}"
        time.sleep(0.05)


def _true_spend(sim: Any) -> float:
    s = sim.stats()
    return (s["prompt_tokens"] + s["completion_tokens"]) * PRICE / 1e6


def test_a_store_outage_is_503_with_one_log_line(tmp_path: Path, outage: threading.Event,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    settings = ServerSettings(model="sim-model", endpoints=(Endpoint("sim-model", base_url="http://127.0.0.1:9/v1"),),
                              max_jobs=0, jobs_db=str(tmp_path / "jobs.sqlite"), cache=str(tmp_path / "c.sqlite"),
                              cpu_processes=0)
    with _app(settings) as c:
        job = c.post("/v1/judge", json=_pairs(3)).json()["id"]
        outage.set()
        for _ in range(3):
            r = c.post("/v1/judge", json=_pairs(3), headers={"Idempotency-Key": "during"})
            assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
            assert "job store is unavailable (simulated outage)" in r.json()["detail"]
            assert c.get(f"/v1/jobs/{job}").status_code == 503
            assert c.get("/v1/jobs").status_code == 503
            assert c.delete(f"/v1/jobs/{job}").status_code == 503
        health = c.get("/v1/health")
        assert health.status_code == 200
        assert health.json() == {"status": "degraded", "store": "unavailable: simulated outage",
                                 "jobs_running": health.json()["jobs_running"]}
        outage.clear()
        assert c.get("/v1/health").json()["status"] == "ok"
        r = c.post("/v1/judge", json=_pairs(3), headers={"Idempotency-Key": "during"})
        assert r.status_code == 202 and r.json()["id"] != job
    notes = [r for r in caplog.records if r.name == "ragjudge.server" and "job store" in r.getMessage()]
    assert len(notes) == 2, [r.getMessage() for r in notes]  # one line as it went, one as it came back
    assert "unavailable" in notes[0].getMessage() and "is back" in notes[1].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


@pytest.mark.slow  # waits out an outage while a job runs
def test_a_job_goes_on_through_a_store_outage(tmp_path: Path, outage: threading.Event,
                                              caplog: pytest.LogCaptureFixture) -> None:
    from _loopback import simulator_thread

    body = _pairs(24)
    with simulator_thread(latency=0.05, api_key=None) as sim, _app(_settings(tmp_path, sim)) as c:
        job = c.post("/v1/judge", json=body).json()["id"]
        _wait(c, job, lambda s: s["progress"]["done"] >= 3)
        outage.set()
        try:
            # the job keeps calling while its store is away: all 24 answers arrive meanwhile
            deadline = time.monotonic() + 30
            while sim.stats()["paid"] < 24 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sim.stats()["paid"] == 24
            time.sleep(1.0)  # its end waits for the store
        finally:
            outage.clear()
        state = _wait(c, job)
        assert state["status"] == "done", state
        assert state["result"]["summary"]["judged"] == 24 and state["progress"]["done"] == 24
        assert c.get("/v1/health").json() == {"status": "ok", "store": "ok", "jobs_running": 0}
        again = c.post("/v1/judge", json=body)  # every judgment was stored: all cache hits
        assert _wait(c, again.json()["id"])["result"]["summary"]["cached"] == 24
        stats = sim.stats()
    assert stats["duplicate_paid"] == 0 and stats["paid"] == 24
    store = open_job_store(tmp_path / "jobs.sqlite")
    assert len(store.judgments(job)) == 24  # the ones made during the outage too
    store.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_an_idempotency_key_finds_its_job_from_a_replica_with_another_model(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    body = _pairs(6)
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _app(_settings(tmp_path, sim, max_jobs=0)) as a, \
            _app(_settings(tmp_path, sim, model="another-model")) as b:
        first = a.post("/v1/judge", json=body, headers={"Idempotency-Key": "same"})
        again = b.post("/v1/judge", json=body, headers={"Idempotency-Key": "same"})
        assert first.status_code == again.status_code == 202, again.text
        assert first.json()["id"] == again.json()["id"]
        state = _wait(b, first.json()["id"])  # run by b, with the model the job was accepted with
        assert state["status"] == "done" and state["result"]["summary"]["judged"] == 6
        assert {j["model"] for j in state["result"]["judgments"]} == {"sim-model"}


def test_a_failed_job_resubmitted_with_its_key_runs_again(tmp_path: Path) -> None:
    store = open_job_store(tmp_path / "jobs.sqlite")
    job = store.create("judge", {"depth": 2}, 3, idempotency_key="k")
    assert store.claim("A", 10)["id"] == job
    store.finish(job, "A", "failed", {"done": 1, "total": 3, "counts": {}, "cost": 0.1, "usage": {}},
                 error="internal error (AdminShutdown)")
    assert store.create("judge", {"depth": 2}, 3, idempotency_key="k") == job
    row = store.get(job)
    assert row["status"] == "queued" and row["error"] is None and int(row["done"]) == 1
    store.finish(job, "A", "done", {"done": 3, "total": 3, "counts": {}, "cost": 0.1, "usage": {}})
    assert store.claim("A", 10)["id"] == job  # queued: claimed again
    store.finish(job, "A", "done", {"done": 3, "total": 3, "counts": {}, "cost": 0.1, "usage": {}})
    assert store.create("judge", {"depth": 2}, 3, idempotency_key="k") == job
    assert store.get(job)["status"] == "done"  # a finished job is returned as it is
    store.close()


def _prices(tmp: Path) -> str:
    path = tmp / "prices.json"
    path.write_text(json.dumps({"sim-model": {"input": PRICE, "output": PRICE}}))
    return str(path)


def test_a_job_keeps_the_budget_it_was_accepted_with(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    prices = _prices(tmp_path)
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _app(_settings(tmp_path, sim, max_jobs=0, prices=prices, max_cost=0.3)) as a, \
            _app(_settings(tmp_path, sim, prices=prices, max_cost=5.0)) as b:
        job = a.post("/v1/judge", json=_pairs(60)).json()["id"]  # accepted by the $0.30 replica
        state = _wait(b, job)  # run by the $5 one
        spent = _true_spend(sim)
    summary = state["result"]["summary"]
    assert state["status"] == "done" and summary["skipped_budget"] > 0 and summary["judged"] > 0
    assert spent <= 0.3 and state["cost_usd"] >= spent - 1e-9


def test_a_takeover_counts_what_earlier_runs_paid(tmp_path: Path) -> None:
    """A run killed mid-job left its account: paid $0.20, up to $0.30 in flight. The run that
    takes over spends at most the rest of the cap and reports every dollar."""
    from _loopback import simulator_thread

    prices = _prices(tmp_path)
    store = open_job_store(tmp_path / "jobs.sqlite")
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _app(_settings(tmp_path, sim, max_jobs=0, prices=prices, max_cost=1.0)) as a:
        job = a.post("/v1/judge", json=_pairs(60)).json()["id"]
        assert store.claim("dead-replica", 60)["id"] == job
        store.account(job, "dead-replica/run1", 0.2, 0.3, {"calls": 2})
        # the dead replica never renews its lease: make it stale now
        store._q("UPDATE {jobs} SET heartbeat = heartbeat - 1000 WHERE id = ?", (job,))
        with _app(_settings(tmp_path, sim, prices=prices, max_cost=5.0, lease_seconds=5.0)) as b:
            state = _wait(b, job)
        spent_here, paid = _true_spend(sim), sim.stats()["paid"]
    assert state["status"] == "done" and state["result"]["summary"]["skipped_budget"] > 0
    assert spent_here <= 1.0 - 0.5 + 1e-9  # the cap less what the dead run paid or may have
    assert state["cost_usd"] == pytest.approx(0.5 + spent_here, abs=1e-6)
    assert state["usage"]["calls"] == 2 + paid
    owners = {a["owner"] for a in store.accounts(job)}
    assert len(owners) == 2 and all(a["reserved"] == 0 for a in store.accounts(job)
                                    if a["owner"] != "dead-replica/run1")
    store.close()


# ----------------------------------------------------------------------------- serve
def test_serve_refuses_a_store_it_cannot_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg")
    from _server import free_port

    from ragjudge.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--jobs-db", "mysql://user:pw@db.example/jobs"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown job store scheme 'mysql://'" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the URL
    url = f"postgresql://ragjudge:secret@127.0.0.1:{free_port()}/jobs"  # nothing listens there
    assert main(["serve", "--jobs-db", url, "--cache", str(tmp_path / "c.sqlite")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot open the job store" in err and len(err.splitlines()) == 1
    assert "secret" not in err and "Traceback" not in err


def test_a_one_call_job_stores_its_account_as_each_call_settles(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A RAG job (one library call) with no cap: its account in the store follows every settled
    call, not only the heartbeat, and holds the calls in flight at their worst case, so a
    replica killed between heartbeats leaves every call it paid for counted."""
    from _loopback import simulator_thread

    from ragjudge.server.jobs import JobManager

    # Heartbeats renew leases but store no account here: what is stored comes from the calls.
    monkeypatch.setattr(JobManager, "_beat",
                        lambda self, job, snap: self.store.heartbeat(job.id, self.owner, snap))
    samples = [json.loads(line) for line in
               (Path(__file__).parents[2] / "examples" / "rag_samples.jsonl").read_text().splitlines()
               if line][:6]
    store = open_job_store(tmp_path / "jobs.sqlite")
    with simulator_thread(latency=0.15, api_key=None) as sim, \
            _app(_settings(tmp_path, sim, prices=_prices(tmp_path))) as c:
        job = c.post("/v1/rag", json={"samples": samples, "metrics": ["faithfulness"]}).json()["id"]
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline and c.get(f"/v1/jobs/{job}").json()["status"] != "done":
            paid_before = _true_spend(sim)
            accounts = store.accounts(job)
            if accounts and sim.stats()["paid"] >= 2:
                # what the store holds covers what was paid before it was read
                seen.append((paid_before, sum(a["spent"] + a["reserved"] for a in accounts)))
            time.sleep(0.05)
        assert c.get(f"/v1/jobs/{job}").json()["status"] == "done"
    store.close()
    assert seen, "no account was stored while the job ran"
    assert all(held >= paid - 1e-9 for paid, held in seen), seen
    assert any(paid > 0 for paid, _ in seen)


def test_a_job_result_says_what_the_run_said_about_its_numbers(tmp_path: Path) -> None:
    """A price taken from a prefix of the model's name is a warning in the job's result (the
    client reads the JSON, not the server's log)."""
    from _loopback import simulator_thread

    with simulator_thread(latency=0.0, api_key=None) as sim, \
            _app(_settings(tmp_path, sim, model="sim-model-2026", prices=_prices(tmp_path))) as c:
        state = _wait(c, c.post("/v1/judge", json=_pairs(4)).json()["id"])
    assert state["status"] == "done", state
    warnings = state["result"]["warnings"]
    assert len(warnings) == 1 and "'sim-model-2026'" in warnings[0] and "'sim-model'" in warnings[0]
