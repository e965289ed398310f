"""The ``/ui`` router: the page's static files and its JSON API over a
:class:`~.workspace.Workspace`; and ``/favicon.ico``, served with or without the page. Only
translation here: parameters in, workspace answers out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from .workspace import MAX_LIMIT, Workspace

__all__ = ["ui_router", "icon_router"]

_STATIC = Path(__file__).resolve().parent / "static"
_TYPES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "app.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
# The page runs only its own script and talks only to this server.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class LabelBody(BaseModel):
    index: int = Field(ge=0, description="Position of the pair in the to-label file")
    grade: int | None = Field(None, description="The grade; null: skipped / unsure")
    who: str = Field("", max_length=100, description="The assessor's name")


class UndoBody(BaseModel):
    who: str = Field("", max_length=100)


class NuggetLabelBody(BaseModel):
    answer: int = Field(ge=0, description="Position of the answer in the nugget to-label file")
    nugget: int = Field(ge=0, description="Position of the nugget in the answer")
    assignment: str | None = Field(None, max_length=40, description="support, partial_support, "
                                   "not_support; null: skipped / unsure")
    who: str = Field("", max_length=100, description="The assessor's name")


def _missing(exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc.args[0]) if exc.args else "not found"}, status_code=404)


def ui_router(files: tuple[str, ...] | list[str], labels: str | None = None) -> APIRouter:
    """The router for the page over ``files`` (read now, once; a bad file raises InputError)."""
    ws = Workspace(files, labels=labels)
    assets = {name: (_STATIC / name).read_bytes() for name in _TYPES}
    r = APIRouter(prefix="/ui", include_in_schema=False)

    def asset(name: str) -> Response:
        return Response(assets[name], media_type=_TYPES[name], headers=_HEADERS)

    @r.get("")
    def root() -> Response:
        return RedirectResponse("/ui/")

    @r.get("/")
    def index() -> Response:
        return asset("index.html")

    @r.get("/app.js")
    def js() -> Response:
        return asset("app.js")

    @r.get("/app.css")
    def css() -> Response:
        return asset("app.css")

    @r.get("/favicon.svg")
    def icon() -> Response:
        return asset("favicon.svg")

    def call(fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (KeyError, LookupError) as exc:
            return _missing(exc)

    paging = {"offset": Query(0, ge=0), "limit": Query(50, ge=1, le=MAX_LIMIT)}

    @r.get("/api/overview")
    def overview() -> Any:
        return ws.overview()

    @r.get("/api/results/{rid}")
    def result(rid: int) -> Any:
        return call(ws.result_table, rid)

    @r.get("/api/results/{rid}/diff")
    def diff(rid: int, metric: str, a: str, b: str, order: str = "desc", q: str = "",
             offset: int = paging["offset"], limit: int = paging["limit"]) -> Any:
        return call(ws.diff, rid, metric, a, b, order=order, search=q, offset=offset, limit=limit)

    @r.get("/api/queries")
    def queries(q: str = "", offset: int = paging["offset"], limit: int = paging["limit"]) -> Any:
        return ws.query_list(q, offset, limit)

    @r.get("/api/query")
    def query(qid: str, depth: int = Query(10, ge=1, le=1000)) -> Any:
        return call(ws.query, qid, depth)

    @r.get("/api/agreement")
    def agreement(human: int | None = None, llm: int | None = None,
                  offset: int = paging["offset"], limit: int = paging["limit"]) -> Any:
        return call(ws.agreement, human_grade=human, llm_grade=llm, offset=offset, limit=limit)

    @r.get("/api/label/state")
    def label_state() -> Any:
        return call(ws.label_state)

    @r.get("/api/label/pair/{index}")
    def label_pair(index: int, reveal: bool = False,
                   who: str = Query("", max_length=100)) -> Any:
        return call(ws.label_pair, index, reveal, who.strip())

    @r.post("/api/label")
    def label(body: LabelBody) -> Any:
        return call(ws.add_label, body.index, body.grade, body.who.strip())

    @r.post("/api/label/undo")
    def undo(body: UndoBody) -> Any:
        return call(ws.undo, body.who.strip())

    @r.get("/api/label/ppi")
    def ppi() -> Any:
        return call(ws.ppi)

    @r.get("/api/label/qrels")
    def qrels(request: Request) -> Any:
        try:
            text = ws.labels_trec()
        except LookupError as exc:
            return _missing(exc)
        return PlainTextResponse(text, headers={
            "Content-Disposition": 'attachment; filename="human.qrels"'})

    # ------------------------------------------------------------------ nuggets
    nd = ws.nuggets

    @r.get("/api/nuggets/answers")
    def nugget_answers(run: str = "", q: str = "", offset: int = paging["offset"],
                       limit: int = paging["limit"]) -> Any:
        return call(nd.answers, run, q, offset, limit)

    @r.get("/api/nuggets/answer")
    def nugget_answer(run: str, qid: str) -> Any:
        return call(nd.answer, run, qid)

    @r.get("/api/nuggets/label/state")
    def nugget_state() -> Any:
        return call(nd.state)

    @r.get("/api/nuggets/label/answer/{index}")
    def nugget_label_answer(index: int, review: bool = False,
                            who: str = Query("", max_length=100)) -> Any:
        return call(nd.label_answer, index, review, who.strip())

    @r.post("/api/nuggets/label")
    def nugget_label(body: NuggetLabelBody) -> Any:
        return call(nd.add_label, body.answer, body.nugget, body.assignment, body.who.strip())

    @r.post("/api/nuggets/label/undo")
    def nugget_undo(body: UndoBody) -> Any:
        return call(nd.undo, body.who.strip())

    @r.get("/api/nuggets/label/ppi")
    def nugget_ppi() -> Any:
        return call(nd.ppi)

    @r.get("/api/nuggets/label/assignments")
    def nugget_human() -> Any:
        try:
            text = nd.human_jsonl()
        except LookupError as exc:
            return _missing(exc)
        return PlainTextResponse(text, media_type="application/x-ndjson", headers={
            "Content-Disposition": 'attachment; filename="human_assignments.jsonl"'})

    return r


def icon_router() -> APIRouter:
    """``/favicon.ico``: browsers ask the site's root for an icon whatever they show (the page,
    the API docs, a JSON answer), so the service answers it with the page's icon whether or not
    it serves the page (``--ui-file``)."""
    icon = (_STATIC / "favicon.svg").read_bytes()
    r = APIRouter(include_in_schema=False)

    @r.get("/favicon.ico")
    def favicon() -> Response:
        return Response(icon, media_type=_TYPES["favicon.svg"], headers=_HEADERS)

    return r
