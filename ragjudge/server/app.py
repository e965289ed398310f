"""The FastAPI application: routes that translate HTTP to library calls, and the guards.

Guards (one ASGI middleware, in this order): bearer token (constant-time comparison; every
path but ``/v1/health`` and the API docs with their assets), request body size (413) and a
deadline for the whole body (408: a client trickling its body cannot hold the server), then per-client
concurrency (429 beyond it), counted only while a request is processed. Behind them, valid JSON
bodies of ``/v1/evaluate`` and ``/v1/compare`` skip FastAPI's request handling (:class:`FastJson`:
about 2 ms less per request; a small evaluation alone in flight even skips the worker thread);
anything else takes the routes. Outermost, :class:`AccessLog` writes one access-log line per
answer after it is sent. Errors: input problems are 400
(library) or 422 (schema) with the one-line ``field:line: name: message`` text the CLI prints;
anything unexpected is a bare 500 whose details stay in the server log. CORS is off unless origins are configured. ``/docs`` and
``/redoc`` load Swagger UI and ReDoc from the installed ``fastapi-offline`` package (served under
``/docs/assets/``), never from a CDN: the docs work without a network.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
import json
import logging
import os
import platform
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Union

import anyio
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel
from pydantic_core import from_json
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from .. import __version__
from ..errors import MetricError, RagjudgeError
from ..measures import split_metric_list
from .catalog import metric_catalog
from .jobs import (
    FINAL, JobManager, JobStore, build_llm, job_view, judge_pairs, rag_inputs, synth_inputs,
    synth_plan,
)
from .models import (
    CompareBody, CompareRequest, DryRunBody, ErrorBody, EvaluateRequest, Health, JobState,
    JudgeRequest, MetricInfo, RagReportBody, RagRequest, ReportBody, SynthDryRunBody,
    SynthRequest, Version,
)
from .service import TooLarge, compare_json, evaluate_json
from .settings import SETTINGS_ENV, ServerSettings
from .ui import PAGE_PATHS as UI_PAGE_PATHS

__all__ = ["create_app", "app_from_env", "API_VERSION", "ACCESS_LOG"]

API_VERSION = "v1"
log = logging.getLogger("ragjudge.server")
#: The access log's logger (see :class:`AccessLog`).
ACCESS_LOG = "ragjudge.server.access"
access_log = logging.getLogger(ACCESS_LOG)
_OPEN_PATHS = frozenset({"/v1/health", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc"}) | UI_PAGE_PATHS
_DOCS_ASSETS = "/docs/assets"  # Swagger UI / ReDoc files, open like the pages that load them
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Bad input (`field:line: name: message`)"},
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token"},
    413: {"model": ErrorBody, "description": "Request body or query x document count too large"},
    422: {"model": ErrorBody, "description": "Request does not match the schema"},
    429: {"model": ErrorBody, "description": "Too many concurrent requests from this client"},
}
_JOB_ID = Path(pattern=r"^[0-9a-f]{32}$", description="Job id")


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
                 body_seconds: float = 30.0, active: Counter[str] | None = None) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body
        self.per_client = per_client
        self.body_seconds = body_seconds
        # requests being processed, by client address (shared with the app when it passes one)
        self.active: Counter[str] = Counter() if active is None else active

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


class AccessLog:
    """One line per answered HTTP request on the :data:`ACCESS_LOG` logger, with uvicorn's
    access-log arguments (so uvicorn's access formatter prints the same line), written once the
    answer has been handed to the transport. uvicorn's own access log writes its line before it
    sends the status line, which put the formatting and the write on every answer's path (see
    the design notes); ``ragjudge serve`` turns that one off and configures
    this logger.

    A request whose handler raises before answering is logged as 500 (the status the app's
    outermost error handler then sends); one the app never answered (its client went away
    while the body arrived) is not logged.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        status = 0

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status = status or 500
            raise
        finally:
            if status:  # the arguments uvicorn's own access log gives, built by its helpers
                access_log.info('%s - "%s %s HTTP/%s" %d', get_client_addr(scope),
                                scope["method"], get_path_with_query_string(scope),
                                scope.get("http_version", "1.1"), status)


