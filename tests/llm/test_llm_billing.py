"""Every paid reply is counted: a 200 whose body is rejected (no choices, not UTF-8, not JSON,
unusable content) was billed by the provider, so its usage is counted as soon as it arrives
(the worst case when it cannot be read), and the next attempt is admitted by the budget."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import respx
from _llm_fakes import BASE, SECRET, URL, completion, grade_reply, ok

from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM, PriceTable, Usage
from ragjudge.llm.cost import Price
from ragjudge.llm.provenance import FailureKind

PRICES = PriceTable.default().with_price("judge-model", PriceTable.default().get("gpt-4o-mini"))
USAGE = {"prompt_tokens": 400, "completion_tokens": 30, "total_tokens": 430}


def make_llm(tmp_path: Path, **kw: Any) -> LLM:
    kw.setdefault("cache", False)
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("prices", PRICES)
    return LLM("judge-model", base_url=BASE, api_key=SECRET, **kw)


def ask(llm: LLM) -> Any:
    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "q", "passage": "p"})
        finally:
            await llm.aclose()

    return asyncio.run(go())


def raw(content: bytes) -> respx.MockResponse:
    return respx.MockResponse(200, content=content, headers={"content-type": "application/json"})


def test_empty_choices_with_usage_are_counted_then_retried(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok({"id": "x", "object": "chat.completion", "choices": [], "usage": USAGE}),
                         ok(grade_reply(2, prompt_tokens=400, completion_tokens=30))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and out.value["grade"] == 2
    assert route.call_count == 2
    assert llm.usage.calls == 2 and llm.usage.prompt_tokens == 800 and llm.usage.completion_tokens == 60
    assert out.usage.calls == 2
    assert llm.cost == PRICES.cost("judge-model", Usage(2, 800, 0, 60))


def test_a_body_that_is_not_utf8_is_counted_at_the_usage_it_states(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    body = json.dumps(completion("MARK", prompt_tokens=400, completion_tokens=30)).encode()
    body = body.replace(b"MARK", b"\xff\xfe")
    assert b"\xff" in body
    route = httpx2_mock.post(URL)
    route.side_effect = [raw(body), ok(grade_reply(1, prompt_tokens=400, completion_tokens=30))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and route.call_count == 2
    assert llm.usage.calls == 2 and llm.usage.prompt_tokens == 800 and llm.usage.unknown == 0


def test_a_body_without_readable_usage_counts_the_worst_case(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [raw(b"<html>upstream hiccup</html>"), ok(grade_reply(1, prompt_tokens=400,
                                                                              completion_tokens=30))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and route.call_count == 2
    assert llm.usage.calls == 2 and llm.usage.unknown == 1
    # The stand-in is the worst case of the request: never less than a real reply.
    assert llm.usage.prompt_tokens > 400 and llm.usage.completion_tokens >= 30 + 300


def test_unusable_bodies_are_bounded_by_the_retry_budget(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok({"object": "chat.completion", "choices": [],
                                                         "usage": USAGE}))
    llm = make_llm(tmp_path, max_attempts=3)
    out = ask(llm)
    assert not out.ok and out.failure is FailureKind.MALFORMED
    assert "no choices" in out.error
    assert route.call_count == 3 and llm.usage.calls == 3 and llm.usage.prompt_tokens == 1200


def test_unparsable_replies_get_fresh_attempts_until_one_is_usable(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(completion("I cannot decide.")), ok(completion("Still unsure.")),
                         ok(completion("No idea.")), ok(grade_reply(3))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and out.value["grade"] == 3
    assert route.call_count == 4 and llm.usage.calls == 4 and out.usage.calls == 4


def test_reported_cost_is_the_true_bill_and_never_passes_the_cap(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    """Many calls in flight, a quarter of the replies billed but rejected: the session's cost
    is exactly what the server's usage says, and that never exceeds --max-cost."""
    rng = random.Random(7)
    billed: list[Usage] = []

    async def effect(request: Any) -> respx.MockResponse:
        await asyncio.sleep(0.01)
        body = json.loads(request.content)
        usage = {"prompt_tokens": 450, "completion_tokens": body["max_tokens"],
                 "total_tokens": 450 + body["max_tokens"]}
        billed.append(Usage(1, 450, 0, body["max_tokens"]))
        u = rng.random()
        if u < 0.15:
            return ok({"object": "chat.completion", "choices": [], "usage": usage})
        if u < 0.25:
            text = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "MARK"}}], "usage": usage}).encode()
            return raw(text.replace(b"MARK", b"\xff\xfe"))
        reply = grade_reply(2, prompt_tokens=450, completion_tokens=body["max_tokens"])
        return ok(reply)

    httpx2_mock.post(URL).mock(side_effect=effect)
    cap = 0.006
    llm = make_llm(tmp_path, max_cost=cap, concurrency=16)
    judge = LLMRelevanceJudge(llm=llm, progress=False)
    judgments = judge.judge_many_sync([(f"query {i}", f"passage {i}") for i in range(80)])
    true_bill = sum(PRICES.cost("judge-model", u) for u in billed)
    assert llm.usage.calls == len(billed)
    assert abs(llm.cost - true_bill) < 1e-12
    assert true_bill <= cap
    assert any(j.failure is FailureKind.BUDGET for j in judgments)


