"""RAG metrics against the loopback simulator: faults become retries or explicit reasons."""

from __future__ import annotations

import math

import pytest
from _loopback import simulator_thread

from ragjudge.llm import LLM
from ragjudge.rag import evaluate_samples_sync


def _samples(n: int) -> list[dict]:
    return [
        {
            "id": f"s{i}",
            "user_input": f"What is thing {i}?",
            "retrieved_contexts": [f"Thing {i} is described here in some detail, sentence {j}." for j in range(5)],
            "reference": f"Thing {i} is a described object. It has details.",
            "response": f"Thing {i} is an object with details.",
        }
        for i in range(n)
    ]


def test_faults_are_retried_and_never_nan() -> None:
    with simulator_thread(latency=0.005, p_5xx=0.3, seed=3) as sim:
        llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=False,
                  backoff_base=0.001, max_attempts=6)
        rep = evaluate_samples_sync(
            _samples(10), ["context_precision", "context_recall", "faithfulness"], judge=llm
        )
        stats = sim.stats()
    assert stats["errors_5xx"] > 0 and llm.stats.retries > 0
    for metric in rep.metrics:
        for score in rep[metric]:
            if score.value is None:
                assert score.reason and "failed" in score.reason
            else:
                assert not math.isnan(score.value) and 0.0 <= score.value <= 1.0
    # 0.3 ** 6 per call: essentially every sample is determined
    assert sum(s.n for s in rep.summaries.values()) >= 0.9 * 10 * len(rep.metrics)
    # 3 calls per sample with listwise grading (grades and recall in one), plus the retried attempts
    assert stats["paid"] == 30


@pytest.mark.slow  # loopback simulator with faults, ~3 s
def test_rag_metrics_are_as_robust_as_the_judge_under_faults() -> None:
    # Issue: 10% 5xx + 5% malformed replies left values undetermined on the RAG path. Every RAG
    # call goes through LLM.structured (the judge's retry and repair policy): none is lost.
    with simulator_thread(latency=0.002, p_5xx=0.10, p_malformed=0.05, seed=7) as sim:
        llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=False, backoff_base=0.001)
        rep = evaluate_samples_sync(
            _samples(60), ["context_precision", "context_recall", "faithfulness"], judge=llm
        )
        stats = sim.stats()
    assert stats["errors_5xx"] > 0 and stats["malformed"] > 0
    assert [s.reason for m in rep.metrics for s in rep[m] if s.value is None] == []
    assert rep.usage["requests_asked"] == 180 and rep.usage["requests_failed"] == 0