class FastJson:
    """``POST`` of a JSON body to a synchronous route, answered without FastAPI's per-request
    machinery: the body is decoded (pydantic-core's parser, several times the speed of
    :mod:`json`), validated and processed on the app's CPU slots.

    Only the plain success path is taken here. A body that is not ``application/json``, does
    not decode, or fails the schema goes on to the FastAPI route unchanged, so every such error
    (and the OpenAPI document) is FastAPI's own, byte for byte; library errors get the app's
    handlers. ``routes`` maps a path to its request model, ``fn(request) -> JSON`` and
    ``light(request) -> bool``: the work is small enough for the event loop itself when the
    request is the only one in flight (``run`` decides; see ``create_app``).
    """

    def __init__(self, app: Any, *, routes: dict[str, tuple[type[BaseModel], Any, Any]],
                 run: Any, handle: Any) -> None:
        self.app = app
        self.routes = routes
        self.run = run  # async (fn, *args, light=bool) -> result: the app's CPU slots
        self.handle = handle  # async (request, RagjudgeError) -> Response

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST" or scope.get("root_path") \
                or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Any] = []
        while True:  # the Guard has read the whole body already: one message as a rule
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        model, fn, light = route
        try:
            if len(body) <= _SMALL_BODY:
                # decoding takes well under a millisecond here: cheaper than a thread trip
                req = _decode(model, body)
                text = None if req is None else await self.run(fn, req, light=light(req))
            else:  # decoding a large body would stall the loop: all of it in one thread trip
                text = await self.run(_decode_and_call, model, fn, body)
        except RagjudgeError as exc:
            response = await self.handle(Request(scope), exc)
            await response(scope, receive, send)
            return
        if text is not None:
            await _json(text)(scope, receive, send)
            return

        async def replay() -> Any:  # FastAPI reads the same body and explains the problem
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


#: Bodies up to this size are decoded on the event loop, and a light request among them may
#: be answered there too (about 5 ms of evaluation at most; see ``create_app``).
_SMALL_BODY = 256 * 1024


