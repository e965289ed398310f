"""The access log: one line per answered request, in uvicorn's format, written after the
answer has been sent (so its formatting and I/O are not on the answer's path)."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")
pytest.importorskip("uvicorn", reason="the server tests need the server extra")

import httpx  # noqa: E402
from _server import ROOT, ServerProcess  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.server import ServerSettings, create_app  # noqa: E402
from ragjudge.server.app import ACCESS_LOG  # noqa: E402

EX = ROOT / "examples"
QRELS = "".join((EX / "qrels.txt").read_text().splitlines(keepends=True)[:60])
RUN = "".join((EX / "runs/bm25_raw.run").read_text().splitlines(keepends=True)[:300])


@pytest.fixture()
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=ACCESS_LOG)
    return caplog


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[Any, ...]]:
    return [r.args for r in caplog.records if r.name == ACCESS_LOG]  # type: ignore[misc]


def test_one_line_per_answer_with_uvicorns_arguments(monkeypatch: pytest.MonkeyPatch,
                                                     records: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RAGJUDGE_TOKEN", "s3cret")
    client = TestClient(create_app(ServerSettings()), raise_server_exceptions=False)
    auth = {"Authorization": "Bearer s3cret"}
    assert client.post("/v1/evaluate", json={"qrels": QRELS, "runs": {"r": RUN}},
                       headers=auth).status_code == 200  # the fast path
    assert client.post("/v1/evaluate", json={"qrels": QRELS}, headers=auth).status_code == 422
    assert client.post("/v1/evaluate", json={}).status_code == 401  # answered by the guard
    assert client.get("/v1/version", params={"q": "a b"}, headers=auth).status_code == 200
    assert client.get("/v1/nope", headers=auth).status_code == 404
    got = _lines(records)
    assert [(m, p, s) for _, m, p, _, s in got] == [
        ("POST", "/v1/evaluate", 200), ("POST", "/v1/evaluate", 422),
        ("POST", "/v1/evaluate", 401), ("GET", "/v1/version?q=a+b", 200), ("GET", "/v1/nope", 404)]
    # uvicorn's access formatter reads exactly these five arguments
    assert all(re.fullmatch(r"testclient:\d+", a) and v == "1.1" for a, _, _, v, _ in got)
    from uvicorn.logging import AccessFormatter

    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s',
                           use_colors=False).format(records.records[0])
    assert re.fullmatch(r'testclient:\d+ - "POST /v1/evaluate HTTP/1.1" 200 OK', line), line


def test_the_line_is_written_after_the_answer(records: pytest.LogCaptureFixture) -> None:
    app = create_app(ServerSettings())
    events: list[str] = []

    class Mark(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            events.append("log")

    handler = Mark()
    logging.getLogger(ACCESS_LOG).addHandler(handler)
    body = httpx.Request("POST", "http://x/v1/evaluate",
                         json={"qrels": QRELS, "runs": {"r": RUN}}).read()

    async def call() -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/evaluate",
                 "raw_path": b"/v1/evaluate", "root_path": "", "query_string": b"",
                 "headers": [(b"host", b"x"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> Any:
            if messages:
                return messages.pop()
            await asyncio.sleep(3600)

        async def send(message: Any) -> None:
            events.append(message["type"])

        await app(scope, receive, send)

    try:
        asyncio.run(call())
    finally:
        logging.getLogger(ACCESS_LOG).removeHandler(handler)
    assert events == ["http.response.start", "http.response.body", "log"]
    assert _lines(records) == [("127.0.0.1:5000", "POST", "/v1/evaluate", "1.1", 200)]


def test_a_handler_that_raises_is_logged_as_500(monkeypatch: pytest.MonkeyPatch,
                                                records: pytest.LogCaptureFixture) -> None:
    from ragjudge.server import app as app_module

    def boom(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(app_module, "evaluate_json", boom)  # the FastAPI route's function
    client = TestClient(create_app(ServerSettings()), raise_server_exceptions=False)
    r = client.post("/v1/evaluate", content=b'{"qrels": "q 0 d 1", "runs": {"r": "q Q0 d 1 1 t"}}',
                    headers={"content-type": "application/vnd.x+json"})  # not the fast path
    assert r.status_code == 500
    assert [s for *_, s in _lines(records)] == [500]


def test_nothing_is_logged_when_the_logger_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=ACCESS_LOG)
    client = TestClient(create_app(ServerSettings()))
    assert client.get("/v1/version").status_code == 200
    assert _lines(caplog) == []


@pytest.mark.slow  # real uvicorn processes
def test_serve_prints_each_answer_once(tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    with ServerProcess(tmp_path / "on") as srv:
        with srv.client() as c:
            assert c.post("/v1/evaluate", json={"qrels": QRELS, "runs": {"r": RUN}}).status_code == 200
            assert c.get("/v1/health").status_code == 200
            assert c.get("/v1/version?x=%C3%A9").status_code == 200
        srv.stop()
        log = srv.log()
    # uvicorn's format, once each (uvicorn's own access log is off: no second line); the
    # readiness probes come first
    lines = re.findall(r'INFO: +127\.0\.0\.1:\d+ - "(.*)" (.*)', log)
    assert lines[lines.index(("POST /v1/evaluate HTTP/1.1", "200 OK")):] == [
        ("POST /v1/evaluate HTTP/1.1", "200 OK"), ("GET /v1/health HTTP/1.1", "200 OK"),
        ("GET /v1/version?x=%C3%A9 HTTP/1.1", "200 OK")], log
    (tmp_path / "off").mkdir()
    with ServerProcess(tmp_path / "off", "--no-access-log") as srv:
        assert httpx.get(srv.url + "/v1/health").status_code == 200
        srv.stop()
        log = srv.log()
    assert "Application startup complete" in log and '"GET /v1/health' not in log, log
