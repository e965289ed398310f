"""In-flight claims in the SQLite cache: a second process needing the same answer waits for the
first's instead of paying again, and a dead process's claims do not block a resume."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from ragjudge.llm.cache import Cache, NullCache


def test_a_live_claim_excludes_other_owners_until_released(tmp_path: Path) -> None:
    a, b = Cache(tmp_path / "c.sqlite"), Cache(tmp_path / "c.sqlite")
    assert a.claim("k") and a.claim("k")  # re-entrant for its owner
    assert not b.claim("k")
    a.release("k")
    assert b.claim("k")
    a.close()
    b.close()


def test_writing_the_answer_drops_the_claim_and_waiters_get_it(tmp_path: Path) -> None:
    a, b = Cache(tmp_path / "c.sqlite"), Cache(tmp_path / "c.sqlite")

    async def main() -> dict[str, object] | None:
        assert await a.claim_or_wait("k") is None  # a will pay for it
        waiter = asyncio.create_task(b.claim_or_wait("k"))
        await asyncio.sleep(0.2)
        assert not waiter.done()  # b waits instead of paying
        a.put("k", {"obj": {"grade": 2}})
        return await asyncio.wait_for(waiter, 10)

    assert asyncio.run(main()) == {"obj": {"grade": 2}}
    assert b.waited == 1
    assert b.claim("other") and a.claim("k")  # nothing left claimed by a
    a.close()
    b.close()


def test_a_failed_call_passes_the_claim_on(tmp_path: Path) -> None:
    a, b = Cache(tmp_path / "c.sqlite"), Cache(tmp_path / "c.sqlite")

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


@pytest.mark.slow
def test_claims_of_a_killed_process_are_taken_over(tmp_path: Path) -> None:
    # kill -9 leaves claims behind; on this machine a dead pid frees them at once.
    path = tmp_path / "c.sqlite"
    code = (
        "import sys, os, signal; sys.path.insert(0, sys.argv[2]);"
        "from ragjudge.llm.cache import Cache; c = Cache(sys.argv[1]); c.claim('k');"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([sys.executable, "-c", code, str(path), str(Path(__file__).resolve().parents[2])],
                   check=False, timeout=60)
    b = Cache(path)
    assert b._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 1  # left behind
    assert b.claim("k")
    b.close()


def test_an_abandoned_claim_from_another_machine_expires(tmp_path: Path) -> None:
    a = Cache(tmp_path / "c.sqlite", claim_ttl=0.3)
    # A claim from another host: its pid cannot be checked, only its heartbeat.
    a._db.execute("INSERT INTO claims VALUES ('k', 'elsewhere:1:x', 'elsewhere', 1, ?)",
                  (__import__("time").time() + 0.3,))
    assert not a.claim("k")

    async def main() -> None:
        assert await asyncio.wait_for(a.claim_or_wait("k"), 10) is None  # expired: ours now

    asyncio.run(main())
    a.close()


def test_the_heartbeat_keeps_a_long_call_claimed(tmp_path: Path) -> None:
    a = Cache(tmp_path / "c.sqlite", claim_ttl=0.3)
    b = Cache(tmp_path / "c.sqlite")
    assert a.claim("k")
    # Past several TTLs: a's heartbeat renewed it, so b (pretending another host) still waits.
    import time

    time.sleep(1.0)
    row = b._db.execute("SELECT expires FROM claims WHERE key = 'k'").fetchone()
    assert row[0] > time.time()
    a.close()
    b.close()


def test_null_cache_claims_nothing() -> None:
    n = NullCache()
    assert n.claim("k") and n.release("k") is None
    assert asyncio.run(n.claim_or_wait("k")) is None
