"""The assembled application (``create_app``) without a server process: what every instance
answers, with or without the page."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.server import ServerSettings, create_app  # noqa: E402


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_plain_serve_answers_the_browsers_icon_request(monkeypatch: pytest.MonkeyPatch,
                                                       token: str | None) -> None:
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    if token:
        monkeypatch.setenv("RAGJUDGE_TOKEN", token)
    c = TestClient(create_app(ServerSettings()))  # no --ui-file; no lifespan: no job store needed
    r = c.get("/favicon.ico")  # asked before any page could send a token
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    assert r.content.startswith(b"<svg")
    assert c.get("/ui/").status_code == 404  # the page itself is not served


@pytest.mark.parametrize("body", [
    b'{"a": [1, 2.5, "x\\ny", null, true]}',
    b'{"a": NaN, "b": -Infinity}',  # orjson refuses these; the standard library takes them
    b'{"a": 123456789012345678901234567890}',  # beyond 64 bits
    b'{"a": 1, "a": 2}',
    b'{"a": "\\ud800"}',  # a lone surrogate
])
def test_a_json_body_reads_as_the_standard_library_reads_it(body: bytes) -> None:
    import asyncio
    import json

    from ragjudge.server.routes import JsonRequest

    async def read() -> object:
        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        return await JsonRequest({"type": "http", "method": "POST", "headers": []}, receive).json()

    assert repr(asyncio.run(read())) == repr(json.loads(body))


def test_a_body_that_is_not_json_is_the_standard_librarys_error() -> None:
    import asyncio
    import json

    from ragjudge.server.routes import JsonRequest

    async def read() -> object:
        async def receive() -> dict:
            return {"type": "http.request", "body": b'{"a": 1,}', "more_body": False}

        return await JsonRequest({"type": "http", "method": "POST", "headers": []}, receive).json()

    with pytest.raises(json.JSONDecodeError) as info:
        asyncio.run(read())
    assert info.value.pos == 8  # FastAPI's 422 names the position