def _is_json(scope: Any) -> bool:
    """The content type is ``application/json`` (FastAPI would decode the body as JSON)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return value.partition(b";")[0].strip().lower() == b"application/json"
    return False


def _decode(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """The request, or ``None`` when the body does not decode or validate (the caller then
    lets FastAPI report it). pydantic-core refuses what :func:`json.loads` accepts beyond
    standard JSON (NaN, lone surrogates, a BOM): those bodies take FastAPI's path too, so a
    request means the same on both."""
    try:
        # (model_validate_json is no faster for a body of a few long strings, and it takes NaN)
        return model.model_validate(from_json(body, allow_inf_nan=False))
    except ValueError:  # bad JSON, or a pydantic ValidationError (a ValueError too)
        return None


def _decode_and_call(model: type[BaseModel], fn: Any, body: bytes) -> str | None:
    """``fn(request)``, or ``None`` as for :func:`_decode`."""
    req = _decode(model, body)
    return None if req is None else fn(req)


def _light_evaluation(req: EvaluateRequest) -> bool:
    """One run and at most 8 measures, counted as the evaluation expands them (``all_trec``
    or ``P.5,10,...`` is many): the work then grows with the (small) body alone."""
    if len(req.runs) != 1:
        return False
    if req.metrics is None:
        return True
    try:
        return sum(len(split_metric_list(m)) for m in req.metrics) <= 8
    except MetricError:  # the thread path reports it
        return False


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
    from ..llm import redact

    return redact(text)


async def _library_error(request: Request, exc: RagjudgeError) -> JSONResponse:
    text = str(exc)
    if isinstance(exc, MetricError):  # the request field it came from, as for file errors
        text = f"metrics: {text}"
    return JSONResponse({"detail": _redact(text)}, status_code=400)


async def _too_large(request: Request, exc: TooLarge) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=413)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.exception("internal error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal error (see the server log)"}, status_code=500)


# ----------------------------------------------------------------------------- the docs
def _offline_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI), its OAuth2 redirect and ``/redoc``, every script, stylesheet and
    icon served from ``/docs/assets/`` out of the installed ``fastapi-offline`` package: the
    pages name no other host, so they work offline and leak nothing to a CDN."""
    from pathlib import Path as FilePath

    import fastapi_offline
    from fastapi.openapi.docs import (
        get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html,
    )
    from fastapi.staticfiles import StaticFiles

    static = FilePath(fastapi_offline.__file__).parent / "static"
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
def _json(text: str, status: int = 200) -> Response:
    return Response(content=text, media_type="application/json", status_code=status)


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The service as an ASGI app (``uvicorn.run(create_app(settings))``)."""
    settings = settings or ServerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = JobStore(settings.jobs_path())
        manager = JobManager(store, settings)
        app.state.store, app.state.manager = store, manager
        manager.start()
        try:
            yield
        finally:
            await manager.stop()
            store.close()

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
    app.add_exception_handler(Exception, _internal)
    limit = settings.max_pairs
    # CPU-bound evaluations run in threads, at most one per core at a time: more threads only
    # fight over the GIL and turn a queue into uniformly slow answers (worse p99, same req/s).
    cpu_slots = anyio.Semaphore(os.cpu_count() or 1)

    slots = cpu_slots.value
    active: Counter[str] = Counter()  # requests being processed (the Guard counts them)

    async def _cpu(fn: Any, *args: Any, light: bool = False) -> Any:
        # Light work of the only request being processed is done right here on the event
        # loop: the trip to a worker thread and back (~0.2-0.3 ms) is 5-8% of such a request.
        # The price is paid by a request arriving meanwhile: it waits for that work (bounded:
        # a body <= 256 KiB, one run, a few metrics; ~4-5 ms for the 179 KiB example) where a
        # worker thread would have let the loop answer it at once (the evaluation releases
        # the GIL often enough). Whenever another request is in flight, work goes to a thread.
        if light and cpu_slots.value == slots and sum(active.values()) == 1:
            return fn(*args)
        async with cpu_slots:
            return await run_in_threadpool(fn, *args)

    async def _handle(request: Request, exc: RagjudgeError) -> Response:
        return await (_too_large if isinstance(exc, TooLarge) else _library_error)(request, exc)

    # Innermost middleware (added first): behind the Guard's checks and inside CORS.
    app.add_middleware(FastJson, run=_cpu, handle=_handle, routes={
        "/v1/evaluate": (EvaluateRequest, functools.partial(evaluate_json, limit=limit),
                         _light_evaluation),
        # resamples make a small comparison long: never on the loop
        "/v1/compare": (CompareRequest, functools.partial(compare_json, limit=limit),
                        lambda req: False)})
    app.add_middleware(Guard, token=settings.token(), max_body=settings.max_body_bytes,
                       per_client=settings.client_concurrency, body_seconds=settings.body_seconds,
                       active=active)
    if settings.cors_origins:  # outside the guard: a browser's preflight carries no token
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key"])
    app.add_middleware(AccessLog)  # outermost: every answer, the guards' and CORS's too
    # Documents the bearer scheme in OpenAPI (the /docs "Authorize" button); Guard enforces it.
    bearer = [Depends(HTTPBearer(auto_error=False, description="Authorization: Bearer <token> "
                                 "(when the server has a token)"))]

    @app.post("/v1/evaluate", dependencies=bearer, response_model=None, tags=["ranking"],
              responses={200: {"model": Union[ReportBody, list[ReportBody]],
                               "description": "One run: its report; several: a list"}})
    async def evaluate(req: EvaluateRequest) -> Response:
        """Score runs against qrels: exactly what `ragjudge evaluate --no-stats --format json`
        prints (one object for one run, a list for several)."""
        return _json(await _cpu(evaluate_json, req, limit))

    @app.post("/v1/compare", dependencies=bearer, response_model=None, tags=["ranking"],
              responses={200: {"model": CompareBody}})
    async def compare(req: CompareRequest) -> Response:
        """Compare runs (paired tests, Holm correction, bootstrap intervals): exactly what
        `ragjudge compare --format json` prints."""
        return _json(await _cpu(compare_json, req, limit))

    @app.post("/v1/rag", dependencies=bearer, response_model=None, tags=["rag"], status_code=200,
              responses={200: {"model": RagReportBody, "description": "No LLM metric: the report"},
                         202: {"model": JobState, "description": "LLM metrics: a job"}})
    async def rag(req: RagRequest, request: Request) -> Response:
        """RAG metrics on samples. Deterministic metrics answer at once (the report of
        `ragjudge rag --format json`); LLM metrics start a job (202) whose result is that report."""
        samples, metrics, options = await _cpu(rag_inputs, req, limit)
        if not any(m.needs_llm for m in metrics):
            from ..rag import evaluate_samples_sync

            report = await _cpu(lambda: evaluate_samples_sync(samples, metrics, options=options))
            return _json(report.render("json", per_sample=req.per_sample))
        # model, key and budget are checked before accepting; the model is pinned in the job
        req.settings.model = build_llm(settings, req.settings).model
        return _new_job(request, "rag", req, 0)

    @app.post("/v1/judge", dependencies=bearer, response_model=None, status_code=202,
              tags=["jobs"], responses={202: {"model": JobState, "description": "The job"},
                                        200: {"model": DryRunBody, "description": "dry_run"}})
    async def judge(req: JudgeRequest, request: Request) -> Response:
        """Start a judge job: grade the pooled top-`depth` documents of runs (or explicit
        pairs) with the server's LLM; the result holds the qrels, every judgment and a summary.
        With `dry_run`: the estimate only (200)."""
        pairs = await _cpu(judge_pairs, req, limit)
        llm = build_llm(settings, req.settings, check_key=not req.dry_run)
        if req.dry_run:
            est = await _cpu(llm.estimate, req.prompt,
                             [{"query": p.query, "passage": p.passage} for p in pairs])
            return _json(json.dumps({**dataclasses.asdict(est), "description": est.describe()}))
        req.settings.model = llm.model  # a restart with another --model must not switch models
        return _new_job(request, "judge", req, len(pairs))

    @app.post("/v1/synth", dependencies=bearer, response_model=None, status_code=202,
              tags=["jobs"], responses={202: {"model": JobState, "description": "The job"},
                                        200: {"model": SynthDryRunBody, "description": "dry_run"}})
    async def synth(req: SynthRequest, request: Request) -> Response:
        """Start a synth job: `n` filtered synthetic queries from the corpus alone, as
        `ragjudge synth`; the result holds the queries, qrels (TREC text), RAG samples, every
        candidate and the accounting. With `dry_run`: the estimate only (200)."""
        options = synth_inputs(req, limit)
        llm = build_llm(settings, req.settings, check_key=not req.dry_run)
        plan = await _cpu(synth_plan, req, options, llm)  # checks every input; sends nothing
        if req.dry_run:
            return _json(json.dumps({**dataclasses.asdict(plan), "calls": plan.calls,
                                     "cost": plan.cost, "description": plan.describe()}))
        req.settings.model = llm.model  # a restart with another --model must not switch models
        total = sum(d.pairs for d in plan.generation.values()) + plan.judge.pairs
        return _new_job(request, "synth", req, total)

    def _new_job(request: Request, kind: str, req: Any, total: int) -> Response:
        store: JobStore = request.app.state.store
        job_id = store.create(kind, req.model_dump(mode="json"), total,
                              idempotency_key=request.headers.get("idempotency-key"))
        request.app.state.manager.wake()
        row = store.get(job_id)
        return _json(json.dumps(job_view(row)), 202)

    @app.get("/v1/jobs", dependencies=bearer, response_model=list[JobState], tags=["jobs"])
    async def jobs(request: Request) -> Any:
        """The 100 most recent jobs (without results)."""
        return [job_view(r, with_result=False) for r in request.app.state.store.list()]

    @app.get("/v1/jobs/{job_id}", dependencies=bearer, response_model=JobState, tags=["jobs"],
             responses={404: {"model": ErrorBody}})
    async def job(request: Request, job_id: str = _JOB_ID,
                  result: bool = Query(True, description="Include the result (false: state only)")
                  ) -> Any:
        """Status, progress, counts, cost so far; the result when done."""
        row = request.app.state.store.get(job_id)
        if row is None:
            return JSONResponse({"detail": f"job_id: no job {job_id}"}, status_code=404)
        return job_view(row, with_result=result)

    @app.delete("/v1/jobs/{job_id}", dependencies=bearer, response_model=JobState, tags=["jobs"],
                responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
    async def cancel(request: Request, job_id: str = _JOB_ID) -> Any:
        """Cancel a job, keeping what is judged (the partial result is in the job when it
        stops; `status` becomes `cancelled`)."""
        store: JobStore = request.app.state.store
        row = store.get(job_id)
        if row is None:
            return JSONResponse({"detail": f"job_id: no job {job_id}"}, status_code=404)
        if row["status"] in FINAL:
            return JSONResponse({"detail": f"job_id: job {job_id} is already {row['status']}"},
                                status_code=409)
        row = store.request_cancel(job_id)
        request.app.state.manager.wake()
        return job_view(row)

    @app.get("/v1/metrics", dependencies=bearer, response_model=list[MetricInfo], tags=["meta"])
    def metrics() -> Any:
        """Every metric spec with its definition and parameters."""
        return metric_catalog()

    @app.get("/v1/health", response_model=Health, tags=["meta"])
    async def health(request: Request) -> Any:
        """Liveness (no authentication)."""
        return {"status": "ok", "jobs_running": len(request.app.state.manager.running)}

    if settings.ui_files:  # the web page over the operator's files (ragjudge ui, --ui-file)
        from .ui.routes import ui_router

        app.include_router(ui_router(settings.ui_files, settings.ui_labels))

    @app.get("/v1/version", dependencies=bearer, response_model=Version, tags=["meta"])
    async def version() -> Any:
        return {"ragjudge": __version__, "api": API_VERSION, "python": platform.python_version()}

    return app


def app_from_env() -> FastAPI:
    """Factory for uvicorn worker processes: settings from ``$RAGJUDGE_SERVER_SETTINGS``."""
    text = os.environ.get(SETTINGS_ENV)
    return create_app(ServerSettings.from_json(text) if text else None)
