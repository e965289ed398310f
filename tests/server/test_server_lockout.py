"""The service cannot be locked out: request bodies have a deadline (408), and a client's
concurrency slot is held only while its request is processed, not while its body trickles in.
Serve flags that would trace or disable a limit are one-line errors."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
from _server import ServerProcess

from ragjudge.cli import main

TOKEN = "lockout-test-token-0123456789"
EX = Path(__file__).resolve().parents[2] / "examples"


def _trickle(port: int, stop: threading.Event, statuses: list[tuple[str, float]], stall: bool) -> None:
    """An authenticated POST whose body comes one byte at a time (bounded: ~60 s at most);
    ``stall``: five bytes of it, then nothing."""
    body = json.dumps({"qrels": {"q": {"d": 1}}, "runs": {"r": {"q": {"d": 1.0}}}}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"POST /v1/evaluate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        t0 = time.monotonic()
        deadline = t0 + 60
        try:
            for i, byte in enumerate(body):
                if stop.is_set() or time.monotonic() > deadline or (stall and i == 5):
                    break
                s.sendall(bytes([byte]))
                time.sleep(0.25)
            s.settimeout(30)
            statuses.append((s.recv(64).decode("latin-1").split("\r\n")[0], time.monotonic() - t0))
        except OSError as exc:
            # The server answered 408 and closed while bytes were still coming: a reset.
            statuses.append((f"closed: {exc}", time.monotonic() - t0))


@pytest.mark.slow
def test_trickling_bodies_neither_lock_others_out_nor_hang(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, "--client-concurrency", "4", "--body-seconds", "3",
                           token=TOKEN).start()
    stop = threading.Event()
    statuses: list[tuple[str, float]] = []
    threads = [threading.Thread(target=_trickle, args=(server.port, stop, statuses, i < 2), daemon=True)
               for i in range(16)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)  # the tricklers are mid-body
        with server.client() as client:
            qrels = {"q1": {"d1": 1}}
            run = {"q1": {"d1": 2.0, "d2": 1.0}}
            for _ in range(3):
                r = client.post("/v1/evaluate", json={"qrels": qrels, "runs": {"r": run}, "metrics": ["p@1"]})
                assert r.status_code == 200, r.text
        for t in threads:
            t.join(30)
    finally:
        stop.set()
        server.stop()
    # Every trickler was cut off at the body deadline (its body needed ~17 s), none got
    # through or hung.
    assert len(statuses) == 16
    assert all(s.startswith(("HTTP/1.1 408", "closed")) for s, _ in statuses), statuses
    assert any(s.startswith("HTTP/1.1 408") for s, _ in statuses), statuses
    assert all(elapsed < 12 for _, elapsed in statuses), statuses


@pytest.mark.parametrize("flag, value, says", [
    ("--port", "70000", "from 0 to 65535"),
    ("--drain-seconds", "nan", "finite"),
    ("--max-cost", "nan", "finite"),
    ("--body-seconds", "inf", "finite"),
    ("--timeout", "-1", "finite"),
])
def test_serve_flags_are_checked_before_starting(flag: str, value: str, says: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ragjudge: error: {flag}:") and says in err and "\n" not in err


def test_serve_refuses_a_folder_as_its_job_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--jobs-db", str(tmp_path)]) == 2
    assert "--jobs-db: is a directory" in capsys.readouterr().err
