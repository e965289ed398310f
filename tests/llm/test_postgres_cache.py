"""The LLM cache on a real PostgreSQL server: the SQLite cache's semantics (answers, in-flight
claims, takeover of a dead owner's claim, read-only degradation) across two cache objects and
two processes, and one payment per answer for two sessions on the same pairs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real PostgreSQL server

from _postgres import fresh_database, wait_until  # noqa: E402

from ragjudge.errors import InputError  # noqa: E402
from ragjudge.llm.cache import Cache, CacheStore, open_cache  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def url() -> str:
    return fresh_database()


def _sql(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        cur = db.execute(sql, args)
        return cur.fetchall() if cur.description else []


def test_a_url_opens_the_postgres_backend_behind_the_one_interface(url: str) -> None:
    c = open_cache(url)
    assert isinstance(c, CacheStore) and not isinstance(c, Cache) and type(c).__name__ == "PostgresCache"
    assert open_cache(c) is c  # an open store is passed through
    assert c.get("k") is None and "k" not in c and len(c) == 0
    c.put("k", {"obj": {"grade": 2}, "model": "m", "prompt_id": "p"})
    assert c.get("k") == {"obj": {"grade": 2}, "model": "m", "prompt_id": "p"}
    assert c.hits == 1 and c.writes == 1 and "k" in c and len(c) == 1
    c.put("k", {"obj": {"grade": 3}})  # a later answer replaces it
    assert open_cache(url).get("k") == {"obj": {"grade": 3}}
    c.close()


def test_the_password_never_shows(url: str) -> None:
    secret = url.replace("postgres@", "postgres:hunter2@")
    c = open_cache(secret)  # trust auth ignores the password
    assert "hunter2" not in repr(c) and "hunter2" not in str(c.path)
    c.close()
    with pytest.raises(InputError) as err:
        open_cache(secret.rsplit(":", 1)[0] + ":1/db")  # nothing listens on port 1
    assert "hunter2" not in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("postgresql://postgres:***@")


def test_a_live_claim_excludes_other_owners_until_released(url: str) -> None:
    a, b = open_cache(url), open_cache(url)
    assert a.claim("k") and a.claim("k")  # re-entrant for its owner
    assert not b.claim("k")
    a.release("k")
    assert b.claim("k")
    a.close()
    b.close()


def test_writing_the_answer_drops_the_claim_and_waiters_get_it(url: str) -> None:
    a, b = open_cache(url), open_cache(url)

    async def main() -> dict[str, object] | None:
        assert await a.claim_or_wait("k") is None  # a will pay for it
        waiter = asyncio.create_task(b.claim_or_wait("k"))
        await asyncio.sleep(0.2)
        assert not waiter.done()  # b waits instead of paying
        a.put("k", {"obj": {"grade": 2}})
        return await asyncio.wait_for(waiter, 10)

    assert asyncio.run(main()) == {"obj": {"grade": 2}}
    assert b.waited == 1
    assert _sql(url, "SELECT COUNT(*) FROM ragjudge_claims") == [(0,)]
    assert b.claim("other") and a.claim("k")
    a.close()
    b.close()


def test_a_failed_call_passes_the_claim_on(url: str) -> None:
    a, b = open_cache(url), open_cache(url)

    async def main() -> dict[str, object] | None:
        assert await a.claim_or_wait("k") is None
        waiter = asyncio.create_task(b.claim_or_wait("k"))
        await asyncio.sleep(0.1)
        a.release("k")  # a's call failed: nothing cached, b must make the call itself
        return await asyncio.wait_for(waiter, 10)

    assert asyncio.run(main()) is None
    assert not a.claim("k")  # b holds it now
    a.close()
    b.close()


def test_an_abandoned_claim_from_another_machine_expires(url: str) -> None:
    a = open_cache(url, claim_ttl=0.3)
    # A claim from another host: its pid cannot be checked, only its expiry (on the DB clock).
    _sql(url, "INSERT INTO ragjudge_claims VALUES ('k', 'elsewhere:1:x', 'elsewhere', 1, "
              "EXTRACT(EPOCH FROM clock_timestamp()) + 0.3)")
    assert not a.claim("k")

    async def main() -> None:
        assert await asyncio.wait_for(a.claim_or_wait("k"), 10) is None  # expired: ours now

    asyncio.run(main())
    assert _sql(url, "SELECT owner FROM ragjudge_claims") == [(a.owner,)]
    a.close()


def test_the_heartbeat_keeps_a_long_call_claimed(url: str) -> None:
    a = open_cache(url, claim_ttl=0.3)
    assert a.claim("k")
    time.sleep(1.0)  # several TTLs: the heartbeat pushed the expiry back
    (left,), = _sql(url, "SELECT expires - EXTRACT(EPOCH FROM clock_timestamp()) FROM ragjudge_claims")
    assert left > 0
    b = open_cache(url)
    assert not b.claim("k")
    a.close()
    assert b.claim("k")  # closing drops a's claims
    b.close()


def test_claims_of_a_killed_process_are_taken_over(url: str) -> None:
    # kill -9 leaves the claim behind; on this machine the dead pid frees it at once (the TTL
    # is an hour: no waiting for the expiry).
    code = ("import sys, os, signal; sys.path.insert(0, sys.argv[2]);"
            "from ragjudge.llm.cache import open_cache; c = open_cache(sys.argv[1], claim_ttl=3600); "
            "c.claim('k'); os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", code, url, str(ROOT)], check=False, timeout=60)
    assert _sql(url, "SELECT COUNT(*) FROM ragjudge_claims") == [(1,)]  # left behind
    b = open_cache(url)
    assert b.claim("k")
    b.close()


def test_two_processes_wait_for_each_other_instead_of_paying_twice(url: str, tmp_path: Path) -> None:
    # Process A claims every key and answers them slowly; process B, started meanwhile, needs
    # the same keys: it gets every answer by waiting, and pays (claims) none itself.
    keys = [f"k{i}" for i in range(20)]
    a_code = ("import sys, time; sys.path.insert(0, sys.argv[2]);"
              "from ragjudge.llm.cache import open_cache; c = open_cache(sys.argv[1]);"
              f"keys = {keys!r}; assert all(c.claim(k) for k in keys);"
              "open(sys.argv[3], 'w').write('claimed');"
              "[(time.sleep(0.05), c.put(k, {'obj': {'by': 'a', 'k': k}})) for k in keys]; c.close()")
    b_code = ("import sys, json, asyncio\nsys.path.insert(0, sys.argv[2])\n"
              "from ragjudge.llm.cache import open_cache\nc = open_cache(sys.argv[1])\n"
              f"keys = {keys!r}\n"
              "async def main():\n    return await asyncio.gather(*(c.claim_or_wait(k) for k in keys))\n"
              "out = asyncio.run(main())\n"
              "print(json.dumps({'records': out, 'waited': c.waited}))\n")
    flag = tmp_path / "claimed"
    a = subprocess.Popen([sys.executable, "-c", a_code, url, str(ROOT), str(flag)])
    assert wait_until(flag.exists, 30)
    b = subprocess.run([sys.executable, "-c", b_code, url, str(ROOT)], capture_output=True, text=True,
                       timeout=120)
    assert a.wait(60) == 0 and b.returncode == 0, b.stderr
    import json

    got = json.loads(b.stdout)
    assert got["waited"] >= 1  # the rest were answered by the time B claimed them
    assert [r["obj"] for r in got["records"]] == [{"by": "a", "k": k} for k in keys]


def test_a_failing_write_turns_the_cache_read_only(url: str) -> None:
    a = open_cache(url)
    a.put("old", {"obj": 1})
    _sql(url, "REVOKE ALL ON ragjudge_cache, ragjudge_claims FROM PUBLIC")
    _sql(url, "CREATE ROLE reader LOGIN")
    _sql(url, "GRANT SELECT ON ragjudge_cache, ragjudge_claims TO reader")
    r = open_cache(url.replace("postgres@", "reader@"))  # may not create tables: uses the existing ones
    assert r.get("old") == {"obj": 1}
    assert r.claim("k")  # cannot record claims: granted (pay rather than wait forever)
    r.put("k", {"obj": 2})  # not stored, no exception
    assert not r.writable and r.writes == 0 and len(r.faults) == 1
    assert "cannot write" in r.faults[0] and "\n" not in r.faults[0]
    assert a.get("k") is None and r.get("old") == {"obj": 1}  # reads still served
    r.close()
    a.close()


def test_a_lost_connection_is_reopened(url: str) -> None:
    c = open_cache(url)
    c.put("k", {"obj": 1})
    pid = c._db.info.backend_pid
    _sql(url, "SELECT pg_terminate_backend(%s)", (pid,))
    assert wait_until(lambda: not _sql(url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)))
    assert c.get("k") == {"obj": 1}  # reconnected once, transparently
    assert c.writable and c.faults == []
    c.close()


def test_an_unreachable_database_at_open_is_one_line() -> None:
    with pytest.raises(InputError) as err:
        open_cache("postgresql://nobody@127.0.0.1:1/nothing")
    assert "cannot open the cache" in str(err.value) and "\n" not in str(err.value)


def test_the_judge_cli_on_a_postgres_cache_pays_once_across_two_processes(url: str, tmp_path: Path) -> None:
    from _loopback import simulator_thread

    # 8 queries x depth 5 = 40 pairs
    (tmp_path / "queries.tsv").write_text("".join(f"q{q}\tquery number {q}\n" for q in range(8)))
    (tmp_path / "corpus.tsv").write_text("".join(f"d{d}\tpassage {d} about topic {d % 7}\n" for d in range(40)))
    (tmp_path / "run.trec").write_text("".join(f"q{q} Q0 d{q * 5 + r} {r + 1} {10 - r} sys\n"
                                               for q in range(8) for r in range(5)))
    with simulator_thread(latency=0.1, api_key=None) as sim:
        env = {**os.environ, "OPENAI_API_KEY": "sk-sim", "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "ragjudge", "judge", "--queries", str(tmp_path / "queries.tsv"),
               "--corpus", str(tmp_path / "corpus.tsv"), "--run", str(tmp_path / "run.trec"),
               "--depth", "5", "--model", "sim-model", "--base-url", sim.base_url, "--cache", url,
               "--no-progress"]
        procs = [subprocess.Popen([*cmd, "-o", str(tmp_path / f"out{n}.qrels")], env=env, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
        stats = sim.stats()
    assert stats["paid"] == 40 and stats["duplicate_paid"] == 0
    assert (tmp_path / "out0.qrels").read_text() == (tmp_path / "out1.qrels").read_text()
    assert _sql(url, "SELECT COUNT(*) FROM ragjudge_cache") == [(40,)]
    assert _sql(url, "SELECT COUNT(*) FROM ragjudge_claims") == [(0,)]


def test_a_killed_judge_leaves_nothing_that_blocks_the_rerun(url: str, tmp_path: Path) -> None:
    _ = signal  # the kill is a SIGKILL through the subprocess API
    from ragjudge.llm import LLM

    code = ("import sys, os, signal; sys.path.insert(0, sys.argv[2]);"
            "from ragjudge.llm.cache import open_cache; c = open_cache(sys.argv[1], claim_ttl=3600);"
            "[c.claim(f'k{i}') for i in range(5)]; os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", code, url, str(ROOT)], check=False, timeout=60)
    llm = LLM("m", base_url="http://127.0.0.1:1/v1", api_key="x", cache=url)
    assert type(llm.cache).__name__ == "PostgresCache"
    assert all(llm.cache.claim(f"k{i}") for i in range(5))
    llm.cache.close()
