"""The service's job store, SQLite and PostgreSQL alike: two store objects (two server
processes) see the same jobs, a job is claimed by one of them, a lease that is not renewed is
taken over, and a submission with an idempotency key returns the existing job. Then two real
``ragjudge serve`` processes on one Postgres database: one is killed mid-job, the other
finishes it, paying once."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from ragjudge.errors import InputError  # noqa: E402
from ragjudge.server.store import JobStore, open_job_store  # noqa: E402

SNAP = {"done": 1, "total": 3, "counts": {"judged": 1}, "cost": 0.5, "usage": {"calls": 1}}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        return tmp_path / "jobs.sqlite"
    from _postgres import fresh_database

    return fresh_database()


def test_two_stores_share_jobs_and_one_claims_each(target: Any) -> None:
    a, b = open_job_store(target), open_job_store(target)
    if isinstance(target, str):
        assert type(a).__name__ == "PostgresJobStore" and isinstance(a, JobStore)
    job = a.create("judge", {"pairs": [1, 2, 3]}, 3)
    row = b.get(job)
    assert row["status"] == "queued" and row["kind"] == "judge" and int(row["total"]) == 3
    got = b.claim("B", 10)
    assert got is not None and got["id"] == job and got["owner"] == "B" and got["status"] == "running"
    assert a.claim("A", 10) is None  # B holds a fresh lease
    assert b.heartbeat(job, "B", SNAP) is False and a.heartbeat(job, "A", SNAP) is None
    b.add_judgment(job, 0, {"grade": 2})
    b.add_judgment(job, 0, {"grade": 3})  # a retried pair appears twice, in order
    assert a.judgments(job) == [(0, {"grade": 2}), (0, {"grade": 3})]
    assert a.request_cancel(job)["cancel"] and b.heartbeat(job, "B", SNAP) is True
    b.finish(job, "B", "cancelled", SNAP, result={"partial": True})
    row = a.get(job)
    assert row["status"] == "cancelled" and row["owner"] is None and int(row["done"]) == 1
    assert [r["id"] for r in a.list()] == [job]
    queued = a.create("rag", {}, 0)
    assert b.request_cancel(queued)["status"] == "cancelled"  # a queued job stops at once
    a.close()
    b.close()


def test_a_lease_that_is_not_renewed_is_taken_over(target: Any) -> None:
    a, b = open_job_store(target), open_job_store(target)
    job = a.create("judge", {}, 3)
    assert a.claim("A", 0.3)["id"] == job
    assert b.claim("B", 0.3) is None
    time.sleep(0.6)  # A was killed: no heartbeat for longer than the lease
    taken = b.claim("B", 0.3)
    assert taken is not None and taken["id"] == job and taken["owner"] == "B"
    assert a.heartbeat(job, "A", SNAP) is None  # A (if it comes back) learns it lost the job
    a.finish(job, "A", "done", SNAP)  # and cannot finish it
    assert b.get(job)["status"] == "running"
    b.release(job, "B", SNAP)  # a graceful stop queues it again
    assert a.get(job)["status"] == "queued" and a.claim("A", 0.3)["id"] == job
    a.close()
    b.close()


def test_concurrent_claims_never_hand_a_job_out_twice(target: Any) -> None:
    stores = [open_job_store(target) for _ in range(4)]
    jobs = {stores[0].create("judge", {"n": i}, 1) for i in range(20)}
    claimed: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        while True:
            row = stores[n].claim(f"w{n}", 60)
            if row is None:
                return
            with lock:
                claimed.append(row["id"])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(claimed) == sorted(jobs)
    for s in stores:
        s.close()


def test_an_idempotency_key_returns_the_existing_job(target: Any) -> None:
    a, b = open_job_store(target), open_job_store(target)
    first = a.create("judge", {"depth": 2}, 10, idempotency_key="req-42")
    assert b.create("judge", {"depth": 2}, 10, idempotency_key="req-42") == first
    assert len(a.list()) == 1
    other = a.create("judge", {"depth": 2}, 10, idempotency_key="req-43")
    assert other != first and a.create("judge", {"depth": 2}, 10) not in (first, other)
    with pytest.raises(InputError, match=r"Idempotency-Key: already used for another request"):
        b.create("judge", {"depth": 3}, 10, idempotency_key="req-42")
    with pytest.raises(InputError, match=r"Idempotency-Key: already used"):
        b.create("rag", {"depth": 2}, 10, idempotency_key="req-42")
    for bad in ("", "x" * 256, "tab\there"):
        with pytest.raises(InputError, match="Idempotency-Key: must be"):
            a.create("judge", {}, 1, idempotency_key=bad)
    assert len(a.list()) == 3

    # many replicas racing on one key: one job
    ids: list[str] = []

    def submit() -> None:
        s = open_job_store(target)
        ids.append(s.create("judge", {"race": True}, 1, idempotency_key="race"))
        s.close()

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(ids) == 6 and len(set(ids)) == 1
    a.close()
    b.close()


def test_a_store_made_before_idempotency_keys_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL,
            request TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, owner TEXT,
            heartbeat REAL, cancel INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0,
            total INTEGER NOT NULL DEFAULT 0, counts TEXT NOT NULL DEFAULT '{}', cost REAL,
            usage TEXT NOT NULL DEFAULT '{}', error TEXT, result TEXT);
        INSERT INTO jobs (id, kind, status, request, created, updated) VALUES ('old', 'judge', 'done', '{}', 1, 1);
    """)
    db.commit()
    db.close()
    store = open_job_store(path)
    assert store.get("old")["status"] == "done" and store.get("old")["idem_key"] is None
    job = store.create("judge", {}, 1, idempotency_key="k")
    assert store.create("judge", {}, 1, idempotency_key="k") == job
    store.close()