def test_a_rejected_batch_result_is_counted(tmp_path: Path) -> None:
    llm = make_llm(tmp_path)
    call = llm.prepare("relevance.v1", {"query": "q", "passage": "p"})
    out = llm.accept(call, {"object": "chat.completion", "choices": [], "usage": USAGE}, batch=True)
    assert not out.ok and out.failure is FailureKind.MALFORMED
    assert llm.usage.calls == 1 and llm.usage.prompt_tokens == 400
    assert llm.batch_usage.calls == 1


def test_a_body_that_is_not_json_is_counted_at_the_usage_it_still_states(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    # A JSON reply with a trailer (a proxy's stray event line): not JSON as a whole, but its
    # usage is readable, and that is what the provider billed.
    body = json.dumps(completion("MARK", prompt_tokens=400, completion_tokens=30)).encode() + b"\ndata: [DONE]\n"
    route = httpx2_mock.post(URL)
    route.side_effect = [raw(body), ok(grade_reply(1, prompt_tokens=400, completion_tokens=30))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and route.call_count == 2
    assert llm.usage == Usage(2, 800, 0, 60)
    assert llm.cost == PRICES.cost("judge-model", Usage(2, 800, 0, 60))


def test_a_usage_quoted_inside_the_reply_text_is_not_taken_for_the_bill(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    text = json.dumps({"usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]})
    route = httpx2_mock.post(URL)
    route.side_effect = [raw(body.encode()[:-2]), ok(grade_reply(1, prompt_tokens=400, completion_tokens=30))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and route.call_count == 2
    # The cut-off body states no usage of its own: counted at the worst case, not at 1 + 1.
    assert llm.usage.unknown == 1 and llm.usage.prompt_tokens > 400 + 1


def test_an_embeddings_reply_that_cannot_be_decoded_is_counted_then_retried(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    emb_url = BASE + "/embeddings"
    bad = ok({"object": "list", "data": [{"index": 0, "embedding": "not base64!"}],
              "usage": {"prompt_tokens": 7, "total_tokens": 7}})
    good = ok({"object": "list", "data": [{"index": 0, "embedding": [1.0, 0.0]}],
               "usage": {"prompt_tokens": 7, "total_tokens": 7}})
    route = httpx2_mock.post(emb_url)
    route.side_effect = [bad, good]
    prices = PRICES.with_price("emb-model", Price(input=0.02, output=0.0))
    llm = make_llm(tmp_path, prices=prices)

    async def go() -> Any:
        try:
            return await llm.embed(["alpha"], model="emb-model")
        finally:
            await llm.aclose()

    got = asyncio.run(go())
    assert got.ok and got.vectors == [[1.0, 0.0]]
    assert route.call_count == 2
    assert llm.embedding_usage["emb-model"] == Usage(2, 14, 0, 0)
    assert got.usage == Usage(2, 14, 0, 0)


def test_two_malformed_bodies_then_a_good_reply_is_graded(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [raw(b'{"choices": [{"message": {"content": "{\\"grade\\": 2'),
                         ok({"object": "chat.completion", "choices": [], "usage": USAGE}),
                         ok(grade_reply(2, prompt_tokens=400, completion_tokens=30))]
    llm = make_llm(tmp_path, max_attempts=3)
    out = ask(llm)
    assert out.ok and out.value["grade"] == 2 and route.call_count == 3
    # Every reply counted: the cut-off one at the worst case, the others at their usage.
    assert llm.usage.calls == 3 and llm.usage.unknown == 1 and out.usage.calls == 3


def test_always_unusable_content_fails_with_its_reason_after_the_retry_budget(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    n = 0

    def effect(request: Any) -> respx.MockResponse:
        nonlocal n
        n += 1
        return ok(completion(f"I would say it depends ({n}).", prompt_tokens=400, completion_tokens=30))

    route = httpx2_mock.post(URL).mock(side_effect=effect)
    llm = make_llm(tmp_path, max_attempts=5)
    out = ask(llm)
    assert not out.ok and out.failure is FailureKind.UNPARSABLE
    assert out.error.startswith("unparsable reply after 3 repairs and 1 fresh attempt: ")
    assert route.call_count == 5
    assert llm.usage == Usage(5, 2000, 0, 150) and out.usage == llm.usage
    assert llm.cost == PRICES.cost("judge-model", Usage(5, 2000, 0, 150))


def test_rejected_bodies_and_unusable_content_share_one_retry_budget(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok({"object": "chat.completion", "choices": [], "usage": USAGE}),
                         ok(completion("Maybe.", prompt_tokens=400, completion_tokens=30)),
                         ok(completion("Perhaps.", prompt_tokens=400, completion_tokens=30)),
                         ok(grade_reply(1, prompt_tokens=400, completion_tokens=30))]
    llm = make_llm(tmp_path, max_attempts=3)
    out = ask(llm)
    assert not out.ok and out.failure is FailureKind.UNPARSABLE
    assert route.call_count == 3 and llm.usage == Usage(3, 1200, 0, 90)


def test_a_request_answered_by_two_batch_jobs_is_counted_twice(tmp_path: Path) -> None:
    """Two processes submitted the same requests before either recorded a batch id: a rerun
    harvests both jobs, uses one answer per request, and counts both (both are billed)."""
    from _loopback import simulator_thread

    from ragjudge.llm.batch import BatchOptions, BatchStore, build_requests, run_batch

    items = [{"query": f"q{i}", "passage": f"passage {i}"} for i in range(4)]
    with simulator_thread(latency=0.0, batch_seconds=0.1) as sim:
        def make() -> LLM:
            return LLM("sim-model", base_url=sim.base_url, api_key="sk-test-batch-key",
                       cache=tmp_path / "cache.sqlite", prices=PRICES.with_price(
                           "sim-model", Price(input=1.0, output=4.0)))

        llm = make()
        calls = [llm.prepare("relevance.v1", v) for v in items]
        data = b"".join(build_requests((c.key, c.body) for c in calls))

        async def upload_and_create() -> str:
            client = llm.client().provider.sdk
            try:
                f = await client.files.create(file=("in.jsonl", data), purpose="batch")
                await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")
                return f.id
            finally:
                await llm.aclose()

        store = BatchStore(tmp_path / "cache.sqlite")
        for _ in range(2):  # ... and each "crashed" before recording its batch id
            store.record_upload(asyncio.run(upload_and_create()), [c.key for c in calls])
        store.close()

        llm2 = make()

        async def main() -> list[Any]:
            try:
                return await run_batch(llm2, "relevance.v1", items,
                                       options=BatchOptions(poll_interval=0.05, max_poll_interval=0.2))
            finally:
                await llm2.aclose()

        outs = asyncio.run(main())
        assert all(o.ok for o in outs)
        stats = sim.stats()
        assert stats["batches_created"] == 2 and stats["batch_lines"] == 8
        assert llm2.usage.calls == 8 and llm2.batch_usage.calls == 8
        used = sum((o.usage for o in outs), Usage())
        assert llm2.usage.prompt_tokens == 2 * used.prompt_tokens


def test_against_the_simulator_the_reported_cost_is_its_bill_and_within_the_cap(tmp_path: Path) -> None:
    """Empty choices, content that is no JSON, bodies that are not clean JSON and 5xx, all
    but the 5xx billed: what the session reports is what the server billed, under the cap."""
    from _loopback import simulator_thread

    price = Price(input=1.0, output=4.0)
    with simulator_thread(latency=0.0, p_5xx=0.1, p_malformed=0.05, p_empty_choices=0.1,
                          p_billed_garbage=0.1, seed=5) as sim:
        def run(cap: float | None, salt: str) -> tuple[LLM, list[Any], dict[str, Any]]:
            before = sim.stats()
            llm = LLM("sim-model", base_url=sim.base_url, api_key="sk-test", cache=False,
                      backoff_base=0.001, prices=PRICES.with_price("sim-model", price), max_cost=cap)
            judge = LLMRelevanceJudge(llm=llm, progress=False)
            out = judge.judge_many_sync([(f"{salt} query {i % 7}", f"{salt} passage {i}") for i in range(60)])
            after = sim.stats()
            return llm, out, {k: after[k] - before[k] for k in ("prompt_tokens", "completion_tokens",
                                                                 "billed_garbage", "empty_choices")}

        llm, judgments, billed = run(None, "a")
        true_bill = price.cost(Usage(1, billed["prompt_tokens"], 0, billed["completion_tokens"]))
        assert billed["billed_garbage"] and billed["empty_choices"]
        assert all(j.grade is not None for j in judgments), [j.error for j in judgments if j.grade is None]
        assert abs(llm.cost - true_bill) < 1e-9

        cap = true_bill / 3
        llm, judgments, billed = run(cap, "b")
        true_bill = price.cost(Usage(1, billed["prompt_tokens"], 0, billed["completion_tokens"]))
        assert abs(llm.cost - true_bill) < 1e-9 and true_bill <= cap
        assert any(j.failure is FailureKind.BUDGET for j in judgments)


def test_a_call_cut_off_in_flight_is_counted_at_its_worst_case(tmp_path: Path) -> None:
    # A stop or a cancelled job cuts an attempt off while the server works on it; the server
    # may finish and bill it, so the session counts it (worst case, "unknown" usage). A call
    # still queued in our own runner never left and costs nothing.
    from _loopback import simulator_thread

    with simulator_thread(latency=1.0) as sim:
        llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=False, concurrency=1,
                  prices=PriceTable({"sim-model": Price(1.0, 1.0)}))

        async def go() -> None:
            calls = [asyncio.create_task(llm.structured("relevance.v1", {"query": "q", "passage": f"p{i}"}))
                     for i in range(2)]
            for _ in range(500):  # until the first request is with the server
                if sim.stats()["inflight"] >= 1:
                    break
                await asyncio.sleep(0.01)
            for t in calls:
                t.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            await llm.aclose()

        asyncio.run(go())
    assert llm.usage.calls == 1 and llm.usage.unknown == 1 and llm.stats.cancelled == 1
    assert llm.usage.prompt_tokens > 0 and llm.cost is not None and llm.cost > 0
