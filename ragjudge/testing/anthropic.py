"""A loopback fake of Anthropic's Messages API, for tests of code that judges with Claude.

It answers ``POST /v1/messages`` as the real API does where a client can tell: the key in
``x-api-key`` or as a bearer token, ``anthropic-version`` required, a ``tool_use`` reply for a
forced tool (how structured output is asked), ``anthropic-ratelimit-*`` headers, errors as
``{"type": "error", "error": {"type", "message"}}`` (529 ``overloaded_error`` included). Each
reply's content comes from the OpenAI-compatible simulator (:mod:`ragjudge.testing.simulator`),
so every prompt (relevance, RAG, synth) is answered as the simulator would: deterministic,
valid for the schema, plumbing rather than quality. ``script`` queues faults: each entry is a
status (429, 529, 500, 401, 400), ``"spend"`` (the 429 of a reached monthly spend limit: no
``retry-after``, and every later request gets it too) or ``"cache"`` (a good reply whose usage
reports prompt-cache reads and writes).

Prompt caching follows the docs: a request whose ``system`` text blocks carry ``cache_control``
(``{"type": "ephemeral"}``, ``ttl`` ``"5m"`` or ``"1h"``) writes its prefix (tools + system) on
first sight -- ``cache_creation_input_tokens``, split by TTL in ``cache_creation`` -- and reads
it afterwards (``cache_read_input_tokens``); ``input_tokens`` is then only the part after the
breakpoint.

``GET /v1/models`` lists ``models`` (dated ids, newest first, as the API lists them: a client
that accepts an alias such as ``claude-haiku-4-5`` must know it from the dated id) in pages of
``limit`` (default 20, 1 to 1000) with ``has_more`` / ``first_id`` / ``last_id`` and the
``after_id`` / ``before_id`` cursors; ``page_size`` caps a page lower, so a client's paging
can be tested with a short list. ``/v1/messages`` accepts any model name. The error shape
(:func:`error_body`) and the paging (:func:`models_page`) are plain functions, for other
servers of the same API (a test suite's own fault server) to answer alike.

In-process::

    with AnthropicFakeThread() as fake:
        LLM("claude-x", provider="anthropic", base_url=fake.base_url, api_key=fake.api_key)

As a command (prints the base URL on its first stdout line)::

    python -m ragjudge.testing.anthropic --port 8766

Only ever listens on 127.0.0.1. Needs aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import signal
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["MODELS", "AnthropicFakeThread", "FakeAnthropic", "error_body", "main", "models_page"]

HOST = "127.0.0.1"  # never anything else: this is a test fixture, not a service

#: The key the fake accepts unless told another.
DEFAULT_KEY = "sk-ant-test-key-0123456789"

#: What ``GET /v1/models`` lists unless told another: dated ids, the most recent first.
MODELS = ("claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805",
          "claude-opus-4-20250514", "claude-sonnet-4-20250514", "claude-3-7-sonnet-20250219",
          "claude-3-5-haiku-20241022")

_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
           429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
_DATE = re.compile(r"-(\d{4})(\d{2})(\d{2})$")


def error_body(status: int, message: str, *, kind: str | None = None,
               details: dict[str, Any] | None = None) -> dict[str, Any]:
    """An error reply's body as the API shapes it: ``{"type": "error", "error": {"type",
    "message"}, "request_id"}``; ``kind`` overrides the type the status implies, ``details``
    is the error's ``details`` object (``{"error_code": "enforced_spend_limit_reached"}``)."""
    error: dict[str, Any] = {"type": kind or _ERRORS.get(status, "api_error"), "message": message}
    if details is not None:
        error["details"] = details
    return {"type": "error", "error": error, "request_id": "req_fake"}


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    from aiohttp import web

    return web.json_response(error_body(status, message), status=status, headers=headers or {})


def _refused(request: Any, api_key: str) -> Any:
    """The error for a request without the key or ``anthropic-version`` (None: neither missing)."""
    # Older SDKs send the key as x-api-key, newer ones as a bearer token.
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    if api_key not in (request.headers.get("x-api-key"), bearer):
        return _error(401, "invalid x-api-key")
    if not request.headers.get("anthropic-version"):
        return _error(400, "anthropic-version header is required")
    return None


def _created_at(model_id: str) -> str:
    m = _DATE.search(model_id)
    return f"{m[1]}-{m[2]}-{m[3]}T00:00:00Z" if m else "2025-01-01T00:00:00Z"


