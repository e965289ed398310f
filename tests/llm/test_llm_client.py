"""The client's retry policy and failure mapping, with the real openai client over respx."""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import respx
from _llm_fakes import BASE, SECRET, URL, completion, error, grade_reply, ok

from ragjudge.errors import LLMError
from ragjudge.llm import LLM, ClientConfig, LLMClient
from ragjudge.llm.client import retry_after_seconds
from ragjudge.llm.providers.openai import completion_from_dict


def make_llm(tmp_path: Path, **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("api_key", SECRET)
    return LLM("judge-model", base_url=BASE, **kw)


def ask(llm: LLM, passage: str = "p") -> Any:
    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "q", "passage": passage})
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "junk", "retry-after": "2"}) == 2.0
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_seconds({"retry-after": future}) <= 31
    assert retry_after_seconds({"retry-after": "not a date"}) is None
    assert retry_after_seconds({}) is None


def test_429_with_retry_after_then_success(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [
        error(429, "rate limited", headers={"retry-after-ms": "5"}),
        ok(grade_reply(2)),
    ]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and out.value["grade"] == 2
    assert route.call_count == 2
    assert llm.stats.retries == 1 and llm.rate_limited == 1
    assert out.attempts == 2


def test_429_honours_retry_after_seconds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The wait computed for a 429 is at least what the server asked for (no wall time measured).
    cfg = ClientConfig(model="m", base_url=BASE, api_key=SECRET, backoff_base=0.001)
    client = LLMClient(cfg)
    import openai
    from tenacity import RetryCallState

    req = httpx2.Request("POST", URL)
    resp = httpx2.Response(429, headers={"retry-after": "7"}, request=req)
    from ragjudge.llm.providers.base import AttemptFailed

    exc = AttemptFailed(client.provider.classify(openai.RateLimitError("slow", response=resp, body=None)))
    state = RetryCallState(None, None, (), {})
    state.attempt_number = 1
    state.set_exception((type(exc), exc, None))
    waits = [client._wait(state) for _ in range(20)]
    assert all(7.0 <= w <= 7.0 + 0.05 + 0.7 for w in waits)


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
def test_transient_status_is_retried(httpx2_mock: respx.Router, tmp_path: Path, status: int) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [error(status, "transient"), ok(grade_reply(1))]
    out = ask(make_llm(tmp_path))
    assert out.ok and out.value["grade"] == 1
    assert route.call_count == 2


def test_timeouts_and_connection_errors_are_retried(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [httpx2.ReadTimeout("slow"), httpx2.ConnectError("refused"), ok(grade_reply(3))]
    out = ask(make_llm(tmp_path))
    assert out.ok and out.value["grade"] == 3
    assert route.call_count == 3


def test_exhausted_retries_are_a_failed_judgment_not_an_exception(
    httpx2_mock: respx.Router, tmp_path: Path
) -> None:
    route = httpx2_mock.post(URL).mock(return_value=error(503, "down"))
    llm = make_llm(tmp_path, max_attempts=3)
    out = ask(llm)
    assert not out.ok and out.value is None
    assert "gave up after 3 attempt(s)" in out.error and "503" in out.error
    # max_retries=0 in the SDK: exactly max_attempts HTTP calls, retries never multiply.
    assert route.call_count == 3
    assert llm.stats.failed == 1


def test_timeout_exhausted(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=httpx2.ReadTimeout("slow"))
    out = ask(make_llm(tmp_path, max_attempts=2))
    assert out.error == "gave up after 2 attempt(s): timeout"
    assert route.call_count == 2


def test_malformed_http_body_is_retried(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [
        respx.MockResponse(200, content=b"<html>oops</html>", headers={"content-type": "application/json"}),
        ok({"id": "x", "choices": []}),
        ok(grade_reply(0)),
    ]
    out = ask(make_llm(tmp_path))
    assert out.ok and out.value["grade"] == 0
    assert route.call_count == 3


@pytest.mark.parametrize(
    "status, code, match",
    [
        (401, None, "authentication failed"),
        (403, None, "permission denied"),
        (404, "model_not_found", "wrong model name or base URL"),
        (400, None, "bad request rejected"),
        (429, "insufficient_quota", "quota exhausted"),
    ],
)
def test_fatal_errors_fail_fast_without_the_key(
    httpx2_mock: respx.Router, tmp_path: Path, status: int, code: str | None, match: str
) -> None:
    route = httpx2_mock.post(URL).mock(
        return_value=error(status, f"Incorrect API key provided: {SECRET}. Something else.", code=code))
    llm = make_llm(tmp_path)
    with pytest.raises(LLMError, match=match) as err:
        ask(llm)
    assert route.call_count == 1
    assert SECRET not in str(err.value)
    assert "judge-model" in str(err.value) and BASE in str(err.value)


def test_context_length_is_a_per_item_failure(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(URL).mock(return_value=error(
        400, "This model's maximum context length is 8192 tokens.", code="context_length_exceeded"))
    out = ask(make_llm(tmp_path))
    assert not out.ok and out.error.startswith("prompt too long")


def test_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        LLM("gpt-4o-mini", cache=False)
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(LLMError, match="MY_KEY"):
        LLM("gpt-4o-mini", api_key_env="MY_KEY", cache=False)
    monkeypatch.setenv("MY_KEY", SECRET)
    llm = LLM("gpt-4o-mini", api_key_env="MY_KEY", cache=False)
    assert SECRET not in repr(llm) and SECRET not in repr(llm.config)
    # A local server needs no key.
    LLM("llama", base_url="http://localhost:8080/v1", cache=False)


def test_key_from_environment_reaches_the_server(
    httpx2_mock: respx.Router, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(1)))
    llm = LLM("judge-model", base_url=BASE, cache=False)
    assert ask(llm).ok
    assert route.calls[0].request.headers["authorization"] == f"Bearer {SECRET}"


def test_azure_client(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(url__regex=r"https://res\.openai\.azure\.com/openai/deployments/dep/chat/completions.*")
    route.mock(return_value=ok(grade_reply(2)))
    llm = LLM("dep", azure_endpoint="https://res.openai.azure.com", azure_api_version="2024-10-21",
              api_key=SECRET, cache=False)
    out = ask(llm)
    assert out.ok and route.call_count == 1
    assert route.calls[0].request.headers["api-key"] == SECRET


def test_client_complete_direct(httpx2_mock: respx.Router) -> None:
    httpx2_mock.post(URL).mock(return_value=ok(completion("hi", finish_reason="length")))
    client = LLMClient(ClientConfig(model="m", base_url=BASE, api_key=SECRET))

    async def go() -> Any:
        try:
            return await client.complete({"model": "m", "messages": [{"role": "user", "content": "x"}]})
        finally:
            await client.close()

    comp = asyncio.run(go())
    assert (comp.text, comp.finish_reason, comp.system_fingerprint) == ("hi", "length", "fp_test")
    assert comp.usage.prompt_tokens == 120 and comp.attempts == 1



# ----------------------------------------------------------------------------- 429s and the attempt budget
@pytest.mark.slow
def test_429s_do_not_use_up_the_attempt_budget(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    # A shared limit answers 429 many times in a row: the server asking to wait is not the
    # pair's failure (bounded by time, `patience`), while 5xx keep their small budget.
    route = httpx2_mock.post(URL)
    route.side_effect = [error(429, "slow down", headers={"retry-after-ms": "1"})] * 6 + [ok(grade_reply(2))]
    llm = make_llm(tmp_path, max_attempts=2)
    out = ask(llm)
    assert out.ok and route.call_count == 7


def test_429s_are_bounded_by_patience(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=error(429, "slow down", headers={"retry-after-ms": "1"}))
    llm = make_llm(tmp_path, max_attempts=2, patience=0.2)  # LLM(patience=) / --patience
    assert llm.config.patience == 0.2 and llm.runner.breaker.patience == 0.2
    out = ask(llm)
    assert not out.ok and "429" in out.error and route.call_count >= 2


def test_a_wait_past_the_patience_names_the_status_and_its_seconds(httpx2_mock: respx.Router,
                                                                   tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=error(429, "slow down", headers={"retry-after-ms": "1500"}))
    out = ask(make_llm(tmp_path, max_attempts=2, patience=0.9))
    assert not out.ok and route.call_count == 1
    assert "HTTP 429: the server asked to wait 1.5 s (Retry-After), more than the 0.9" in out.error
    assert "s of patience left (--patience 0.9)" in out.error


@pytest.mark.parametrize("status", [501, 505])
def test_permanent_5xx_is_not_retried(httpx2_mock: respx.Router, tmp_path: Path, status: int) -> None:
    route = httpx2_mock.post(URL).mock(return_value=error(status, "Not Implemented"))
    with pytest.raises(LLMError, match=f"HTTP {status}"):
        ask(make_llm(tmp_path))
    assert route.call_count == 1


def test_credentials_in_urls_are_redacted() -> None:
    from ragjudge.llm.client import redact, redact_url

    assert redact_url("https://user:hunter2-secret@host.example/v1") == "https://***@host.example/v1"
    assert redact_url("https://host/v1?api-key=abc123&x=1") == "https://host/v1?api-key=***&x=1"
    assert redact_url("https://host/v1?foo=1&access_token=zzz") == "https://host/v1?foo=1&access_token=***"
    assert "pw" not in redact("failed at http://me:pw@127.0.0.1:9/v1: refused")
    cfg = ClientConfig(model="m", base_url="https://bob:sk-live-SECRET99@host/v1", api_key=SECRET)
    assert "SECRET99" not in repr(cfg)


def test_credentials_in_base_url_never_reach_a_message(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    base = "http://alice:pa55w0rd-xyz@llm.test/v1"
    httpx2_mock.post(URL).mock(return_value=error(404, "no such model at http://alice:pa55w0rd-xyz@llm.test"))
    llm = LLM("judge-model", base_url=base, api_key=SECRET, cache=tmp_path / "c.sqlite")
    with pytest.raises(LLMError) as info:
        ask(llm)
    assert "pa55w0rd" not in str(info.value) and "alice" not in str(info.value)
    assert "llm.test" in str(info.value)


@pytest.mark.parametrize("odd", ["-0.1x", None, "NaN", {"v": 1}, float("nan")])
def test_unreadable_logprobs_are_dropped_not_raised(odd: Any) -> None:
    body = grade_reply(2)
    body["choices"][0]["logprobs"] = {"content": [{"token": "2", "logprob": odd, "top_logprobs": 5}]}
    comp = completion_from_dict(body)
    assert comp.logprobs is None and comp.text is not None
    # An odd alternative is read only where it matters, at the label's token: no probabilities.
    from ragjudge.llm.prompts import load_prompt
    from ragjudge.llm.replies import label_probs

    body["choices"][0]["logprobs"] = {"content": [
        {"token": '{"reasoning": "Because.", "grade": ', "logprob": -0.1, "top_logprobs": []},
        {"token": "2", "logprob": -0.1,
         "top_logprobs": [{"token": "2", "logprob": -0.1}, {"token": "3", "logprob": odd}]},
        {"token": "}", "logprob": -0.1, "top_logprobs": []}]}
    comp = completion_from_dict(body)
    assert label_probs(comp.logprobs, comp.text, load_prompt("relevance.v1"), 2) == (None, None)
    comp.logprobs[1]["top_logprobs"]["3"] = -2.0  # readable: probabilities again
    probs, _ = label_probs(comp.logprobs, comp.text, load_prompt("relevance.v1"), 2)
    assert probs is not None and probs["2"] > probs["3"] > 0


def test_failures_are_classified_for_the_circuit_breaker() -> None:
    import socket

    import openai

    from ragjudge.llm.client import classify_failure

    req = httpx2.Request("POST", "http://me:pw-secret@llm.test/v1/chat/completions")

    def conn_error(cause: BaseException) -> openai.APIConnectionError:
        exc = openai.APIConnectionError(request=req)
        exc.__cause__ = cause
        return exc

    refused = classify_failure(conn_error(ConnectionRefusedError(111, "refused")))
    assert refused.kind == "unreachable" and refused.reason == "connection refused"
    assert "pw-secret" not in refused.url and "llm.test" in refused.url
    dns = classify_failure(conn_error(socket.gaierror(-2, "Name or service not known")))
    assert dns.kind == "unreachable" and dns.reason.startswith("host not found")
    slow = classify_failure(openai.APITimeoutError(request=req))
    assert slow.kind == "timeout"
    resp = httpx2.Response(503, request=req)
    status = classify_failure(openai.InternalServerError("down", response=resp, body=None))
    assert status.kind == "status" and status.status == 503


def test_requests_leave_no_garbage_for_the_cycle_collector(httpx2_mock: respx.Router,
                                                           tmp_path: Path) -> None:
    # Objects in reference cycles are freed only by the cycle collector, whose whole-heap
    # passes stall the event loop (the retry loop once left ~40 of them a request), and a
    # reply's logprobs are kept in a shape the collector does not track.
    import gc
    import json as _json

    from _llm_fakes import completion, grade_logprobs

    text = _json.dumps({"reasoning": "Because.", "grade": 2})
    body = completion(text, logprobs=grade_logprobs(text, {"2": 0.7, "3": 0.2, "1": 0.1}))
    httpx2_mock.post(URL).mock(side_effect=lambda request: ok(body))
    llm = make_llm(tmp_path)

    async def go() -> tuple[int, Any]:
        try:
            await llm.structured("relevance.v1", {"query": "q", "passage": "warm"})  # once a run
            gc.collect()
            gc.disable()
            try:
                outs = [await llm.structured("relevance.v1", {"query": "q", "passage": f"p{i}"})
                        for i in range(20)]
                return gc.collect(), outs
            finally:
                gc.enable()
        finally:
            await llm.aclose()

    found, outs = asyncio.run(go())
    assert all(o.ok and o.probs is not None for o in outs)
    assert found < 20, f"{found} objects in reference cycles after 20 requests"

    comp = completion_from_dict(body)
    assert comp.logprobs and not any(gc.is_tracked(t["top_logprobs"]) for t in comp.logprobs)
    assert comp.logprobs[1]["top_logprobs"] == pytest.approx({"2": math.log(0.7), "3": math.log(0.2),
                                                              "1": math.log(0.1)})


def test_logprob_alternatives_merge_and_fall_back_as_the_server_meant() -> None:
    def tokens(*alts: Any, own: float = -0.1) -> Any:
        body = grade_reply(2)
        body["choices"][0]["logprobs"] = {"content": [{"token": "2", "logprob": own, "top_logprobs": list(alts)}]}
        return completion_from_dict(body).logprobs[0]["top_logprobs"]

    # two alternatives with the same text hold their summed probability, even far in the tail
    assert tokens({"token": "2", "logprob": math.log(0.3)}, {"token": "2", "logprob": math.log(0.2)}) \
        == pytest.approx({"2": math.log(0.5)})
    assert tokens({"token": "x", "logprob": -1000.0}, {"token": "x", "logprob": -1000.0}) \
        == pytest.approx({"x": -1000.0 + math.log(2)})
    assert tokens({"token": "x", "logprob": "-0.5"}, {"token": "x", "logprob": None}) == {"x": None}
    assert tokens() == {"2": -0.1}  # no alternatives: the token alone
    assert tokens(own=0.5) == {"2": None}  # a positive logprob is no probability


def test_patience_counts_from_the_first_failure_not_from_the_queue(httpx2_mock: respx.Router) -> None:
    # A request that waited at the runner's gate (the run's shared pacing) longer than twice its
    # patience before its first attempt, then met one 429, is retried: the queue was not a run
    # of 429s of its own.
    from contextlib import asynccontextmanager

    route = httpx2_mock.post(URL)
    route.side_effect = [error(429, "slow down", headers={"retry-after-ms": "1"}), ok(completion("hi"))]
    client = LLMClient(ClientConfig(model="m", base_url=BASE, api_key=SECRET, patience=0.2, backoff_base=0.001))
    gates = [0]

    @asynccontextmanager
    async def gate() -> Any:
        gates[0] += 1
        if gates[0] == 1:
            await asyncio.sleep(0.6)  # queued behind the others' slots
        yield None

    async def go() -> Any:
        try:
            return await client.complete({"model": "m", "messages": [{"role": "user", "content": "x"}]}, gate=gate)
        finally:
            await client.close()

    comp = asyncio.run(go())
    assert comp.text == "hi" and route.call_count == 2
