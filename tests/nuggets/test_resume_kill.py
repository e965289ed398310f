"""``ragjudge nuggets assign`` killed with SIGKILL mid-run and run again: every call answered
before the kill comes from the cache (none paid twice beyond those in flight at the kill), and
the rerun's assignments are complete (slow: subprocesses and a simulator thread)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _loopback import simulator_thread
from conftest import EX

ROOT = Path(__file__).resolve().parents[2]
RUNS = [str(EX / "runs" / f"run_{x}.jsonl") for x in "abc"]
CONCURRENCY = 2


@pytest.mark.slow
def test_kill_9_mid_assign_then_rerun_pays_nothing_twice(tmp_path: Path) -> None:
    out, cache = tmp_path / "assign.jsonl", tmp_path / "cache.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGJUDGE_")}
    env.update(OPENAI_API_KEY="sim", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    with simulator_thread(latency=0.4) as sim:
        cmd = [sys.executable, "-m", "ragjudge", "nuggets", "assign", str(EX / "nuggets.jsonl"), *RUNS,
               "-o", str(out), "--model", "sim", "--base-url", sim.base_url, "--cache", str(cache),
               "--concurrency", str(CONCURRENCY), "--no-progress"]
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while sim.stats()["paid"] < 4 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.01)
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        paid_at_kill = sim.stats()["paid"]
        assert 4 <= paid_at_kill < 12 and not out.exists()  # killed mid-run: no output yet
        time.sleep(1.0)  # calls in flight at the kill land (paid, never stored)
        in_flight = sim.stats()["paid"] - paid_at_kill
        done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        err = done.stderr.decode()
        s = sim.stats()
    # every answer assigned, every nugget graded
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12 and all(n["assignment"] for r in rows for n in r["nuggets"])
    # the rerun paid only for what the cache lacked: nothing twice beyond the calls in flight
    assert s["duplicate_paid"] <= min(CONCURRENCY, in_flight + CONCURRENCY)
    assert s["distinct_paid_bodies"] == 12 and s["paid"] <= 12 + CONCURRENCY
    cached = int(err.split("assign: ")[1].split(" calls (")[1].split(" cached")[0])
    assert cached >= paid_at_kill - CONCURRENCY, err
