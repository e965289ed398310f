"""Where the routes' CPU-bound work runs (``server/cpu.py``): evaluations and comparisons in
worker processes answer exactly what a thread of the server answers, errors and warnings
included; a worker that dies costs one request; workers end with their server."""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
import time
import warnings
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.errors import InputError  # noqa: E402
from ragjudge.evaluate import EvaluationWarning  # noqa: E402
from ragjudge.server import ServerSettings, create_app  # noqa: E402
from ragjudge.server.cpu import CpuWork  # noqa: E402

EX = Path(__file__).resolve().parents[2] / "examples"


def _bodies() -> list[tuple[str, dict]]:
    qrels = (EX / "qrels.txt").read_text()
    runs = {p.stem: p.read_text() for p in sorted((EX / "runs").glob("*.run"))}
    one = dict(list(runs.items())[:1])
    return [
        ("/v1/evaluate", {"qrels": qrels, "runs": one}),
        ("/v1/evaluate", {"qrels": qrels, "runs": runs, "per_query": True, "metrics": ["ndcg@5", "map"]}),
        ("/v1/compare", {"qrels": qrels, "runs": runs, "resamples": 200, "seed": 3}),
        ("/v1/evaluate", {"qrels": "q1 0 d1", "runs": one}),  # a library error: 400
        ("/v1/evaluate", {"qrels": qrels, "runs": one, "metrics": ["ndcg@x"]}),  # a metric error
        ("/v1/compare", {"qrels": qrels, "runs": runs, "baseline": "nope"}),
    ]


def test_worker_processes_answer_what_a_thread_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    answers = {}
    for processes in (0, 1, 2):
        with TestClient(create_app(ServerSettings(no_cache=True, cpu_processes=processes))) as c:
            answers[processes] = [(r.status_code, r.content)
                                  for r in (c.post(path, json=body) for path, body in _bodies())]
    assert [s for s, _ in answers[0]] == [200, 200, 200, 400, 400, 400]
    assert answers[1] == answers[0] and answers[2] == answers[0]


def test_a_workers_warnings_are_raised_again_in_the_server() -> None:
    body = {"qrels": (EX / "qrels.txt").read_text(), "runs": {"r": (EX / "runs/bm25_raw.run").read_text()}}
    with TestClient(create_app(ServerSettings(no_cache=True, cpu_processes=1))) as c:
        with pytest.warns(EvaluationWarning, match="tied scores"):
            assert c.post("/v1/evaluate", json=body).status_code == 200


def test_an_error_comes_back_as_raised() -> None:
    async def go(fn: object, *args: object) -> None:
        work = CpuWork(1)
        try:
            await work.compute(fn, *args)  # type: ignore[arg-type]
        finally:
            await work.close()

    with pytest.raises(ValueError, match="invalid literal"):
        asyncio.run(go(int, "x"))
    with pytest.raises(InputError) as err:  # the library's: its fields too (a 400 names them)
        asyncio.run(go(_input_error))
    assert str(err.value) == "runs.txt:3: score: not a number" and err.value.line == 3


def _input_error() -> None:
    raise InputError("not a number", source="runs.txt", line=3, field="score")


class _TwoPartError(Exception):
    def __init__(self, a: str, b: str) -> None:  # rebuilt from its args, it would miss one
        super().__init__(f"{a}/{b}")


def _unrebuildable() -> None:
    raise _TwoPartError("x", "y")


def test_an_error_the_server_could_not_rebuild_fails_its_request_not_the_pool() -> None:
    async def go() -> None:
        work = CpuWork(1)
        try:
            with pytest.raises(RuntimeError, match="_TwoPartError: x/y"):
                await work.compute(_unrebuildable)
            assert await work.compute(operator.add, 1, 1) == 2
        finally:
            await work.close()

    asyncio.run(go())


def test_a_request_over_the_servers_limit_is_413_from_a_worker() -> None:
    body = {"qrels": (EX / "qrels.txt").read_text(), "runs": {"r": (EX / "runs/bm25_raw.run").read_text()}}
    with TestClient(create_app(ServerSettings(no_cache=True, cpu_processes=1, max_pairs=100))) as c:
        r = c.post("/v1/evaluate", json=body)
    assert r.status_code == 413 and "at most 100" in r.json()["detail"]


def test_a_worker_that_dies_costs_one_request_and_the_next_gets_a_fresh_pool() -> None:
    async def go() -> None:
        work = CpuWork(1)
        assert await work.compute(operator.add, 1, 2) == 3
        with pytest.raises(BrokenProcessPool):
            await work.compute(os._exit, 3)  # the worker ends mid-request (as killed, out of memory)
        assert await work.compute(operator.add, 2, 2) == 4
        await work.close()

    asyncio.run(go())


def test_the_work_runs_in_another_process_or_without_processes_in_a_thread() -> None:
    async def go(processes: int) -> int:
        work = CpuWork(processes)
        try:
            return await work.compute(os.getpid)
        finally:
            await work.close()

    assert asyncio.run(go(1)) != os.getpid()
    assert asyncio.run(go(0)) == os.getpid()


def test_the_setting_is_checked() -> None:
    with pytest.raises(InputError, match="--cpu-processes: must be an integer of at least 0"):
        ServerSettings(cpu_processes=-1).check()
    from ragjudge.cli import build_parser
    from ragjudge.cli.serve import settings_from_args

    args = build_parser("serve").parse_args(["serve", "--cpu-processes", "3"])
    assert settings_from_args(args).cpu_processes == 3
    assert settings_from_args(build_parser("serve").parse_args(["serve"])).cpu_processes == 1


def _spawned_below(pid: int) -> set[int]:
    """The processes started by multiprocessing's spawn below ``pid`` (uvicorn's workers and
    the evaluation workers)."""
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        grew, tree = bool(more), tree | more
    found = set()
    for p in tree - {pid}:
        try:
            if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes():
                found.add(p)
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
@pytest.mark.parametrize("workers, how", [(1, signal.SIGTERM), (1, signal.SIGINT), (1, signal.SIGKILL),
                                          (2, signal.SIGTERM), (2, signal.SIGINT)])
def test_the_workers_end_with_their_server(tmp_path: Path, workers: int, how: signal.Signals) -> None:
    """(uvicorn's own worker processes outlive a supervisor killed with SIGKILL: not ours.)"""
    import socket

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "RAGJUDGE_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "ragjudge", "serve", "--port", str(port),
                             "--workers", str(workers), "--cpu-processes", "2", "--jobs-db", str(tmp_path / "jobs.sqlite"),
                             "--no-cache"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        spawned: set[int] = set()
        expected = 2 * workers + (workers if workers > 1 else 0)
        while len(spawned) < expected:  # started beside the server, before any request
            assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
            spawned = _spawned_below(proc.pid)
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/v1/evaluate"
        body = {"qrels": (EX / "qrels.txt").read_text(), "runs": {"r": (EX / "runs/bm25_raw.run").read_text()}}
        assert httpx.post(url, json=body, timeout=30).status_code == 200
        proc.send_signal(how)
        proc.wait(30)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in spawned) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in spawned)
        err = proc.stderr.read()
        assert b"Traceback" not in err, err
        if how != signal.SIGKILL:  # after kill -9, multiprocessing's tracker cleans up, and says so
            assert b"leaked" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            proc.stderr.close()
