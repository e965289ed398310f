"""A loopback fake of Anthropic's Messages API for the anthropic provider's tests.

It answers ``POST /v1/messages`` the way the real API does (a key in ``x-api-key`` or as a bearer token,
and ``anthropic-version``, required, tool-use replies for forced tools, ``anthropic-ratelimit-*``
headers, error bodies ``{"type": "error", "error": {"type", "message"}}``, 529 ``overloaded``),
and gets the content of each reply from the project's OpenAI-compatible simulator
(``benchmarks/simulator.py``), so every prompt (relevance, RAG, synth) is answered as the
simulator would. ``script`` queues faults: each entry is a status (429, 529, 500, 401, 400),
``"spend"`` (the monthly spend-limit 429: no ``retry-after``, not to be retried) or ``"cache"``
(a good reply whose usage includes prompt-cache reads and writes).

Prompt caching follows the docs: a request whose ``system`` blocks carry ``cache_control``
writes its prefix (tools + system) on first sight -- ``cache_creation_input_tokens`` with the
``cache_creation`` split by TTL -- and reads it afterwards (``cache_read_input_tokens``);
``input_tokens`` is then only the part after the breakpoint. ``GET /v1/models`` lists
``models`` (dated ids, as the API lists them; aliases are accepted by ``/v1/messages`` but not
listed) in pages of ``limit`` (default 20) with ``has_more`` / ``last_id`` / ``after_id``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from _loopback import simulator_thread

_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
           500: "api_error", 529: "overloaded_error"}

#: What /v1/models lists: dated ids only, more than one page of them.
MODELS = tuple(f"claude-test-{i:02d}-20250101" for i in range(30)) + (
    "claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929", "claude-opus-4-20250514",
    "claude-3-7-sonnet-20250219")


@dataclass
class FakeAnthropic:
    sim_url: str
    api_key: str = "sk-ant-test-key-0123456789"
    script: deque[Any] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    billed: int = 0
    url: str = ""
    models: tuple[str, ...] = MODELS
    model_pages: int = 0  # GET /v1/models requests served
    cached_prefixes: set[str] = field(default_factory=set)

    async def list_models(self, request: Any) -> Any:
        from aiohttp import web

        self.model_pages += 1
        limit = int(request.query.get("limit", "20"))
        limit = max(1, min(limit, 20))  # the fake's page size is small so every client pages
        after = request.query.get("after_id")
        start = self.models.index(after) + 1 if after in self.models else 0
        page = self.models[start:start + limit]
        return web.json_response({
            "data": [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                     for m in page],
            "has_more": start + limit < len(self.models),
            "first_id": page[0] if page else None, "last_id": page[-1] if page else None})

    async def handle(self, request: Any) -> Any:
        from aiohttp import ClientSession, web

        def error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
            return web.json_response({"type": "error", "error": {"type": _ERRORS.get(status, "api_error"),
                                                                 "message": message}},
                                     status=status, headers=headers or {})

        # Older SDKs send the key as x-api-key, newer ones as a bearer token.
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.api_key not in (request.headers.get("x-api-key"), bearer):
            return error(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return error(400, "anthropic-version header is required")
        body = await request.json()
        self.requests.append(body)
        step = self.script.popleft() if self.script else None
        if step == 429:
            return error(429, "Number of requests has exceeded your rate limit",
                         {"retry-after": "0.05", "anthropic-ratelimit-requests-remaining": "0"})
        if step == "spend":
            self.script.appendleft("spend")  # the limit holds until the month ends
            return error(429, "You have reached your specified API usage limits. You will regain "
                              "access on 2026-12-01 at 00:00 UTC.")
        if isinstance(step, int):
            return error(step, {529: "Overloaded", 500: "Internal server error", 401: "invalid x-api-key",
                                400: "prompt is too long: 250000 tokens > 200000 maximum"}.get(step, "error"))
        if not isinstance(body.get("max_tokens"), int) or not body.get("messages"):
            return error(400, "max_tokens and messages are required")
        system = body.get("system")
        breakpoint_ = None
        if isinstance(system, list):  # text blocks, perhaps with a cache_control breakpoint
            if any(not isinstance(b, dict) or b.get("type") != "text" for b in system):
                return error(400, "system: blocks must be text blocks")
            if any("cache_control" in b for b in system):
                for b in system:
                    cc = b.get("cache_control")
                    if cc is not None and (not isinstance(cc, dict) or cc.get("type") != "ephemeral"
                                           or cc.get("ttl", "5m") not in ("5m", "1h")):
                        return error(400, "system: cache_control must be {'type': 'ephemeral'}")
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
            return error(500, "upstream error")
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
                                 cache_creation={"ephemeral_5m_input_tokens": prefix,
                                                 "ephemeral_1h_input_tokens": 0})
        reset = (datetime.now(timezone.utc) + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
        return web.json_response(
            {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"] + "-20251001",
             "content": content, "stop_reason": {"length": "max_tokens"}.get(choice.get("finish_reason"), "end_turn"),
             "stop_sequence": None, "usage": out_usage},
            headers={"anthropic-ratelimit-requests-limit": "4000", "anthropic-ratelimit-requests-remaining": "3999",
                     "anthropic-ratelimit-requests-reset": reset,
                     "anthropic-ratelimit-tokens-limit": "400000", "anthropic-ratelimit-tokens-remaining": "399000",
                     "anthropic-ratelimit-tokens-reset": reset})


@contextmanager
def fake_anthropic(**sim: Any) -> Iterator[FakeAnthropic]:
    """The fake on a loopback port (``fake.url`` is the base URL to pass as ``--base-url``)."""
    pytest.importorskip("anthropic", reason="the anthropic provider's tests need the anthropic SDK")
    from aiohttp import web

    sim.setdefault("latency", 0.01)
    with simulator_thread(**sim) as simulator:
        fake = FakeAnthropic(simulator.base_url.rstrip("/"))
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        runner_box: list[Any] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            app = web.Application()
            app.router.add_post("/v1/messages", fake.handle)
            app.router.add_get("/v1/models", fake.list_models)
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            fake.url = f"http://127.0.0.1:{port}"
            runner_box.append(runner)
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert ready.wait(10), "fake Anthropic server did not start"
        try:
            yield fake
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
