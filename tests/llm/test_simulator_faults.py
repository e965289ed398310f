"""Fault and load tests: the real judge against the loopback simulator (benchmarks/simulator.py).

The simulator draws its faults from a PRNG seeded by (seed, request body, arrival count of that
body), so each test meets the same faults on every run regardless of scheduling. Nothing here
asserts on wall time; the servers use millisecond latencies so the file runs in seconds.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from _loopback import simulator_module, simulator_thread

from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM


def pairs(n: int) -> list[tuple[str, str, str, str]]:
    return [
        (f"q{i % 7}", f"d{i}", f"query about subject {i % 7}", f"Passage {i}: text on subject {i % 5}.")
        for i in range(n)
    ]


def make_judge(sim: Any, tmp_path: Path, **kw: Any) -> LLMRelevanceJudge:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    kw.setdefault("backoff_base", 0.01)
    llm = LLM("sim-model", base_url=sim.base_url, api_key="sk-sim", **kw)
    return LLMRelevanceJudge(llm=llm, progress=False)


# ----------------------------------------------------------------------------- the simulator itself
def test_schema_instances_are_valid_and_deterministic() -> None:
    sim = simulator_module()
    schema = {
        "type": "object",
        "properties": {
            "grade": {"type": "integer", "minimum": 0, "maximum": 3},
            "verdict": {"enum": ["yes", "no", "idk"]},
            "score": {"type": "number", "minimum": 0.5, "maximum": 0.75},
            "statements": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 8},
            "nested": {"$ref": "#/$defs/pair"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
            "short": {"type": "string", "maxLength": 5},
        },
        "required": ["grade"],
        "$defs": {
            "pair": {"type": "object", "properties": {"a": {"type": "integer", "exclusiveMaximum": 2}}}
        },
    }
    pool = [
        "First sentence of the answer text.",
        "Second sentence of the answer text.",
        "Third one here, fine.",
    ]
    seen_lengths = set()
    for seed in range(40):
        obj = sim.instance_for_schema(schema, f"seed-{seed}", pool)
        assert obj == sim.instance_for_schema(schema, f"seed-{seed}", pool)  # a pure function
        assert set(obj) == set(schema["properties"])
        assert isinstance(obj["grade"], int) and 0 <= obj["grade"] <= 3
        assert obj["verdict"] in ("yes", "no", "idk")
        assert 0.5 <= obj["score"] <= 0.75
        assert 1 <= len(obj["statements"]) <= 8 and all(isinstance(s, str) and s for s in obj["statements"])
        assert obj["nested"]["a"] <= 1
        assert isinstance(obj["maybe"], bool)
        assert len(obj["short"]) <= 5
        seen_lengths.add(len(obj["statements"]))
    assert len(seen_lengths) > 1  # plausible, varied list lengths


def test_rate_limit_headers_429_and_duplicate_detection() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    with simulator_thread(latency=0.0, rpm=120, window=1.0) as sim:  # 2 requests per 1 s window
        with httpx.Client(base_url=sim.base_url, timeout=10) as http:
            r1 = http.post("/chat/completions", json=body)
            r2 = http.post("/chat/completions", json=body)
            r3 = http.post("/chat/completions", json={**body, "messages": [{"role": "user", "content": "x"}]})
            models = http.get("/models")
        stats = sim.stats()
    assert r1.status_code == 200 and r2.status_code == 200
    assert r1.json()["choices"][0]["message"]["content"] == r2.json()["choices"][0]["message"]["content"]
    assert r1.headers["x-ratelimit-limit-requests"] == "120"
    assert r1.headers["x-ratelimit-remaining-requests"] == "1"
    assert r3.status_code == 429
    assert float(r3.headers["retry-after-ms"]) > 0 and "retry-after" in r3.headers
    assert r3.headers["x-ratelimit-remaining-requests"] == "0"
    assert r3.json()["error"]["code"] == "rate_limit_exceeded"
    assert models.json()["data"][0]["id"] == "sim-model"
    assert stats["paid"] == 2 and stats["duplicate_paid"] == 1 and stats["rate_limited"] == 1
    usage = r1.json()["usage"]
    assert (
        usage["prompt_tokens"] == 3
        and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    )


def test_unsupported_json_schema_is_a_400_that_names_response_format() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
    }
    with simulator_thread(latency=0.0, supports_json_schema=False) as sim:
        with httpx.Client(base_url=sim.base_url, timeout=10) as http:
            r = http.post("/chat/completions", json=body)
            ok = http.post("/chat/completions", json={**body, "response_format": {"type": "json_object"}})
    assert r.status_code == 400 and "response_format" in r.json()["error"]["message"]
    assert isinstance(json.loads(ok.json()["choices"][0]["message"]["content"]), dict)


# ----------------------------------------------------------------------------- the judge under faults
@pytest.mark.slow
def test_faults_lose_no_judgment_and_pay_nothing_twice(tmp_path: Path) -> None:
    items = pairs(60)
    with simulator_thread(
        latency=0.005, p_5xx=0.10, p_malformed=0.05, hang_first=1, hang_seconds=60.0, seed=7
    ) as sim:
        judge = make_judge(sim, tmp_path, concurrency=4, timeout=2.0)
        judgments = judge.judge_many_sync(items)
        stats = sim.stats()

        assert len(judgments) == 60
        lost = [(j.qid, j.docid, j.error) for j in judgments if j.grade is None]
        assert lost == []
        assert all(j.grade in (0, 1, 2, 3) for j in judgments)
        # the faults did happen, and were absorbed by retries and the repair turn
        assert stats["errors_5xx"] > 0 and stats["malformed"] > 0 and stats["hangs"] == 1
        assert judge.llm.stats.retries >= stats["errors_5xx"] + 1
        # a malformed reply is either still readable (chatter around the JSON) or repaired once
        assert 0 < judge.llm.stats.repaired <= stats["malformed"]
        assert stats["duplicate_paid"] == 0
        assert stats["max_inflight"] <= 4  # the concurrency cap holds, retries included
        assert stats["paid"] == 60 + judge.llm.stats.repaired == judge.llm.usage.calls

        # the same job again is free: every judgment from the cache, no request at all
        again = make_judge(sim, tmp_path, concurrency=4, timeout=2.0).judge_many_sync(items)
        assert [j.grade for j in again] == [j.grade for j in judgments]
        assert all(j.cached for j in again)
        assert sim.stats()["requests"] == stats["requests"]


@pytest.mark.slow
def test_retry_after_is_honoured_and_rate_limits_respected(tmp_path: Path) -> None:
    with simulator_thread(
        latency=0.005, rpm=1200, window=1.0, p_429=0.2, spurious_retry_after=0.2, seed=11
    ) as sim:
        judge = make_judge(sim, tmp_path, concurrency=8)
        judgments = judge.judge_many_sync(pairs(40))
        stats = sim.stats()
    assert all(j.ok for j in judgments), [j.error for j in judgments if not j.ok]
    assert stats["rate_limited"] > 0 and judge.llm.rate_limited == stats["rate_limited"]
    assert stats["early_retries"] == 0  # no body came back before its Retry-After elapsed
    assert stats["duplicate_paid"] == 0 and stats["paid"] == 40


def test_truncation_and_refusal_are_recorded_failures_not_retried_forever(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0, p_truncate=0.5, p_refusal=0.5, seed=3) as sim:
        judge = make_judge(sim, tmp_path, concurrency=4)
        judgments = judge.judge_many_sync(pairs(30))
        stats = sim.stats()
    assert all(j.grade is None for j in judgments)
    reasons = {j.error.split(":")[0].split(" (")[0] for j in judgments}
    assert reasons <= {"refusal", "truncated reply"} and len(reasons) == 2
    # each failure costs a bounded number of distinct calls (a truncation is re-asked for the
    # grade alone, then with more room), never the same request twice
    assert stats["duplicate_paid"] == 0 and stats["paid"] == judge.llm.usage.calls
    assert all(1 <= j.usage.calls <= 3 for j in judgments)


def test_in_process_simulator_on_the_running_loop(tmp_path: Path) -> None:
    mod = simulator_module()

    async def main() -> dict[str, Any]:
        async with mod.Simulator(mod.SimConfig(latency=0.0, max_lifetime=60)) as sim:
            assert sim.base_url.startswith("http://127.0.0.1:")
            llm = LLM("sim-model", base_url=sim.base_url, api_key="k", cache=False)
            judge = LLMRelevanceJudge(llm=llm, progress=False)
            try:
                js = await judge.judge_many(pairs(5))
            finally:
                await llm.aclose()
            assert all(j.ok for j in js)
            return sim.stats()

    stats = asyncio.run(main())
    assert stats["paid"] == 5


def test_max_lifetime_stops_the_server() -> None:
    mod = simulator_module()
    sim = mod.SimulatorThread(mod.SimConfig(max_lifetime=0.2))
    sim.start()
    try:
        sim._thread.join(10)
        assert not sim._thread.is_alive()
        with pytest.raises(httpx.ConnectError):
            httpx.get(sim.base_url + "/models", timeout=2)
    finally:
        sim.stop()


@pytest.mark.slow
def test_standalone_simulator_prints_its_url_and_serves() -> None:
    import subprocess
    import sys

    simulator_module()  # skips without aiohttp
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragjudge.testing.simulator",  # the documented command
            "--port",
            "0",
            "--latency",
            "0",
            "--max-lifetime",
            "30",
            "--rpm",
            "600",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        r = httpx.post(
            url + "/chat/completions",
            timeout=10,
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200 and r.headers["x-ratelimit-limit-requests"] == "600"
        stats = httpx.get(url.rsplit("/v1", 1)[0] + "/_sim/stats", timeout=10).json()
        assert stats["paid"] == 1
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert json.loads(err.strip().splitlines()[-1])["paid"] == 1  # counters printed on exit


def test_reply_longer_than_max_tokens_is_truncated() -> None:
    schema = {"type": "object", "properties": {"statements": {"type": "array", "items": {"type": "string"},
                                                              "minItems": 5}}}
    body = {"model": "m", "messages": [{"role": "user", "content": "list"}], "max_tokens": 5,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    with simulator_thread(latency=0.0) as sim:
        with httpx.Client(base_url=sim.base_url, timeout=10) as http:
            short = http.post("/chat/completions", json=body).json()
            full = http.post("/chat/completions", json={**body, "max_tokens": 4000}).json()
    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] <= 5
    assert full["choices"][0]["finish_reason"] == "stop"
    assert len(json.loads(full["choices"][0]["message"]["content"])["statements"]) >= 5


def test_wrong_api_key_fails_fast_without_retries(tmp_path: Path) -> None:
    from ragjudge.errors import LLMError

    with simulator_thread(latency=0.0, api_key="sk-right") as sim:
        judge = make_judge(sim, tmp_path)  # uses "sk-sim"
        with pytest.raises(LLMError, match="401"):
            judge.judge_many_sync(pairs(20))
        stats = sim.stats()
    assert stats["paid"] == 0 and stats["client_errors"] <= 16  # stopped, not 20 x 6 attempts
    assert "sk-sim" not in json.dumps(stats)


def test_config_rejects_impossible_fault_mixes() -> None:
    sim = simulator_module()
    with pytest.raises(ValueError, match="add up to"):
        sim.SimConfig(p_5xx=0.6, p_malformed=0.6)
    with pytest.raises(ValueError, match=r"p_hang must be in \[0, 1\]"):
        sim.SimConfig(p_hang=1.5)


# ----------------------------------------------------------------------------- outages
def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_server_at_all_is_one_error_naming_the_url(tmp_path: Path) -> None:
    from ragjudge.errors import LLMError

    url = f"http://127.0.0.1:{free_port()}/v1"
    llm = LLM("m", base_url=url, api_key="sk-none", cache=False, backoff_base=0.01)
    llm.runner.breaker.startup = 1.0  # seconds (default 5): keeps the test short
    judge = LLMRelevanceJudge(llm=llm, progress=False)
    with pytest.raises(LLMError) as info:
        judge.judge_many_sync(pairs(40))
    message = str(info.value)
    assert url in message and "connection refused" in message and "\n" not in message
    # Probes, not 40 pairs x 6 attempts: the breaker held everyone back.
    assert llm.runner.started <= 6


@pytest.mark.slow
def test_cli_no_server_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from ragjudge.cli import main

    monkeypatch.setenv("SIM_KEY", "sk-none-0123456789")
    url = f"http://127.0.0.1:{free_port()}/v1"
    q = tmp_path / "q.tsv"
    q.write_text("q1\tcapital of france\n")
    c = tmp_path / "c.jsonl"
    c.write_text(json.dumps({"_id": "d1", "text": "Paris."}) + "\n")
    r = tmp_path / "r.trec"
    r.write_text("q1 Q0 d1 1 1.0 x\n")
    code = main(["judge", "--queries", str(q), "--corpus", str(c), "--run", str(r), "--model", "m",
                 "--base-url", url, "--api-key-env", "SIM_KEY", "--no-cache", "--no-progress",
                 "-o", str(tmp_path / "out.qrels")])
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert url in last and "unreachable" in last and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["refuse", "503"])
def test_an_outage_pauses_the_run_and_loses_nothing(tmp_path: Path, kind: str) -> None:
    # Down for 3 s after 20 answers; each pair has only 3 attempts of its own. Before the
    # breaker, every pair in flight burnt its attempts in ~1 s and 46 of 80 were lost.
    with simulator_thread(latency=0.01, outage_after=20, outage_seconds=3.0, outage_kind=kind) as sim:
        judge = make_judge(sim, tmp_path, max_attempts=3)
        judgments = judge.judge_many_sync(pairs(80))
        stats = sim.stats()
    assert [j.error for j in judgments if j.grade is None] == []
    assert stats["outages"] == 1 and stats["duplicate_paid"] == 0
    assert judge.llm.runner.breaker.outages == 1 and not judge.llm.runner.breaker.open
    assert "again" in judge.llm.runner.last_event
    # Probes, not a storm: few requests reached the dead server.
    assert stats["outage_rejected"] <= 40


@pytest.mark.slow
def test_a_shared_rate_limit_loses_nothing(tmp_path: Path) -> None:
    # Two clients (separate runners, as two processes) on one 1,200 rpm limit per 1 s window,
    # no x-ratelimit headers, 2 attempts per pair: 429s are the server asking to wait and do
    # not use up a pair's attempts.
    with simulator_thread(latency=0.01, rpm=1200, window=1.0, ratelimit_headers=False) as sim:
        a = make_judge(sim, tmp_path, cache=tmp_path / "a.sqlite", max_attempts=2)
        b = make_judge(sim, tmp_path, cache=tmp_path / "b.sqlite", max_attempts=2)
        items_a, items_b = pairs(80), [(q, d + "b", t, p + " b") for q, d, t, p in pairs(80)]

        async def both() -> list[Any]:
            ra, rb = await asyncio.gather(a.judge_many(items_a), b.judge_many(items_b))
            await a.llm.aclose()
            await b.llm.aclose()
            return list(ra) + list(rb)

        judgments = asyncio.run(both())
        stats = sim.stats()
    assert stats["rate_limited"] > 0  # the limit did bind
    assert [j.error for j in judgments if j.grade is None] == []
    assert stats["duplicate_paid"] == 0


@pytest.mark.slow
def test_two_sessions_on_one_cache_file_pay_once(tmp_path: Path) -> None:
    # Two identical jobs on one cache file at the same time (two processes in real life: two
    # Cache objects here, each its own claim owner): the second waits for the first's answers.
    from ragjudge.llm.cache import Cache

    path = tmp_path / "shared.sqlite"
    items = pairs(40)
    with simulator_thread(latency=0.05) as sim:
        a = make_judge(sim, tmp_path, cache=Cache(path))
        b = make_judge(sim, tmp_path, cache=Cache(path))

        async def both() -> tuple[Any, Any]:
            ra, rb = await asyncio.gather(a.judge_many(items), b.judge_many(items))
            await a.llm.aclose()
            await b.llm.aclose()
            return ra, rb

        ra, rb = asyncio.run(both())
        stats = sim.stats()
    assert [j.grade for j in ra] == [j.grade for j in rb]
    assert all(j.grade is not None for j in ra)
    assert stats["paid"] == 40 and stats["duplicate_paid"] == 0
    assert a.llm.cache.waited + b.llm.cache.waited > 0


# ----------------------------------------------------------------------------- local servers
@pytest.mark.slow
def test_a_single_slot_server_is_not_flooded(tmp_path: Path) -> None:
    # A llama.cpp-like server with one slot: requests queue inside it. With 16 in flight and
    # 0.1 s per answer the last waits 1.6 s, past the 1.2 s timeout: requests timed out, were
    # cancelled and retried. The adaptive limit keeps the queue short instead (time-scaled:
    # 4 s per answer and the default 60 s timeout behave the same).
    with simulator_thread(latency=0.1, slots=1) as sim:
        judge = make_judge(sim, tmp_path, timeout=1.2, max_attempts=3)
        judgments = judge.judge_many_sync(pairs(30))
        stats = sim.stats()
    assert [j.error for j in judgments if j.grade is None] == []
    assert stats["cancelled"] == 0 and stats["paid"] == 30
    assert judge.llm.runner.concurrency_limit < 16

