"""The anthropic provider: request/reply translation, its errors and rate-limit headers, and
``judge``, ``rag``, ``synth`` and ``evaluate --judge`` through it, against a loopback fake of
the Messages API (``ragjudge.testing.anthropic``, started by ``tests/_anthropic_fake.py``)
whose content comes from the simulator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _anthropic_fake import fake_anthropic

from ragjudge.cli import main
from ragjudge.errors import LLMError
from ragjudge.io import read_qrels
from ragjudge.llm import LLM, Endpoint, FailureKind
from ragjudge.llm.providers.anthropic import (
    PRICES,
    from_messages_reply,
    messages_usage,
    rate_info,
    to_messages_request,
)
from ragjudge.llm.providers.base import BadBody

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "examples"
MODEL = "claude-haiku-4-5"
KEY_ENV = "RAGJUDGE_TEST_ANTHROPIC_KEY"


def test_request_translation_forces_the_schema_as_a_tool() -> None:
    body = {"model": MODEL, "max_tokens": 64, "temperature": 0.0, "seed": 0,
            "messages": [{"role": "system", "content": "be terse"}, {"role": "user", "content": "q"}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "relevance", "schema": {"type": "object", "properties": {"grade": {"type": "integer"}}}}}}
    req = to_messages_request(body)
    assert req["system"] == "be terse" and req["messages"] == [{"role": "user", "content": "q"}]
    assert req["max_tokens"] == 64 and req["temperature"] == 0.0 and "seed" not in req
    assert req["tools"][0]["input_schema"]["properties"] == {"grade": {"type": "integer"}}
    assert req["tool_choice"] == {"type": "tool", "name": "relevance"}
    plain = to_messages_request({**body, "response_format": {"type": "json_object"}})
    assert "tools" not in plain and "tool_choice" not in plain


def test_reply_translation() -> None:
    usage = {"input_tokens": 100, "output_tokens": 20}
    tool = from_messages_reply({"type": "message", "model": "m", "stop_reason": "tool_use", "usage": usage,
                                "content": [{"type": "tool_use", "name": "r", "input": {"grade": 2}}]})
    assert json.loads(tool.text) == {"grade": 2} and tool.finish_reason == "stop" and tool.logprobs is None
    text = from_messages_reply({"type": "message", "stop_reason": "max_tokens", "usage": usage,
                                "content": [{"type": "text", "text": '{"gr'}]})
    assert text.finish_reason == "length" and text.text == '{"gr'
    refused = from_messages_reply({"type": "message", "stop_reason": "refusal", "usage": usage, "content": []})
    assert refused.refusal and refused.text is None
    with pytest.raises(BadBody) as err:
        from_messages_reply({"type": "error", "usage": usage})
    assert err.value.usage is not None and err.value.usage.prompt_tokens == 100  # billed: counted


def test_cache_reads_and_writes_are_counted_once_and_priced_by_their_ttl() -> None:
    u = messages_usage({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1000,
                        "cache_creation_input_tokens": 200})
    # Every prompt token once (no fraction of the writes added); the writes at the 5-minute rate.
    assert (u.prompt_tokens, u.cached_tokens, u.completion_tokens) == (10 + 1000 + 200, 1000, 5)
    assert (u.cache_write_tokens, u.cache_write_1h_tokens) == (200, 0)
    price = PRICES[MODEL]
    expected = (10 * price.input + 1000 * price.cached_input + 200 * 1.25 * price.input + 5 * price.output) / 1e6
    assert price.cost(u) == pytest.approx(expected)
    # 1-hour writes at 2x input, 5-minute ones at 1.25x (cache_creation splits them).
    split = messages_usage({"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 300,
                            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200}})
    assert (split.prompt_tokens, split.cache_write_tokens, split.cache_write_1h_tokens) == (310, 100, 200)
    assert price.cost(split) == pytest.approx(
        (10 * price.input + 100 * 1.25 * price.input + 200 * 2 * price.input + 5 * price.output) / 1e6)
    assert messages_usage({"output_tokens": 5}).unknown == 1  # no input count: the worst case is used


def test_rate_limit_headers() -> None:
    info = rate_info({"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "7",
                      "anthropic-ratelimit-requests-reset": "2999-01-01T00:00:00Z",
                      "anthropic-ratelimit-tokens-limit": "40000", "anthropic-ratelimit-tokens-remaining": "100",
                      "anthropic-ratelimit-tokens-reset": "not a time", "retry-after": "3"})
    assert (info.limit_requests, info.remaining_requests, info.limit_tokens, info.remaining_tokens) == (50, 7, 40000, 100)
    assert info.reset_requests is not None and info.reset_requests > 1e9 and info.reset_tokens is None
    assert info.retry_after == 3.0


def _llm(fake: Any, tmp_path: Path, **kw: Any) -> LLM:
    ep = Endpoint(MODEL, provider="anthropic", base_url=fake.url, api_key=fake.api_key, backoff_base=0.001)
    return LLM(ep, cache=tmp_path / "c.sqlite", **kw)


def _ask(llm: LLM) -> Any:
    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "volcano ash flights", "passage": "ash cloud"})
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_a_judgment_through_the_messages_api(tmp_path: Path) -> None:
    with fake_anthropic() as fake:
        llm = _llm(fake, tmp_path)
        out = _ask(llm)
        sent = fake.requests[0]
    assert out.ok and out.value["grade"] in (0, 1, 2, 3) and out.probs is None
    assert sent["tool_choice"]["type"] == "tool" and "seed" not in sent and "logprobs" not in sent
    assert out.provenance.served_model == MODEL + "-20251001" and out.provenance.model == MODEL
    assert llm.usage.calls == 1 == fake.billed and llm.cost is not None and llm.cost > 0
    assert llm.runner.header_rpm == 4000  # learned from anthropic-ratelimit-requests-limit


def test_overload_and_rate_limits_are_retried(tmp_path: Path) -> None:
    with fake_anthropic() as fake:
        fake.script.extend([529, 429, 500, "cache"])
        llm = _llm(fake, tmp_path, max_cost=1.0)
        out = _ask(llm)
    assert out.ok and llm.stats.retries == 3 and llm.rate_limited == 1
    assert llm.usage.calls == 1 and llm.usage.cached_tokens == 1000  # only the good reply is billed


def test_a_bad_key_stops_and_a_long_prompt_fails_one_item(tmp_path: Path) -> None:
    with fake_anthropic() as fake:
        bad = LLM(Endpoint(MODEL, provider="anthropic", base_url=fake.url, api_key="sk-ant-wrong-000000"),
                  cache=False)
        with pytest.raises(LLMError, match="authentication failed"):
            _ask(bad)
        fake.script.append(400)
        out = _ask(_llm(fake, tmp_path))
    assert not out.ok and out.failure is FailureKind.PROMPT_TOO_LONG


def test_no_embeddings_and_no_batch(tmp_path: Path) -> None:
    llm = LLM(Endpoint(MODEL, provider="anthropic", api_key="sk-ant-x-0000000000"), cache=False)
    with pytest.raises(LLMError, match="no embeddings"):
        asyncio.run(llm.embed(["a"], model="voyage-3"))


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("RAGJUDGE_MODEL", raising=False)


def _flags(fake: Any, tmp_path: Path) -> list[str]:
    return ["--provider", "anthropic", "--model", MODEL, "--base-url", fake.url, "--api-key-env", KEY_ENV,
            "--cache", str(tmp_path / "cache.sqlite"), "--no-progress"]


@pytest.mark.slow
def test_cli_judge_evaluate_rag_and_synth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_env: None,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with fake_anthropic(judge="overlap") as fake:
        monkeypatch.setenv(KEY_ENV, fake.api_key)
        flags = _flags(fake, tmp_path)
        qrels = tmp_path / "q.txt"
        assert main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                     "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "2", "-o", str(qrels), *flags]) == 0
        assert len(read_qrels(qrels)) > 0
        capsys.readouterr()
        assert main(["evaluate", "none", str(EX / "runs" / "bm25_raw.run"), "--judge", MODEL,
                     "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                     "-m", "p@2", *[f for f in flags if f not in ("--model", MODEL)]]) == 0
        assert "p@2" in capsys.readouterr().out
        samples = tmp_path / "s.jsonl"
        samples.write_text("".join(line + "\n" for line in
                                   (EX / "rag_samples.jsonl").read_text(encoding="utf-8").splitlines()[:3]))
        assert main(["rag", str(samples), "-m", "context_precision,faithfulness", *flags]) == 0
        assert "faithfulness" in capsys.readouterr().out
        assert main(["synth", "--corpus", str(EX / "corpus.jsonl"), "-n", "3", "-o", str(tmp_path / "synth"),
                     *flags]) == 0
        assert (tmp_path / "synth").is_dir()
        assert fake.requests and all("tool_choice" in r or "tools" not in r for r in fake.requests)


# -- the edges: aliases and pages in the model list, the spend limit, truncation, dry run, caching


def test_the_model_check_accepts_aliases_and_reads_every_page(tmp_path: Path) -> None:
    # Two endpoints make the session check that each lists the model; the fake lists dated ids
    # only, and the one asked for is past the first page.
    with fake_anthropic() as fake:
        eps = [Endpoint(MODEL, provider="anthropic", base_url=fake.url, api_key=fake.api_key, backoff_base=0.001)
               for _ in range(2)]
        llm = LLM(eps[0], endpoints=eps, cache=False)
        out = _ask(llm)
    assert out.ok, out.error
    assert fake.model_pages >= 2 * 2  # each endpoint read more than the first page
    assert all(not c.drained for c in llm.callers)


def test_a_spend_limit_stops_the_run_at_once(tmp_path: Path) -> None:
    with fake_anthropic() as fake:
        fake.script.append("spend")
        llm = _llm(fake, tmp_path)
        with pytest.raises(LLMError, match="spend limit reached") as err:
            _ask(llm)
        asked = len(fake.requests)
    assert asked == 1  # not retried for the whole patience
    assert "\n" not in str(err.value) and "sk-ant" not in str(err.value)


@pytest.mark.slow
def test_a_spend_limit_mid_run_writes_what_it_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_env: None,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with fake_anthropic() as fake:
        monkeypatch.setenv(KEY_ENV, fake.api_key)
        fake.script.extend([None] * 4 + ["spend"])
        qrels = tmp_path / "q.txt"
        code = main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                     "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "5", "-o", str(qrels),
                     "--concurrency", "1", *_flags(fake, tmp_path)])
        asked = len(fake.requests)
    err = capsys.readouterr().err
    assert code != 0 and "spend limit reached" in err
    assert asked == 5  # four answers, then one refusal: nothing retried
    assert len(read_qrels(qrels)) == 4  # what was paid for is written


def test_the_truncation_retry_sends_a_tool_without_the_dropped_fields(tmp_path: Path) -> None:
    with fake_anthropic(p_truncate=1.0) as fake:
        out = _ask(_llm(fake, tmp_path))
        sent = [r["tools"][0]["input_schema"] for r in fake.requests]
    assert not out.ok and "without reasoning" in (out.error or "")
    assert "reasoning" in sent[0]["properties"]
    for schema in sent[1:]:  # the retries ask for the grade alone, and the tool says so too
        assert "reasoning" not in schema["properties"] and "reasoning" not in schema["required"]


def test_the_dry_run_counts_the_forced_tool(tmp_path: Path) -> None:
    from ragjudge.llm.cost import estimate_tokens
    from ragjudge.llm.prompts import load_prompt

    llm = LLM(Endpoint(MODEL, provider="anthropic", api_key="sk-ant-x-0000000000"), cache=False)
    items = [{"query": f"q{i}", "passage": "ash cloud over the airport"} for i in range(3)]
    plan = llm.estimate("relevance.v1", items)
    prompt = load_prompt("relevance.v1")
    messages_only = sum(estimate_tokens(prompt.render(**v)) for v in items)
    schema = len(json.dumps(prompt.response_format("json_schema")["json_schema"], separators=(",", ":"))) // 4
    # The tool's schema and Anthropic's tool-use system prompt (235-340 tokens by model).
    assert plan.prompt_tokens == messages_only + 3 * (schema + 340)
    assert plan.worst_cost is not None and plan.cost is not None and plan.worst_cost > plan.cost


def _long_prompt(tmp_path: Path) -> Path:
    """relevance.v1 with a long shared system part (~1,500 tokens): worth caching."""
    text = (REPO / "prompts" / "relevance.v1.md").read_text(encoding="utf-8")
    notes = "Assessor's notes: judge each passage on its own; ignore its length and its style. " * 70
    path = tmp_path / "relevance_long.md"
    path.write_text(text.replace("<!-- role: system -->\n", "<!-- role: system -->\n" + notes + "\n", 1),
                    encoding="utf-8")
    return path


def test_prompt_caching_marks_a_long_shared_prefix_and_prices_reads_and_writes(tmp_path: Path) -> None:
    model = "claude-sonnet-4-6"  # caches prefixes of 1,024 tokens and more
    short = to_messages_request({"model": model, "max_tokens": 8, "messages": [
        {"role": "system", "content": "be terse"}, {"role": "user", "content": "q"}]})
    assert short["system"] == "be terse"  # too short to be cached: no breakpoint
    prompt = _long_prompt(tmp_path)
    with fake_anthropic() as fake:
        llm = LLM(Endpoint(model, provider="anthropic", base_url=fake.url, api_key=fake.api_key,
                           backoff_base=0.001, concurrency=1), cache=False)

        async def go() -> list[Any]:
            try:
                return await llm.structured_many(prompt, [{"query": f"volcano {i}", "passage": "ash"}
                                                           for i in range(3)], progress=False)
            finally:
                await llm.aclose()

        outs = asyncio.run(go())
        sent = fake.requests
    assert all(o.ok for o in outs)
    assert all(isinstance(r["system"], list) and r["system"][-1]["cache_control"] == {"type": "ephemeral"}
               for r in sent)
    u = llm.usage
    assert u.cache_write_tokens > 0 and u.cached_tokens == 2 * u.cache_write_tokens  # one write, two reads
    price = llm.prices.get(model)
    assert price is not None and price.cache_write == pytest.approx(1.25 * price.input)
    plain = u.prompt_tokens - u.cached_tokens - u.cache_write_tokens
    assert llm.cost == pytest.approx((plain * price.input + u.cached_tokens * price.cached_input
                                      + u.cache_write_tokens * price.cache_write
                                      + u.completion_tokens * price.output) / 1e6)
    # Cheaper than the same tokens uncached.
    assert llm.cost < price.cost(type(u)(u.calls, u.prompt_tokens, 0, u.completion_tokens))


@pytest.mark.slow
def test_the_judge_cost_line_shows_prompt_cache_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cli_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_anthropic() as fake:
        monkeypatch.setenv(KEY_ENV, fake.api_key)
        flags = _flags(fake, tmp_path)
        flags[flags.index(MODEL)] = "claude-sonnet-4-6"
        qrels = tmp_path / "q.txt"
        assert main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                     "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "2", "-o", str(qrels),
                     "--prompt", str(_long_prompt(tmp_path)), "--concurrency", "1", *flags]) == 0
    err = capsys.readouterr().err
    assert "written to the prompt cache" in err
