"""The service's API docs work offline: /docs and /redoc load every script, stylesheet and icon
from the server itself (the installed fastapi-offline package), never from a CDN."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")
pytest.importorskip("fastapi_offline", reason="the server tests need the server extra")

from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.server import ServerSettings, create_app  # noqa: E402

_URL = re.compile(r"""(?:src|href|url)\s*[=:]\s*["']([^"']+)["']""", re.I)


def _client(monkeypatch: pytest.MonkeyPatch, token: str | None = None) -> TestClient:
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    if token:
        monkeypatch.setenv("RAGJUDGE_TOKEN", token)
    return TestClient(create_app(ServerSettings()))  # no lifespan: the docs need no job store


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_name_only_same_origin_urls(monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    c = _client(monkeypatch)
    r = c.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+", r.text, re.I), r.text  # no other host
    urls = _URL.findall(r.text)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    assert "validatorUrl" in r.text or page == "/redoc"  # Swagger UI's online validator is off
    for url in urls:
        got = c.get(url)
        assert got.status_code == 200, url


def test_docs_assets_have_their_content_types(monkeypatch: pytest.MonkeyPatch) -> None:
    c = _client(monkeypatch)
    page = c.get("/docs").text
    js = re.search(r'src="([^"]+swagger-ui-bundle\.js)"', page).group(1)
    css = re.search(r'href="([^"]+swagger-ui\.css)"', page).group(1)
    icon = re.search(r'rel="shortcut icon" href="([^"]+)"', page).group(1)
    for url, kind in ((js, "text/javascript"), (css, "text/css"), (icon, "image/png")):
        r = c.get(url)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), (url, r.headers)
        assert len(r.content) > 1000
    assert "SwaggerUIBundle" in c.get(js).text
    assert c.get("/docs/assets/../app.py").status_code == 404
    assert c.get("/docs/assets/nope.js").status_code == 404


def test_docs_stay_open_under_a_token_and_the_api_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    c = _client(monkeypatch, token="s3cret")
    for url in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect",
                "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css",
                "/docs/assets/favicon.png"):
        assert c.get(url).status_code == 200, url
    assert c.get("/v1/version").status_code == 401
    assert c.get("/docs/assets").status_code == 401  # only files under the assets folder are open
    assert c.get("/v1/version", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.slow  # a real uvicorn process and a headless browser
def test_docs_render_in_a_browser_without_a_network(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); "
                    "the offline /docs page is not rendered")
    pytest.importorskip("uvicorn", reason="the server tests need the server extra")
    from _server import ServerProcess

    with ServerProcess(tmp_path, token="s3cret") as srv:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
               # every host but the server's fails to resolve: the page must need none
               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
               "--virtual-time-budget=20000", "--dump-dom", srv.url + "/docs"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    # Swagger UI ran: the operations of the spec are rendered as its operation blocks
    blocks = re.findall(r'class="opblock opblock-(get|post|delete)', dom)
    assert len(blocks) >= 8, dom[:2000]
    for path in ("/v1/evaluate", "/v1/compare", "/v1/rag", "/v1/health"):
        assert path in dom
