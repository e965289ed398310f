"""Endpoint health and money at the edges of a reply: a billed 200 whose body cannot be read
is counted at its worst case; a reply naming another model is refused (or, from a server
that renames models, flagged once); impossible usage figures are counted at the worst case;
an endpoint failing every call is declared down and its work moves (or, alone, the run stops
with one line); a short outage does not lose an endpoint; an idle endpoint takes queued work."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import respx
from _llm_fakes import BASE, SECRET, URL, grade_reply, ok

from ragjudge.errors import LLMError
from ragjudge.llm import LLM, Endpoint, PriceTable
from ragjudge.llm.cost import Price

PRICES = PriceTable.default().with_price("judge-model", Price(1.0, 2.0))


def make_llm(**kw: Any) -> LLM:
    kw.setdefault("cache", False)
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("prices", PRICES)
    return LLM("judge-model", base_url=BASE, api_key=SECRET, **kw)


def ask(llm: LLM, n: int = 1) -> Any:
    async def go() -> Any:
        try:
            return await asyncio.gather(*(llm.structured("relevance.v1", {"query": f"q{i}", "passage": "p"})
                                          for i in range(n)))
        finally:
            await llm.aclose()

    return asyncio.run(go())


class Server:
    """A loopback OpenAI-style server (stdlib, one thread per connection) whose n-th chat
    request is answered by ``plan(n, body)``: ``("ok", reply)``, ``("gzip", reply)`` (a plain
    body labelled gzip), ``("stall", reply)`` (headers, then nothing), ``(status, None)``."""

    def __init__(self, plan: Callable[[int, dict[str, Any]], tuple[Any, Any]]) -> None:
        self.plan = plan
        self.requests = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # /models: lists nothing (taken on trust)
                self._send(404, b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    n = outer.requests
                    outer.requests += 1
                how, reply = outer.plan(n, body)
                if isinstance(how, int):
                    self._send(how, json.dumps({"error": {"message": f"status {how}"}}).encode())
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if how == "gzip":
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if how == "stall":
                    self.wfile.flush()
                    outer.release.wait(30)
                    self.close_connection = True
                    return
                self.wfile.write(data)

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def on(url: str, **kw: Any) -> LLM:
    kw.setdefault("cache", False)
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("prices", PRICES)
    return LLM("judge-model", base_url=url, api_key=SECRET, **kw)


# ----------------------------------------------------------------------------- money
@pytest.mark.parametrize("fault", ["gzip", "stall"])
def test_a_billed_reply_whose_body_is_lost_is_counted_at_its_worst_case(fault: str) -> None:
    def plan(n: int, body: dict[str, Any]) -> tuple[Any, Any]:
        return (fault if n == 0 else "ok"), grade_reply(n + 1, prompt_tokens=400, completion_tokens=30)

    with Server(plan) as srv:
        llm = on(srv.base_url, timeout=1.0)
        (out,) = ask(llm)
        assert srv.requests == 2
    assert out.ok and out.value["grade"] == 2
    # Both replies were billed: the lost one at its worst case (the whole prompt, max_tokens).
    assert llm.usage.calls == 2 and llm.usage.unknown == 1
    assert llm.usage.completion_tokens == 30 + 300 and llm.usage.prompt_tokens > 400
    assert out.usage.calls == 2


@pytest.mark.parametrize("figure", ["1" + "0" * 400, "-5", '"lots"', "1e400"])
def test_impossible_usage_figures_are_counted_at_the_worst_case(httpx2_mock: respx.Router, figure: str) -> None:
    body = (b'{"id": "x", "object": "chat.completion", "model": "judge-model", "choices": [{"index": 0, '
            b'"message": {"role": "assistant", "content": "{\\"reasoning\\": \\"r\\", \\"grade\\": 1}"}, '
            b'"finish_reason": "stop"}], "usage": {"prompt_tokens": ' + figure.encode()
            + b', "completion_tokens": 5}}')
    httpx2_mock.post(URL).mock(return_value=respx.MockResponse(
        200, content=body, headers={"content-type": "application/json"}))
    llm = make_llm()
    (out,) = ask(llm)
    assert out.ok and llm.usage.unknown == 1 and llm.usage.completion_tokens == 300
    assert llm.cost is not None and llm.cost < 1.0


# ----------------------------------------------------------------------------- the model named
def named(model: str, grade: int = 1) -> dict[str, Any]:
    return {**grade_reply(grade, prompt_tokens=100, completion_tokens=10), "model": model}


def test_a_reply_naming_another_model_is_refused_and_asked_again(httpx2_mock: respx.Router) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(named("judge-model-2024-07-18")), ok(named("other-model")), ok(named("judge-model", 3))]
    llm = make_llm()
    a, b = ask(llm, 2)
    assert a.ok and b.ok and b.value["grade"] == 3 and route.call_count == 3
    assert llm.usage.calls == 3  # the refused reply was billed and is counted
    assert b.usage.calls == 2 and b.provenance.served_model == "judge-model"


def test_a_server_that_renames_models_is_flagged_once(httpx2_mock: respx.Router,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(named("/models/llama-3-8b.Q4.gguf")))
    llm = make_llm()
    with caplog.at_level("WARNING", logger="ragjudge.llm"):
        outs = ask(llm, 3)
    assert all(o.ok for o in outs) and route.call_count == 3
    lines = [r.getMessage() for r in caplog.records if "taken as the server's name" in r.getMessage()]
    assert len(lines) == 1 and "'judge-model'" in lines[0] and "llama-3-8b" in lines[0]
    assert outs[0].provenance.served_model == "/models/llama-3-8b.Q4.gguf"


def test_a_batch_result_naming_another_model_is_not_taken() -> None:
    llm = make_llm()
    first = llm.prepare("relevance.v1", {"query": "q1", "passage": "p"})
    second = llm.prepare("relevance.v1", {"query": "q2", "passage": "p"})
    assert llm.accept(first, named("judge-model")).ok
    out = llm.accept(second, named("another-model"))
    assert not out.ok and "another-model" in (out.error or "") and llm.usage.calls == 2
    assert llm.cache.get(second.key) is None


# ----------------------------------------------------------------------------- endpoint health
def good(n: int, body: dict[str, Any]) -> tuple[Any, Any]:
    return "ok", grade_reply(1, prompt_tokens=100, completion_tokens=10)


def judge_pairs(llm: LLM, n: int) -> list[Any]:
    from ragjudge.judges import LLMRelevanceJudge

    pairs = [(f"q{i % 7}", f"d{i}", f"query {i % 7}", f"passage {i}") for i in range(n)]
    return LLMRelevanceJudge(llm=llm, progress=False).judge_many_sync(pairs)


def endpoints(*servers: Server, **kw: Any) -> list[Endpoint]:
    kw.setdefault("backoff_base", 0.001)
    return [Endpoint("judge-model", base_url=s.base_url, api_key=SECRET, **kw) for s in servers]


@pytest.mark.slow
@pytest.mark.parametrize("fault", [500, "stall"])
def test_an_endpoint_failing_every_call_is_drained_and_nothing_is_lost(fault: Any) -> None:
    with Server(good) as a, Server(lambda n, b: (fault, grade_reply(1))) as bad:
        llm = LLM(endpoints(bad, a, concurrency=4, timeout=1.0), cache=False, prices=PRICES)
        js = judge_pairs(llm, 40)
        sent_bad = bad.requests
    assert all(j.ok for j in js), [j.error for j in js if not j.ok][:3]
    # Declared down after a few failures and probed now and then, not 6 attempts per pair.
    assert sent_bad <= 12
    assert llm.callers[0].down() and not llm.callers[0].drained


@pytest.mark.slow
def test_an_endpoint_back_after_a_short_outage_gets_work_again() -> None:
    def flaky(n: int, body: dict[str, Any]) -> tuple[Any, Any]:
        if n < 6:
            return 503, None
        time.sleep(0.05)
        return good(n, body)

    def slow(n: int, body: dict[str, Any]) -> tuple[Any, Any]:
        time.sleep(0.05)
        return good(n, body)

    with Server(flaky) as f, Server(slow) as s:
        llm = LLM(endpoints(f, s, concurrency=2), cache=False, prices=PRICES)
        js = judge_pairs(llm, 80)
        served_after = f.requests - 6
    assert all(j.ok for j in js)
    assert served_after >= 10 and llm.callers[0].runner.breaker.outages == 1 and not llm.callers[0].down()


@pytest.mark.slow
def test_alone_an_endpoint_failing_every_call_stops_the_run_with_one_line() -> None:
    with Server(lambda n, b: (500, None)) as bad:
        llm = on(bad.base_url, concurrency=4)
        with pytest.raises(LLMError) as err:
            judge_pairs(llm, 30)
    assert bad.base_url in str(err.value) and "HTTP 500" in str(err.value)
    assert bad.requests < 30  # not 6 attempts for each of the 30 pairs
    assert err.value.partial is not None  # what finished is handed back to be written


@pytest.mark.slow
def test_an_idle_endpoint_takes_queued_queries_from_a_busy_one() -> None:
    # No weight= given: rendezvous hashing splits the queries about evenly, then the fast
    # endpoint, its own queue empty, takes what still waits in the slow one's.
    def at(delay: float) -> Callable[[int, dict[str, Any]], tuple[Any, Any]]:
        def plan(n: int, body: dict[str, Any]) -> tuple[Any, Any]:
            time.sleep(delay)
            return good(n, body)
        return plan

    with Server(at(0.01)) as fast, Server(at(0.5)) as slow:
        llm = LLM(endpoints(fast, slow, concurrency=1), cache=False, prices=PRICES)
        pairs = [(f"q{i}", f"d{i}", f"query {i}", f"passage {i}") for i in range(40)]
        from ragjudge.judges import LLMRelevanceJudge

        js = LLMRelevanceJudge(llm=llm, progress=False).judge_many_sync(pairs)
        served = (fast.requests, slow.requests)
    assert all(j.ok for j in js) and sum(served) == 40
    assert served[0] >= 30  # not the ~20 the hashing alone gives it
