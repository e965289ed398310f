"""Deterministic sample metrics through the ranking core, pinned on hand-computed examples."""

from __future__ import annotations

import math

import pytest

from ragjudge.errors import MetricError
from ragjudge.rag import evaluate_samples_sync, parse_rag_metric, parse_rag_metrics

ISSUE = {"id": "q", "retrieved": ["doc-7", "doc-3", "doc-1", "doc-9", "doc-2"],
         "expected_output": ["doc-3", "doc-9"]}


def means(samples, metrics, **kw):
    rep = evaluate_samples_sync(samples, metrics, **kw)
    return {m: rep.mean(m) for m in rep.metrics}, rep


def test_issue_example():
    got, _ = means([ISSUE], ["hit@5", "recall@5", "mrr", "ndcg@5", "precision@5", "map@5",
                             "recall_all@5", "recall_all@3", "hit@1", "rbp(p=0.5)@5"])
    assert got["hit@5"] == 1.0
    assert got["recall@5"] == 1.0
    assert got["mrr"] == 0.5
    assert round(got["ndcg@5"], 2) == 0.65
    assert got["ndcg@5"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert got["precision@5"] == pytest.approx(2 / 5)
    assert got["map@5"] == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert got["recall_all@5"] == 1.0 and got["recall_all@3"] == 0.0
    assert got["hit@1"] == 0.0
    assert got["rbp(p=0.5)@5"] == pytest.approx(0.5 * (0.5 + 0.5**3))


def test_k_resolution_sample_then_metric_then_default():
    with_k = {**ISSUE, "id": "k3", "metadata": {"k": 3}}
    rep = evaluate_samples_sync([ISSUE, with_k], ["recall@5", "recall"], default_k=1)
    # recall@5: sample 1 uses the metric's 5 -> 1.0; sample 2 its own k=3 -> 1/2.
    assert [s.value for s in rep["recall@5"]] == [1.0, 0.5]
    # recall (no @k): sample 1 uses the default k=1 -> 0; sample 2 its k=3 -> 1/2.
    assert [s.value for s in rep["recall"]] == [0.0, 0.5]
    assert [s.detail["k"] for s in rep["recall"]] == [1, 3]


def test_graded_gains_map():
    s = {"retrieved": ["a", "b", "c"], "expected_output": {"b": 3, "c": 1, "z": 2}}
    got, _ = means([s], ["ndcg@3", "hit(rel=2)@1", "hit(rel=2)@2", "recall(rel=2)@3"])
    dcg = 3 / math.log2(3) + 1 / math.log2(4)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert got["ndcg@3"] == pytest.approx(dcg / idcg)
    assert got["hit(rel=2)@1"] == 0.0 and got["hit(rel=2)@2"] == 1.0
    assert got["recall(rel=2)@3"] == 0.5


def test_content_matching_single_and_multi_hit():
    # Haystack's example: ground truth [Paris, France] vs retrieved [Paris, Berlin].
    s = {"retrieved_contexts": ["Paris", "Berlin"], "reference_contexts": ["Paris", "France"]}
    got, _ = means([s], ["recall@5", "hit@5"])
    assert got["recall@5"] == 0.5  # multi-hit
    assert got["hit@5"] == 1.0  # single-hit


def test_match_modes_and_duplicates_count_once():
    s = {"retrieved_contexts": ["PARIS  is big", "paris is big", "France"],
         "reference_contexts": ["Paris is big", "France"]}
    got, _ = means([s], ["recall(match=text)@3", "recall(match=normalized)@3",
                         "precision(match=normalized)@3", "mrr(match=text)"])
    assert got["recall(match=text)@3"] == 0.5
    assert got["recall(match=normalized)@3"] == 1.0
    # the second "paris is big" is a repeat of the same gold: not relevant again
    assert got["precision(match=normalized)@3"] == pytest.approx(2 / 3)
    assert got["mrr(match=text)"] == pytest.approx(1 / 3)
    # --match sets the mode of metrics that do not set one themselves
    rep = evaluate_samples_sync([s], ["recall@3"], match="text")
    assert rep.mean("recall@3") == 0.5


def test_chunk_of_original_matching():
    original = "Date: 2024-02-01\nuser: my dog is called Rex\nassistant: nice name"
    s = {"retrieved_contexts": ["nothing", "user: my dog is called Rex\\nassistant: nice"],
         "reference_contexts": [original]}
    got, _ = means([s], ["hit(match=chunk)@2", "hit(match=normalized)@2", "mrr(match=chunk)"])
    assert got["hit(match=chunk)@2"] == 1.0 and got["mrr(match=chunk)"] == 0.5
    assert got["hit(match=normalized)@2"] == 0.0


def test_undetermined_reasons_not_zero():
    samples = [
        ISSUE,
        {"id": "no-gold", "retrieved": ["a"]},
        {"id": "no-relevant", "retrieved": ["a"], "expected_output": {"a": 0}},
        {"id": "empty-ranking", "retrieved": [], "expected_output": ["a"]},
    ]
    rep = evaluate_samples_sync(samples, ["recall@5"])
    values = [s.value for s in rep["recall@5"]]
    reasons = [s.reason for s in rep["recall@5"]]
    assert values == [1.0, None, None, 0.0]
    assert reasons[1].startswith("no gold") and reasons[2] == "no relevant gold document"
    summary = rep.summaries["recall@5"]
    assert summary.mean == 0.5 and summary.n == 2 and summary.undetermined == 2


def test_containment():
    samples = [
        {"id": "a", "retrieved_contexts": ["x", "The capital is  PARIS."], "reference": "paris"},
        {"id": "b", "retrieved_contexts": ["x", "y", "Paris"], "answers": ["Lyon", "paris"], "metadata": {"k": 2}},
        {"id": "c", "retrieved_contexts": ["x"]},
        {"id": "d", "retrieved_contexts": ["x"], "reference": "   "},
    ]
    rep = evaluate_samples_sync(samples, ["containment@5", "containment@1"])
    assert [s.value for s in rep["containment@5"]] == [1.0, 0.0, None, None]
    assert rep["containment@5"][2].reason.startswith("no expected answer")
    assert rep["containment@1"][0].value == 0.0


def test_metric_specs():
    assert [str(m) for m in parse_rag_metric("context_precision")] == [
        "context_precision", "context_precision(norm=ir)"]
    assert str(parse_rag_metric("success@3")[0]) == "hit@3"
    assert str(parse_rag_metric("P_10")[0]) == "precision@10"
    assert str(parse_rag_metric("context_rbp@5")[0]) == "context_rbp(p=0.8)@5"
    for spec in ["recall(match=chunk)@5", "context_precision(norm=ir,threshold=3)@3",
                 "context_ndcg(gain=exp)@3", "context_rbp(gain=binary,p=0.5,rel=2)", "containment@2"]:
        (m,) = parse_rag_metric(spec)
        assert str(m) == spec and parse_rag_metric(str(m)) == [m]
    assert [str(m) for m in parse_rag_metrics(["ndcg@5,faithfulness", "ndcg@5"])] == ["ndcg@5", "faithfulness"]
    for bad in ["faithfulness@5", "context_precision(threshold=0)", "nope", "ndcg(match=fuzzy)",
                "containment(x=1)", "context_precision(by=reference,threshold=2)"]:
        with pytest.raises(MetricError):
            parse_rag_metric(bad)


def test_missing_field_everywhere_is_a_usage_error():
    with pytest.raises(MetricError, match="retrieved contexts"):
        evaluate_samples_sync([{"user_input": "q", "response": "r"}], ["faithfulness"], judge=object.__new__(_Fake))


class _Fake:
    def structured(self, *a, **k):  # pragma: no cover - never reached: the check fails first
        raise AssertionError
