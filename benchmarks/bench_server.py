"""Load benchmark of the HTTP service: requests/s of ``POST /v1/evaluate`` on the example data
(qrels + one run as TREC text, the default metrics) next to the library called in-process.

    python benchmarks/bench_server.py [--clients 8] [--requests 300] [--rounds 5] [--workers 1]

The goal: with 8 concurrent clients, the service (plain FastAPI routes, uvicorn as ``ragjudge
serve`` runs it, access log on) answers at least 0.8 of the library's in-process rate, so a
service adds little to what the evaluation itself costs once several clients keep it busy.

Starts ``ragjudge serve`` on a free loopback port (its own temporary state), drives it with a
stdlib keep-alive HTTP/1.1 client (one raw socket per concurrent client, each in its own
thread, the request bytes built once: as a load generator such as wrk would), stops it. Every
answer must be 200 with the library's own bytes (else it counts as an error). Each level runs
in rounds with library calls timed between them, so its ratio (the median of the rounds'
ratios, each against its own library calls) holds on a shared machine whose speed drifts; the
'rounds' column gives the lowest and highest. Never run by the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
#: The goal: at this many clients, at least this share of the library's rate.
GOAL_CLIENTS, GOAL_RATIO = 8, 0.8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _body() -> dict:
    return {"qrels": (EX / "qrels.txt").read_text(),
            "runs": {"bm25_raw": (EX / "runs/bm25_raw.run").read_text()}}


def _lean_load(url: str, body: bytes, clients: int, total: int, path: str, ok: int,
               expect: bytes | None, between: Callable[[], None] | None = None
               ) -> tuple[list[float], float, int]:
    """The same requests over raw keep-alive sockets, one thread each (the threads wait in
    ``recv``/``sendall`` without the GIL)."""
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    latencies: list[float] = []
    errors = 0
    remaining = total
    lock = threading.Lock()

    def worker(sock: socket.socket) -> None:
        nonlocal remaining, errors
        buf = b""
        while True:
            with lock:
                if remaining <= 0:
                    return
                remaining -= 1
            t = time.perf_counter()
            try:
                sock.sendall(request)
                while (end := buf.find(b"\r\n\r\n")) < 0:
                    buf += _recv(sock)
                head, buf = buf[:end].lower(), buf[end + 4:]
                length = int(head.partition(b"content-length:")[2].split(b"\r\n", 1)[0])
                while len(buf) < length:
                    buf += _recv(sock)
            except (OSError, ValueError):
                with lock:
                    errors += 1
                return
            answer, buf = buf[:length], buf[length:]
            latencies.append(time.perf_counter() - t)
            if int(head[9:12]) != ok or (expect is not None and answer != expect):
                with lock:
                    errors += 1
            if between is not None:
                between()

    socks = [socket.create_connection((host, int(port)), timeout=120) for _ in range(clients)]
    for sock in socks:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threads = [threading.Thread(target=worker, args=(sock,)) for sock in socks]
    start = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - start
    for sock in socks:
        sock.close()
    return latencies, wall, errors


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(1 << 16)
    if not data:
        raise ConnectionError("the server closed the connection")
    return data


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
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default=str(GOAL_CLIENTS), help="concurrency levels (comma-separated)")
    ap.add_argument("--requests", type=int, default=300, help="requests per level and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per level, library calls between")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--cpu-processes", type=int, default=None,
                    help="evaluation processes per worker (default: the server's)")
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.clients.split(",") if x.strip()]

    sys.path.insert(0, str(ROOT))
    import json

    payload = _body()
    body = json.dumps(payload).encode()
    _lib_times(payload, 3)
    port = _free_port()
    state = tempfile.mkdtemp(prefix="ragjudge-bench-server-")
    env = {k: v for k, v in os.environ.items() if k != "RAGJUDGE_TOKEN"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "ragjudge", "serve", "--port", str(port), "--workers",
           str(args.workers), "--client-concurrency", str(max(levels) * 2),
           "--jobs-db", f"{state}/jobs.sqlite", "--cache", f"{state}/cache.sqlite"]
    if args.cpu_processes is not None:
        cmd += ["--cpu-processes", str(args.cpu_processes)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    rows = []
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
        expect = httpx.post(url + "/v1/evaluate", content=body,
                            headers={"content-type": "application/json"}, timeout=60).content
        _lean_load(url, body, 1, 20, "/v1/evaluate", 200, expect)  # warm-up
        for clients in levels:
            ratios, lat, errors, cpu, done = [], [], 0, 0.0, 0
            for _ in range(args.rounds):
                lib = statistics.median(_lib_times(payload, 10))
                before = _cpu_seconds(proc.pid)
                got, wall, err = _lean_load(url, body, clients, args.requests, "/v1/evaluate",
                                            200, expect)
                after = _cpu_seconds(proc.pid)
                if before is not None and after is not None:
                    cpu += after - before
                lat += got
                errors += err
                done += args.requests
                ratios.append((args.requests / wall) * lib)
            rows.append((clients, statistics.median(ratios), min(ratios), max(ratios),
                         _pct(lat, 0.5) * 1000, _pct(lat, 0.99) * 1000, 1000 * cpu / done, errors))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()

    lib_ms = statistics.median(_lib_times(payload, 30)) * 1000
    print(f"POST /v1/evaluate, {len(body) / 1024:.0f} KiB body (qrels + one run, default metrics); "
          f"{args.workers} worker(s), evaluation processes per worker: "
          f"{'the default' if args.cpu_processes is None else args.cpu_processes}; {args.requests} requests x {args.rounds} rounds per level; "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"library in-process: {lib_ms:.2f} ms per call ({1000 / lib_ms:.0f} calls/s)")
    print(f"{'clients':>7} {'x library':>9} {'rounds':>11} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'CPU ms/req':>10} {'errors':>6}")
    for clients, ratio, lo, hi, p50, p99, cpu_ms, errors in rows:
        print(f"{clients:>7} {ratio:>9.2f} {lo:>5.2f}-{hi:<5.2f} {p50:>7.1f} {p99:>7.1f} "
              f"{cpu_ms:>10.2f} {errors:>6}")
    for clients, ratio, *_ in rows:
        if clients == GOAL_CLIENTS:
            verdict = "met" if ratio >= GOAL_RATIO else "NOT met"
            print(f"goal: at {GOAL_CLIENTS} clients at least {GOAL_RATIO} of the library's rate: "
                  f"{ratio:.2f}, {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
