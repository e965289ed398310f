"""The PostgreSQL cache across a server restart: it reconnects with backoff for the whole run,
keeps the answers made while the server was away and stores them when it is back, so a restart
of a few seconds costs a rerun nothing (each test has its own server, restarted mid-test)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.slow  # a real PostgreSQL server, restarted

from _postgres import PostgresServer, postgres_bin, wait_until  # noqa: E402

from ragjudge.llm import LLM, Endpoint  # noqa: E402
from ragjudge.llm.cache import open_cache  # noqa: E402


class Restartable:
    """A throwaway server of the test's own that can be stopped and started again."""

    def __init__(self) -> None:
        pytest.importorskip("psycopg", reason="the Postgres tests need psycopg")
        bindir = postgres_bin()
        if bindir is None:
            pytest.skip("PostgreSQL binaries not found")
        try:
            self.server = PostgresServer(bindir).start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"could not start PostgreSQL: {exc}")
        self.url = self.server.create_database("t_restart")

    def _ctl(self, *args: str) -> None:
        s = self.server
        out = subprocess.run(s._as_server_user([str(s.bindir / "pg_ctl"), "-D", str(s.data), *args]),
                             capture_output=True, text=True, timeout=60, cwd=s.root)
        assert out.returncode == 0, out.stderr

    def stop(self) -> None:
        self._ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        s = self.server
        opts = (f"-p {s.port} -k {s.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._ctl("-l", str(s.root / "log"), "-o", opts, "-w", "-t", "60", "start")


@pytest.fixture()
def pg() -> Iterator[Restartable]:
    r = Restartable()
    try:
        yield r
    finally:
        r.server.stop()


def _count(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM ragjudge_cache").fetchone()[0])


def test_answers_made_while_the_server_is_away_are_stored_when_it_is_back(pg: Restartable) -> None:
    c = open_cache(pg.url)
    c.put("before", {"obj": 1})
    pg.stop()
    assert c.get("before") is None  # a miss, not a crash
    assert c.claim("during")  # granted: paying beats waiting
    c.put("during", {"obj": 2})
    assert c.get("during") == {"obj": 2}  # kept, and served to this process meanwhile
    assert c.writable and c.outages == 1 and len(c.faults) == 1 and "\n" not in c.faults[0]
    pg.start()
    # Within the backoff, the next use of the cache reaches the server again and stores it.
    assert wait_until(lambda: c.get("before") == {"obj": 1}, timeout=15)
    assert _count(pg.url) == 2 and open_cache(pg.url).get("during") == {"obj": 2}
    assert c.outages == 1
    c.close()


def test_a_restart_mid_run_costs_the_rerun_nothing(pg: Restartable) -> None:
    from _loopback import simulator_thread

    items = [{"query": f"query {i}", "passage": f"passage {i} about topic {i % 7}"} for i in range(80)]

    def run(sim_url: str) -> LLM:
        llm = LLM(Endpoint("sim-model", base_url=sim_url, api_key="sk-sim", concurrency=4, backoff_base=0.001),
                  cache=pg.url)

        async def go() -> None:
            try:
                outs = await llm.structured_many("relevance.v1", items, progress=False)
                assert all(o.ok for o in outs)
            finally:
                await llm.aclose()

        asyncio.run(go())
        return llm

    with simulator_thread(latency=0.2, api_key=None) as sim:
        seen: list[object] = []

        def restart() -> None:
            # Once the run is under way: stop the server for ~3 s.
            wait_until(lambda: sim.stats()["paid"] >= 8, timeout=60)
            try:
                pg.stop()
                seen.append(sim.stats()["paid"])
                time.sleep(3.0)
                pg.start()
                seen.append(sim.stats()["paid"])
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                seen.append(exc)

        t = threading.Thread(target=restart)
        t.start()
        first = run(sim.base_url)
        t.join()
        print(f"restart mid-run: server down from call {seen[0]} to call {seen[-1]} of {len(items)}")
        assert all(isinstance(n, int) for n in seen) and seen[-1] < len(items), seen
        # The run may end before its cache reached the server again: its close stores the rest.
        first.cache.close()
        second = run(sim.base_url)
    print(f"restart mid-run: the rerun paid {second.usage.calls} of {len(items)} calls again")
    assert first.usage.calls == len(items)
    assert second.usage.calls == 0 and second.stats.cache_hits == len(items)
    assert _count(pg.url) == len(items)
    assert first.cache.outages == 1


def test_answers_kept_at_close_wait_for_the_server(pg: Restartable) -> None:
    c = open_cache(pg.url)
    pg.stop()
    c.put("during", {"obj": 2})
    threading.Timer(1.0, pg.start).start()  # back while close waits for it
    c.close()
    assert _count(pg.url) == 1 and open_cache(pg.url).get("during") == {"obj": 2}


def test_answers_kept_when_the_server_stays_away_are_stored_by_the_next_open(
        pg: Restartable, tmp_path, monkeypatch, caplog) -> None:
    from ragjudge.llm.postgres import spill_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    c = open_cache(pg.url)
    pg.stop()
    c.put("a", {"obj": 1})
    c.put("b", {"obj": 2})
    c.close(wait=0.5)
    spill = spill_path(pg.url)
    assert spill.exists() and str(spill).startswith(str(tmp_path))
    said = [r.getMessage() for r in caplog.records if "still unreachable" in r.getMessage()]
    assert len(said) == 1 and str(spill) in said[0] and "nothing is paid again" in said[0]
    pg.start()
    d = open_cache(pg.url)  # the next run: stores them before anything else
    assert d.get("a") == {"obj": 1} and d.get("b") == {"obj": 2} and _count(pg.url) == 2
    assert not spill.exists()
    d.close()
