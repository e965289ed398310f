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
