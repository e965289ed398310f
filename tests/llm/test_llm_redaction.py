"""A key in the endpoint URL (userinfo, query or path) never reaches a message, a record or
stderr: every URL passes through the one redaction function."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import respx
from _llm_fakes import error

from ragjudge.errors import LLMError
from ragjudge.llm import LLM
from ragjudge.llm.client import redact, redact_url

KEY = "Zq8xW3vB7nM2kL9pR4tY6uI1oP5aS0dF"
PATH_BASE = f"http://gateway.test/{KEY}/v1"


@pytest.mark.parametrize("url, kept", [
    (f"http://gw.test/{KEY}/v1", "http://gw.test/***/v1"),
    ("http://gw.test/sk-proj-abcdef123456/v1", "http://gw.test/***/v1"),
    ("http://gw.test/8f14e45f-ceea-467f-a9b2-5e3d0f0a1b2c/v1", "http://gw.test/***/v1"),
    ("http://gw.test/proxy/0123456789abcdef0123456789abcdef/v1", "http://gw.test/proxy/***/v1"),
    ("http://user:pw@h.test/v1", "http://***@h.test/v1"),
    ("http://h.test/v1?api-key=abcdef", "http://h.test/v1?api-key=***"),
    # names made of short words stay readable
    ("https://r.openai.azure.com/openai/deployments/gpt-4o-mini-2024-07-18/chat",
     "https://r.openai.azure.com/openai/deployments/gpt-4o-mini-2024-07-18/chat"),
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
])
def test_urls_are_redacted_the_same_way_everywhere(url: str, kept: str) -> None:
    assert redact_url(url) == kept
    assert redact(f"failed at {url} (boom)") == f"failed at {kept} (boom)"


def _ask(llm: LLM) -> Any:
    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "q", "passage": "p"})
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_a_key_in_the_url_path_is_not_in_fatal_errors(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(f"{PATH_BASE}/chat/completions").mock(return_value=error(404, "no such model"))
    llm = LLM("m", base_url=PATH_BASE, api_key="k", cache=tmp_path / "c.sqlite")
    assert KEY not in repr(llm)
    with pytest.raises(LLMError) as info:
        _ask(llm)
    assert KEY not in str(info.value) and "gateway.test/***/v1" in str(info.value)


def test_a_key_in_the_url_path_is_not_in_feature_errors(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    # Every structured-output format refused: the session's "rejected the request" message.
    httpx2_mock.post(f"{PATH_BASE}/chat/completions").mock(
        return_value=error(400, "response_format is not supported"))
    llm = LLM("m", base_url=PATH_BASE, api_key="k", cache=tmp_path / "c.sqlite")
    with pytest.raises(LLMError) as info:
        _ask(llm)
    assert "rejected the request" in str(info.value)
    assert KEY not in str(info.value)


@pytest.mark.slow
def test_a_key_in_the_url_path_is_not_printed_by_a_failed_run(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "what is x"}\n')
    (tmp_path / "c.jsonl").write_text('{"_id": "d1", "text": "x is y"}\n')
    (tmp_path / "run").write_text("q1 Q0 d1 1 2.0 r\n")
    env = {**os.environ, "OPENAI_API_KEY": "k"}
    # Port 9 (discard) on loopback refuses the connection: the outage path prints the URL.
    proc = subprocess.run(
        [sys.executable, "-m", "ragjudge", "judge", "--run", str(tmp_path / "run"), "--queries",
         str(tmp_path / "q.jsonl"), "--corpus", str(tmp_path / "c.jsonl"), "--model", "m",
         "--base-url", f"http://127.0.0.1:9/{KEY}/v1", "--patience", "2", "--no-cache",
         "--judgments", str(tmp_path / "j.jsonl"), "-o", str(tmp_path / "out.qrels"),
         "--no-progress"],
        capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "127.0.0.1:9/***/v1" in proc.stderr
    for text in (proc.stdout, proc.stderr, *(p.read_text() for p in tmp_path.iterdir() if p.is_file())):
        assert KEY not in text


class _Echo(BaseHTTPRequestHandler):
    """Fails every request with ``status``, quoting the URL and path it was sent to (as many
    proxies and gateways do in their error pages)."""

    status = 500

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        host = self.headers.get("host")
        body = json.dumps({"error": {"message": f"upstream failed for POST http://{host}{self.path} "
                                                f"(path {self.path})"}}).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("status", [500, 401, 404])
def test_a_server_quoting_the_url_does_not_make_the_run_print_the_key(tmp_path: Path, status: int) -> None:
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "what is x"}\n')
    (tmp_path / "c.jsonl").write_text('{"_id": "d1", "text": "x is y"}\n')
    (tmp_path / "run").write_text("q1 Q0 d1 1 2.0 r\n")
    handler = type("Echo", (_Echo,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    key = "8f14e45f-ceea-467f-a9b2-5e3d0f0a1b2c"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ragjudge", "judge", "--run", str(tmp_path / "run"), "--queries",
             str(tmp_path / "q.jsonl"), "--corpus", str(tmp_path / "c.jsonl"), "--model", "m",
             "--base-url", f"http://127.0.0.1:{server.server_port}/{key}/v1", "--max-attempts", "1",
             "--no-cache", "--judgments", str(tmp_path / "j.jsonl"), "-o", str(tmp_path / "out.qrels"),
             "--no-progress"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": "k"})
    finally:
        server.shutdown()
        thread.join(10)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "/***/v1" in proc.stderr + "".join(p.read_text() for p in tmp_path.glob("j.jsonl"))
    for text in (proc.stdout, proc.stderr, *(p.read_text() for p in tmp_path.iterdir() if p.is_file())):
        assert key not in text


# ----------------------------------------------------------------------------- every URL, one redaction
@pytest.mark.parametrize("url, kept", [
    ("http://h.test/v1?subscription-key=abcdef123", "http://h.test/v1?subscription-key=***"),
    ("http://h.test/v1?api_token=tok999", "http://h.test/v1?api_token=***"),
    ("http://h.test/v1?x=1&client_secret=xyz789&y=2", "http://h.test/v1?x=1&client_secret=***&y=2"),
    ("http://h.test/v1#key=secret123", "http://h.test/v1#key=***"),
    ("http://h.test/v1#a=1&access_token=qq", "http://h.test/v1#a=1&access_token=***"),
    ("http://h.test/v1;key=abc/chat", "http://h.test/v1;key=***/chat"),
    ("http://h.test/v1?X-Amz-Signature=abc&X-Amz-Date=2024", "http://h.test/v1?X-Amz-Signature=***&X-Amz-Date=2024"),
    # short random path segments
    ("http://gw.test/s3cr3tK3y/v1", "http://gw.test/***/v1"),
    ("http://gw.test/aB3xY9/v1", "http://gw.test/***/v1"),
    ("http://gw.test/a8k2p9q3/v1", "http://gw.test/***/v1"),
    ("http://gw.test/sk-abc123/v1", "http://gw.test/***/v1"),
    # names stay readable
    ("https://h.test/openai/deployments/gpt-4o/chat?api-version=2024-02-01",
     "https://h.test/openai/deployments/gpt-4o/chat?api-version=2024-02-01"),
    ("http://h.test/models/Qwen2.5-7B-Instruct/v1", "http://h.test/models/Qwen2.5-7B-Instruct/v1"),
    ("http://h.test/meta-llama/Llama-3.1-8B-Instruct/v1", "http://h.test/meta-llama/Llama-3.1-8B-Instruct/v1"),
])
def test_key_like_parameters_fragments_and_short_segments(url: str, kept: str) -> None:
    assert redact_url(url) == kept
    assert redact(f"see {url}, then") == f"see {kept}, then"


def test_a_configured_short_path_key_is_redacted_however_short() -> None:
    from ragjudge.llm.endpoint import Endpoint

    Endpoint("m", base_url="http://gw-short.test/KEY7/v1")  # configured: its odd segments are secrets
    assert redact("POST http://gw-short.test/KEY7/v1/chat/completions failed") == \
        "POST http://gw-short.test/***/v1/chat/completions failed"
    assert redact("upstream said: no route for /KEY7/v1/chat") == "upstream said: no route for /***/v1/chat"
    # A word elsewhere is left alone.
    assert redact("KEY7 is a word here") == "KEY7 is a word here"


def test_an_endpoint_spec_error_does_not_print_its_key(capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    ex = Path(__file__).resolve().parents[2] / "examples"
    spec = "http://gw-spec.test/Zk4/v1?api_token=tok12345,bogus=1"
    assert main(["judge", "--queries", str(ex / "queries.jsonl"), "--corpus", str(ex / "corpus.jsonl"),
                 "--run", str(ex / "runs" / "bm25_raw.run"), "--model", "m", "--dry-run", "--no-cache",
                 "--endpoint", spec]) == 2
    err = capsys.readouterr().err
    assert "bogus=1" in err and "Zk4" not in err and "tok12345" not in err


def test_a_short_path_key_is_not_in_messages_records_or_debug_logs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ragjudge.cli import main

    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "what is x"}\n')
    (tmp_path / "c.jsonl").write_text('{"_id": "d1", "text": "x is y"}\n')
    (tmp_path / "run").write_text("q1 Q0 d1 1 2.0 r\n")
    env_key = "sk-envkey-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Echo", (_Echo,), {"status": 500}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    key = "Ky7"
    caplog.set_level("DEBUG")
    try:
        code = main(["judge", "--run", str(tmp_path / "run"), "--queries", str(tmp_path / "q.jsonl"),
                     "--corpus", str(tmp_path / "c.jsonl"), "--model", "m", "--base-url",
                     f"http://127.0.0.1:{server.server_port}/{key}/v1?subscription-key=sub98765",
                     "--max-attempts", "1", "--no-cache", "--judgments", str(tmp_path / "j.jsonl"),
                     "-o", str(tmp_path / "out.qrels"), "--no-progress"])
    finally:
        server.shutdown()
        thread.join(10)
    out = capsys.readouterr()
    assert code != 0
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request" in logs or "Request options" in logs  # the HTTP stack did log
    files = [p.read_text() for p in tmp_path.iterdir() if p.is_file()]
    for text in (out.out, out.err, logs, *files):
        assert f"/{key}/" not in text and "sub98765" not in text and env_key not in text


@pytest.mark.parametrize("text, secret", [
    ("postgresql://judge:p@ssw0rd99@db.test/x", "ssw0rd99"),  # a bare "@" in the password
    ("http://h.test/v1?pass=S3cretPass", "S3cretPass"),
    ("http://h.test/v1?pw=S3cretPass", "S3cretPass"),
    ("http://h.test/v1?passphrase=S3cretPass", "S3cretPass"),
    ("http://h.test/v1?jwt=eyJhbGciOi.eyJzdWIi.c2ln", "eyJhbGciOi"),
    ("upstream: Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("see https://h.test/v1?key=x and AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "AIzaSyDaGmWKa4"),
])
def test_more_credentials_in_urls_and_headers(text: str, secret: str) -> None:
    assert secret not in redact(text)
