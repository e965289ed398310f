"""Load benchmark of the HTTP service: requests/s and latency percentiles of ``POST /v1/evaluate``
on the example data (qrels + one run as TREC text, the default metrics) with 1, 8 and 32
concurrent clients, next to the library called in-process (the floor any service pays).

    python benchmarks/bench_server.py [--requests 200] [--clients 1,8,32] [--workers 1] [--rounds 5]

Starts ``ragjudge serve`` on a free loopback port (its own temporary state), sends a bounded
number of requests, stops the server. Never run by the test suite.

Each level is driven by two clients in turn, so the table shows what the service costs apart
from the client library: ``httpx`` (``httpx.AsyncClient``, one keep-alive connection per
concurrent client; ~1.5 ms of its own per request for this body) and ``lean`` (a stdlib
keep-alive HTTP/1.1 client on a raw socket, one per concurrent client in its own thread: the
request bytes built once, the answer read by its Content-Length), as a load generator such as
wrk would. Every answer must be 200 with the library's own bytes (else it counts as an error).

With one client a third row sends the lean client's requests to a minimal ASGI service on the
same uvicorn (``minimal_asgi.py``: body, pydantic-core decode, ``evaluate_json``, answer; no
framework, guards or log): the ceiling of a Python service doing this work, so the gap between
the rows is what ragjudge's service adds.

Besides req/s it prints, per row, the ratio to the library's in-process rate and the server
processes' CPU time per request (Linux), and per client the transport alone: the same body
POSTed to ``/v1/health`` (read whole by the server, answered 405 without work). With one client
the client's and the transport's time is in every request, so ratio <= library / (library +
transport). A line gives the floor of any Python service on the same uvicorn: the lean client's
same body to a route of ``minimal_asgi.py`` that reads it and answers without work, plus the
body's decode timed in-process, and the one-client ceiling they leave to any service on this
stack, library / (library + floor + decode) (a row's own reading, against its own library
calls, can land either side of it on a machine that drifts), given for the floor timed back
to back and for the floor timed as the one-client rows are (a library call after each
request, so the server sits idle and wakes for each). Another line calls both services' ASGI apps in-process with the
library call replaced by its answer: what their own layers cost, apart from any socket. Each
level runs in rounds with library calls timed between them (with one client, one after each
request), so its ratio holds on a shared machine whose speed drifts; the 'rounds' column gives
the lowest and highest ratio of a row's rounds, each against its own library calls, to show
how far a single reading moves.
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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


async def _httpx_load(url: str, body: bytes, clients: int, total: int, path: str, ok: int,
                      expect: bytes | None, between: Callable[[], None] | None = None
                      ) -> tuple[list[float], float, int]:
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
                if r.status_code != ok or (expect is not None and r.content != expect):
                    errors += 1
                if between is not None:
                    between()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - start
    return latencies, wall, errors


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


CLIENTS = {"httpx": lambda *a: asyncio.run(_httpx_load(*a)), "lean": _lean_load}


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


def _decode_ms(body: bytes) -> float:
    """Median time to decode the request body with the service's parser (pydantic-core)."""
    from pydantic_core import from_json

    times = []
    for _ in range(200):
        t = time.perf_counter()
        from_json(body, allow_inf_nan=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times[20:]) * 1000


