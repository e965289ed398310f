"""Load benchmark of the HTTP service: requests/s and latency percentiles of ``POST /v1/evaluate``
on the example data (qrels + one run as TREC text, the default metrics) with 1, 8 and 32
concurrent clients, next to the library called in-process (the floor any service pays).

    python benchmarks/bench_server.py [--requests 200] [--clients 1,8,32] [--workers 1] [--rounds 5]

Starts ``ragjudge serve`` on a free loopback port (its own temporary state), sends a bounded
number of requests, stops the server. Never run by the test suite.

Besides req/s it prints, per level, the ratio to the library's in-process rate and the server
processes' CPU time per request (Linux), and once the transport alone: the same body POSTed
to ``/v1/health`` (read whole by the server, answered 405 without work). With one client the
client's own time (httpx, ~2 ms for this body) is in every request, so ratio <= library /
(library + transport). Each level runs in rounds with library calls timed between them, so its
ratio holds on a shared machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _body() -> dict:
    return {"qrels": (EX / "qrels.txt").read_text(),
            "runs": {"bm25_raw": (EX / "runs/bm25_raw.run").read_text()}}


async def _load(url: str, body: bytes, clients: int, total: int,
                path: str = "/v1/evaluate", ok: int = 200) -> tuple[list[float], float, int]:
    latencies: list[float] = []
    errors = 0
    remaining = total
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=limits) as client:

        async def worker() -> None:
            nonlocal remaining, errors
            while remaining > 0:
                remaining -= 1
                t = time.perf_counter()
                r = await client.post(path, content=body,
                                      headers={"content-type": "application/json"})
                latencies.append(time.perf_counter() - t)
                if r.status_code != ok:
                    errors += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - start
    return latencies, wall, errors


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) of ``pid`` and its descendants (uvicorn workers); ``None``
    without ``/proc``."""
    try:
        stats = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        fields = f.read().rpartition(")")[2].split()
                except OSError:
                    continue
                stats[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid, ticks
    except OSError:
        return None
    tree, grew = {pid}, True
    while grew:
        more = {p for p, (ppid, _) in stats.items() if ppid in tree} - tree
        grew = bool(more)
        tree |= more
    return sum(stats[p][1] for p in tree if p in stats) / os.sysconf("SC_CLK_TCK")


def _lib_times(payload: dict, n: int) -> list[float]:
    from ragjudge.server.models import EvaluateRequest
    from ragjudge.server.service import evaluate_json

    times = []
    for _ in range(n):
        t = time.perf_counter()
        evaluate_json(EvaluateRequest.model_validate(payload), 10**9)
        times.append(time.perf_counter() - t)
    return times


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    ap.add_argument("--clients", default="1,8,32", help="concurrency levels (comma-separated)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds per level, each after 10 library calls (the ratio's reference)")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.clients.split(",") if x.strip()]

    # the in-process floor: parse + evaluate + JSON, as the endpoint does
    sys.path.insert(0, str(ROOT))
    payload = _body()
    _lib_times(payload, 1)
    lib_before = _lib_times(payload, 50)

    port = _free_port()
    state = tempfile.mkdtemp(prefix="ragjudge-bench-server-")
    env = {k: v for k, v in os.environ.items() if k != "RAGJUDGE_TOKEN"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "ragjudge", "serve", "--port", str(port), "--workers",
           str(args.workers), "--client-concurrency", str(max(levels) * 2),
           "--jobs-db", f"{state}/jobs.sqlite", "--cache", f"{state}/cache.sqlite"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                print("server did not start", file=sys.stderr)
                return 1
            time.sleep(0.1)
        body = json.dumps(_body()).encode()
        asyncio.run(_load(url, body, 1, 10))  # warm-up
        rows = []
        lib_during: list[float] = []
        for c in levels:
            # Rounds of requests between rounds of library calls: on a shared machine whose
            # speed drifts, each ratio compares like with like.
            lat, wall, errors, cpu, lib = [], 0.0, 0, 0.0, []
            for r in range(args.rounds):
                lib += _lib_times(payload, 10)
                n = args.requests // args.rounds + (r < args.requests % args.rounds)
                cpu0 = _cpu_seconds(proc.pid)
                more, w, e = asyncio.run(_load(url, body, c, n))
                cpu1 = _cpu_seconds(proc.pid)
                lat, wall, errors = lat + more, wall + w, errors + e
                cpu = cpu + (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
            lib_during += lib
            rows.append((c, lat, wall, errors, None if cpu is None else cpu / len(lat) * 1000,
                         statistics.median(lib) * 1000))
        lat, wall, errors = asyncio.run(_load(url, body, 1, args.requests, "/v1/health", 405))
        transport_ms = statistics.median(lat) * 1000
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    lib_after = _lib_times(payload, 50)
    lib_ms = statistics.median(lib_before + lib_during + lib_after) * 1000
    print(f"POST /v1/evaluate on the example data ({len(body) / 1024:.0f} KiB body: "
          f"710 qrels lines + 5,032 run lines, 5 metrics); {args.workers} worker(s); "
          f"{os.cpu_count()} CPUs (shared machine); Python {platform.python_version()}")
    print(f"library in-process (parse + evaluate + JSON): {lib_ms:.1f} ms/request "
          f"= {1000 / lib_ms:.0f} requests/s on one core (median; 50 before the load "
          f"{statistics.median(lib_before) * 1000:.1f} ms, 50 after {statistics.median(lib_after) * 1000:.1f} "
          f"ms, 10 before each round of requests: 'lib ms')")
    print(f"transport alone (same body to /v1/health, 405, one client): p50 {transport_ms:.1f} ms; "
          f"one-client ceiling ~{lib_ms / (lib_ms + transport_ms):.2f} of the library's rate")
    print(f"{'clients':>8} {'requests':>9} {'req/s':>8} {'lib ms':>7} {'ratio':>6} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'srv CPU ms':>10} {'errors':>7}")
    for c, lat, wall, errors, cpu, lib_round_ms in rows:
        rate = len(lat) / wall
        cpu_text = f"{cpu:>10.1f}" if cpu is not None else f"{'-':>10}"
        # ratio: this level's req/s over the library's rate timed between its rounds
        print(f"{c:>8} {len(lat):>9} {rate:>8.1f} {lib_round_ms:>7.1f} {rate * lib_round_ms / 1000:>6.2f} "
              f"{statistics.median(lat) * 1000:>8.1f} {_pct(lat, 0.99) * 1000:>8.1f} "
              f"{cpu_text} {errors:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
