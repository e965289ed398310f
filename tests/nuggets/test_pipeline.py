"""The whole evaluation as one library call, end to end on the bundled example."""

from __future__ import annotations

from conftest import EX, oracle

from ragjudge.llm.fake import FakeLLM, MemoryCache
from ragjudge.nuggets import estimate_answers, evaluate_answers_sync

RUNS = [EX / "runs" / f"run_{x}.jsonl" for x in "abc"]


def test_created_assigned_scored_cited_and_checked_against_people() -> None:
    cache = MemoryCache()
    llm = FakeLLM(oracle, cache=cache)
    ev = evaluate_answers_sync(RUNS, llm=llm, queries=EX / "topics.jsonl", qrels=EX / "qrels.txt",
                               corpus=EX / "passages.jsonl", human=EX / "human_assignments.jsonl",
                               human_support=EX / "human_support.jsonl", n_resamples=200)
    assert [s.qid for s in ev.nuggets] == ["t1", "t2", "t3", "t4"]
    assert ev.scores.runs == ["run_a", "run_b", "run_c"]
    assert set(ev.citation_scores.metrics) == {"citation_precision", "citation_recall"}
    # created nuggets are not the people's, so item agreement is empty; run-level needs both
    assert ev.agreement is not None and ev.agreement.assignments is None
    assert ev.agreement.support is not None
    assert set(ev.usage) == {"create", "assign", "cite"}
    assert ev.usage["create"]["calls"] == 8 and ev.usage["assign"]["calls"] == 12
    # the same call again is answered from the cache (a job resumed after a kill)
    again = FakeLLM(oracle, cache=cache)
    evaluate_answers_sync(RUNS, llm=again, queries=EX / "topics.jsonl", qrels=EX / "qrels.txt",
                          corpus=EX / "passages.jsonl", n_resamples=50)
    assert again.calls == []


def test_given_nuggets_and_dry_run() -> None:
    llm = FakeLLM(oracle)
    ev = evaluate_answers_sync(RUNS, llm=llm, nuggets=EX / "nuggets.jsonl", cite=False,
                               human=EX / "human_assignments.jsonl", n_resamples=100)
    assert ev.citations is None and ev.agreement.kendall_tau is not None
    assert set(ev.agreement.ppi) == {"run_a", "run_b", "run_c"}
    assert "run_a" in str(ev)
    dry = estimate_answers(RUNS, llm=FakeLLM(oracle), nuggets=EX / "nuggets.jsonl", corpus=EX / "passages.jsonl")
    assert dry.calls == 24  # 12 assignments + 12 citation checks
    dry = estimate_answers(RUNS, llm=FakeLLM(oracle), queries=EX / "topics.jsonl", qrels=EX / "qrels.txt",
                           corpus=EX / "passages.jsonl")
    assert dry.calls == 8 + 12 + 12
