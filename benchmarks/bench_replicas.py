"""Service replicas on one PostgreSQL store, killed at random while they judge.

Three ``ragjudge serve`` processes share one PostgreSQL database (``--jobs-db`` and ``--cache``)
and the loopback simulator (its own process) as the model. One judging job of ``--pairs`` pairs
is submitted (with an ``Idempotency-Key``); while it runs, a random replica is killed with
SIGKILL and started again, ``--kills`` times. Printed: whether the job finished and judged every
pair, the calls the simulator was paid for against the pairs (the excess can only be calls in
flight at a kill: at most kills x concurrency), the job's budget against the true spend (the
simulator's billed tokens) and the reported cost (which counts every run's account, calls cut
off by a kill at their worst case, so it is at least the true spend), and the wall time.

Figures from the simulator check plumbing, not quality.

Usage::

    python benchmarks/bench_replicas.py                     # 10,000 pairs, 20 kills
    python benchmarks/bench_replicas.py --pairs 2000 --kills 5
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from _postgres import PostgresServer, postgres_bin  # noqa: E402
from _server import ServerProcess  # noqa: E402
from bench_judge import SimProcess  # noqa: E402
from bench_postgres import new_database  # noqa: E402


PRICE = 1.0  # USD per 1M tokens, input and output


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight per replica")
    ap.add_argument("--latency", type=float, default=0.05, help="simulator seconds per reply")
    ap.add_argument("--budget", type=float, default=5.0, help="the job's max_cost in USD")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bindir = postgres_bin()
    if bindir is None:
        raise SystemExit("PostgreSQL binaries not found (apt-get install postgresql)")
    pg = PostgresServer(bindir).start()
    sim = SimProcess("--latency", str(args.latency))
    tmp = Path(tempfile.mkdtemp(prefix="ragjudge-replicas-"))
    url = new_database(pg.url())
    prices = tmp / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": PRICE, "output": PRICE}}))

    def replica(i: int) -> ServerProcess:
        folder = tmp / f"r{i}"
        folder.mkdir(exist_ok=True)
        return ServerProcess(folder, "--base-url", sim.base_url, "--model", "sim-model",
                             "--concurrency", str(args.concurrency), "--jobs-db", url, "--cache", url,
                             "--prices", str(prices), env={"OPENAI_API_KEY": "sk-sim"})

    replicas = [replica(i).start() for i in range(args.replicas)]
    pairs = [{"qid": f"q{i // 10}", "docid": f"d{i}", "query": f"query {i // 10} about topic {i // 10}",
              "passage": f"passage {i} with a few words"} for i in range(args.pairs)]
    start = time.monotonic()
    kills = 0
    try:
        with replicas[0].client(timeout=120.0) as c:
            r = c.post("/v1/judge", json={"pairs": pairs, "settings": {"max_cost": args.budget}},
                       headers={"Idempotency-Key": "bench-job"})
            assert r.status_code == 202, r.text
            job = r.json()["id"]
        state: dict = {}
        next_kill = time.monotonic() + rng.uniform(2, 6)
        while True:
            live = [s for s in replicas if s.proc is not None and s.proc.poll() is None]
            try:
                with live[0].client(timeout=30.0) as c:
                    state = c.get(f"/v1/jobs/{job}").json()
            except Exception:  # noqa: BLE001 - the replica asked may just have been killed
                time.sleep(0.2)
                continue
            if state["status"] in ("done", "failed", "cancelled"):
                break
            if kills < args.kills and time.monotonic() >= next_kill:
                victim = rng.randrange(len(replicas))
                replicas[victim].stop(signal.SIGKILL)
                replicas[victim] = replica(victim).start()
                kills += 1
                next_kill = time.monotonic() + rng.uniform(2, 6)
            time.sleep(0.3)
        wall = time.monotonic() - start
        stats = sim.stats()
    finally:
        for s in replicas:
            s.stop(signal.SIGKILL)
        sim.close()
        pg.stop()
    summary = (state.get("result") or {}).get("summary") or {}
    excess = stats["paid"] - args.pairs
    print(f"{args.replicas} replicas on one PostgreSQL, {args.pairs} pairs, {kills} kill -9s, "
          f"concurrency {args.concurrency} per replica, simulator latency {args.latency} s")
    print(f"job {state['status']}: judged {summary.get('judged')} of {args.pairs}; wall {wall:.0f} s")
    print(f"paid {stats['paid']} calls for {args.pairs} pairs: {excess} beyond one per pair "
          f"(bound: calls in flight at the kills, at most {kills * args.concurrency}); "
          f"duplicate bodies paid {stats['duplicate_paid']}")
    true = (stats["prompt_tokens"] + stats["completion_tokens"]) * PRICE / 1e6
    reported = state.get("cost_usd") or 0.0
    print(f"budget {args.budget:.4f} USD; true spend (the simulator's billed tokens) {true:.6f} USD, "
          f"within budget: {true <= args.budget}; reported {reported:.6f} USD (every run's account, "
          f"calls cut off by a kill at their worst case), at least the true spend: {reported >= true}")
    return 0 if state["status"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