# ----------------------------------------------------------------------------- real servers
@pytest.mark.slow
def test_idempotency_key_over_http(tmp_path: Path) -> None:
    from _loopback import simulator_thread
    from _server import ServerProcess, wait_job

    body = {"pairs": [{"qid": "q1", "docid": f"d{i}", "query": "q", "passage": f"p {i}"} for i in range(3)]}
    with simulator_thread(latency=0.0, api_key=None) as sim, \
            ServerProcess(tmp_path, "--base-url", sim.base_url, "--model", "sim-model",
                          env={"OPENAI_API_KEY": "sk-sim"}) as srv, srv.client() as c:
        r1 = c.post("/v1/judge", json=body, headers={"Idempotency-Key": "abc"})
        r2 = c.post("/v1/judge", json=body, headers={"Idempotency-Key": "abc"})
        assert r1.status_code == r2.status_code == 202 and r1.json()["id"] == r2.json()["id"]
        r3 = c.post("/v1/judge", json={**body, "depth": 7}, headers={"Idempotency-Key": "abc"})
        assert r3.status_code == 400 and "Idempotency-Key" in r3.json()["detail"]
        assert c.post("/v1/judge", json=body).json()["id"] != r1.json()["id"]  # no key: a new job
        assert wait_job(c, r1.json()["id"])["status"] == "done"
        assert len(c.get("/v1/jobs").json()) == 2