def _layers_ms(body: bytes, answer: str, state: str, rounds: int = 100) -> dict[str, float]:
    """Median time of one request through ``ragjudge``'s ASGI app and through
    ``minimal_asgi``'s, called in-process (no socket, no wake-up) with the library call
    replaced by ``answer`` (its JSON): what each service's own layers cost, the decode
    included."""
    import minimal_asgi

    import ragjudge.server.app as service_app
    from ragjudge.server.settings import ServerSettings

    saved = service_app.evaluate_json
    service_app.evaluate_json = lambda req, limit: answer  # the app binds it when created
    try:
        app = service_app.create_app(ServerSettings(jobs_db=f"{state}/layers.sqlite",
                                                    cache=f"{state}/layers-cache.sqlite"))
    finally:
        service_app.evaluate_json = saved
    apps = {"ragjudge": app, "minimal": minimal_asgi.app}
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]

    async def one(asgi: Any) -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/evaluate",
                 "raw_path": b"/v1/evaluate", "query_string": b"", "root_path": "",
                 "headers": headers, "client": ("127.0.0.1", 50000),
                 "server": ("127.0.0.1", 8000), "state": {}}
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        status = []

        async def receive() -> Any:
            return messages.pop() if messages else {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await asgi(scope, receive, send)
        if status != [200]:
            raise RuntimeError(f"in-process request answered {status}")

    async def run() -> dict[str, float]:
        times: dict[str, list[float]] = {name: [] for name in apps}
        async with app.router.lifespan_context(app):
            for asgi in apps.values():
                for _ in range(20):
                    await one(asgi)
            for r in range(rounds):  # alternating blocks: the machine's drift hits both
                for name in (list(apps) if r % 2 == 0 else list(apps)[::-1]):
                    t = time.perf_counter()
                    for _ in range(10):
                        await one(apps[name])
                    times[name].append((time.perf_counter() - t) / 10)
        return {name: statistics.median(v) * 1000 for name, v in times.items()}

    saved = minimal_asgi.evaluate_json
    minimal_asgi.evaluate_json = lambda req, limit: answer  # looked up on each request
    try:
        return asyncio.run(run())
    finally:
        minimal_asgi.evaluate_json = saved


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    ap.add_argument("--clients", default="1,8,32", help="concurrency levels (comma-separated)")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds per level; the clients take turns in each, with 10 library "
                         "calls between turns (the ratio's reference)")
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
    minimal_port = _free_port()
    minimal = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "benchmarks"), "--port",
         str(minimal_port), "--no-access-log", "minimal_asgi:app"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    minimal_url = f"http://127.0.0.1:{minimal_port}"
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
        # every answer must be these bytes: the library's own JSON for the same request
        from ragjudge.server.models import EvaluateRequest
        from ragjudge.server.service import evaluate_json

        expect = evaluate_json(EvaluateRequest.model_validate(payload), 10**9).encode()
        while True:  # the minimal service has no health route: wait for its port
            try:
                socket.create_connection(("127.0.0.1", minimal_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or minimal.poll() is not None:
                    print("minimal service did not start", file=sys.stderr)
                    return 1
                time.sleep(0.1)
        # (client, server) -> load, url; the minimal service only with one client
        targets = {("httpx", "ragjudge"): (CLIENTS["httpx"], url),
                   ("lean", "ragjudge"): (CLIENTS["lean"], url),
                   ("lean", "minimal"): (CLIENTS["lean"], minimal_url)}
        for load, target in targets.values():  # warm-up
            load(target, body, 1, 10, "/v1/evaluate", 200, expect)
        rows = []
        lib_during: list[float] = []
        for c in levels:
            # Rounds of requests between library calls: on a shared machine whose speed
            # drifts (by a third within seconds on this one), each ratio compares like with
            # like. The clients take turns in each round (first one, then the other); 10
            # library calls are timed between turns, and a row's reference is the calls just
            # before and just after its turns. One client gets a closer reference: a library
            # call after each of its requests, outside the requests' time.
            names = [t for t in targets if c == 1 or t[1] == "ragjudge"]
            got = {name: ([], 0.0, 0, 0.0, [], []) for name in names}
            turns = [(r, name) for r in range(args.rounds)
                     for name in (names if r % 2 == 0 else names[::-1])]
            before = _lib_times(payload, 10)
            for r, name in turns:
                n = args.requests // args.rounds + (r < args.requests % args.rounds)
                lat, wall, errors, cpu, lib, spread = got[name]
                server = proc if name[1] == "ragjudge" else minimal
                cpu0 = _cpu_seconds(server.pid)
                paired: list[float] = []

                def between(paired: list[float] = paired) -> None:
                    paired.extend(_lib_times(payload, 1))

                load, target = targets[name]
                more, w, e = load(target, body, c, n, "/v1/evaluate", 200, expect,
                                  between if c == 1 else None)
                cpu1 = _cpu_seconds(server.pid)
                cpu = cpu + (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
                after = _lib_times(payload, 10)
                if c == 1:  # the client's own time: its requests one after another
                    w = sum(more)
                    lib_during += paired
                ref = paired if c == 1 else before + after
                # this turn's own ratio: how far one round's reading moves on this machine
                spread.append(len(more) / w * statistics.median(ref))
                got[name] = (lat + more, wall + w, errors + e, cpu, lib + ref, spread)
                lib_during += before
                before = after
            lib_during += before
            for name, (lat, wall, errors, cpu, lib, spread) in got.items():
                rows.append((name, c, lat, wall, errors,
                             None if cpu is None else cpu / len(lat) * 1000,
                             statistics.median(lib) * 1000, spread))
        transport = {}
        for name, load in CLIENTS.items():
            lat, _, errors = load(url, body, 1, args.requests, "/v1/health", 405, None)
            transport[name] = (statistics.median(lat) * 1000, errors)
        lat, _, errors = CLIENTS["lean"](minimal_url, body, 1, args.requests, "/floor", 200, None)
        idle, _, idle_errors = CLIENTS["lean"](minimal_url, body, 1, args.requests, "/floor", 200,
                                               None, lambda: _lib_times(payload, 1))
        floor = (statistics.median(lat) * 1000, statistics.median(idle) * 1000,
                 errors + idle_errors)
    finally:
        for p in (proc, minimal):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    lib_after = _lib_times(payload, 50)
    lib_ms = statistics.median(lib_before + lib_during + lib_after) * 1000
    print(f"POST /v1/evaluate on the example data ({len(body) / 1024:.0f} KiB body: "
          f"710 qrels lines + 5,032 run lines, 5 metrics); {args.workers} worker(s); "
          f"{os.cpu_count()} CPUs (shared machine); Python {platform.python_version()}")
    print(f"library in-process (parse + evaluate + JSON): {lib_ms:.1f} ms/request "
          f"= {1000 / lib_ms:.0f} requests/s on one core (median; 50 before the load "
          f"{statistics.median(lib_before) * 1000:.1f} ms, 50 after {statistics.median(lib_after) * 1000:.1f} "
          f"ms, 10 between the clients' turns in each round of requests; 'lib ms': a row's "
          f"reference, from the calls around its turns, or with one client from a call after "
          f"each request)")
    print("clients: 'httpx' = httpx.AsyncClient, one keep-alive connection per concurrent client; "
          "'lean' = stdlib raw-socket keep-alive HTTP/1.1, one socket and thread per concurrent "
          "client (request bytes built once, answer read by Content-Length); every answer checked "
          "against the library's bytes ('errors': another status or other bytes)")
    for name, (ms, errors) in transport.items():
        print(f"transport alone, {name} (same body to /v1/health, 405, one client): p50 {ms:.1f} ms; "
              f"one-client ceiling ~{lib_ms / (lib_ms + ms):.2f} of the library's rate"
              + (f"; {errors} errors" if errors else ""))
    decode_ms = _decode_ms(body)
    layers = _layers_ms(body, expect.decode(), state)
    ceiling = lib_ms / (lib_ms + floor[0] + decode_ms)
    ceiling_rows = lib_ms / (lib_ms + floor[1] + decode_ms)
    print(f"floor of any Python service on this uvicorn, lean client: the same body read by a "
          f"bare route that answers without work, p50 {floor[0]:.2f} ms back to back "
          f"({floor[1]:.2f} ms with a library call after each request, as in the one-client "
          f"rows: the idle server wakes for each)"
          + (f" ({floor[2]} errors)" if floor[2] else "")
          + f", plus decoding the body in-process (pydantic-core) {decode_ms:.2f} ms: one-client "
          f"ceiling ~{ceiling:.2f} of the library's rate back to back, ~{ceiling_rows:.2f} as the "
          f"rows are measured")
    print(f"the services' own layers, called in-process (no socket) with the library call "
          f"replaced by its answer: ragjudge {layers['ragjudge']:.3f} ms, minimal "
          f"{layers['minimal']:.3f} ms per request (the decode included in both)")
    print("'rounds': the lowest and highest ratio of the row's rounds, each against its own "
          "library calls (how far one reading moves on this machine)")
    print("'minimal' rows: the lean client against minimal_asgi.py on the same uvicorn (the body "
          "decoded and the library called, nothing else): the ceiling of a Python service for "
          "this work")
    print(f"{'server':>8} {'client':>7} {'clients':>8} {'requests':>9} {'req/s':>8} {'lib ms':>7} {'ratio':>6} "
          f"{'rounds':>10} {'p50 ms':>8} {'p99 ms':>8} {'srv CPU ms':>10} {'errors':>7}")
    for (name, server), c, lat, wall, errors, cpu, lib_round_ms, spread in rows:
        rate = len(lat) / wall
        cpu_text = f"{cpu:>10.1f}" if cpu is not None else f"{'-':>10}"
        # ratio: this row's req/s over the library's rate timed around its requests
        print(f"{server:>8} {name:>7} {c:>8} {len(lat):>9} {rate:>8.1f} {lib_round_ms:>7.1f} "
              f"{rate * lib_round_ms / 1000:>6.2f} {f'{min(spread):.2f}-{max(spread):.2f}':>10} "
              f"{statistics.median(lat) * 1000:>8.1f} "
              f"{_pct(lat, 0.99) * 1000:>8.1f} {cpu_text} {errors:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
