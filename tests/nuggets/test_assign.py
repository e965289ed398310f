"""Nugget assignment with a fake session: calls per answer, failures as data, strict counts,
the two-grade mode, the cache and the dry run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import EX, oracle

from ragjudge.llm.fake import Failure, FakeLLM, MemoryCache
from ragjudge.nuggets import (
    assign_nuggets,
    assign_nuggets_sync,
    estimate_assign,
    read_answers,
)

RUNS = [EX / "runs" / f"run_{x}.jsonl" for x in "abc"]


def answers() -> list[Any]:
    return [a for r in RUNS for a in read_answers(r)]


def test_one_call_per_answer_and_scores() -> None:
    llm = FakeLLM(oracle)
    res = assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=llm)
    assert len(res.assignments) == 12 and res.failed == 0
    assert len(llm.calls) == 12 and res.usage["calls"] == 12 and res.usage["total_tokens"] > 0
    # all of a query's nuggets in the one call, numbered
    assert "5. Nitrogen produces blue and purple light" in next(c.user for c in llm.calls if "northern" in c.user)
    a = next(x for x in res.assignments if x.run_id == "run_a" and x.qid == "t1")
    assert a.nuggets[0].assignment == "support" and a.nuggets[0].reason == "word overlap"
    assert a.provenance["prompt_id"] == "nugget_assign" and a.provenance["prompt_sha"]
    rep = res.score(n_resamples=200)
    assert rep.reports["run_a"].mean["all"] > rep.reports["run_c"].mean["all"]


def test_window_splits_calls() -> None:
    llm = FakeLLM(oracle)
    res = assign_nuggets_sync(EX / "nuggets.jsonl", read_answers(RUNS[0]), llm=llm, assign_window=3)
    # t1 has 5 nuggets (2 calls), the others 4 (2 calls each)
    assert len(llm.calls) == 8
    assert [len(a.nuggets) for a in res.assignments] == [5, 4, 4, 4]


def test_failures_are_data_with_reasons() -> None:
    def reply(prompt: Any, v: Any) -> Any:
        if "Colosseum" in v["answer"]:
            return Failure("refusal", "I will not")
        if "insulation" in v["answer"]:
            return {"reasons": ["x"], "labels": ["support"]}  # one label for four nuggets
        return oracle(prompt, v)

    llm = FakeLLM(reply)
    res = assign_nuggets_sync(EX / "nuggets.jsonl", read_answers(RUNS[2]), llm=llm)
    bad = {a.qid: a for a in res.assignments}
    assert all(n.assignment is None and "refusal" in (n.failure or "") for n in bad["t3"].nuggets)
    assert all(n.assignment is None for n in bad["t4"].nuggets)  # never misaligned
    assert res.failed == 8 and res.total == 17 and res.usage["requests_failed"] == 2
    rep = res.score(n_resamples=100).reports["run_c"]
    assert rep.undetermined["all"] == 2 and "refusal" in rep.meta["reasons"]["t3"]


def test_two_grades() -> None:
    llm = FakeLLM(oracle)
    res = assign_nuggets_sync(EX / "nuggets.jsonl", read_answers(RUNS[1]), llm=llm, grades=2)
    assert {c.prompt_id for c in llm.calls} == {"nugget_assign_2grade"}
    assert {n.assignment for a in res.assignments for n in a.nuggets} <= {"support", "not_support"}

    def partial(prompt: Any, v: Any) -> Any:
        n = v["nuggets"].count("\n") + 1
        return {"reasons": ["r"] * n, "labels": ["partial_support"] * n}

    res = assign_nuggets_sync(EX / "nuggets.jsonl", read_answers(RUNS[1]), llm=FakeLLM(partial), grades=2)
    assert res.failed == res.total  # the schema's enum refuses partial support in 2-grade mode


def test_cache_resume_and_dry_run() -> None:
    cache = MemoryCache()
    first = FakeLLM(oracle, cache=cache)
    assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=first)
    dry = estimate_assign(EX / "nuggets.jsonl", answers(), llm=FakeLLM(oracle, cache=cache))
    assert dry.pairs == 12 and dry.cached == 12 and dry.calls == 0
    fresh = estimate_assign(EX / "nuggets.jsonl", answers(), llm=FakeLLM(oracle))
    assert fresh.calls == 12 and fresh.prompt_tokens > 0
    again = FakeLLM(oracle, cache=cache)
    res = assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=again)
    assert again.calls == [] and res.usage["cache_hits"] == 12 and res.failed == 0


def test_async_api() -> None:
    res = asyncio.run(assign_nuggets(EX / "nuggets.jsonl", read_answers(RUNS[0]), llm=FakeLLM(oracle)))
    assert len(res.assignments) == 4


def test_a_stopped_run_resumes_paying_only_for_the_rest() -> None:
    from ragjudge.errors import LLMError

    cache = MemoryCache()
    seen = []

    def revoked_after_five(prompt: Any, v: Any) -> Any:
        seen.append(1)
        if len(seen) > 5:
            raise LLMError("key revoked")
        return oracle(prompt, v)

    with pytest.raises(LLMError):
        assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=FakeLLM(revoked_after_five, cache=cache,
                                                                           concurrency=1))
    again = FakeLLM(oracle, cache=cache)
    res = assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=again)
    assert len(again.calls) == 12 - 5 and res.usage["cache_hits"] == 5 and res.failed == 0


def test_reply_limit_follows_the_window() -> None:
    """A call's reply limit (what the budget reserves for it) is sized to its nuggets: a
    two-nugget window reserves far less than the prompt's limit made for a full window, so a
    cap a run fits in is not spent on reservations; a full window keeps the prompt's limit."""
    llm = FakeLLM(oracle)
    small = assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=llm, assign_window=2)
    big = assign_nuggets_sync(EX / "nuggets.jsonl", answers(), llm=FakeLLM(oracle), assign_window=30)
    limits = {a.provenance["params"]["max_tokens"] for a in small.assignments}
    assert max(limits) <= 300
    full = {a.provenance["params"]["max_tokens"] for a in big.assignments}
    assert max(full) < 2000  # five nuggets at most in the example
    from ragjudge.nuggets.calls import sized

    assert sized("nugget_assign.v1", ("reasons", "labels"), 30, per_item=100).max_tokens == 2000