@dataclass
class FakeAnthropic:
    """The request handlers: ``sim_url`` is the simulator's base URL (``.../v1``); ``requests``
    the message bodies received; ``billed`` the replies that carried usage; ``model_pages`` the
    ``/v1/models`` pages served; ``cached_prefixes`` the prompt-cache keys written."""

    sim_url: str
    api_key: str = DEFAULT_KEY
    script: deque[Any] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    billed: int = 0
    url: str = ""
    models: tuple[str, ...] = MODELS
    page_size: int = 1000
    model_pages: int = 0
    cached_prefixes: set[str] = field(default_factory=set)

    async def list_models(self, request: Any) -> Any:
        from aiohttp import web

        refused = _refused(request, self.api_key)
        if refused is not None:
            return refused
        status, body = models_page(self.models, request.query, self.page_size)
        self.model_pages += status == 200
        return web.json_response(body, status=status)

    async def handle(self, request: Any) -> Any:
        from aiohttp import ClientSession, web

        refused = _refused(request, self.api_key)
        if refused is not None:
            return refused
        body = await request.json()
        self.requests.append(body)
        step = self.script.popleft() if self.script else None
        if step == 429:
            return _error(429, "Number of requests has exceeded your rate limit",
                         {"retry-after": "0.05", "anthropic-ratelimit-requests-remaining": "0"})
        if step == "spend":
            self.script.appendleft("spend")  # the limit holds until the month ends
            return _error(429, "You have reached your specified API usage limits. You will regain "
                              "access on 2026-12-01 at 00:00 UTC.")
        if isinstance(step, int):
            return _error(step, {529: "Overloaded", 500: "Internal server error", 401: "invalid x-api-key",
                                400: "prompt is too long: 250000 tokens > 200000 maximum"}.get(step, "error"))
        if not isinstance(body.get("max_tokens"), int) or not body.get("messages"):
            return _error(400, "max_tokens and messages are required")
        system = body.get("system")
        breakpoint_ = None
        ttl = "5m"
        if isinstance(system, list):  # text blocks, perhaps with a cache_control breakpoint
            if any(not isinstance(b, dict) or b.get("type") != "text" for b in system):
                return _error(400, "system: blocks must be text blocks")
            if any("cache_control" in b for b in system):
                for b in system:
                    cc = b.get("cache_control")
                    if cc is not None and (not isinstance(cc, dict) or cc.get("type") != "ephemeral"
                                           or cc.get("ttl", "5m") not in ("5m", "1h")):
                        return _error(400, "system: cache_control must be {'type': 'ephemeral'}")
                    if cc is not None:
                        ttl = cc.get("ttl", "5m")
                breakpoint_ = json.dumps([body.get("tools"), system], sort_keys=True)
            system = "\n\n".join(b["text"] for b in system)
        messages = ([{"role": "system", "content": system}] if system else []) + body["messages"]
        chat: dict[str, Any] = {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"]}
        tool = (body.get("tools") or [None])[0]
        if tool is not None:
            chat["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": tool["name"], "schema": tool["input_schema"]}}
        async with ClientSession() as s:
            async with s.post(self.sim_url + "/chat/completions", json=chat,
                              headers={"authorization": "Bearer x"}) as r:
                reply = await r.json()
        if "choices" not in reply:
            return _error(500, "upstream error")
        self.billed += 1
        choice = reply["choices"][0]
        text = choice["message"].get("content") or ""
        usage = reply.get("usage") or {}
        content: list[dict[str, Any]]
        if tool is not None:
            try:
                content = [{"type": "tool_use", "id": "toolu_1", "name": tool["name"], "input": json.loads(text)}]
            except ValueError:
                content = [{"type": "text", "text": text}]
        else:
            content = [{"type": "text", "text": text}]
        out_usage: dict[str, Any] = {"input_tokens": usage.get("prompt_tokens", 10),
                                     "output_tokens": usage.get("completion_tokens", 5)}
        if step == "cache":
            out_usage.update(cache_read_input_tokens=1000, cache_creation_input_tokens=200)
        elif breakpoint_ is not None:
            # The prefix's share of the prompt: its characters / 4 (the simulator's own measure).
            prefix = len(breakpoint_) // 4
            out_usage["input_tokens"] = max(1, out_usage["input_tokens"] - prefix)
            key = hashlib.sha256(breakpoint_.encode()).hexdigest()
            if key in self.cached_prefixes:
                out_usage.update(cache_read_input_tokens=prefix, cache_creation_input_tokens=0)
            else:
                self.cached_prefixes.add(key)
                out_usage.update(cache_read_input_tokens=0, cache_creation_input_tokens=prefix,
                                 cache_creation={"ephemeral_5m_input_tokens": prefix if ttl == "5m" else 0,
                                                 "ephemeral_1h_input_tokens": prefix if ttl == "1h" else 0})
        reset = (datetime.now(timezone.utc) + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
        return web.json_response(
            {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"] + "-20251001",
             "content": content, "stop_reason": {"length": "max_tokens"}.get(choice.get("finish_reason"), "end_turn"),
             "stop_sequence": None, "usage": out_usage},
            headers={"anthropic-ratelimit-requests-limit": "4000", "anthropic-ratelimit-requests-remaining": "3999",
                     "anthropic-ratelimit-requests-reset": reset,
                     "anthropic-ratelimit-tokens-limit": "400000", "anthropic-ratelimit-tokens-remaining": "399000",
                     "anthropic-ratelimit-tokens-reset": reset})



def models_page(models: tuple[str, ...], query: Any, page_size: int = 1000) -> tuple[int, dict[str, Any]]:
    """``GET /v1/models`` for ``query`` (its ``limit``, ``after_id``, ``before_id``): the status
    and body, a page of ``models`` (at most ``page_size`` long) with ``has_more`` /
    ``first_id`` / ``last_id``, or a 400 for a bad limit or cursor."""
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 1000:
        return 400, error_body(400, "limit: must be an integer from 1 to 1000")
    after, before = query.get("after_id"), query.get("before_id")
    for cursor in (after, before):
        if cursor is not None and cursor not in models:
            return 400, error_body(400, f"no model with id {cursor!r} to page from")
    limit = min(limit, max(1, page_size))
    if before is not None:
        end = models.index(before)
        start = max(0, end - limit)
    else:
        start = models.index(after) + 1 if after is not None else 0
        end = min(len(models), start + limit)
    page = models[start:end]
    return 200, {
        "data": [{"type": "model", "id": m, "display_name": m, "created_at": _created_at(m)} for m in page],
        "has_more": start > 0 if before is not None else end < len(models),
        "first_id": page[0] if page else None, "last_id": page[-1] if page else None}


class AnthropicFakeThread:
    """The fake and its simulator on their own event loops in daemon threads:
    ``with AnthropicFakeThread() as fake: fake.base_url, fake.api_key, fake.fake.script``.
    ``models`` and ``page_size`` are :class:`FakeAnthropic`'s; ``sim`` holds
    :class:`~ragjudge.testing.simulator.SimConfig` fields (``latency``, faults, ...)."""

    def __init__(self, *, api_key: str = DEFAULT_KEY, port: int = 0, models: tuple[str, ...] = MODELS,
                 page_size: int = 1000, **sim: Any) -> None:
        # Deferred: the simulator loads aiohttp's server, which the Messages API wire
        # helpers of this module do not need.
        from .simulator import SimConfig, SimulatorThread

        sim.setdefault("latency", 0.01)
        self.simulator = SimulatorThread(SimConfig(**sim))
        self.api_key = api_key
        self._models = models
        self._page_size = page_size
        self._port = port
        self.fake: FakeAnthropic | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The URL to pass as ``base_url`` (``--base-url``)."""
        assert self.fake is not None, "not started"
        return self.fake.url

    def start(self) -> AnthropicFakeThread:
        from aiohttp import web

        self.simulator.start()
        fake = FakeAnthropic(self.simulator.base_url.rstrip("/"), api_key=self.api_key,
                             models=self._models, page_size=self._page_size)
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            app = web.Application()
            app.router.add_post("/v1/messages", fake.handle)
            app.router.add_get("/v1/models", fake.list_models)
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, HOST, self._port)
            loop.run_until_complete(site.start())
            port = runner.addresses[0][1]
            fake.url = f"http://{HOST}:{port}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._loop, self.fake = loop, fake
        self._thread = threading.Thread(target=run, name="ragjudge-anthropic-fake", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the Anthropic fake did not start in time")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None
        self.simulator.stop()

    def __enter__(self) -> AnthropicFakeThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m ragjudge.testing.anthropic [--port N] [--api-key K] [--latency S]``: serve
    until interrupted; the base URL on the first stdout line."""
    p = argparse.ArgumentParser(prog="python -m ragjudge.testing.anthropic",
                                description="A loopback fake of Anthropic's Messages API.")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    p.add_argument("--api-key", default=DEFAULT_KEY, help="the key it accepts")
    p.add_argument("--latency", type=float, default=0.01, help="seconds per reply")
    args = p.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with AnthropicFakeThread(api_key=args.api_key, port=args.port, latency=args.latency) as fake:
        print(fake.base_url, flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
