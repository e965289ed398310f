"""Judging on a local Ray cluster (ragjudge.ray) against three loopback simulators, beside the
same job in one process.

Three simulators (``benchmarks/simulator.py`` in this process's threads) allow ``--rpm``
requests per minute each; ``--pairs`` pairs are judged three ways, each with a fresh cache:

* ``one process``: ``LLMRelevanceJudge.judge_many`` over the three endpoints (what ``ragjudge
  judge`` does);
* ``ray``: :func:`ragjudge.ray.judge_ray` with ``--workers`` workers, each running the session
  over the three endpoints;
* ``ray, a worker killed``: the same, with one worker process killed (SIGKILL) once 40% of the
  pairs were answered; Ray restarts it and retries its batch.

Printed per row: the rate while requesting (answered requests between the first and the last
one) against the combined ceiling, pairs lost (no judgment or a failed one), and paid calls
beyond the pairs (answers the simulators billed that no judgment uses: the calls in flight at a
kill). Figures from the simulator check plumbing, not quality; a local cluster on this 2-core
machine also pays Ray's start-up, which is left out of the rate (the requests' own span).

Usage::

    python benchmarks/bench_ray.py                     # 2,000 pairs, three rows, a few minutes
    python benchmarks/bench_ray.py --pairs 600 --rpm 400

Target: ray >= 0.9 of the combined rate; a killed worker: 0 lost, paid calls at most the pairs
plus those in flight (<= workers x 2 batches: a worker works on two at once).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import ragjudge  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))

from ragjudge.judges import LLMRelevanceJudge  # noqa: E402
from ragjudge.llm import LLM, Endpoint  # noqa: E402
from ragjudge.ray.cluster import BATCHES_IN_FLIGHT  # noqa: E402
from ragjudge.testing.simulator import SimConfig, SimulatorThread  # noqa: E402


def _answered(sims: list[SimulatorThread]) -> int:
    """Replies the simulators billed (200s with usage)."""
    return sum(s.sim.stats()["paid"] for s in sims)


def _span(sims: list[SimulatorThread], stop: threading.Event, out: dict[str, float]) -> None:
    """First and last moment the simulators' answered count moved (the requesting span)."""
    last = _answered(sims)
    while not stop.is_set():
        now = _answered(sims)
        if now != last:
            out.setdefault("first", time.monotonic())
            out["last"] = time.monotonic()
            last = now
        time.sleep(0.05)


def _own_processes(name: str) -> list[int]:
    """Pids of this process's descendants whose command line holds ``name``: the workers of the
    local cluster this script started (never another program's processes)."""
    parents: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
            parents[int(d)] = (ppid, cmd)

    def mine(pid: int) -> bool:
        seen: set[int] = set()
        while pid in parents and pid not in seen:
            seen.add(pid)
            pid = parents[pid][0]
            if pid == os.getpid():
                return True
        return False

    return [p for p, (_, cmd) in parents.items() if name in cmd and mine(p)]


def _kill_a_worker(sims: list[SimulatorThread], at: int, stop: threading.Event, killed: list[int]) -> None:
    while not stop.is_set():
        if _answered(sims) >= at:
            ps = _own_processes("_SessionWorker")
            if ps:
                os.kill(ps[0], signal.SIGKILL)
                killed.append(ps[0])
                return
        time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--rpm", type=int, default=600, help="each simulator's requests per minute")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    # The table alone on stdout (what benchmarks/record.py keeps): Ray's own notices about the
    # killed worker are printed by the driver to sys.stdout, so they go to stderr here.
    table, sys.stdout = sys.stdout, sys.stderr
    import ray

    from ragjudge.ray import judge_ray_sync

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    sims = [SimulatorThread(SimConfig(rpm=args.rpm, latency=args.latency, max_lifetime=3600)).start()
            for _ in range(3)]
    os.environ["SIM_KEY"] = "sim"
    endpoints = [Endpoint("sim-model", base_url=s.base_url, api_key_env="SIM_KEY") for s in sims]
    pairs = [(f"query {i // 4} about topic {i // 4}", f"passage {i} text") for i in range(args.pairs)]
    ceiling = 3 * args.rpm / 60.0
    print(f"{args.pairs} pairs, 3 simulators at {args.rpm} rpm each (ceiling {ceiling:.1f} req/s), "
          f"latency {args.latency} s, {args.workers} Ray workers, batches of {args.batch_size} "
          f"(a kill may repay at most {args.workers * BATCHES_IN_FLIGHT * args.batch_size} calls in flight: "
          f"{BATCHES_IN_FLIGHT} batches per worker)", file=table)
    print(f"{'row':24} {'req/s':>7} {'of ceiling':>10} {'lost':>5} {'paid beyond pairs':>18} {'wall s':>7}",
          file=table)
    for row in ("one process", "ray", "ray, a worker killed"):
        for s in sims:
            s.sim.reset_stats()
        with tempfile.TemporaryDirectory() as tmp:
            llm = LLM(endpoints, cache=str(Path(tmp) / "c.sqlite"))
            stop, span, killed = threading.Event(), {}, []
            threads = [threading.Thread(target=_span, args=(sims, stop, span), daemon=True)]
            if row.endswith("killed"):
                threads.append(threading.Thread(target=_kill_a_worker, args=(
                    sims, int(0.4 * args.pairs), stop, killed), daemon=True))
            for t in threads:
                t.start()
            t0 = time.monotonic()
            if row == "one process":
                judgments = LLMRelevanceJudge(llm=llm, progress=False).judge_many_sync(pairs)
            else:
                judgments = judge_ray_sync(pairs, llm=llm, workers=args.workers,
                                           batch_size=args.batch_size).judgments
            wall = time.monotonic() - t0
            stop.set()
            for t in threads:
                t.join()
            answered = _answered(sims)
            lost = sum(1 for j in judgments if j.grade is None)
            rate = (answered - 1) / max(1e-9, span.get("last", 0) - span.get("first", 0))
            note = f" (killed pid {killed[0]})" if killed else ""
            print(f"{row:24} {rate:7.1f} {rate / ceiling:10.2f} {lost:5d} {answered - args.pairs:18d} "
                  f"{wall:7.1f}{note}", file=table, flush=True)
    for s in sims:
        s.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
