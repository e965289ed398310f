"""The PostgreSQL job store against a real server: every connection cut mid-job and a server
restart mid-job never fail the job nor pay twice (submits and polls get 503 meanwhile); ``serve``
refuses a database that does not exist before it listens."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a real PostgreSQL server

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.llm import Endpoint  # noqa: E402
from ragjudge.server import ServerSettings, create_app  # noqa: E402


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    monkeypatch.delenv("RAGJUDGE_CACHE", raising=False)


def _pairs(n: int) -> dict[str, Any]:
    return {"pairs": [{"qid": f"q{i // 4}", "docid": f"d{i}", "query": f"query {i // 4}",
                       "passage": f"passage number {i}"} for i in range(n)]}


def _wait(c: TestClient, job: str, until: Any = None, timeout: float = 90.0) -> dict[str, Any]:
    until = until or (lambda s: s["status"] in ("done", "failed", "cancelled"))
    deadline = time.monotonic() + timeout
    while True:
        r = c.get(f"/v1/jobs/{job}")
        if r.status_code == 200 and until(r.json()):
            return r.json()
        assert time.monotonic() < deadline, f"job did not get there: {r.text[:300]}"
        time.sleep(0.05)


def _app(tmp: Path, sim: Any, url: str) -> TestClient:
    # the LLM cache is a local file: only the job store is on the database under test
    return TestClient(create_app(ServerSettings(
        model="sim-model", endpoints=(Endpoint("sim-model", base_url=sim.base_url, concurrency=2),), jobs_db=url,
        cache=str(tmp / "cache.sqlite"))))


def test_connections_cut_mid_job_never_fail_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import psycopg
    from _loopback import simulator_thread
    from _postgres import fresh_database

    url = fresh_database()
    with simulator_thread(latency=0.05, api_key=None) as sim, _app(tmp_path, sim, url) as c:
        job = c.post("/v1/judge", json=_pairs(40)).json()["id"]
        for done in (5, 15, 25):  # every connection of the database cut, three times
            _wait(c, job, lambda s, d=done: s["progress"]["done"] >= d)
            with psycopg.connect(url, autocommit=True) as db:
                cut = db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                                 ).fetchone()[0]
            assert cut >= 1
        state = _wait(c, job)
        stats = sim.stats()
    assert state["status"] == "done", state
    assert state["result"]["summary"]["judged"] == 40
    assert stats["duplicate_paid"] == 0 and stats["paid"] == 40
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def _pg_ctl(server: Any, action: str) -> None:
    opts = (f"-p {server.port} -k {server.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    args = [str(server.bindir / "pg_ctl"), "-D", str(server.data), "-l", str(server.root / "log"),
            "-w", "-t", "60"]
    args += ["-o", opts, "start"] if action == "start" else ["-m", "fast", "stop"]
    out = subprocess.run(server._as_server_user(args), capture_output=True, text=True, timeout=90,
                         cwd=server.root)
    assert out.returncode == 0, out.stderr


def test_a_server_restart_mid_job_is_503_then_the_job_finishes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from _loopback import simulator_thread
    from _postgres import PostgresServer, postgres_bin, postgres_server

    postgres_server()  # skips without the binaries
    server = PostgresServer(postgres_bin()).start()  # our own: it is stopped mid-test
    caplog.set_level(logging.INFO)
    try:
        url = server.url()
        with simulator_thread(latency=0.05, api_key=None) as sim, _app(tmp_path, sim, url) as c:
            job = c.post("/v1/judge", json=_pairs(40)).json()["id"]
            _wait(c, job, lambda s: s["progress"]["done"] >= 5)
            _pg_ctl(server, "stop")
            try:
                r = c.post("/v1/judge", json=_pairs(3), headers={"Idempotency-Key": "k"})
                assert r.status_code == 503 and r.headers["retry-after"], r.text
                assert c.get(f"/v1/jobs/{job}").status_code == 503
                assert c.get("/v1/health").json()["status"] == "degraded"
                time.sleep(3.0)
            finally:
                _pg_ctl(server, "start")
            state = _wait(c, job)
            r = c.post("/v1/judge", json=_pairs(3), headers={"Idempotency-Key": "k"})
            assert r.status_code == 202
            stats = sim.stats()
        assert state["status"] == "done", state
        assert state["result"]["summary"]["judged"] == 40
        assert stats["duplicate_paid"] == 0
        notes = [r.getMessage() for r in caplog.records
                 if r.name == "ragjudge.server" and "job store" in r.getMessage()]
        assert len(notes) == 2, notes  # one line as it went, one as it came back
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    finally:
        server.stop()


def test_serve_refuses_a_missing_database(capsys: pytest.CaptureFixture[str]) -> None:
    from _postgres import postgres_server

    from ragjudge.cli import main

    url = postgres_server().url("no_such_database")
    assert main(["serve", "--jobs-db", url, "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot open the job store" in err and "no_such_database" in err
    assert len(err.splitlines()) == 1
