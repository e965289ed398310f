"""Model objects as the judge: ``LLM(obj)`` for a LangChain chat model, a LlamaIndex LLM,
LiteLLM's completion function (a function of its shape here) and any function
``(messages, schema) -> text``, each through the real session: cache, budget, retries,
provenance and structured output."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import subprocess
import sys
from typing import Any

import pytest

from ragjudge.errors import InputError, LLMError
from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM, FailureKind, Price, PriceTable, load_prompt
from ragjudge.llm.fake import MemoryCache

lc_fakes = pytest.importorskip("langchain_core.language_models.fake_chat_models")
from langchain_core.messages import AIMessage  # noqa: E402

GRADE = json.dumps({"reasoning": "on topic", "grade": 2})


def _judge(llm: LLM) -> LLMRelevanceJudge:
    return LLMRelevanceJudge(llm=llm, progress=False)


# ----------------------------------------------------------------------------- LangChain
def test_a_langchain_fake_chat_model_judges_with_provenance_and_worst_case_usage(caplog: Any) -> None:
    model = lc_fakes.FakeListChatModel(responses=[GRADE])
    llm = LLM(model, cache=False)
    assert llm.endpoint.provider == "langchain" and llm.model == "FakeListChatModel"
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        a = _judge(llm).judge_sync("capital of france", "Paris is the capital.")
        b = _judge(llm).judge_sync("capital of italy", "Rome is the capital.")
    assert a.grade == b.grade == 2 and a.model == "FakeListChatModel"
    assert a.system_fingerprint == "langchain_core.language_models.fake_chat_models.FakeListChatModel"
    # no usage reported: each reply counted at its worst case, never zero, and said once
    assert a.usage.unknown == 1 and a.usage.prompt_tokens > 100 and llm.usage.calls == 2
    assert sum("reports no token usage" in r.message for r in caplog.records) <= 1


def test_langchain_usage_metadata_is_read_and_priced() -> None:
    reply = AIMessage(content=GRADE, usage_metadata={"input_tokens": 120, "output_tokens": 9, "total_tokens": 129},
                      response_metadata={"model_name": "gpt-4o-mini-2024-07-18", "finish_reason": "stop"})
    model = lc_fakes.FakeMessagesListChatModel(responses=[reply])
    llm = LLM(model, cache=False, prices=PriceTable({"FakeMessagesListChatModel": Price(1.0, 2.0)}))
    j = _judge(llm).judge_sync("q", "p")
    assert j.grade == 2 and j.served_model == "gpt-4o-mini-2024-07-18"
    assert (j.usage.prompt_tokens, j.usage.completion_tokens, j.usage.unknown) == (120, 9, 0)
    assert llm.cost == pytest.approx((120 * 1.0 + 9 * 2.0) / 1e6)


class StructuredFake(lc_fakes.FakeMessagesListChatModel):
    """A chat model with structured output: records the schema it was given."""

    schemas: list[Any] = []

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, **kw: Any) -> Any:
        from langchain_core.runnables import RunnableLambda

        self.schemas.append(schema)
        raw = AIMessage(content="", usage_metadata={"input_tokens": 50, "output_tokens": 5, "total_tokens": 55})
        return RunnableLambda(lambda _messages: {"raw": raw, "parsed": {"reasoning": "tool", "grade": 3},
                                                 "parsing_error": None})


def test_langchain_structured_output_gets_the_prompts_schema() -> None:
    model = StructuredFake(responses=[AIMessage(content="not used")])
    j = _judge(LLM(model, cache=False)).judge_sync("q", "p")
    assert j.grade == 3 and j.usage.prompt_tokens == 50
    (schema,) = model.schemas
    wanted = load_prompt("relevance.v1").output_schema
    assert schema["title"] == "relevance" and schema["properties"] == wanted["properties"]


def test_a_langchain_reply_that_is_not_json_gets_the_repair_policy() -> None:
    model = lc_fakes.FakeListChatModel(responses=["I think it is relevant.", GRADE])
    llm = LLM(model, cache=False)
    j = _judge(llm).judge_sync("q", "p")
    assert j.grade == 2 and llm.stats.repaired == 1 and llm.usage.calls == 2


# ----------------------------------------------------------------------------- LlamaIndex
# Importing llama_index.core takes seconds: these are in the slow set.
@pytest.mark.slow
def test_llamaindex_mock_llm_goes_through_the_session() -> None:
    from llama_index.core.llms import MockLLM

    llm = LLM(MockLLM(), cache=False)
    assert llm.endpoint.provider == "llamaindex" and llm.model == "MockLLM"
    j = _judge(llm).judge_sync("q", "p")
    # MockLLM echoes the prompt: no JSON, asked again by the repair policy, then a failure as data
    assert j.grade is None and j.failure is FailureKind.UNPARSABLE
    assert j.system_fingerprint == "llama_index.core.llms.mock.MockLLM" and llm.usage.calls >= 2
    assert llm.usage.unknown == llm.usage.calls  # each counted at its worst case


@pytest.mark.slow
def test_a_llamaindex_llm_answering_json_with_usage() -> None:
    from llama_index.core.base.llms.types import CompletionResponse
    from llama_index.core.llms import MockLLM

    class Answering(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=GRADE, raw={"usage": {"prompt_tokens": 70, "completion_tokens": 8}})

    llm = LLM(Answering(), cache=MemoryCache())
    first = _judge(llm).judge_sync("q", "p")
    again = _judge(llm).judge_sync("q", "p")
    assert first.grade == 2 and (first.usage.prompt_tokens, first.usage.completion_tokens) == (70, 8)
    assert again.cached and llm.usage.calls == 1  # the cache answers the second time


# ----------------------------------------------------------------------------- LiteLLM-style
class RateLimitError(Exception):
    status_code = 429


def _completion_function(fail_first: bool = False) -> tuple[Any, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def acompletion(model: str, messages: list[dict[str, str]], **kw: Any) -> dict[str, Any]:
        seen.append({"model": model, "messages": messages, **kw})
        if fail_first and len(seen) == 1:
            raise RateLimitError("slow down")
        return {"model": model + "-2024", "choices": [{"message": {"content": GRADE}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 40, "completion_tokens": 6}}

    return acompletion, seen


def test_a_litellm_style_function_with_usage_schema_and_retries() -> None:
    fn, seen = _completion_function(fail_first=True)
    llm = LLM(functools.partial(fn, model="openai/gpt-4o-mini"), cache=False, backoff_base=0.01,
              prices=PriceTable({"openai/gpt-4o-mini": Price(0.15, 0.6)}), max_cost=1.0)
    assert llm.endpoint.provider == "litellm" and llm.model == "openai/gpt-4o-mini"
    j = _judge(llm).judge_sync("q", "p")
    assert j.grade == 2 and j.served_model == "openai/gpt-4o-mini-2024"
    assert (j.usage.prompt_tokens, j.usage.completion_tokens) == (40, 6) and llm.stats.retries == 1
    assert len(seen) == 2 and seen[-1]["response_format"]["type"] == "json_schema"
    assert seen[-1]["max_tokens"] == load_prompt("relevance.v1").max_tokens
    assert llm.cost == pytest.approx((40 * 0.15 + 6 * 0.6) / 1e6)


def test_a_completion_function_needs_its_model_bound() -> None:
    fn, _ = _completion_function()
    with pytest.raises(InputError, match="functools.partial"):
        LLM(fn)


# ----------------------------------------------------------------------------- any function
def test_any_async_function_of_messages_and_schema() -> None:
    got: list[Any] = []

    async def my_model(messages: list[dict[str, str]], schema: dict[str, Any] | None) -> dict[str, Any]:
        got.append((messages, schema))
        return {"reasoning": "mine", "grade": 1}

    llm = LLM(my_model, cache=False)
    assert llm.endpoint.provider == "callable" and llm.model == "test_any_async_function_of_messages_and_schema.<locals>.my_model"
    j = _judge(llm).judge_sync("q", "p")
    assert j.grade == 1 and got[0][1] == load_prompt("relevance.v1").output_schema
    assert got[0][0][-1]["role"] == "user" and "<passage>" in got[0][0][-1]["content"]


def test_a_function_failure_is_data_a_dropped_connection_is_retried_and_llm_error_stops() -> None:
    calls = {"n": 0}

    def flaky(messages: Any, schema: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("connection reset")
        if "Bananas" in messages[-1]["content"]:
            raise ValueError("no fruit")
        return GRADE

    flaky.model_name = "flaky-1"  # type: ignore[attr-defined]
    llm = LLM(flaky, cache=False, backoff_base=0.01)
    js = _judge(llm).judge_many_sync([("q", "Paris"), ("q", "Bananas")])
    assert [j.grade for j in js] == [2, None] and llm.model == "flaky-1"
    assert js[1].failure is FailureKind.OTHER and "no fruit" in js[1].error and llm.stats.retries == 1

    def revoked(messages: Any, schema: Any) -> str:
        raise LLMError("key revoked")

    with pytest.raises(LLMError, match="key revoked"):
        _judge(LLM(revoked, cache=False)).judge_sync("q", "p")


def test_rag_metrics_take_a_model_object() -> None:
    from ragjudge.rag import evaluate_samples_sync

    answers = {"answer_relevance": {"reasoning": "ok", "grade": 2}}

    async def by_schema(messages: Any, schema: Any) -> Any:
        return answers["answer_relevance"]

    sample = {"id": "s", "user_input": "q?", "retrieved_contexts": ["c1"], "response": "a."}
    rep = evaluate_samples_sync([sample], ["answer_relevance"], judge=LLM(by_schema, cache=False))
    assert rep.mean("answer_relevance") == pytest.approx(2 / 3)


def test_an_unknown_object_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="LangChain chat model"):
        LLM(42)


@pytest.mark.slow  # a subprocess
def test_recognising_objects_imports_no_framework() -> None:
    code = ("import sys, ragjudge.llm.providers as p, ragjudge.llm.session;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'llama_index', 'litellm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_object_providers_are_not_cli_choices() -> None:
    from ragjudge.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["rag", "s.jsonl", "-m", "hit@5", "--provider", "langchain"])
    asyncio.run(asyncio.sleep(0))


def test_a_langchain_model_judges_the_bundled_collection_with_costs_and_provenance() -> None:
    from pathlib import Path

    from ragjudge.io.readers import read_run
    from ragjudge.io.texts import read_corpus, read_queries

    examples = Path(__file__).resolve().parents[2] / "examples"
    queries, corpus = read_queries(examples / "queries.jsonl"), read_corpus(examples / "corpus.jsonl")
    run = read_run(examples / "runs" / "bm25_raw.run")
    reply = AIMessage(content=GRADE, usage_metadata={"input_tokens": 300, "output_tokens": 10, "total_tokens": 310},
                      response_metadata={"model_name": "gpt-4o-mini-2024-07-18"})

    class Named(lc_fakes.FakeMessagesListChatModel):
        model_name: str = "gpt-4o-mini"  # as ChatOpenAI(model="gpt-4o-mini") reports it

    model = Named(responses=[reply])  # answers every request with it
    llm = LLM(model, cache=False, max_cost=5.0)  # the model's list price, as for a URL
    res = LLMRelevanceJudge(llm=llm, progress=False).judge_run_sync(queries, corpus, run, depth=2)
    pairs = len(res.judgments)
    assert pairs >= len(queries) and all(j.grade == 2 for j in res.judgments)
    assert all(j.model == "gpt-4o-mini" and j.served_model == "gpt-4o-mini-2024-07-18" for j in res.judgments)
    assert llm.usage.calls == pairs and llm.usage.prompt_tokens == 300 * pairs
    assert llm.cost == pytest.approx(llm.cost_of(llm.usage)) and llm.cost > 0
