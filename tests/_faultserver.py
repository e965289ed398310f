"""A small OpenAI-compatible server for fault tests, standard library only (``http.server``).

It answers ``POST /v1/chat/completions`` (and ``GET /v1/models``) with a valid instance of the
request's ``json_schema`` response format, drawn deterministically from the request (the same
request gets the same reply), or with a fault, chosen per request by :class:`FaultServer`'s
``modes`` (``{mode: rate}``; the rest are clean replies):

====================  =======  ==============================================================
mode                  billed   what the client gets
====================  =======  ==============================================================
``5xx``               no       HTTP 500
``429``               no       HTTP 429 with ``Retry-After: 1``
``429_bare``          no       HTTP 429 without ``Retry-After``
``stall``             yes      a 200's headers, then nothing (until the client gives up)
``reset``             yes      a 200's headers and half the body, then a TCP reset
``gzip``              yes      ``Content-Encoding: gzip`` on a plain JSON body
``malformed``         yes      a 200 whose body is cut JSON
``empty_choices``     yes      ``"choices": []`` with usage
``other_model``       yes      a clean reply naming another model
``usage_huge``        yes      a clean reply whose usage says ``1e400`` tokens
``usage_negative``    yes      a clean reply whose usage says ``-500`` tokens
``usage_text``        yes      a clean reply whose usage says ``"many"`` tokens
====================  =======  ==============================================================

Billing is counted on the server side, as a provider would: every billed reply adds its true
tokens (prompt: UTF-8 bytes / 4 rounded up; completion: the content's, at most ``max_tokens``),
so a test knows the *true spend* whatever the client could read, and ``paid_twice``: billed
requests identical to one that already got a clean reply (the client asked again for an
answer it had been given).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Every fault mode, and whether the provider bills it.
MODES: dict[str, bool] = {
    "5xx": False, "429": False, "429_bare": False, "stall": True, "reset": True, "gzip": True,
    "malformed": True, "empty_choices": True, "other_model": True, "usage_huge": True,
    "usage_negative": True, "usage_text": True,
}
#: Modes whose reply a client may use as it is: a second bill for the same request is paid twice.
USABLE = frozenset({"ok", "usage_huge", "usage_negative", "usage_text"})
#: USD per 1M tokens (the tests' own prices).
PRICES = {"input": 1.0, "output": 4.0}


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


def reply_content(body: Mapping[str, Any]) -> str:
    """The clean reply's content for a request ``body`` (deterministic)."""
    seed = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()
    rng = random.Random(seed)
    messages = body.get("messages") or [{}]
    words = _words(str(messages[-1].get("content", "")))
    rf = body.get("response_format") or {}
    schema = (rf.get("json_schema") or {}).get("schema") if rf.get("type") == "json_schema" else None
    if schema is None:
        return json.dumps({"reasoning": "because", "grade": rng.randint(0, 3)})
    return json.dumps(_Instance(schema, rng, words).gen(schema))


def request_key(body: Mapping[str, Any]) -> str:
    """What makes two requests the same request (and a second bill for it a second payment)."""
    keep = {k: body.get(k) for k in ("model", "messages", "response_format", "temperature", "seed",
                                     "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


class FaultServer:
    """One loopback endpoint (``base_url``) with its fault ``modes`` and billing counters.

    ``modes``: ``{mode: rate}`` with rates in [0, 1] summing to at most 1 (``{"5xx": 1.0}``: an
    endpoint failing every call). ``stall_s``: how long a stalled reply holds its connection
    (the client's timeout should end it first). ``model``: the name a clean reply gives."""

    def __init__(self, modes: Mapping[str, float] | None = None, *, model: str = "fault-model",
                 seed: int = 0, stall_s: float = 30.0, latency: float = 0.0) -> None:
        unknown = set(modes or {}) - set(MODES)
        if unknown:
            raise ValueError(f"unknown fault modes {sorted(unknown)}; known: {sorted(MODES)}")
        self.modes = dict(modes or {})
        self.model, self.stall_s, self.latency = model, stall_s, latency
        self._seed = seed
        self._picks = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.reset_counts()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if not self.path.rstrip("/").endswith("/chat/completions"):
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

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
            self.paid_twice = 0
            self.refused_other = 0  # requests asked again after a reply naming another model
            self._clean: set[str] = set()
            self._other: set[str] = set()

    @property
    def spend(self) -> float:
        """USD the provider billed (true tokens at :data:`PRICES`)."""
        return (self.prompt_tokens * PRICES["input"] + self.completion_tokens * PRICES["output"]) / 1e6

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": self.requests, "outcomes": dict(self.outcomes),
                    "billed_calls": self.billed_calls, "prompt_tokens": self.prompt_tokens,
                    "completion_tokens": self.completion_tokens, "spend": self.spend,
                    "paid_twice": self.paid_twice, "refused_other": self.refused_other}

    # -- serving -----------------------------------------------------------------------
    def _pick(self) -> str:
        # A low-discrepancy sequence rather than random draws: the faults come at their rates
        # from the first requests on, evenly spread, so a small run meets every mode it names.
        with self._lock:
            self._picks += 1
            x = ((self._picks - 1 + self._seed) * 0.6180339887498949) % 1.0
        for mode, rate in self.modes.items():
            if x < rate:
                return mode
            x -= rate
        return "ok"

    def _bill(self, mode: str, key: str, prompt: int, completion: int) -> None:
        with self._lock:
            self.billed_calls += 1
            self.prompt_tokens += prompt
            self.completion_tokens += completion
            if key in self._clean:
                self.paid_twice += 1
            if key in self._other:
                self._other.discard(key)
                self.refused_other += 1
            if mode in USABLE:
                self._clean.add(key)
            elif mode == "other_model":
                self._other.add(key)

    def _serve(self, h: Any, body: Mapping[str, Any]) -> None:
        mode = self._pick()
        with self._lock:
            self.requests += 1
            self.outcomes[mode] = self.outcomes.get(mode, 0) + 1
        if self.latency:
            time.sleep(self.latency)
        if mode == "5xx":
            h._send(500, {"error": {"message": "internal error", "type": "server_error"}})
            return
        if mode in ("429", "429_bare"):
            h._send(429, {"error": {"message": "rate limited", "type": "rate_limit_error"}},
                    {"retry-after": "1"} if mode == "429" else None)
            return
        content = reply_content(body)
        prompt = sum(len(str(m.get("content", "")).encode()) for m in body.get("messages") or []) // 4 + 1
        cap = body.get("max_completion_tokens") or body.get("max_tokens") or 10**6
        completion = min(int(cap), len(content.encode()) // 4 + 1)
        self._bill(mode, request_key(body), prompt, completion)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        reply: dict[str, Any] = {
            "id": "chatcmpl-fault", "object": "chat.completion", "created": int(time.time()),
            "model": "another-model" if mode == "other_model" else self.model,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": content}}],
            "usage": usage,
        }
        if mode == "empty_choices":
            reply["choices"] = []
        data = json.dumps(reply).encode()
        if mode == "usage_huge":
            data = data.replace(f'"completion_tokens": {completion}'.encode(), b'"completion_tokens": 1e400')
        elif mode == "usage_negative":
            usage["completion_tokens"] = -500
            data = json.dumps(reply).encode()
        elif mode == "usage_text":
            usage["completion_tokens"] = "many"
            data = json.dumps(reply).encode()
        elif mode == "malformed":
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
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

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

    def __exit__(self, *exc: Any) -> None:
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
