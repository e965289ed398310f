"""answer_correctness: TP/FP/FN statements in one call, F-beta by hand, undetermined reasons,
the dry run counting the same call, and the optional embedding-similarity blend."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import respx
from _rag_replies import chat_reply

from ragjudge.errors import MetricError
from ragjudge.llm import LLM
from ragjudge.rag import evaluate_samples_sync, parse_rag_metric, plan_requests

BASE = "http://rag.test/v1"


SAMPLES = [
    {"id": "a", "user_input": "When and where was the tower built?", "response": "Paris, in 1890.",
     "reference": "It was built in Paris in 1889."},
    {"id": "b", "user_input": "q", "response": "  ", "reference": "x"},
    {"id": "c", "user_input": "q", "response": "Hello!", "reference": "Nothing."},
]


def test_answer_correctness(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    replies = {"Paris, in 1890.": {"tp": ["It is in Paris."], "fp": ["It was built in 1890."],
                                   "fn": ["It was built in 1889."]},
               "Hello!": {"tp": [], "fp": [], "fn": []}}
    route = httpx2_mock.post(BASE + "/chat/completions").mock(side_effect=lambda req: chat_reply(
        replies[json.loads(req.content)["messages"][-1]["content"].split("<answer>\n")[1].split("\n")[0]]))
    llm = LLM("m", base_url=BASE, api_key="k", cache=tmp_path / "c.sqlite")
    rep = evaluate_samples_sync(SAMPLES, ["answer_correctness", "answer_correctness(beta=2)"], judge=llm)
    # F1 = TP / (TP + (FP + FN) / 2) = 1 / (1 + 1); F2 = 5 TP / (5 TP + 4 FN + FP) = 5 / 10
    assert rep.values("answer_correctness") == [pytest.approx(0.5), None, None]
    assert rep.values("answer_correctness(beta=2.0)") == [pytest.approx(0.5), None, None]
    assert [s.reason for s in rep["answer_correctness"]][1:] == [
        "empty response", "no statements in the response or the reference"]
    # one call per sample with a response, shared by both columns
    assert route.call_count == 2
    body = json.loads(route.calls[0].request.content)
    assert body["response_format"]["json_schema"]["name"] == "answer_correctness"
    # the dry run plans exactly those calls
    assert [p.name for p, _ in plan_requests(SAMPLES, ["answer_correctness"])] == ["answer_correctness.v1"] * 2
    # the semantic blend needs an embeddings model, and asks response + reference vectors
    (blend,) = parse_rag_metric("answer_correctness(similarity=0.25)")
    with pytest.raises(MetricError, match="embeddings model"):
        evaluate_samples_sync(SAMPLES[:1], [blend], judge=llm)
    emb = httpx2_mock.post(BASE + "/embeddings").mock(return_value=respx.MockResponse(200, json={
        "object": "list", "model": "e", "usage": {"prompt_tokens": 4, "total_tokens": 4},
        "data": [{"object": "embedding", "index": 0, "embedding": [1.0, 0.0]},
                 {"object": "embedding", "index": 1, "embedding": [1.0, 1.0]}]}))
    rep = evaluate_samples_sync(SAMPLES[:1], [blend], judge=llm, embedding_model="e")
    assert rep.values(str(blend)) == [pytest.approx(0.75 * 0.5 + 0.25 / math.sqrt(2))]
    assert emb.call_count == 1 and route.call_count == 2  # the statements came from the cache
    for bad in ["answer_correctness@3", "answer_correctness(similarity=1)", "answer_correctness(x=1)"]:
        with pytest.raises(MetricError):
            parse_rag_metric(bad)
