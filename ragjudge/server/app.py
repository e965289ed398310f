"""The FastAPI application, assembled: the guard, the error handlers, the offline API docs,
the routes (:mod:`ragjudge.server.routes`) and the job manager's life.

The guard (one ASGI middleware) checks, in this order: the bearer token (constant-time
comparison; every path but ``/v1/health`` and the API docs with their assets), the request
body's size (413) and a deadline for the whole body (408: a client trickling its body cannot
hold the server), then per-client concurrency (429 beyond it), counted only while a request
is processed. Errors: input problems are 400 (library) or 422 (schema) with the one-line
``field:line: name: message`` text the CLI prints; a job store that cannot be reached is 503
with ``Retry-After`` (the store logs one line per outage); anything unexpected is a bare 500
whose details stay in the server log. CORS is off unless origins are configured. ``/docs``
and ``/redoc`` load Swagger UI and ReDoc from the installed ``fastapi-offline`` package
(served under ``/docs/assets/``), never from a CDN: the docs work without a network.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from .. import __version__
from ..errors import MetricError, RagjudgeError
from ..llm import redact
from .cpu import CpuWork
from .jobs import JobManager
from .models import ErrorBody
from .routes import API_VERSION, api_router, health_router
from .service import TooLarge
from .settings import SETTINGS_ENV, ServerSettings
from .store import StoreUnavailable, open_job_store
from .ui import PAGE_PATHS as UI_PAGE_PATHS
from .ui.routes import icon_router, ui_router

__all__ = ["create_app", "app_from_env", "API_VERSION", "RETRY_AFTER"]

log = logging.getLogger("ragjudge.server")
#: Seconds a client is asked to wait (``Retry-After``) while the job store is unavailable.
RETRY_AFTER = 2
_OPEN_PATHS = frozenset({"/v1/health", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc"}) | UI_PAGE_PATHS
_DOCS_ASSETS = "/docs/assets"  # Swagger UI / ReDoc files, open like the pages that load them
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Bad input (`field:line: name: message`)"},
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    413: {"model": ErrorBody, "description": "Request body or query x document count too large"},
    422: {"model": ErrorBody, "description": "Request does not match the schema"},
    429: {"model": ErrorBody, "description": "Too many concurrent requests from this client"},
}


# ----------------------------------------------------------------------------- guards
async def _send_json(send: Any, status: int, body: dict[str, Any],
                     headers: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


if sys.version_info >= (3, 11):
    async def _within(awaitable: Any, seconds: float) -> Any:
        """``await awaitable`` within ``seconds`` (:class:`asyncio.TimeoutError` after): a
        deadline on the running task, with no task of its own per request."""
        async with asyncio.timeout(seconds):
            return await awaitable
else:  # pragma: no cover - Python 3.10
    async def _within(awaitable: Any, seconds: float) -> Any:
        return await asyncio.wait_for(awaitable, timeout=seconds)


class _BodyTooLarge(Exception):
    """The body outgrew ``--max-body-bytes`` while it was read."""


class Guard:
    """Authentication, per-client concurrency and body size, before any route runs."""

    def __init__(self, app: Any, *, token: str | None, max_body: int, per_client: int,
                 body_seconds: float = 30.0) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.per_client = per_client
        self.body_seconds = body_seconds
        self.active: Counter[str] = Counter()  # requests being processed, by client address

    def _authorized(self, scope: Any) -> bool:
        path = scope["path"]
        if self.token is None or path in _OPEN_PATHS or path.startswith(_DOCS_ASSETS + "/"):
            return True
        value = b""
        for name, v in scope.get("headers", ()):
            if name == b"authorization":
                value = v
                break
        scheme, _, given = value.partition(b" ")
        # compare_digest on every request, whatever the header looks like (no early exit)
        ok = hmac.compare_digest(given.strip(), self.token)
        return ok and scheme.lower() == b"bearer"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _send_json(send, 401, {"detail": "missing or invalid bearer token "
                                         "(send 'Authorization: Bearer <token>')"},
                             [(b"www-authenticate", b"Bearer")])
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            receive = await self._read_body(scope, receive, send)
            if receive is None:
                return  # answered already (413, 408, 400) or the client went away
        # A slot is held while the request is processed, not while its body arrives: slow
        # uploads cannot lock a client's (or a shared proxy's) other requests out.
        client = (scope.get("client") or ("?", 0))[0]
        if self.active[client] >= self.per_client:
            await _send_json(send, 429, {"detail": f"more than {self.per_client} concurrent "
                                         "requests from this client; retry later"},
                             [(b"retry-after", b"1")])
            return
        self.active[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active[client] -= 1
            if self.active[client] <= 0:
                del self.active[client]

    async def _read_body(self, scope: Any, receive: Any, send: Any) -> Any:
        """The whole body, within its size limit and deadline, as a replaying ``receive``;
        ``None`` when the request was answered here instead."""
        too_large = {"detail": f"request body larger than {self.max_body:,} bytes "
                               "(ragjudge serve --max-body-bytes)"}
        for name, v in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(v)
                except ValueError:
                    await _send_json(send, 400, {"detail": "invalid Content-Length header"})
                    return None
                if declared > self.max_body:
                    await _send_json(send, 413, too_large)
                    return None
        chunks: list[bytes] = []

        async def read() -> bool:
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return False
                chunk = message.get("body", b"")
                if chunk:
                    chunks.append(chunk)
                    size += len(chunk)
                if size > self.max_body:
                    raise _BodyTooLarge
                if not message.get("more_body", False):
                    return True

        try:
            if not await _within(read(), self.body_seconds):
                return None
        except _BodyTooLarge:
            await _send_json(send, 413, too_large)
            return None
        except asyncio.TimeoutError:
            await _send_json(send, 408, {"detail": f"request body not received within "
                                         f"{self.body_seconds:g} s"}, [(b"connection", b"close")])
            return None
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                # join returns a lone bytes chunk itself: the usual one-message body is not copied
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return replay


# ----------------------------------------------------------------------------- errors
def _loc(loc: Any) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    for e in exc.errors():
        msg = str(e.get("msg", "invalid"))
        loc = _loc(e.get("loc", ()))
        if e.get("type") == "json_invalid":
            detail = (e.get("ctx") or {}).get("error")
            msg = f"invalid JSON at character {loc}" + (f" ({detail})" if detail else "")
            loc = "body"
        # never echo the input back: it may be large or hold something secret
        errors.append({"loc": loc, "msg": msg, "type": e.get("type")})
    first = errors[0] if errors else {"loc": "body", "msg": "invalid request"}
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return JSONResponse({"detail": f"{first['loc']}: {first['msg']}{more}", "errors": errors},
                        status_code=422)


def _redact(text: str) -> str:
    return redact(text)


async def _library_error(request: Request, exc: RagjudgeError) -> JSONResponse:
    text = str(exc)
    if isinstance(exc, MetricError):  # the request field it came from, as for file errors
        text = f"metrics: {text}"
    return JSONResponse({"detail": _redact(text)}, status_code=400)


async def _too_large(request: Request, exc: TooLarge) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=413)


async def _store_unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
    return JSONResponse({"detail": f"the job store is unavailable ({_redact(exc.reason)}); "
                         f"retry in a few seconds"}, status_code=503,
                        headers={"Retry-After": str(RETRY_AFTER)})


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.exception("internal error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal error (see the server log)"}, status_code=500)


# ----------------------------------------------------------------------------- the docs
def _offline_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI), its OAuth2 redirect and ``/redoc``, every script, stylesheet and
    icon served from ``/docs/assets/`` out of the installed ``fastapi-offline`` package: the
    pages name no other host, so they work offline and leak nothing to a CDN."""
    static = Path(fastapi_offline.__file__).parent / "static"
    app.mount(_DOCS_ASSETS, StaticFiles(directory=static), name="docs-assets")
    redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect}",
            swagger_js_url=f"{root}{_DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{_DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{_DOCS_ASSETS}/favicon.png",
            # no badge from the public validator: it would fetch from another host
            swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})})

    @app.get(redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{_DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{_DOCS_ASSETS}/favicon.png", with_google_fonts=False)


# ----------------------------------------------------------------------------- the app
def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The service as an ASGI app (``uvicorn.run(create_app(settings))``)."""
    settings = settings or ServerSettings()
    work = CpuWork(settings.cpu_processes)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = open_job_store(settings.jobs_path())
        manager = JobManager(store, settings)
        app.state.store, app.state.manager = store, manager
        manager.start()
        work.warm()  # the evaluation processes start beside the server, not on its first request
        try:
            yield
        finally:
            await manager.stop()
            await work.close()
            store.close()
            # uvicorn ends the process by the signal it stopped on (no exit hooks): answers its
            # jobs made while the cache's database was away are stored (or spilled) now.
            if "ragjudge.llm.postgres" in sys.modules:
                await asyncio.to_thread(sys.modules["ragjudge.llm.postgres"].close_kept)

    app = FastAPI(
        title="ragjudge",
        version=__version__,
        summary="Evaluate retrieval and RAG systems over HTTP: the ragjudge library's own "
                "results, with LLM judging as resumable background jobs.",
        lifespan=lifespan,
        responses=_ERRORS,  # type: ignore[arg-type]
        docs_url=None,  # served by _offline_docs from local files instead of a CDN
        redoc_url=None,
    )
    _offline_docs(app)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(RagjudgeError, _library_error)  # type: ignore[arg-type]
    app.add_exception_handler(TooLarge, _too_large)  # type: ignore[arg-type]
    app.add_exception_handler(StoreUnavailable, _store_unavailable)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _internal)
    app.add_middleware(Guard, token=settings.token(), max_body=settings.max_body_bytes,
                       per_client=settings.client_concurrency, body_seconds=settings.body_seconds)
    if settings.cors_origins:  # outside the guard: a browser's preflight carries no token
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key"])
    app.include_router(api_router(settings, work))
    app.include_router(health_router())
    app.include_router(icon_router())
    if settings.ui_files:  # the web page over the operator's files (ragjudge ui, --ui-file)
        app.include_router(ui_router(settings.ui_files, settings.ui_labels))
    return app


def app_from_env() -> FastAPI:
    """Factory for uvicorn worker processes: settings from ``$RAGJUDGE_SERVER_SETTINGS``."""
    text = os.environ.get(SETTINGS_ENV)
    return create_app(ServerSettings.from_json(text) if text else None)
