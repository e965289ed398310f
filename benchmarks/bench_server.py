"""Load benchmark of the HTTP service: requests/s and latency percentiles of ``POST /v1/evaluate``
on the example data (qrels + one run as TREC text, the default metrics) with 1, 8 and 32
concurrent clients, next to the library called in-process (the floor any service pays).

    python benchmarks/bench_server.py [--requests 200] [--clients 1,8,32] [--workers 1]

Starts ``ragjudge serve`` on a free loopback port (its own temporary state), sends a bounded
number of requests, stops the server. Never run by the test suite.
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


async def _load(url: str, body: bytes, clients: int, total: int) -> tuple[list[float], float, int]:
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
                r = await client.post("/v1/evaluate", content=body,
                                      headers={"content-type": "application/json"})
                latencies.append(time.perf_counter() - t)
                if r.status_code != 200:
                    errors += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - start
    return latencies, wall, errors


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    ap.add_argument("--clients", default="1,8,32", help="concurrency levels (comma-separated)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.clients.split(",") if x.strip()]

    # the in-process floor: parse + evaluate + JSON, as the endpoint does
    sys.path.insert(0, str(ROOT))
    from ragjudge.server.models import EvaluateRequest
    from ragjudge.server.service import evaluate_json

    payload = _body()
    evaluate_json(EvaluateRequest.model_validate(payload), 10**9)
    n_lib = 50
    t = time.perf_counter()
    for _ in range(n_lib):
        evaluate_json(EvaluateRequest.model_validate(payload), 10**9)
    lib_ms = (time.perf_counter() - t) / n_lib * 1000

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
        print(f"POST /v1/evaluate on the example data ({len(body) / 1024:.0f} KiB body: "
              f"710 qrels lines + 5,032 run lines, 5 metrics); {args.workers} worker(s); "
              f"{os.cpu_count()} CPUs (shared machine); Python {platform.python_version()}")
        print(f"library in-process (parse + evaluate + JSON): {lib_ms:.1f} ms/request "
              f"= {1000 / lib_ms:.0f} requests/s on one core")
        print(f"{'clients':>8} {'requests':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
        for c in levels:
            lat, wall, errors = asyncio.run(_load(url, body, c, args.requests))
            print(f"{c:>8} {len(lat):>9} {len(lat) / wall:>8.1f} "
                  f"{statistics.median(lat) * 1000:>8.1f} {_pct(lat, 0.99) * 1000:>8.1f} {errors:>7}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
