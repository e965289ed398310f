"""Batch API mode: JSONL building, chunking, result joining, and whole jobs (submit, poll, join,
partial errors, resume, adopt) against the loopback simulator's Files + Batches endpoints."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge.data import Qrels, Run
from ragjudge.errors import LLMError
from ragjudge.judges import LLMRelevanceJudge, judge_with_batch_sync
from ragjudge.llm import LLM
from ragjudge.llm.batch import (
    BatchOptions,
    BatchStore,
    build_requests,
    chunk_requests,
    parse_result_files,
    run_batch,
)

FAST = BatchOptions(poll_interval=0.05, max_poll_interval=0.2)


def variables(n: int) -> list[dict[str, str]]:
    return [
        {"query": f"query number {i % 4}", "passage": f"Passage {i}: some text about topic {i}."}
        for i in range(n)
    ]


def make_llm(sim: Any, tmp_path: Path, **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    return LLM("sim-model", base_url=sim.base_url, api_key="sk-test-batch-key", **kw)


def go(llm: LLM, items: list[dict[str, str]], **kw: Any) -> list[Any]:
    async def main() -> list[Any]:
        try:
            return await run_batch(llm, "relevance.v1", items, **kw)
        finally:
            await llm.aclose()

    kw.setdefault("options", FAST)
    return asyncio.run(main())


# ----------------------------------------------------------------------------- pure parts
def test_build_requests_lines_are_batch_jsonl() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
    lines = build_requests([("k1", body), ("k2", body)])
    assert len(lines) == 2 and all(line.endswith(b"\n") for line in lines)
    first = json.loads(lines[0])
    assert first == {"custom_id": "k1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    assert "héllo" in lines[0].decode("utf-8")  # UTF-8, not escaped
    with pytest.raises(ValueError, match="duplicate custom_id"):
        build_requests([("k", body), ("k", body)])


def test_chunking_respects_count_and_size() -> None:
    lines = [b"x" * 10 + b"\n"] * 7  # 11 bytes each
    assert chunk_requests(lines, max_requests=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert chunk_requests(lines, max_bytes=25) == [[0, 1], [2, 3], [4, 5], [6]]
    assert chunk_requests([]) == []
    with pytest.raises(LLMError, match="over the 5-byte"):
        chunk_requests(lines, max_bytes=5)


def _line(cid: str, status: int, body: dict[str, Any] | None = None, error: Any = None) -> str:
    return json.dumps(
        {"id": "r", "custom_id": cid, "response": {"status_code": status, "body": body or {}}, "error": error}
    )


def test_parse_result_files_joins_by_custom_id() -> None:
    reply = {"choices": [{"message": {"content": "{}"}}]}
    out = "\n".join([_line("a", 200, reply), _line("b", 200, reply)]) + "\n"
    err = "\n".join(
        [
            _line("c", 500, {"error": {"message": "boom", "type": "server_error"}}),
            json.dumps(
                {
                    "id": "r",
                    "custom_id": "d",
                    "response": None,
                    "error": {"code": "batch_expired", "message": "expired"},
                }
            ),
            _line("a", 500, {"error": {"message": "late duplicate"}}),  # a success is never overwritten
        ]
    )
    res = parse_result_files(out, err)
    assert res["a"].body == reply and res["a"].error is None
    assert res["b"].body == reply
    assert res["c"].body is None and res["c"].error == "batch: HTTP 500: boom"
    assert res["d"].error == "batch: expired"
    assert parse_result_files(None, "") == {}
    with pytest.raises(LLMError, match="line 1 has no custom_id"):
        parse_result_files('{"response": {}}')
    with pytest.raises(LLMError, match="line 2 is not JSON"):
        parse_result_files(out.splitlines()[0] + "\nnot json")


def test_store_tracks_live_jobs(tmp_path: Path) -> None:
    store = BatchStore(tmp_path / "state.sqlite")
    job = store.record_upload("file-1", ["k1", "k2"])
    assert store.live_jobs(["k2", "k3"]) == {
        job: {"input_file_id": "file-1", "batch_id": None, "keys": ["k2"]}
    }
    store.set_batch(job, "batch-1", "validating")
    assert store.live_jobs(["k1"])[job]["batch_id"] == "batch-1"
    store.finish(job, "completed")
    assert store.live_jobs(["k1", "k2"]) == {}
    assert store.jobs()[0]["status"] == "completed"
    store.close()


# ----------------------------------------------------------------------------- whole jobs
def test_batch_job_end_to_end_then_cache(tmp_path: Path) -> None:
    items = variables(10) + variables(3)  # three duplicates: sent once
    with simulator_thread(latency=0.0, batch_seconds=0.2) as sim:
        llm = make_llm(sim, tmp_path)
        messages: list[str] = []
        outs = go(llm, items, progress=messages.append)
        assert len(outs) == 13
        assert all(o.ok for o in outs), [o.error for o in outs]
        assert all(o.value["grade"] in (0, 1, 2, 3) for o in outs)
        assert all(o.response_format == "json_schema" and o.prompt_id == "relevance" for o in outs)
        assert all(o.probs is not None and abs(sum(o.probs.values()) - 1) < 1e-9 for o in outs)
        assert outs[10].key == outs[0].key and outs[10].value == outs[0].value
        stats = sim.stats()
        assert stats["batches_created"] == 1 and stats["batch_lines"] == 10
        assert stats["duplicate_paid"] == 0 and stats["requests"] == 0  # no online call at all
        assert llm.usage.calls == 10
        assert any("completed" in m for m in messages)

        # the same job again: everything from the cache, nothing submitted
        llm2 = make_llm(sim, tmp_path)
        again = go(llm2, items)
        assert all(o.ok and o.cached for o in again)
        assert [o.value for o in again] == [o.value for o in outs]
        assert sim.stats()["batches_created"] == 1 and llm2.usage.calls == 0


def test_partial_errors_become_failures_and_are_retried_next_run(tmp_path: Path) -> None:
    items = variables(30)
    with simulator_thread(latency=0.0, batch_seconds=0.1, batch_p_error=0.3, seed=3) as sim:
        llm = make_llm(sim, tmp_path)
        outs = go(llm, items, options=BatchOptions(poll_interval=0.05, resubmit_failed=0))
        failed = [o for o in outs if not o.ok]
        assert failed, "the simulator was asked for 30% errors"
        assert all(o.value is None and o.error.startswith("batch: HTTP 500") for o in failed)
        assert all(o.prompt_sha and o.model == "sim-model" for o in failed)  # provenance kept
        assert llm.stats.failed == len(failed)
        assert sim.stats()["batches_created"] == 1

        # failures were not cached: the next run submits exactly those again
        llm2 = make_llm(sim, tmp_path)
        sim.sim.config.batch_p_error = 0.0
        again = go(llm2, items)
        assert all(o.ok for o in again)
        assert sum(1 for o in again if not o.cached) == len(failed)
        stats = sim.stats()
        assert stats["batches_created"] == 2 and stats["batch_lines"] == 30 + len(failed)
        assert stats["duplicate_paid"] == 0


def test_unanswered_requests_are_resubmitted_in_the_same_run(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0, batch_seconds=0.1, batch_p_error=0.5, seed=1) as sim:
        llm = make_llm(sim, tmp_path)
        sim_config = sim.sim.config

        def progress(msg: str) -> None:
            if "resubmitting" in msg:
                sim_config.batch_p_error = 0.0  # the second round succeeds

        outs = go(llm, variables(12), progress=progress)
        assert all(o.ok for o in outs)
        assert sim.stats()["batches_created"] == 2


def test_interrupted_wait_resumes_the_same_batch(tmp_path: Path) -> None:
    items = variables(6)
    with simulator_thread(latency=0.0, batch_seconds=0.1, batch_paused=True) as sim:
        llm = make_llm(sim, tmp_path)
        with pytest.raises(TimeoutError, match="run the same command again"):
            go(llm, items, options=BatchOptions(poll_interval=0.05, max_wait=0.1))
        sim.sim.config.batch_paused = False
        store = BatchStore(tmp_path / "cache.sqlite")  # state lives in the cache file by default
        [job] = store.jobs()
        assert job["batch_id"] and job["state"] == "submitted"
        store.close()

        llm2 = make_llm(sim, tmp_path)
        messages: list[str] = []
        outs = go(llm2, items, progress=messages.append)
        assert all(o.ok for o in outs)
        assert any(f"resuming {job['batch_id']}" in m for m in messages)
        stats = sim.stats()
        assert stats["batches_created"] == 1 and stats["files_uploaded"] == 1
        assert stats["batch_lines"] == 6


def test_crash_between_create_and_record_adopts_the_batch(tmp_path: Path) -> None:
    """The process died after ``batches.create`` returned but before the id was stored: the
    rerun finds the batch by its recorded input file instead of paying for a second one."""
    items = variables(4)
    with simulator_thread(latency=0.0, batch_seconds=0.2) as sim:
        llm = make_llm(sim, tmp_path)
        calls = [llm.prepare("relevance.v1", v) for v in items]
        data = b"".join(build_requests((c.key, c.body) for c in calls))

        async def upload_and_create() -> str:
            client = llm.client().provider.sdk
            try:
                f = await client.files.create(file=("in.jsonl", data), purpose="batch")
                await client.batches.create(
                    input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
                )
                return f.id
            finally:
                await llm.aclose()

        file_id = asyncio.run(upload_and_create())
        store = BatchStore(tmp_path / "cache.sqlite")
        store.record_upload(file_id, [c.key for c in calls])  # ... and then "crashed"
        store.close()

        outs = go(make_llm(sim, tmp_path), items)
        assert all(o.ok for o in outs)
        assert sim.stats()["batches_created"] == 1


def test_state_file_without_cache(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0, batch_seconds=0.1) as sim:
        llm = make_llm(sim, tmp_path, cache=False)
        state = tmp_path / "state.sqlite"
        outs = go(llm, variables(3), state_path=state)
        assert all(o.ok for o in outs)
        store = BatchStore(state)
        assert [j["state"] for j in store.jobs()] == ["done"]
        store.close()


def test_budget_limits_what_is_submitted(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": 1000.0, "output": 1000.0}}))
    with simulator_thread(latency=0.0, batch_seconds=0.1) as sim:
        llm = make_llm(sim, tmp_path, prices=prices, max_cost=3.0)
        outs = go(llm, variables(10))
        skipped = [o for o in outs if o.skipped]
        assert skipped and len(skipped) < 10
        assert sim.stats()["batch_lines"] == 10 - len(skipped)


def test_judge_with_batch_returns_qrels_and_judgments(tmp_path: Path) -> None:
    queries = {"q1": "what is a cat", "q2": "capital of france"}
    corpus = {f"d{i}": f"Document {i} text about cats and Paris." for i in range(5)}
    run = Run.from_dict({"q1": {"d0": 3.0, "d1": 2.0, "d2": 1.0}, "q2": {"d2": 2.0, "d3": 1.0, "d4": 0.5}})
    human = Qrels.from_dict({"q1": {"d0": 1}})
    with simulator_thread(latency=0.0, batch_seconds=0.1) as sim:
        judge = LLMRelevanceJudge(llm=make_llm(sim, tmp_path), progress=False)
        result = judge_with_batch_sync(
            judge,
            queries,
            corpus,
            [run],
            2,
            qrels=human,
            all_queries=True,
            options=FAST,
            progress=lambda m: None,
        )
    pairs = {(j.qid, j.docid) for j in result.judgments}
    assert pairs == {("q1", "d1"), ("q2", "d2"), ("q2", "d3")}  # the human label is not re-judged
    assert all(j.grade in (0, 1, 2, 3) and j.error is None for j in result.judgments)
    assert all(
        j.prompt_id == "relevance" and j.prompt_sha and j.model == "sim-model" for j in result.judgments
    )
    assert result.qrels.get("q1")["d0"] == 1 and result.provenance("q1", "d0") == "human"
    assert result.summary()["judged"] == 3 and result.usage.calls == 3
    key = "sk-test-batch-key"
    assert key not in json.dumps([j.to_dict() for j in result.judgments])
    assert key.encode() not in (tmp_path / "cache.sqlite").read_bytes()


def test_batch_failing_validation_fails_every_item_with_the_reason(tmp_path: Path) -> None:
    # a server that rejects json_schema bodies fails the whole batch at validation
    with simulator_thread(latency=0.0, batch_seconds=0.1, supports_json_schema=False) as sim:
        llm = make_llm(sim, tmp_path)
        outs = go(llm, variables(3))
        stats = sim.stats()
    assert all(not o.ok for o in outs)
    assert all("failed validation" in o.error and "json_schema" in o.error for o in outs)
    assert stats["batches_created"] == 1 and stats["paid"] == 0  # not resubmitted: it would fail again
    assert llm.stats.failed == 3


# ----------------------------------------------------------------------------- batch price
def test_price_table_batch_cost_is_half_the_online_cost() -> None:
    from ragjudge.llm.cost import BATCH_DISCOUNT, Price, PriceTable, Usage

    table = PriceTable({"m": Price(input=2.0, output=8.0, cached_input=1.0)})
    usage = Usage(calls=3, prompt_tokens=1_000_000, cached_tokens=500_000, completion_tokens=250_000)
    online = (500_000 * 2.0 + 500_000 * 1.0 + 250_000 * 8.0) / 1e6  # 3.5 USD
    assert table.cost("m", usage) == pytest.approx(online)
    assert BATCH_DISCOUNT == 0.5
    assert table.cost("m", usage, batch=True) == pytest.approx(online / 2)
    assert table.cost("unknown", usage, batch=True) is None  # unknown stays unknown


def test_batch_job_is_costed_at_the_batch_price(tmp_path: Path) -> None:
    from ragjudge.llm.cost import PriceTable

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"sim-model": {"input": 1.0, "output": 4.0}}))
    queries = {"q1": "what is a cat"}
    corpus = {f"d{i}": f"Document {i} about cats." for i in range(3)}
    run = Run.from_dict({"q1": {"d0": 3.0, "d1": 2.0, "d2": 1.0}})
    with simulator_thread(latency=0.0, batch_seconds=0.1) as sim:
        llm = make_llm(sim, tmp_path, prices=prices)
        judge = LLMRelevanceJudge(llm=llm, progress=False)
        result = judge_with_batch_sync(judge, queries, corpus, [run], 3, options=FAST, progress=lambda m: None)
    assert result.usage.calls == 3 and result.usage.total_tokens > 0
    online = PriceTable.load(prices).cost("sim-model", result.usage)
    assert online is not None and online > 0
    assert result.cost == pytest.approx(online / 2)
    assert llm.cost == pytest.approx(online / 2)  # the session's running total agrees


def test_a_server_without_the_batch_api_says_so(httpx2_mock: Any, tmp_path: Path) -> None:
    """llama.cpp, vLLM and Ollama have no /files or /batches: one clear error, not a trace."""
    base = "http://local.test/v1"
    httpx2_mock.post(base + "/files").respond(404, json={"error": {"message": "File Not Found"}})
    llm = LLM("local", base_url=base, api_key="sk-test-batch-key", cache=tmp_path / "c.sqlite")
    with pytest.raises(LLMError, match=r"has no Batch API \(HTTP 404 on upload\); run without --batch"):
        go(llm, variables(2))
