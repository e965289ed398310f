"""Run ``ragjudge serve`` as a real process on a loopback port for the server tests.

The tests speak HTTP to it with httpx, kill it, and start it again on the same state.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m ragjudge serve`` with its state in ``state_dir`` (jobs.sqlite, cache.sqlite)."""

    def __init__(self, state_dir: Path, *args: str, env: dict[str, str] | None = None,
                 token: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.args = list(args)
        self.env = dict(env or {})
        self.token = token
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log_path = self.state_dir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kw: Any) -> httpx.Client:
        kw.setdefault("timeout", 60.0)
        return httpx.Client(base_url=self.url, headers=self.headers(), **kw)

    def start(self, timeout: float = 60.0) -> ServerProcess:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGJUDGE_")}
        env.update(self.env)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if self.token:
            env["RAGJUDGE_TOKEN"] = self.token
        cmd = [sys.executable, "-m", "ragjudge", "serve", "--port", str(self.port),
               "--jobs-db", str(self.state_dir / "jobs.sqlite"),
               "--cache", str(self.state_dir / "cache.sqlite"), *self.args]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"server did not start in {timeout} s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_job(client: httpx.Client, job_id: str, *, until: Any = None, timeout: float = 90.0) -> dict:
    """Poll ``GET /v1/jobs/{id}`` until ``until(state)`` (default: a final status)."""
    until = until or (lambda s: s["status"] in ("done", "failed", "cancelled"))
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        state = r.json()
        if until(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"job did not get there in {timeout} s: {state}")
        time.sleep(0.1)
