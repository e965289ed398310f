"""A small fault server speaking an LLM provider's API, standard library only (``http.server``).

Each provider's API is one :class:`Api` in :data:`APIS`:

* ``openai``: ``POST /v1/chat/completions`` (and ``GET /v1/models``), the reply a valid instance
  of the request's ``json_schema`` response format;
* ``anthropic``: Anthropic's Messages API as its public documentation describes it: ``POST
  /v1/messages`` (``x-api-key`` and ``anthropic-version`` required, the request checked: a
  ``max_tokens``, user/assistant turns, tools with an ``input_schema`` and a ``tool_choice``
  naming one), the reply a ``tool_use`` block whose ``input`` is a valid instance of the forced
  tool's schema, usage as ``input_tokens`` / ``output_tokens`` / ``cache_creation_input_tokens``
  / ``cache_read_input_tokens``, the reply's ``model`` the dated id of the alias asked for;
  ``GET /v1/models`` lists dated ids only, in short pages (``has_more`` / ``last_id``, the
  ``after_id`` cursor), the served model past the first page; errors as ``{"type": "error",
  "error": {"type", "message"}}`` (the shapes and the paging are those of
  :mod:`ragjudge.testing.anthropic`, the fake users get).

The reply is drawn deterministically from the request (the same request gets the same reply),
or is a fault, chosen per request by :class:`FaultServer`'s ``modes`` (``{mode: rate}``; the
rest are clean replies); each API answers a mode in its own terms:

====================  =======  ==============================================================
mode                  billed   what the client gets
====================  =======  ==============================================================
``5xx``               no       HTTP 500
``overloaded``        no       HTTP 529 ``overloaded_error`` (OpenAI: 503)
``429``               no       HTTP 429 with ``Retry-After: 1``
``429_bare``          no       HTTP 429 without ``Retry-After``
``stall``             yes      a 200's headers, then nothing (until the client gives up)
``reset``             yes      a 200's headers and half the body, then a TCP reset
``gzip``              yes      ``Content-Encoding: gzip`` on a plain JSON body
``malformed``         yes      a 200 whose body is cut JSON
``bad_content``       yes      a 200 whose answer is cut JSON: the ``tool_use`` block's
                               ``input`` a string (OpenAI: the message's content)
``empty_choices``     yes      no answer with usage: ``"content": []`` (OpenAI: ``"choices": []``)
``other_model``       yes      a clean reply naming another model
``usage_huge``        yes      a clean reply whose usage says ``1e400`` output tokens
``usage_negative``    yes      a clean reply whose usage says ``-500`` output tokens
``usage_text``        yes      a clean reply whose usage says ``"many"`` output tokens
``usage_cache``       yes      a clean reply part of whose prompt is stated as prompt-cache
                               reads and 5-minute and 1-hour writes (OpenAI: cached tokens),
                               billed at those rates
``spend_limit``       no       the account's spend limit is reached, from this request on:
                               429 ``rate_limit_error`` without ``retry-after``, its
                               ``details.error_code`` ``enforced_spend_limit_reached``
                               (OpenAI: 429 ``insufficient_quota``)
``spend_limit_400``   no       the self-set usage limit, from this request on: 400
                               ``invalid_request_error`` "You have reached your specified API
                               usage limits..." (OpenAI: 429 ``insufficient_quota``)
====================  =======  ==============================================================

Billing is counted on the server side, as a provider would: every billed reply adds its true
tokens (prompt: UTF-8 bytes / 4 rounded up; completion: the content's, at most ``max_tokens``),
so a test knows the *true spend* whatever the client could read, and ``paid_twice``: billed
requests identical to one that already got a clean reply (the client asked again for an
answer it had been given). ``invalid`` counts requests the API would refuse as malformed (a
client bug), ``after_stop`` the requests sent after a spend limit was reached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

#: Every fault mode, and whether the provider bills it.
MODES: dict[str, bool] = {
    "5xx": False, "overloaded": False, "429": False, "429_bare": False, "stall": True, "reset": True,
    "gzip": True, "malformed": True, "bad_content": True, "empty_choices": True, "other_model": True,
    "usage_huge": True, "usage_negative": True, "usage_text": True, "usage_cache": True,
    "spend_limit": False, "spend_limit_400": False,
}
#: Modes whose reply a client may use as it is: a second bill for the same request is paid twice.
USABLE = frozenset({"ok", "usage_huge", "usage_negative", "usage_text", "usage_cache"})
#: Modes that hold from their first request on (every later request gets them too).
STICKY = frozenset({"spend_limit", "spend_limit_400"})
#: USD per 1M tokens (the tests' own prices): prompt-cache reads at 0.1x input, 5-minute writes
#: at 1.25x and 1-hour writes at 2x, as Anthropic bills them.
PRICES = {"input": 1.0, "output": 4.0, "cached_input": 0.1, "cache_write": 1.25, "cache_write_1h": 2.0}
#: Prompt tokens Anthropic adds for a forced tool (its tool-use system prompt).
TOOL_PROMPT = 313


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?\"'()[]{}") for w in text.split() if w.strip(".,;:!?\"'()[]{}")]


class _Instance:
    """A valid instance of a JSON schema, drawn from ``rng``; strings are runs of the words of
    the request's last message (so generated questions share words with their passage)."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random, words: list[str]) -> None:
        self.root, self.rng, self.words = root, rng, words or ["text"]

    def _resolve(self, s: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = s.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            node: Any = self.root
            for part in ref[2:].split("/"):
                node = node[part]
            return node
        return s

    def gen(self, schema: Any, depth: int = 0) -> Any:
        s = self._resolve(schema if isinstance(schema, Mapping) else {})
        if "const" in s:
            return s["const"]
        if s.get("enum"):
            return self.rng.choice(list(s["enum"]))
        for alt in ("anyOf", "oneOf"):
            if s.get(alt):
                options = [o for o in s[alt] if self._resolve(o).get("type") != "null"] or s[alt]
                return self.gen(options[0], depth + 1)
        kind = s.get("type", "object" if "properties" in s else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        if kind == "object":
            props = s.get("properties") or {}
            return {k: self.gen(v, depth + 1) for k, v in props.items()}
        if kind == "array":
            lo = int(s.get("minItems", 1))
            hi = max(lo, min(int(s.get("maxItems", 3)), 3))
            return [self.gen(s.get("items") or {}, depth + 1) for _ in range(self.rng.randint(lo, hi) if depth < 4 else lo)]
        if kind in ("integer", "number"):
            lo = s.get("minimum", 0)
            hi = s.get("maximum", lo + 3)
            v = self.rng.randint(math.ceil(lo), math.floor(hi))
            return v if kind == "integer" else float(v)
        if kind == "boolean":
            return self.rng.random() < 0.5
        n = len(self.words)
        start = self.rng.randrange(n)
        text = " ".join(self.words[start:start + self.rng.randint(4, 9)]) or "text"
        limit = s.get("maxLength")
        return text[: int(limit)] if isinstance(limit, int) else text


def _text(content: Any) -> str:
    """A message's text: a string, or the text of its content blocks."""
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return str(content or "")


def answer(messages: Any, schema: Mapping[str, Any] | None, extra: Any = None) -> Any:
    """The clean answer to ``messages`` (deterministic): an instance of ``schema``."""
    seed = hashlib.sha256(json.dumps([messages, extra], sort_keys=True).encode()).hexdigest()
    rng = random.Random(seed)
    last = (messages or [{}])[-1]
    words = _words(_text(last.get("content", "")) if isinstance(last, Mapping) else "")
    if schema is None:
        return {"reasoning": "because", "grade": rng.randint(0, 3)}
    return _Instance(schema, rng, words).gen(schema)


def reply_content(body: Mapping[str, Any]) -> str:
    """The clean reply's content for a chat completions request ``body`` (deterministic)."""
    rf = body.get("response_format") or {}
    schema = (rf.get("json_schema") or {}).get("schema") if rf.get("type") == "json_schema" else None
    return json.dumps(answer(body.get("messages"), schema))


def request_key(body: Mapping[str, Any]) -> str:
    """What makes two requests the same request (and a second bill for it a second payment)."""
    keep = {k: body.get(k) for k in ("model", "messages", "response_format", "temperature", "seed",
                                     "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs",
                                     "system", "tools", "tool_choice")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


Reply = tuple[int, Any, dict[str, str]]  # status, JSON body, headers


class _Quiet(ThreadingHTTPServer):
    """A client that hangs up (a run stopping, an attempt cut at its deadline) is no error of
    the server's: no traceback for it on stderr, where a cell's own lines are read."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Api:
    """How one provider's API names things: its routes, its request checks, its error shapes
    and its replies (the fault modes in its own terms). ``model`` is the name a client asks for."""

    name = "base"
    #: The base URL's path a client is given (``/v1`` or the host alone).
    root = "/v1"

    def __init__(self, model: str) -> None:
        self.model = model

    def served(self) -> str:
        """The model name a clean reply states."""
        return self.model

    def is_chat(self, path: str) -> bool:
        raise NotImplementedError

    def refuse(self, headers: Mapping[str, str], body: Any) -> Reply | None:
        """The error for a request the API would refuse (``None``: a valid request)."""
        return None

    def models(self, query: Mapping[str, str]) -> Reply:
        raise NotImplementedError

    def error(self, mode: str) -> Reply:
        raise NotImplementedError

    def reply(self, body: Mapping[str, Any], mode: str, served: str) -> tuple[dict[str, Any], int, int]:
        """The clean reply for ``body`` naming ``served``, with its true prompt and completion
        tokens."""
        raise NotImplementedError

    def odd(self, reply: dict[str, Any], mode: str, prompt: int) -> tuple[bytes, int, int, int]:
        """The reply's bytes in ``mode`` and the prompt tokens it states as cache reads,
        5-minute writes and 1-hour writes (billed at their own rates)."""
        raise NotImplementedError


class OpenAIApi(Api):
    """OpenAI's chat completions API."""

    name = "openai"

    def is_chat(self, path: str) -> bool:
        return path.rstrip("/").endswith("/chat/completions")

    def models(self, query: Mapping[str, str]) -> Reply:
        return 200, {"object": "list", "data": [{"id": self.model, "object": "model"}]}, {}

    def error(self, mode: str) -> Reply:
        if mode == "5xx":
            return 500, {"error": {"message": "internal error", "type": "server_error"}}, {}
        if mode == "overloaded":
            return 503, {"error": {"message": "the server is overloaded", "type": "server_error"}}, {}
        if mode in ("429", "429_bare"):
            return 429, {"error": {"message": "rate limited", "type": "rate_limit_error"}}, \
                ({"retry-after": "1"} if mode == "429" else {})
        # spend_limit, spend_limit_400: OpenAI says both as a 429 insufficient_quota
        return 429, {"error": {"message": "You exceeded your current quota, please check your plan and billing "
                                          "details.", "type": "insufficient_quota", "code": "insufficient_quota"}}, {}

    def reply(self, body: Mapping[str, Any], mode: str, served: str) -> tuple[dict[str, Any], int, int]:
        content = reply_content(body)
        prompt = sum(len(str(m.get("content", "")).encode()) for m in body.get("messages") or []) // 4 + 1
        cap = body.get("max_completion_tokens") or body.get("max_tokens") or 10**6
        completion = min(int(cap), len(content.encode()) // 4 + 1)
        if mode == "bad_content":
            content = content[: len(content) // 2]
        return {
            "id": "chatcmpl-fault", "object": "chat.completion", "created": int(time.time()), "model": served,
            "choices": [] if mode == "empty_choices" else [
                {"index": 0, "finish_reason": "stop", "logprobs": None,
                 "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }, prompt, completion

    def odd(self, reply: dict[str, Any], mode: str, prompt: int) -> tuple[bytes, int, int, int]:
        usage = reply["usage"]
        read = 0
        if mode == "usage_cache":
            read = prompt // 2
            usage["prompt_tokens_details"] = {"cached_tokens": read}
        if mode == "usage_huge":
            data = json.dumps(reply).encode()
            return data.replace(f'"completion_tokens": {usage["completion_tokens"]}'.encode(),
                                b'"completion_tokens": 1e400'), 0, 0, 0
        if mode in ("usage_negative", "usage_text"):
            usage["completion_tokens"] = -500 if mode == "usage_negative" else "many"
        return json.dumps(reply).encode(), read, 0, 0


def _anthropic_models(model_id: str) -> tuple[str, ...]:
    # Dated ids only, newest first, the served one past the first page (pages of 5).
    return tuple(f"claude-filler-{i:02d}-20250301" for i in range(7)) + (model_id,) + tuple(
        f"claude-older-{i}-20240101" for i in range(4))


class AnthropicApi(Api):
    """Anthropic's Messages API, from its public documentation (the reply's ``model`` is the
    dated id of the alias asked for, as the API answers an alias)."""

    name = "anthropic"
    root = ""
    page_size = 5

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.model_id = f"{model}-20250101"
        self.listed = _anthropic_models(self.model_id)

    def served(self) -> str:
        return self.model_id

    def is_chat(self, path: str) -> bool:
        return path.rstrip("/").endswith("/v1/messages")

    def _error(self, status: int, message: str, *, kind: str | None = None,
               details: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Reply:
        from ragjudge.testing.anthropic import error_body

        return status, error_body(status, message, kind=kind, details=details), headers or {}

    def refuse(self, headers: Mapping[str, str], body: Any) -> Reply | None:
        bearer = (headers.get("authorization") or "").removeprefix("Bearer ")
        if not (headers.get("x-api-key") or bearer):
            return self._error(401, "invalid x-api-key")
        if not headers.get("anthropic-version"):
            return self._error(400, "anthropic-version: header is required")
        if body is None:
            return None
        problem = self._check(body)
        return None if problem is None else self._error(400, problem)

    @staticmethod
    def _check(body: Any) -> str | None:
        """What the API would say is wrong with a Messages request (``None``: nothing)."""
        if not isinstance(body, Mapping):
            return "body: must be an object"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model: Field required"
        mt = body.get("max_tokens")
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
            return "max_tokens: Field required (an integer >= 1)"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant"):
                return f"messages.{i}.role: must be user or assistant"
            c = m.get("content")
            if not isinstance(c, str) and not (isinstance(c, list) and all(isinstance(b, Mapping) for b in c)):
                return f"messages.{i}.content: must be a string or content blocks"
        if messages[0].get("role") != "user":
            return "messages: the first message must use the user role"
        system = body.get("system")
        if system is not None and not isinstance(system, str) and not (
                isinstance(system, list) and all(isinstance(b, Mapping) and b.get("type") == "text" for b in system)):
            return "system: must be a string or text blocks"
        if isinstance(system, list):
            for b in system:
                cc = b.get("cache_control")
                if cc is not None and (not isinstance(cc, Mapping) or cc.get("type") != "ephemeral"
                                       or cc.get("ttl", "5m") not in ("5m", "1h")):
                    return "system: cache_control must be {'type': 'ephemeral'} with ttl 5m or 1h"
        for key in ("response_format", "seed", "logprobs", "top_logprobs", "max_completion_tokens"):
            if key in body:
                return f"{key}: Extra inputs are not permitted"
        t = body.get("temperature")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1):
            return "temperature: must be a number from 0 to 1"
        tools = body.get("tools")
        names = []
        if tools is not None:
            if not isinstance(tools, list):
                return "tools: must be a list"
            for i, tool in enumerate(tools):
                if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str) \
                        or not isinstance(tool.get("input_schema"), Mapping) \
                        or tool["input_schema"].get("type") != "object":
                    return f"tools.{i}: a name and an input_schema of type object are required"
                names.append(tool["name"])
        choice = body.get("tool_choice")
        if choice is not None:
            if not isinstance(choice, Mapping) or choice.get("type") not in ("auto", "any", "tool", "none"):
                return "tool_choice: must be auto, any, tool or none"
            if choice.get("type") == "tool" and choice.get("name") not in names:
                return f"tool_choice.name: no tool named {choice.get('name')!r}"
        return None

    def models(self, query: Mapping[str, str]) -> Reply:
        from ragjudge.testing.anthropic import models_page

        status, body = models_page(self.listed, query, self.page_size)
        return status, body, {}

    def error(self, mode: str) -> Reply:
        if mode == "5xx":
            return self._error(500, "Internal server error")
        if mode == "overloaded":
            return self._error(529, "Overloaded")
        if mode in ("429", "429_bare"):
            return self._error(429, "Number of request tokens has exceeded your per-minute rate limit",
                               headers={"retry-after": "1"} if mode == "429" else None)
        if mode == "spend_limit":
            # The monthly cap of the usage tier: a rate_limit_error without retry-after; only its
            # details say it is not a rate limit (the message is not relied on).
            return self._error(429, "Your request was rejected; usage resumes at 2026-12-01T00:00:00Z.",
                               details={"error_code": "enforced_spend_limit_reached"})
        # spend_limit_400: a spend limit the organisation set itself
        return self._error(400, "You have reached your specified API usage limits. You will regain access on "
                                "2026-12-01 at 00:00 UTC.")

    def reply(self, body: Mapping[str, Any], mode: str, served: str) -> tuple[dict[str, Any], int, int]:
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {}
        tool = next((t for t in tools if t.get("name") == choice.get("name")), None) \
            if choice.get("type") == "tool" else None
        system = body.get("system")
        system_text = _text(system) if isinstance(system, list) else str(system or "")
        messages = body.get("messages") or []
        value = answer(messages, tool["input_schema"] if tool else None, system_text)
        content_text = json.dumps(value)
        prompt = (len(system_text.encode()) + sum(len(_text(m.get("content")).encode()) for m in messages)
                  + len(json.dumps(tools).encode())) // 4 + 1 + (TOOL_PROMPT if tool else 0)
        completion = min(int(body["max_tokens"]), len(content_text.encode()) // 4 + 1)
        if tool is not None:
            block: dict[str, Any] = {"type": "tool_use", "id": "toolu_fault", "name": tool["name"],
                                     "input": content_text[: len(content_text) // 2] if mode == "bad_content" else value}
            stop = "tool_use"
        else:
            text = content_text[: len(content_text) // 2] if mode == "bad_content" else content_text
            block, stop = {"type": "text", "text": text}, "end_turn"
        if completion < len(content_text.encode()) // 4 + 1:
            stop = "max_tokens"
        return {
            "id": "msg_fault", "type": "message", "role": "assistant", "model": served,
            "content": [] if mode == "empty_choices" else [block], "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0},
        }, prompt, completion

    def odd(self, reply: dict[str, Any], mode: str, prompt: int) -> tuple[bytes, int, int, int]:
        usage = reply["usage"]
        read = w5 = w1h = 0
        if mode == "usage_cache":
            # Half the prompt read from the cache, a quarter written for 5 minutes, a quarter for
            # an hour: input_tokens is only the rest (each prompt token is stated once).
            read, w5, w1h = prompt // 2, prompt // 4, prompt // 4
            usage["input_tokens"] = prompt - read - w5 - w1h
            usage["cache_read_input_tokens"] = read
            usage["cache_creation_input_tokens"] = w5 + w1h
            usage["cache_creation"] = {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1h}
        if mode == "usage_huge":
            data = json.dumps(reply).encode()
            return data.replace(f'"output_tokens": {usage["output_tokens"]}'.encode(),
                                b'"output_tokens": 1e400'), 0, 0, 0
        if mode in ("usage_negative", "usage_text"):
            usage["output_tokens"] = -500 if mode == "usage_negative" else "many"
        return json.dumps(reply).encode(), read, w5, w1h


#: Each provider's API, by the name ``--provider`` takes.
APIS: dict[str, type[Api]] = {"openai": OpenAIApi, "anthropic": AnthropicApi}


class FaultServer:
    """One loopback endpoint (``base_url``) with its fault ``modes`` and billing counters.

    ``modes``: ``{mode: rate}`` with rates in [0, 1] summing to at most 1 (``{"5xx": 1.0}``: an
    endpoint failing every call). ``stall_s``: how long a stalled reply holds its connection
    (the client's timeout should end it first). ``model``: the name a client asks for (a clean
    reply gives it, or the API's dated id for it). ``api``: a name in :data:`APIS`."""

    def __init__(self, modes: Mapping[str, float] | None = None, *, model: str = "fault-model",
                 seed: int = 0, stall_s: float = 30.0, latency: float = 0.0, api: str = "openai") -> None:
        unknown = set(modes or {}) - set(MODES)
        if unknown:
            raise ValueError(f"unknown fault modes {sorted(unknown)}; known: {sorted(MODES)}")
        self.modes = dict(modes or {})
        self.api = APIS[api](model)
        self.model, self.stall_s, self.latency = model, stall_s, latency
        self._seed = seed
        self._picks = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stuck: str | None = None  # a sticky mode, once met
        self.reset_counts()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _headers(self) -> dict[str, str]:
                return {k.lower(): v for k, v in self.headers.items()}

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path.rstrip("/").endswith("/v1/models"):
                    refused = server.api.refuse(self._headers(), None)
                    status, obj, headers = refused or server.api.models(
                        {k: v[-1] for k, v in parse_qs(query).items()})
                    self._send(status, obj, headers)
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if len(raw) < length:  # the client went away mid-request (a run stopping): nothing to answer
                    self.close_connection = True
                    return
                if not server.api.is_chat(self.path.partition("?")[0]):
                    self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "bad JSON"}})
                    return
                server._serve(self, body)

            def _send(self, status: int, obj: Any, headers: Mapping[str, str] | None = None,
                      raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._httpd = _Quiet(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # -- counters ----------------------------------------------------------------------
    def reset_counts(self) -> None:
        with self._lock:
            self.requests = 0
            self.outcomes: dict[str, int] = {}
            self.billed_calls = 0
            self.prompt_tokens = 0
            self.completion_tokens = 0
            self._spend = 0.0
            self.paid_twice = 0
            self.refused_other = 0  # requests asked again after a reply naming another model
            self.invalid = 0  # requests the API refused as malformed
            self.invalid_reasons: list[str] = []
            self.after_stop = 0  # requests after a spend limit was reached
            self.resent_after_stop = 0  # of them, requests the limit had already refused
            self._limited: set[str] = set()
            self.inflight = 0  # requests being answered now
            self._clean: set[str] = set()
            self._other: set[str] = set()

    @property
    def spend(self) -> float:
        """USD the provider billed (true tokens at :data:`PRICES`, prompt-cache reads and writes
        at their rates)."""
        return self._spend

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": self.requests, "outcomes": dict(self.outcomes),
                    "billed_calls": self.billed_calls, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "spend": self.spend,
                    "paid_twice": self.paid_twice, "refused_other": self.refused_other,
                    "invalid": self.invalid, "after_stop": self.after_stop,
                    "resent_after_stop": self.resent_after_stop, "inflight": self.inflight}

    # -- serving -----------------------------------------------------------------------
    def _pick(self) -> str:
        # A low-discrepancy sequence rather than random draws: the faults come at their rates
        # from the first requests on, evenly spread, so a small run meets every mode it names.
        with self._lock:
            if self._stuck is not None:
                self.after_stop += 1
                return self._stuck
            self._picks += 1
            x = ((self._picks - 1 + self._seed) * 0.6180339887498949) % 1.0
            for mode, rate in self.modes.items():
                if x < rate:
                    if mode in STICKY:
                        self._stuck = mode
                    return mode
                x -= rate
        return "ok"

    def _bill(self, mode: str, key: str, prompt: int, completion: int, cache: tuple[int, int, int]) -> None:
        read, w5, w1h = cache
        with self._lock:
            self.billed_calls += 1
            self.prompt_tokens += prompt
            self.completion_tokens += completion
            self._spend += ((prompt - read - w5 - w1h) * PRICES["input"] + read * PRICES["cached_input"]
                            + w5 * PRICES["cache_write"] + w1h * PRICES["cache_write_1h"]
                            + completion * PRICES["output"]) / 1e6
            if key in self._clean:
                self.paid_twice += 1
            if key in self._other:
                self._other.discard(key)
                self.refused_other += 1
            if mode in USABLE:
                self._clean.add(key)
            elif mode == "other_model":
                self._other.add(key)

    def _serve(self, h: Any, body: Any) -> None:
        with self._lock:
            self.inflight += 1
        try:
            self._answer(h, body)
        finally:
            with self._lock:
                self.inflight -= 1

    def _answer(self, h: Any, body: Any) -> None:
        refused = self.api.refuse(h._headers(), body)
        if refused is not None:
            with self._lock:
                self.invalid += 1
                self.invalid_reasons.append(str(refused[1])[:300])
            h._send(*refused)
            return
        mode = self._pick()
        with self._lock:
            self.requests += 1
            self.outcomes[mode] = self.outcomes.get(mode, 0) + 1
        if self.latency:
            time.sleep(self.latency)
        if mode in STICKY:
            key = request_key(body)
            with self._lock:
                self.resent_after_stop += key in self._limited
                self._limited.add(key)
        if not MODES.get(mode, True):
            h._send(*self.api.error(mode))
            return
        served = "claude-other-9-20250101" if mode == "other_model" and self.api.name == "anthropic" \
            else "another-model" if mode == "other_model" else self.api.served()
        reply, prompt, completion = self.api.reply(body, mode, served)
        data, *cache = self.api.odd(reply, mode, prompt)
        self._bill(mode, request_key(body), prompt, completion, tuple(cache))  # type: ignore[arg-type]
        if mode == "malformed":
            data = data[: len(data) // 2]
        if mode == "gzip":
            h._send(200, None, {"content-encoding": "gzip"}, raw=data)
            return
        if mode in ("stall", "reset"):
            h.send_response(200)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            with contextlib.suppress(OSError):
                if mode == "reset":
                    h.wfile.write(data[: len(data) // 2])
                    h.wfile.flush()
                    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    h.wfile.flush()
                    self._stop.wait(self.stall_s)
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.close()
            return
        h._send(200, None, raw=data)

    # -- life --------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.api.root}"

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def fault_servers(*modes: Mapping[str, float] | None, **kw: Any) -> Iterator[list[FaultServer]]:
    """Several endpoints at once, stopped together."""
    servers = [FaultServer(m, seed=i, **kw).start() for i, m in enumerate(modes)]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()
