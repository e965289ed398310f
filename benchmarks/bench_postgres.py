"""Two ``ragjudge judge`` processes (the CLI) on one Postgres cache, for the same pairs.

Against the loopback simulator (``benchmarks/simulator.py``, its own process, 0.2 s per reply),
``--pairs`` pairs (default 200: 20 queries x depth 10) are judged by:

* ``1 process, postgres``  -- one ``judge`` on an empty Postgres cache (the baseline);
* ``2 processes, postgres`` -- two ``judge`` processes started together on one empty Postgres
  cache: the in-flight claims make each answer paid once (expected ``paid`` = pairs,
  ``dup_paid`` = 0) and the pair of runs takes about as long as one;
* ``2 processes, sqlite``   -- the same on one local SQLite file, for comparison;
* ``rerun, postgres``       -- one more ``judge`` on the filled Postgres cache (``paid`` = 0).

``paid`` is what the simulator billed (a 200 with usage), ``dup_paid`` the identical requests
it billed more than once; ``wall`` is from starting the first process to the last one exiting.
Both processes must write identical qrels (checked; exit 1 otherwise).

PostgreSQL: ``--url postgresql://...`` (each scenario uses fresh tables in a new database it
creates there: the role needs CREATEDB), else a throwaway server is started from Debian's
``postgresql`` binaries as in the tests (``tests/_postgres.py``).

Usage::

    python benchmarks/bench_postgres.py                  # ~30 s
    python benchmarks/bench_postgres.py --pairs 1000 --latency 0.5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

from bench_judge import SimProcess  # noqa: E402


def write_inputs(folder: Path, pairs: int, depth: int) -> None:
    queries = -(-pairs // depth)
    (folder / "queries.tsv").write_text("".join(f"q{q}\thow does topic {q} work in practice\n"
                                                for q in range(queries)))
    (folder / "corpus.tsv").write_text("".join(
        f"d{d}\tParagraph {d}: notes on topic {d % 37}, covering history, practice and common "
        f"questions people ask about it, with examples and a short summary at the end.\n"
        for d in range(queries * depth)))
    lines = [f"q{q} Q0 d{q * depth + r} {r + 1} {depth - r} bench\n" for q in range(queries) for r in range(depth)]
    (folder / "run.trec").write_text("".join(lines[:pairs]))


def judge_cmd(folder: Path, base_url: str, cache: str, out: Path, depth: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "ragjudge", "judge", "--queries", str(folder / "queries.tsv"),
            "--corpus", str(folder / "corpus.tsv"), "--run", str(folder / "run.trec"),
            "--depth", str(depth), "--model", "sim-model", "--base-url", base_url,
            "--cache", cache, "--concurrency", str(concurrency), "--no-progress", "-o", str(out)]


def reset(sim: SimProcess) -> None:
    root = sim.base_url.rsplit("/v1", 1)[0]
    urllib.request.urlopen(urllib.request.Request(root + "/_sim/reset", method="POST"), timeout=10).read()


def run_processes(cmds: list[list[str]]) -> float:
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench-not-a-key", "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    procs = [subprocess.Popen(c, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode:
            raise SystemExit(f"judge exited with {p.returncode}: {err.strip()}")
    return time.monotonic() - start


def new_database(admin_url: str) -> str:
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    base, _, rest = admin_url.rpartition("/")
    query = ("?" + rest.split("?", 1)[1]) if "?" in rest else ""
    return f"{base}/{name}{query}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--latency", type=float, default=0.2, help="simulator seconds per reply")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight per process")
    ap.add_argument("--url", help="an existing PostgreSQL server (its role needs CREATEDB)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()

    server = None
    admin = args.url
    if admin is None:
        from _postgres import PostgresServer, postgres_bin

        bindir = postgres_bin()
        if bindir is None:
            raise SystemExit("no PostgreSQL binaries (apt-get install postgresql) and no --url")
        server = PostgresServer(bindir).start()
        admin = server.url()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, \
                SimProcess("--latency", str(args.latency), "--jitter", "0") as sim:
            folder = Path(tmp)
            write_inputs(folder, args.pairs, args.depth)

            def scenario(name: str, caches: list[str]) -> None:
                reset(sim)
                outs = [folder / f"{name.replace(' ', '_').replace(',', '')}_{i}.qrels" for i in range(len(caches))]
                wall = run_processes([judge_cmd(folder, sim.base_url, c, o, args.depth, args.concurrency)
                                      for c, o in zip(caches, outs)])
                stats = sim.stats()
                same = len({o.read_text() for o in outs}) == 1
                lines = len(outs[0].read_text().splitlines())
                rows.append({"scenario": name, "processes": len(caches), "pairs": args.pairs,
                             "qrels_lines": lines, "paid": stats["paid"],
                             "dup_paid": stats["duplicate_paid"], "wall_s": round(wall, 2),
                             "identical_outputs": same})
                print(json.dumps(rows[-1]), flush=True)

            one = new_database(admin)
            scenario("1 process, postgres", [one])
            shared = new_database(admin)
            scenario("2 processes, postgres", [shared, shared])
            sqlite = str(folder / "cache.sqlite")
            scenario("2 processes, sqlite", [sqlite, sqlite])
            scenario("rerun, postgres", [shared])
    finally:
        if server is not None:
            server.stop()

    print()
    head = ["scenario", "processes", "pairs", "paid", "dup_paid", "wall_s", "identical_outputs"]
    width = [max(len(h), *(len(str(r[h])) for r in rows)) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, width)))
    for r in rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(head, width)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    ok = all(r["identical_outputs"] and r["dup_paid"] == 0 and r["qrels_lines"] == args.pairs for r in rows)
    ok = ok and rows[1]["paid"] == args.pairs and rows[3]["paid"] == 0
    if not ok:
        print("FAILED: a pair was paid twice, an output differs, or the rerun paid", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
