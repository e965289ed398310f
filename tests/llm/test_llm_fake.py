"""ragjudge.llm.fake: the in-process fake session judges and RAG metrics accept in place of
an LLM (no HTTP): replies, failures as data, provenance, usage, cache, dry runs, embeddings."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ragjudge.errors import InputError, LLMError
from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import (
    Cache,
    EmbeddingSession,
    FailureKind,
    Price,
    PriceTable,
    StructuredSession,
    Usage,
    load_prompt,
)
from ragjudge.llm.fake import Failure, FakeLLM, MemoryCache, Reply, hashed_embedding


def grade_by_word(prompt: Any, v: Any) -> Any:
    return {"reasoning": "r", "grade": 3 if "paris" in v["passage"].lower() else 0}


def test_it_is_a_session() -> None:
    fake = FakeLLM(grade_by_word)
    assert isinstance(fake, StructuredSession) and isinstance(fake, EmbeddingSession)


def test_replies_carry_provenance_and_counted_usage() -> None:
    fake = FakeLLM(grade_by_word, prompt_tokens=100, completion_tokens=10,
                   prices=PriceTable({"fake-model": Price(1.0, 2.0)}))
    p = load_prompt("relevance.v1")
    out = asyncio.run(fake.structured(p, {"query": "capital", "passage": "Paris is."}))
    assert out.ok and out.value == {"reasoning": "r", "grade": 3} and out.obj == out.value
    assert (out.model, out.prompt_id, out.prompt_version, out.prompt_sha) == ("fake-model", "relevance", "1", p.sha256)
    assert out.params == {"temperature": 0.0, "seed": 0, "max_tokens": p.max_tokens}
    assert out.usage == Usage(1, 100, 0, 10) and not out.cached
    assert fake.usage == Usage(1, 100, 0, 10) and fake.stats.calls == 1
    assert fake.cost == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)
    (call,) = fake.calls
    assert call.prompt_id == "relevance" and call.variables["passage"] == "Paris is." and "Paris is." in call.user
    # default usage: the estimate of the rendered prompt, ~4 characters per reply token
    plain = FakeLLM(grade_by_word)
    o = asyncio.run(plain.structured(p, {"query": "q", "passage": "x"}))
    assert o.usage.calls == 1 and o.usage.prompt_tokens > 50 and o.usage.completion_tokens > 0
    assert plain.cost is None  # no price for the fake model: unknown, not zero


def test_the_judge_through_the_fake() -> None:
    replies = {"Bananas": Failure("refusal", "refusal: fruit"), "Water": Failure(FailureKind.RETRIES_EXHAUSTED, "503"),
               "Junk": "I refuse to use JSON", "Five": {"reasoning": "x", "grade": 5}}

    def reply(prompt: Any, v: Any) -> Any:
        for start, answer in replies.items():
            if v["passage"].startswith(start):
                return answer
        return Reply({"reasoning": "fine", "grade": 3}, probs={"3": 0.6, "2": 0.2})

    fake = FakeLLM(reply)
    judge = LLMRelevanceJudge(llm=fake, progress=False)
    js = judge.judge_many_sync([("q", "Paris"), ("q", "Bananas"), ("q", "Water"), ("q", "Junk"), ("q", "Five")])
    assert [j.grade for j in js] == [3, None, None, None, None]
    assert js[0].probs == pytest.approx({0: 0.0, 1: 0.0, 2: 0.25, 3: 0.75})
    assert js[0].expected == pytest.approx(0.5 + 2.25)
    assert [j.failure for j in js[1:]] == [FailureKind.REFUSAL, FailureKind.RETRIES_EXHAUSTED,
                                            FailureKind.UNPARSABLE, FailureKind.UNPARSABLE]
    assert js[1].error == "refusal: fruit" and js[1].model == "fake-model"
    # a refusal is billed, a transport failure is not
    assert js[1].usage.calls == 1 and js[2].usage.calls == 0
    # the real repair policy: each unusable reply gets two repair turns and a fresh attempt;
    # the fresh attempt answered word for word like the first (the same request) ends it
    # (four calls each)
    assert fake.stats.failed == 4 and fake.stats.calls == 10 and fake.stats.repaired == 6
    assert [c.variables["passage"] for c in fake.calls].count("Junk") == 4


def test_the_validator_refusal_goes_through_the_repair_policy() -> None:
    fake = FakeLLM({"relevance": {"reasoning": "r", "grade": 2}})

    def picky(obj: Any) -> int:
        raise ValueError("no twos")

    out = asyncio.run(fake.structured("relevance.v1", {"query": "q", "passage": "p"}, validate=picky))
    # the real repair policy: a reply the validator refuses gets two repair turns and a fresh
    # attempt, which the same reply as the first request's ends
    assert out.failure is FailureKind.UNPARSABLE and out.error.endswith("no twos") and out.repaired
    assert len(fake.calls) == 4


def test_returned_exception_fails_raised_llm_error_stops() -> None:
    class Boom(Exception):
        kind = "prompt too long"

    p = load_prompt("relevance.v1")
    out = asyncio.run(FakeLLM(lambda prompt, v: Boom("too big")).structured(p, {"query": "q", "passage": "p"}))
    assert out.failure is FailureKind.PROMPT_TOO_LONG and out.error == "too big"
    out2 = asyncio.run(FakeLLM(lambda prompt, v: ValueError("odd")).structured(p, {"query": "q", "passage": "p"}))
    assert out2.failure is FailureKind.OTHER

    def revoked(prompt: Any, v: Any) -> Any:
        if v["passage"] == "c":
            raise LLMError("authentication failed")
        return {"reasoning": "r", "grade": 1}

    judge = LLMRelevanceJudge(llm=FakeLLM(revoked, concurrency=1), progress=False)
    with pytest.raises(LLMError) as err:
        judge.judge_many_sync([("q", "a"), ("q", "b"), ("q", "c"), ("q", "d")])
    partial = err.value.partial  # what finished before the stop, never the failed pair
    assert [j.docid for j in partial][:2] == ["0", "1"] and "2" not in [j.docid for j in partial]
    assert all(j.grade == 1 for j in partial)


def test_mapping_by_prompt_name_and_unknown_prompt() -> None:
    fake = FakeLLM({"relevance.v1": lambda p, v: {"reasoning": v["query"], "grade": 1}})
    out = asyncio.run(fake.structured("relevance.v1", {"query": "why", "passage": "p"}))
    assert out.value["reasoning"] == "why"
    with pytest.raises(LLMError, match="no reply for prompt answer_relevance.v1"):
        asyncio.run(fake.structured("answer_relevance.v1", {"question": "q", "response": "r"}))
    with pytest.raises(InputError):
        FakeLLM(42)  # type: ignore[arg-type]


def test_async_reply_concurrency_and_dedup() -> None:
    live = peak = 0

    async def slow(prompt: Any, v: Any) -> Any:
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0)
        live -= 1
        return {"reasoning": "r", "grade": 2}

    fake = FakeLLM(slow, concurrency=2)
    outs = asyncio.run(fake.structured_many("relevance.v1", [{"query": "q", "passage": f"p{i % 3}"}
                                                             for i in range(6)]))
    assert all(o.value["grade"] == 2 for o in outs) and len(outs) == 6
    assert peak <= 2
    # identical requests in flight together share one call (the sharers are not billed again)
    assert len(fake.calls) + fake.stats.deduplicated == 6 and len(fake.calls) >= 3
    assert sum(not o.cached for o in outs) == len(fake.calls) == fake.usage.calls
    same = FakeLLM(slow)
    outs = asyncio.run(same.structured_many("relevance.v1", [{"query": "q", "passage": "p"}] * 4))
    assert len(same.calls) == 1 and same.stats.deduplicated == 3 and same.usage.calls == 1
    assert [o.cached for o in outs] == [False, True, True, True] and len({o.key for o in outs}) == 1


def test_memory_cache_and_shared_sqlite_cache(tmp_path: Path) -> None:
    fake = FakeLLM(grade_by_word, cache=True)
    judge = LLMRelevanceJudge(llm=fake, progress=False)
    a = judge.judge_sync("q", "Paris")
    b = judge.judge_sync("q", "Paris")
    assert a.grade == b.grade == 3 and not a.cached and b.cached and len(fake.calls) == 1
    assert isinstance(fake.cache, MemoryCache) and len(fake.cache) == 1
    assert fake.stats.cache_hits == 1 and b.usage == a.usage
    # failures are not cached
    failing = FakeLLM(lambda p, v: Failure("truncated", "cut"), cache=True)
    asyncio.run(failing.structured("relevance.v1", {"query": "q", "passage": "p"}))
    assert len(failing.cache) == 0
    # the real session's keys: a sqlite cache written by the fake answers a real LLM
    from ragjudge.llm import LLM

    cache = Cache(tmp_path / "c.sqlite")
    LLMRelevanceJudge(llm=FakeLLM(grade_by_word, model="m", cache=cache), progress=False).judge_sync("q", "Paris")
    real = LLMRelevanceJudge(llm=LLM("m", base_url="http://nowhere.test/v1", api_key="k", cache=cache),
                             progress=False)
    j = real.judge_sync("q", "Paris")
    assert j.grade == 3 and j.cached and j.model == "m"
    cache.close()


def test_prepare_and_estimate() -> None:
    fake = FakeLLM(grade_by_word, cache=True, prices=PriceTable({"fake-model": Price(1.0, 1.0)}))
    judge = LLMRelevanceJudge(llm=fake, progress=False)
    judge.judge_sync("q", "Paris")
    call = fake.prepare("relevance.v1", {"query": "q", "passage": "Paris"})
    assert call.cached is not None and call.cached.value["grade"] == 3
    assert call.body["response_format"]["json_schema"]["name"] == "relevance"
    plan = fake.estimate("relevance.v1", [{"query": "q", "passage": x} for x in ("Paris", "a", "a", "b")])
    assert (plan.pairs, plan.cached, plan.duplicates, plan.calls) == (4, 1, 1, 2)
    assert plan.cost is not None and plan.worst_cost is not None and plan.worst_cost >= plan.cost
    assert fake.stats.calls == 1  # planning calls nothing


def test_embeddings() -> None:
    fake = FakeLLM()
    emb = asyncio.run(fake.embed(["the cat sat", "the cat sat", "stock prices fell"], model="e"))
    assert emb.ok and len(emb.vectors) == 3 and emb.vectors[0] == emb.vectors[1]
    same = sum(a * b for a, b in zip(emb.vectors[0], hashed_embedding("the cat sat down")))
    other = sum(a * b for a, b in zip(emb.vectors[0], emb.vectors[2]))
    assert same > other
    assert fake.embedding_usage["e"].calls == 1 and fake.cost is None
    bad = FakeLLM(embed=lambda t: Failure("retries exhausted", "down"))
    e2 = asyncio.run(bad.embed(["x"], model="e"))
    assert not e2.ok and e2.failure is FailureKind.RETRIES_EXHAUSTED and "down" in e2.error
    with pytest.raises(InputError):
        asyncio.run(fake.embed("one string", model="e"))  # type: ignore[arg-type]


def test_rag_metrics_through_the_fake() -> None:
    from ragjudge.rag import evaluate_samples_sync

    fake = FakeLLM({"answer_relevance": {"reasoning": "ok", "grade": 2},
                    "faithfulness_claims": {"claims": ["a", "b"]},
                    "faithfulness_verify": Reply({"verdicts": [True, False]})})
    sample = {"id": "s", "user_input": "q?", "retrieved_contexts": ["c1"], "response": "a. b."}
    rep = evaluate_samples_sync([sample], ["answer_relevance", "faithfulness"], judge=fake)
    assert rep.mean("answer_relevance") == pytest.approx(2 / 3) and rep.mean("faithfulness") == 0.5
    assert rep.usage["calls"] == 3 == fake.stats.calls


# ----------------------------------------------------------------------------- the real session
def test_the_fake_is_the_real_session_over_the_function_provider() -> None:
    from ragjudge.llm import LLM
    from ragjudge.llm.cachestore import CacheStore
    from ragjudge.llm.providers import provider_names

    fake = FakeLLM(grade_by_word, cache=True)
    assert isinstance(fake, LLM) and fake.endpoint.provider == "function" and "function" in provider_names()
    assert isinstance(fake.cache, CacheStore)
    out = asyncio.run(fake.structured("relevance.v1", {"query": "q", "passage": "Paris"}))
    assert out.provenance.system_fingerprint == "function" and out.provenance.response_format == "json_schema"
    # the real estimate, with its own assumptions
    plan = fake.estimate("relevance.v1", [{"query": "q", "passage": "Rome"}])
    assert plan.calls == 1 and "characters per prompt token" in plan.assumptions


def test_the_real_budget_stops_the_fake() -> None:
    # each call reserves its worst case: with a cap of about two calls, the rest are skipped
    fake = FakeLLM(grade_by_word, prices=PriceTable({"fake-model": Price(1000.0, 1000.0)}), concurrency=1,
                   max_cost=2.5)
    outs = asyncio.run(fake.structured_many("relevance.v1", [{"query": "q", "passage": f"p{i}"} for i in range(6)],
                                            progress=False))
    skipped = [o for o in outs if o.failure is FailureKind.BUDGET]
    assert skipped and len(fake.calls) == 6 - len(skipped) and fake.stats.skipped == len(skipped)
    assert fake.cost is not None and fake.cost <= 2.5


def test_truncated_and_malformed_answers_take_the_real_policy() -> None:
    cut = FakeLLM(lambda p, v: Failure("truncated", "cut"))
    out = asyncio.run(cut.structured("relevance.v1", {"query": "q", "passage": "p"}))
    assert out.failure is FailureKind.TRUNCATED and len(cut.calls) > 1  # asked again as a cut reply is
    assert cut.usage.calls == len(cut.calls)  # each cut reply is billed
    bad = FakeLLM(lambda p, v: Failure(FailureKind.MALFORMED, "not a completion"), max_attempts=3)
    out = asyncio.run(bad.structured("relevance.v1", {"query": "q", "passage": "p"}))
    assert out.failure is FailureKind.MALFORMED and len(bad.calls) == 3 and bad.usage.calls == 3