@pytest.mark.slow
def test_two_servers_on_one_postgres_take_over_a_killed_replicas_job(tmp_path: Path) -> None:
    from _loopback import simulator_thread
    from _postgres import fresh_database
    from _server import ServerProcess, wait_job

    url = fresh_database()
    pairs = [{"qid": f"q{i // 5}", "docid": f"d{i}", "query": f"query {i // 5}", "passage": f"passage {i}"}
             for i in range(60)]
    with simulator_thread(latency=0.2, api_key=None) as sim:
        def server(name: str) -> ServerProcess:
            (tmp_path / name).mkdir()
            return ServerProcess(tmp_path / name, "--base-url", sim.base_url, "--model", "sim-model",
                                 "--concurrency", "2", "--jobs-db", url, "--cache", url,
                                 env={"OPENAI_API_KEY": "sk-sim"})

        a = server("a").start()
        b = server("b").start()
        try:
            with a.client() as ca, b.client() as cb:
                r = ca.post("/v1/judge", json={"pairs": pairs}, headers={"Idempotency-Key": "job-1"})
                assert r.status_code == 202, r.text
                job = r.json()["id"]
                # the same submission through the other replica: the same job
                assert cb.post("/v1/judge", json={"pairs": pairs},
                               headers={"Idempotency-Key": "job-1"}).json()["id"] == job
                state = wait_job(cb, job, until=lambda s: s["progress"]["done"] >= 6, timeout=60)
                assert state["status"] == "running"
                runner = a if _owner_pid(url, job) == a.proc.pid else b
                other = b if runner is a else a
                runner.stop(signal.SIGKILL)  # a replica dies mid-job
                with other.client() as c:
                    final = wait_job(c, job, timeout=120)  # taken over after the lease (10 s)
            assert final["status"] == "done", final
            assert final["result"]["summary"]["judged"] == 60
            stats = sim.stats()
            # only calls in flight at the kill (at most the concurrency) can be paid twice
            assert stats["duplicate_paid"] <= 2 and stats["paid"] <= 62
        finally:
            a.stop()
            b.stop()


def _owner_pid(url: str, job: str) -> int:
    import psycopg

    with psycopg.connect(url) as db:
        owner = db.execute("SELECT owner FROM ragjudge_jobs WHERE id = %s", (job,)).fetchone()[0]
    return int(owner.split("-")[0])


@pytest.mark.slow
def test_a_killed_replicas_spending_counts_against_the_jobs_cap(tmp_path: Path) -> None:
    """Two replicas on one store; the one running a capped job is killed mid-job. The other
    takes over with what the dead one paid (and may have had in flight) counted: the true
    spend stays under the cap and the reported cost is at least the true spend."""
    import json

    from _loopback import simulator_thread
    from _server import ServerProcess, wait_job

    price, cap = 100.0, 2.0
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": price, "output": price}}))
    shared = ["--jobs-db", str(tmp_path / "jobs.sqlite"), "--cache", str(tmp_path / "cache.sqlite")]
    pairs = [{"qid": f"q{i // 5}", "docid": f"d{i}", "query": f"query {i // 5}", "passage": f"passage {i}"}
             for i in range(80)]
    with simulator_thread(latency=0.2, api_key=None) as sim:
        def server(name: str, max_cost: str) -> ServerProcess:
            (tmp_path / name).mkdir()
            return ServerProcess(tmp_path / name, "--base-url", sim.base_url, "--model", "sim-model",
                                 "--concurrency", "2", "--prices", str(prices), "--max-cost", max_cost,
                                 "--lease-seconds", "2", *shared, env={"OPENAI_API_KEY": "sk-sim"})

        a = server("a", str(cap)).start()  # accepts the job with its $2 ceiling
        b = server("b", "10").start()
        try:
            with a.client() as ca:
                job = ca.post("/v1/judge", json={"pairs": pairs}).json()["id"]
                wait_job(ca, job, until=lambda s: s["progress"]["done"] >= 8, timeout=60)
            db = sqlite3.connect(tmp_path / "jobs.sqlite")
            owner = db.execute("SELECT owner FROM jobs WHERE id = ?", (job,)).fetchone()[0]
            db.close()
            runner, other = (a, b) if int(owner.split("-")[0]) == a.proc.pid else (b, a)
            runner.stop(signal.SIGKILL)
            with other.client() as c:
                final = wait_job(c, job, timeout=120)
        finally:
            a.stop()
            b.stop()
        stats = sim.stats()
    true_spend = (stats["prompt_tokens"] + stats["completion_tokens"]) * price / 1e6
    assert final["status"] == "done", final
    assert final["result"]["summary"]["skipped_budget"] > 0  # the cap bound the job
    assert true_spend <= cap
    assert final["cost_usd"] >= true_spend - 1e-9  # every paid call reported
    print(f"paid twice: {stats['duplicate_paid']}, true ${true_spend:.4f}, "
          f"reported ${final['cost_usd']:.4f}, cap ${cap}")
