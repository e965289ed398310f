"""The generic structured call: formats and fallbacks, parsing and repair, logprobs, cache,
dedup, budget, dry run -- with the real openai client mocked at the HTTP layer."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
import respx
from _llm_fakes import (
    BASE, SECRET, URL, body_of, completion, error, grade_logprobs, grade_reply, grader, ok,
)

from ragjudge.errors import InputError, LLMError
from ragjudge.llm import LLM, BUDGET_REASON, Cache, FailureKind, PriceTable, load_prompt, parse_reply
from ragjudge.llm.cost import Price, Usage

VARS = {"query": "what is the boiling point of water", "passage": "Water boils at 100 C."}


def make_llm(tmp_path: Path, model: str = "judge-model", **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("api_key", SECRET)
    return LLM(model, base_url=BASE, **kw)


def run(llm: LLM, coro_fn: Any) -> Any:
    async def go() -> Any:
        try:
            return await coro_fn()
        finally:
            await llm.aclose()

    return asyncio.run(go())


def ask(llm: LLM, variables: dict[str, str] = VARS, prompt: Any = "relevance.v1", **kw: Any) -> Any:
    return run(llm, lambda: llm.structured(prompt, variables, **kw))


# ----------------------------------------------------------------------------- request shape
def test_schema_reply_and_request_shape(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(3, "Exact answer.")))
    llm = make_llm(tmp_path, seed=7)
    out = ask(llm)
    assert out.ok and out.value == {"reasoning": "Exact answer.", "grade": 3}
    body = body_of(route.calls[0])
    assert body["model"] == "judge-model"
    assert body["temperature"] == 0 and body["seed"] == 7 and body["max_tokens"] == 300
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    assert rf["json_schema"]["schema"]["properties"]["grade"]["enum"] == [0, 1, 2, 3]
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    p = load_prompt("relevance.v1")
    assert (out.prompt_id, out.prompt_version, out.prompt_sha) == ("relevance", "1", p.sha256)
    assert out.params == {"temperature": 0.0, "seed": 7, "max_tokens": 300}
    assert out.system_fingerprint == "fp_test" and out.served_model == "judge-model-2025"
    assert out.response_format == "json_schema" and not out.cached
    assert out.usage == Usage(1, 120, 0, 20)


def test_fallback_json_object_then_text(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [
        error(400, "response_format type json_schema is not supported by this server"),
        error(400, "Unknown field response_format"),
        ok(completion('Here you go:\n```json\n{"reasoning": "r", "grade": 1}\n```')),
        ok(completion('{"reasoning": "r2", "grade": 2}')),
    ]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and out.value["grade"] == 1 and out.response_format == "text"
    kinds = [body_of(c).get("response_format", {}).get("type") for c in route.calls]
    assert kinds == ["json_schema", "json_object", None]
    assert llm.stats.fallbacks == ["response_format -> json_object", "response_format -> text"]
    # The downgrade is remembered: the next request starts in text mode.
    out2 = ask(llm, {"query": "q2", "passage": "p2"})
    assert out2.value["grade"] == 2 and "response_format" not in body_of(route.calls[-1])


def test_logprobs_unsupported_are_dropped(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [error(400, "logprobs is not supported"), ok(grade_reply(2))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and out.probs is None
    assert "logprobs" not in body_of(route.calls[1])
    assert "response_format" in body_of(route.calls[1])


def test_max_tokens_renamed_for_models_that_want_max_completion_tokens(
    httpx2_mock: respx.Router, tmp_path: Path
) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [
        error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                   "Use 'max_completion_tokens' instead."),
        ok(grade_reply(2)),
    ]
    out = ask(make_llm(tmp_path))
    assert out.ok
    assert body_of(route.calls[1])["max_completion_tokens"] == 300
    assert "max_tokens" not in body_of(route.calls[1])


def test_a_short_api_key_does_not_hide_an_unsupported_feature(
    httpx2_mock: respx.Router, tmp_path: Path
) -> None:
    # Redaction of a one-letter key used to cut "max_tokens" apart before the message was
    # classified, so the rename was never tried (the error text is classified unredacted).
    route = httpx2_mock.post(URL)
    route.side_effect = [
        error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                   "Use 'max_completion_tokens' instead."),
        ok(grade_reply(2)),
    ]
    assert ask(make_llm(tmp_path, api_key="k")).ok
    assert body_of(route.calls[1])["max_completion_tokens"] == 300


def test_unsupported_feature_twice_is_fatal(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(URL).mock(return_value=error(400, "seed is not allowed"))
    with pytest.raises(LLMError, match="seed"):
        ask(make_llm(tmp_path))


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"grade": 2}', {"grade": 2}),
        ('  ```json\n{"grade": 2}\n```  ', {"grade": 2}),
        ('I think {"grade": 2} is right', {"grade": 2}),
        ('{"grade": 2} and again {"grade": 2}', {"grade": 2}),
    ],
)
def test_parse_reply_tolerant(text: str, expected: dict[str, Any]) -> None:
    assert parse_reply(text) == expected


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        (None, "empty"),
        ("no json here", "no JSON object"),
        ("[1, 2]", "not an object"),
        ('The passage says {"grade": 3} but I say {"grade": 0}', "ambiguous"),
        ('{"grade": 2', "no JSON object"),
    ],
)
def test_parse_reply_rejects(text: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_reply(text)


def test_malformed_reply_gets_one_repair(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(completion('{"reasoning": "r", "grade": 7}')), ok(grade_reply(2))]
    llm = make_llm(tmp_path)
    out = ask(llm)
    assert out.ok and out.value["grade"] == 2 and out.repaired
    repair = body_of(route.calls[1])["messages"]
    assert repair[-2] == {"role": "assistant", "content": '{"reasoning": "r", "grade": 7}'}
    assert "not one of" in repair[-1]["content"]
    assert out.usage.calls == 2 and llm.usage.calls == 2


def test_unparsable_after_repairs_is_a_failure(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(completion("I cannot decide.")), ok(completion("Still unsure.")),
                         ok(completion("No idea.")), ok(completion("Maybe.")), ok(completion("Hmm.")),
                         ok(completion("Pass."))]
    llm = make_llm(tmp_path, max_attempts=5)
    out = ask(llm)
    assert out.value is None
    # Two repairs, then (the replies vary) a fresh attempt and its repairs: five unusable
    # replies in all, the call's retry budget.
    assert out.error == "unparsable reply after 3 repairs and 1 fresh attempt: no JSON object in the reply"
    assert route.call_count == 5 and out.usage.calls == 5
    bodies = [body_of(c) for c in route.calls]
    # Each repair turn is the original request + the latest unusable reply: never a duplicate.
    assert bodies[1]["messages"][-2]["content"] == "I cannot decide."
    assert bodies[2]["messages"][-2]["content"] == "Still unsure."
    assert bodies[2]["messages"][:2] == bodies[0]["messages"]
    assert bodies[3] == bodies[0]  # the fresh attempt
    assert bodies[4]["messages"][-2]["content"] == "Maybe."
    assert len({json.dumps(b, sort_keys=True) for b in bodies}) == 4
    assert llm.stats.failed == 1 and len(llm.cache) == 0  # failures are never cached


def test_a_repeated_bad_reply_is_not_asked_again(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    # The repairs are other requests; the fresh attempt is the first request again, and its
    # word-for-word repeat is what shows the model deterministic: the call ends there.
    route = httpx2_mock.post(URL).mock(return_value=ok(completion("I cannot decide.")))
    out = ask(make_llm(tmp_path))
    assert out.error == "unparsable reply after 2 repairs and 1 fresh attempt: no JSON object in the reply"
    assert route.call_count == 4
    bodies = [body_of(c) for c in route.calls]
    assert bodies[3] == bodies[0] and len({json.dumps(b, sort_keys=True) for b in bodies}) == 3


def test_a_repair_turn_answered_with_the_same_bad_reply_goes_on(httpx2_mock: respx.Router,
                                                               tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(completion("I cannot decide.")), ok(completion("I cannot decide.")),
                         ok(grade_reply(2))]
    out = ask(make_llm(tmp_path))
    assert out.ok and out.value["grade"] == 2 and out.repaired
    assert route.call_count == 3


def test_truncated_reply_is_a_failure(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(
        return_value=ok(completion('{"reasoning": "long', finish_reason="length")))
    out = ask(make_llm(tmp_path))
    assert out.value is None and out.failure is FailureKind.TRUNCATED
    assert out.error == ("truncated reply (finish_reason=length, also with max_tokens=600 "
                         "and without reasoning)")
    # Asked again for the grade alone, then with twice the budget, then given up.
    assert [body_of(c)["max_tokens"] for c in route.calls] == [300, 300, 600] and out.usage.calls == 3
    schemas = [body_of(c)["response_format"]["json_schema"]["schema"] for c in route.calls]
    assert [sorted(s["properties"]) for s in schemas] == [["grade", "reasoning"], ["grade"], ["grade"]]


def test_transient_truncation_and_malformed_replies_are_recovered(
    httpx2_mock: respx.Router, tmp_path: Path
) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [
        ok(completion('{"reasoning": "cut', finish_reason="length")), ok(grade_reply(1)),
        ok(completion("garbage")), ok(completion("more garbage")), ok(grade_reply(2)),
    ]
    llm = make_llm(tmp_path)
    a = ask(llm, {"query": "q", "passage": "a"})
    b = ask(llm, {"query": "q", "passage": "b"})
    assert (a.value["grade"], a.attempts) == (1, 2)
    assert (b.value["grade"], b.attempts, b.repaired) == (2, 3, True)
    assert len(llm.cache) == 2


def test_refusals_are_failures(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [
        ok(completion(None, refusal="I can't help with that.")),
        ok(completion("", finish_reason="content_filter")),
    ]
    llm = make_llm(tmp_path)
    a = ask(llm, {"query": "a", "passage": "a"})
    b = ask(llm, {"query": "b", "passage": "b"})
    assert a.error == "refusal: I can't help with that." and a.value is None
    assert b.error == "refusal: content filter"


def test_custom_validator(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(grade_reply(1)), ok(grade_reply(3))]

    def only_three(obj: dict[str, Any]) -> str:
        if obj["grade"] != 3:
            raise ValueError("grade must be 3 here")
        return "three"

    out = ask(make_llm(tmp_path), validate=only_three)
    assert out.value == "three" and out.repaired


# ----------------------------------------------------------------------------- logprobs
def test_logprobs_give_renormalised_probabilities(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    text = json.dumps({"reasoning": "r", "grade": 2})
    lp = grade_logprobs(text, {"2": 0.6, "3": 0.2, "1": 0.1, "x": 0.1})
    httpx2_mock.post(URL).mock(return_value=ok(completion(text, logprobs=lp)))
    out = ask(make_llm(tmp_path))
    assert out.value["grade"] == 2
    assert set(out.probs) == {"0", "1", "2", "3"}
    assert math.isclose(sum(out.probs.values()), 1.0)
    assert math.isclose(out.probs["2"], 0.6 / 0.9) and out.probs["0"] == 0.0
    assert math.isclose(out.expected, (1 * 0.1 + 2 * 0.6 + 3 * 0.2) / 0.9)


def test_logprobs_with_space_prefixed_tokens(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    text = '{"reasoning": "r", "grade": 1}'
    toks = [{"token": '{"reasoning": "r", "grade":', "logprob": 0.0, "top_logprobs": []},
            {"token": " 1", "logprob": math.log(0.5),
             "top_logprobs": [{"token": " 1", "logprob": math.log(0.5)},
                              {"token": " 0", "logprob": math.log(0.5)}]},
            {"token": "}", "logprob": 0.0, "top_logprobs": []}]
    httpx2_mock.post(URL).mock(return_value=ok(completion(text, logprobs=toks)))
    out = ask(make_llm(tmp_path))
    assert out.probs == {"0": 0.5, "1": 0.5, "2": 0.0, "3": 0.0} and out.expected == 0.5


def test_misaligned_logprobs_give_no_probabilities(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    text = '{"reasoning": "r", "grade": 1}'
    toks = [{"token": "something else entirely", "logprob": 0.0, "top_logprobs": []}]
    httpx2_mock.post(URL).mock(return_value=ok(completion(text, logprobs=toks)))
    out = ask(make_llm(tmp_path))
    assert out.ok and out.probs is None and out.expected is None


def test_fenced_logprobs_stream_is_aligned(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    # llama.cpp: message.content is the bare object, the logprobs tokens spell it inside a
    # ```json fence -- an offset taken from the content would land 8 characters early.
    text = '{"reasoning": "r", "grade": 1}'
    fenced = "```json\n" + text + "\n```"
    lp = grade_logprobs(fenced, {"1": 0.5, "2": 0.25, "0": 0.25})
    httpx2_mock.post(URL).mock(return_value=ok(completion(text, logprobs=lp)))
    out = ask(make_llm(tmp_path))
    assert out.value["grade"] == 1
    assert out.probs == {"0": 0.25, "1": 0.5, "2": 0.25, "3": 0.0}
    assert math.isclose(out.expected, 1.0)


def test_fenced_logprobs_from_the_simulator_give_probabilities(tmp_path: Path) -> None:
    from _loopback import simulator_thread

    items = [{"query": f"query {i}", "passage": f"Passage {i} about topic {i}."} for i in range(6)]
    with simulator_thread(latency=0.0, logprobs_fence=True) as sim:
        llm = LLM("sim-model", base_url=sim.base_url, api_key=SECRET,
                  cache=tmp_path / "c.sqlite", backoff_base=0.001)
        outs = run(llm, lambda: llm.structured_many("relevance.v1", items, progress=False))
    assert all(o.ok for o in outs)
    for o in outs:
        assert o.probs is not None and set(o.probs) == {"0", "1", "2", "3"}
        assert math.isclose(sum(o.probs.values()), 1.0)
        assert o.probs[str(o.value["grade"])] > 0


# ----------------------------------------------------------------------------- cache
def test_rerun_costs_zero_calls(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2)))
    first = ask(make_llm(tmp_path))
    again_llm = make_llm(tmp_path)  # a new process would open the same file
    again = ask(again_llm)
    assert route.call_count == 1
    assert again.cached and again.value == first.value and again.key == first.key
    assert again_llm.usage == Usage() and again_llm.stats.cache_hits == 1


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other-model"},
        {"seed": 1},
        {"temperature": 0.5},
        {"max_tokens": 100},
        {"variables": {"query": VARS["query"], "passage": VARS["passage"] + " "}},
        {"prompt_edit": True},
    ],
)
def test_cache_key_sensitivity(httpx2_mock: respx.Router, tmp_path: Path, change: dict[str, Any]) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2)))
    ask(make_llm(tmp_path))
    kw = {k: v for k, v in change.items() if k in ("seed", "temperature", "max_tokens")}
    llm = make_llm(tmp_path, model=change.get("model", "judge-model"), **kw)
    prompt: Any = "relevance.v1"
    if change.get("prompt_edit"):
        src = (Path(__file__).resolve().parents[2] / "prompts" / "relevance.v1.md").read_text()
        f = tmp_path / "edited.md"
        f.write_text(src.replace("careful human assessor", "careful assessor"))
        prompt = f
    out = ask(llm, change.get("variables", VARS), prompt=prompt)
    assert not out.cached and route.call_count == 2


def test_cache_key_ignores_key_timeout_and_concurrency(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2)))
    ask(make_llm(tmp_path))
    out = ask(make_llm(tmp_path, api_key="sk-other-key-000000", timeout=5, concurrency=3))
    assert out.cached and route.call_count == 1


def test_cache_file_holds_no_secret(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2)))
    llm = make_llm(tmp_path)
    ask(llm)
    llm.cache.close()
    for f in tmp_path.iterdir():
        assert SECRET.encode() not in f.read_bytes()


def test_no_cache(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2)))
    llm = make_llm(tmp_path, cache=False)
    ask(llm)
    ask(llm)
    assert route.call_count == 2 and not (tmp_path / "cache.sqlite").exists()


def test_cache_wal_mode_and_records(tmp_path: Path) -> None:
    c = Cache(tmp_path / "c.sqlite")
    c.put("k", {"obj": {"grade": 1}, "model": "m", "prompt_id": "relevance"})
    assert c._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # A second connection (another process) sees the committed record immediately.
    other = Cache(tmp_path / "c.sqlite")
    assert other.get("k") == {"obj": {"grade": 1}, "model": "m", "prompt_id": "relevance"}
    assert "k" in other and len(other) == 1 and other.get("missing") is None


def test_cache_path_errors_are_input_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot open the cache"):
        Cache(blocker / "sub" / "c.sqlite")


def test_default_cache_path_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ragjudge.llm import default_cache_path

    monkeypatch.setenv("RAGJUDGE_CACHE", str(tmp_path / "x.sqlite"))
    assert default_cache_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("RAGJUDGE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "ragjudge" / "judgments.sqlite"


# ----------------------------------------------------------------------------- many, dedup
def test_identical_concurrent_requests_are_sent_once(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=grader(lambda p: len(p) % 4))
    llm = make_llm(tmp_path, cache=False)
    variables = [VARS] * 5 + [{"query": "q", "passage": "abc"}] * 3
    outs = run(llm, lambda: llm.structured_many("relevance.v1", variables, progress=False))
    assert route.call_count == 2
    assert [o.value["grade"] for o in outs] == [len(VARS["passage"]) % 4] * 5 + [3] * 3
    assert llm.stats.deduplicated == 6 and llm.usage.calls == 2


def test_structured_many_keeps_order_and_failures(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    def effect(request: Any) -> respx.MockResponse:
        passage = json.loads(request.content)["messages"][1]["content"]
        if "bad" in passage:
            return ok(completion("nope"))
        return ok(grade_reply(int(passage.split("n=")[1][0]) % 4))

    httpx2_mock.post(URL).mock(side_effect=effect)
    llm = make_llm(tmp_path)
    variables = [{"query": "q", "passage": f"n={i}"} for i in range(9)] + [{"query": "q", "passage": "bad"}]
    outs = run(llm, lambda: llm.structured_many("relevance.v1", variables, progress=False))
    assert [o.value["grade"] for o in outs[:9]] == [i % 4 for i in range(9)]
    assert outs[9].value is None and outs[9].error.startswith("unparsable")


def test_fatal_error_stops_the_batch(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(URL).mock(return_value=error(401, "bad key"))
    llm = make_llm(tmp_path)
    variables = [{"query": "q", "passage": f"p{i}"} for i in range(40)]
    with pytest.raises(LLMError, match="401"):
        run(llm, lambda: llm.structured_many("relevance.v1", variables, progress=False))


def test_resume_after_a_crash_pays_only_what_is_left(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    """A run interrupted mid-way (the task is cancelled, as a kill would stop it) keeps every
    committed answer; the rerun pays only for the rest."""
    calls = {"n": 0}

    def effect(request: Any) -> respx.MockResponse:
        calls["n"] += 1
        return ok(grade_reply(1))

    httpx2_mock.post(URL).mock(side_effect=effect)
    variables = [{"query": "q", "passage": f"p{i}"} for i in range(30)]
    llm = make_llm(tmp_path, concurrency=2)

    async def crash() -> None:
        task = asyncio.create_task(llm.structured_many("relevance.v1", variables, progress=False))
        while len(llm.cache) < 10:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(llm, crash)
    paid_first = calls["n"]
    committed = len(llm.cache)
    assert 10 <= committed <= paid_first <= committed + 2  # at most the in-flight calls lost
    again = make_llm(tmp_path, concurrency=2)
    outs = run(again, lambda: again.structured_many("relevance.v1", variables, progress=False))
    assert all(o.ok for o in outs)
    assert calls["n"] - paid_first == 30 - committed
    assert sum(o.cached for o in outs) == committed


# ----------------------------------------------------------------------------- cost
def test_usage_and_cost_with_cached_prompt_tokens(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2, prompt_tokens=1000, completion_tokens=100,
                                                            cached_tokens=400)))
    prices = PriceTable({"judge-model": Price(input=1.0, output=10.0, cached_input=0.5)})
    llm = make_llm(tmp_path, prices=prices)
    ask(llm)
    assert llm.usage == Usage(1, 1000, 400, 100)
    assert math.isclose(llm.cost, (600 * 1.0 + 400 * 0.5 + 100 * 10.0) / 1e6)


def test_price_table_file_and_prefix_lookup(tmp_path: Path) -> None:
    f = tmp_path / "prices.json"
    f.write_text(json.dumps({"my-model": {"input": 2, "output": 4}}))
    table = PriceTable.load(f)
    assert table.get("my-model") == Price(2.0, 4.0, None)
    assert table.get("gpt-4o-mini-2024-07-18") == table.get("gpt-4o-mini")
    assert table.cost("local-llama", Usage(1, 10, 0, 10)) is None
    f.write_text(json.dumps({"m": {"input": 1}}))
    with pytest.raises(InputError, match="needs 'input' and 'output'"):
        PriceTable.load(f)


def test_max_cost_stops_cleanly(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2, prompt_tokens=1000, completion_tokens=0)))
    prices = PriceTable({"judge-model": Price(input=1.0, output=1.0)})
    # Each call costs $0.001 (1000 prompt tokens at $1/1M); the budget allows a handful.
    llm = make_llm(tmp_path, prices=prices, max_cost=0.0055, concurrency=1)
    variables = [{"query": "q", "passage": f"p{i}"} for i in range(20)]
    outs = run(llm, lambda: llm.structured_many("relevance.v1", variables, progress=False))
    done = [o for o in outs if o.ok]
    skipped = [o for o in outs if o.skipped]
    assert len(done) + len(skipped) == 20 and 1 <= len(done) < 20
    assert all(o.error == BUDGET_REASON and o.value is None for o in skipped)
    assert llm.cost <= 0.0055 and route.call_count == len(done)
    assert llm.stats.skipped == len(skipped)
    # Everything done is cached: a rerun with a larger budget pays only for the rest.
    more = make_llm(tmp_path, prices=prices, max_cost=1.0)
    outs2 = run(more, lambda: more.structured_many("relevance.v1", variables, progress=False))
    assert all(o.ok for o in outs2) and route.call_count == 20


def test_max_cost_needs_a_price(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="needs a price"):
        make_llm(tmp_path, model="local-llama", max_cost=1.0)


def test_dry_run_sends_nothing(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2)))
    llm = make_llm(tmp_path, model="gpt-4o-mini")
    ask(llm, {"query": "q", "passage": "p0"})
    variables = [{"query": "q", "passage": f"p{i}"} for i in range(5)] + [{"query": "q", "passage": "p1"}]
    plan = llm.estimate("relevance.v1", variables)
    assert route.call_count == 1
    assert (plan.pairs, plan.cached, plan.duplicates, plan.calls) == (6, 1, 1, 4)
    assert plan.prompt_tokens > 4 * 100 and plan.completion_tokens == 4 * 70
    assert plan.cost is not None and plan.cost > 0
    assert "4 calls" in plan.describe()
    local = make_llm(tmp_path, model="local-llama").estimate("relevance.v1", variables)
    assert local.cost is None and "unknown" in local.describe()


def test_prepare_and_accept_for_batch_mode(tmp_path: Path) -> None:
    llm = make_llm(tmp_path)
    call = llm.prepare("relevance.v1", VARS)
    assert call.cached is None and call.body["model"] == "judge-model"
    assert call.body["messages"] == call.messages and call.body["response_format"]["type"] == "json_schema"
    out = llm.accept(call, grade_reply(3, cached_tokens=50))
    assert out.ok and out.value["grade"] == 3 and llm.usage == Usage(1, 120, 50, 20)
    again = llm.prepare("relevance.v1", VARS)
    assert again.key == call.key and again.cached is not None and again.cached.value["grade"] == 3
    bad = llm.accept(llm.prepare("relevance.v1", {"query": "q", "passage": "x"}), completion("nope"))
    assert bad.value is None and bad.error.startswith("unparsable reply")
    assert llm.accept(call, {"choices": []}).error.startswith("malformed reply body")


def test_a_waiter_takes_over_when_the_owner_is_cancelled(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    gate: dict[str, Any] = {"sent": 0}

    async def slow(request: Any) -> respx.MockResponse:
        gate["sent"] += 1
        await gate["release"].wait()
        return ok(grade_reply(2))

    route = httpx2_mock.post(URL).mock(side_effect=slow)
    llm = make_llm(tmp_path, cache=False)

    async def main() -> Any:
        gate["release"] = asyncio.Event()
        owner = asyncio.create_task(llm.structured("relevance.v1", VARS))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(llm.structured("relevance.v1", VARS))
        await asyncio.sleep(0.05)
        owner.cancel()  # e.g. one notebook cell interrupted while another waits on the same pair
        await asyncio.sleep(0.05)
        gate["release"].set()
        try:
            return await waiter, owner.cancelled()
        finally:
            await llm.aclose()

    out, cancelled = asyncio.run(main())
    assert cancelled and out.ok and out.value["grade"] == 2
    assert gate["sent"] == 2  # the cancelled call, then the waiter's own
    assert route.call_count == 1  # only the waiter's was answered
