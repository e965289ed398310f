"""answer_relevance(by=embedding): generated questions + /embeddings, respx-mocked; the cosine
formula pinned on hand-computed vectors; every failure undetermined with its reason."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import respx

from ragjudge.errors import MetricError
from ragjudge.llm import LLM
from ragjudge.rag import evaluate_samples_sync
from ragjudge.rag.evaluate import plan_requests
from ragjudge.rag.metrics.answer import cosine, mean_cosine
from ragjudge.rag.metrics import definition, parse_rag_metric

BASE = "http://emb.test/v1"
CHAT = BASE + "/chat/completions"
EMB = BASE + "/embeddings"
KEY = "sk-emb-test-0000"
METRIC = "answer_relevance(by=embedding)"
QUESTION = "How tall is the Eiffel Tower?"
GENERATED = ["What is the Eiffel Tower's height?", "Where is the Eiffel Tower?", "When was it built?"]
# question -> [1, 0]; generated: cos 1, cos 0, cos 3/5  => mean (1 + 0 + 0.6) / 3
VECTORS = {QUESTION: [1.0, 0.0], GENERATED[0]: [2.0, 0.0], GENERATED[1]: [0.0, 5.0],
           GENERATED[2]: [3.0, 4.0]}
EXPECTED = (1.0 + 0.0 + 0.6) / 3


def chat_reply(obj: Any) -> respx.MockResponse:
    return respx.MockResponse(200, json={
        "id": "c", "object": "chat.completion", "created": 1, "model": "judge-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": json.dumps(obj), "refusal": None}}],
        "usage": {"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100},
    })


def embeddings(vectors: dict[str, list[float]]) -> Any:
    def reply(request: Any) -> respx.MockResponse:
        body = json.loads(request.content)
        data = [{"object": "embedding", "index": i, "embedding": vectors[t]}
                for i, t in enumerate(body["input"])]
        return respx.MockResponse(200, json={"object": "list", "model": body["model"], "data": data,
                                             "usage": {"prompt_tokens": 7, "total_tokens": 7}})
    return reply


def make_llm(tmp_path: Path, **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    kw.setdefault("backoff_base", 0.001)
    return LLM("judge-model", base_url=BASE, api_key=KEY, **kw)


def sample(**kw: Any) -> dict[str, Any]:
    return {"id": "s1", "user_input": QUESTION, "response": "It is 330 metres tall.", **kw}


def evaluate(llm: LLM, rows: list[dict[str, Any]], model: str | None = "emb-model") -> Any:
    return evaluate_samples_sync(rows, [METRIC], judge=llm, embedding_model=model)


# ----------------------------------------------------------------------------- the formula
def test_cosine_on_hand_computed_vectors() -> None:
    assert cosine([1.0, 2.0, 2.0], [2.0, 0.0, 1.0]) == pytest.approx(4 / (3 * math.sqrt(5)))
    assert cosine([1.0, 0.0], [-2.0, 0.0]) == -1.0
    assert mean_cosine([1.0, 0.0], [[2.0, 0.0], [0.0, 5.0], [3.0, 4.0]]) == pytest.approx(EXPECTED)
    with pytest.raises(ValueError, match="zero"):
        cosine([0.0, 0.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="lengths"):
        cosine([1.0], [1.0, 0.0])


def test_spec_round_trips() -> None:
    (m,) = parse_rag_metric(METRIC)
    assert str(m) == METRIC and parse_rag_metric(str(m)) == [m]
    assert parse_rag_metric("answer_relevance(by=llm)") == parse_rag_metric("answer_relevance")
    assert "cosine" in definition(m)
    with pytest.raises(MetricError, match="by=llm\\|embedding"):
        parse_rag_metric("answer_relevance(by=vibes)")


# ----------------------------------------------------------------------------- end to end
def test_score_is_mean_cosine_of_generated_questions(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    chat = httpx2_mock.post(CHAT).mock(return_value=chat_reply({"questions": GENERATED}))
    emb = httpx2_mock.post(EMB).mock(side_effect=embeddings(VECTORS))
    llm = make_llm(tmp_path)
    rep = evaluate(llm, [sample()])
    (score,) = rep.scores[METRIC]
    assert score.value == pytest.approx(EXPECTED)
    assert score.detail["questions"] == GENERATED
    body = json.loads(chat.calls[0].request.content)
    assert body["response_format"]["json_schema"]["name"] == "answer_questions"
    assert "It is 330 metres tall." in body["messages"][-1]["content"]
    assert json.loads(emb.calls[0].request.content)["input"] == [QUESTION, *GENERATED]
    assert rep.usage["embedding_tokens"] == 7
    # rerun: chat answer and vectors come from the cache
    again = evaluate(make_llm(tmp_path), [sample()])
    assert again.scores[METRIC][0].value == pytest.approx(EXPECTED)
    assert chat.call_count == 1 and emb.call_count == 1
    # dry run plans the question-generation call
    plan = plan_requests([sample()], [METRIC])
    assert [p.name for p, _ in plan] == ["answer_questions.v1"]


def test_empty_response_is_undetermined_without_calls(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    rep = evaluate(make_llm(tmp_path), [sample(response="  "), sample(id="s2", user_input="")])
    scores = rep.scores[METRIC]
    assert [s.value for s in scores] == [None, None]
    assert [s.reason for s in scores] == ["empty response", "no question"]
    assert not httpx2_mock.calls


def test_failed_chat_call_is_undetermined(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(CHAT).mock(return_value=respx.MockResponse(503, json={"error": {"message": "down"}}))
    (score,) = evaluate(make_llm(tmp_path, max_attempts=1), [sample()]).scores[METRIC]
    assert score.value is None and score.reason.startswith("answer questions call failed:")


def test_failed_embedding_call_is_undetermined(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(CHAT).mock(return_value=chat_reply({"questions": GENERATED}))
    httpx2_mock.post(EMB).mock(return_value=respx.MockResponse(500, json={"error": {"message": "x"}}))
    (score,) = evaluate(make_llm(tmp_path, max_attempts=2), [sample()]).scores[METRIC]
    assert score.value is None and score.reason.startswith("embedding call failed: gave up after 2")
    assert score.detail["questions"] == GENERATED


def test_zero_vector_is_undetermined_never_nan(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(CHAT).mock(return_value=chat_reply({"questions": GENERATED}))
    httpx2_mock.post(EMB).mock(side_effect=embeddings({**VECTORS, QUESTION: [0.0, 0.0]}))
    (score,) = evaluate(make_llm(tmp_path), [sample()]).scores[METRIC]
    assert score.value is None and score.reason == "zero embedding vector"


def test_wrong_question_count_is_repaired(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    chat = httpx2_mock.post(CHAT)
    chat.side_effect = [chat_reply({"questions": GENERATED[:2]}), chat_reply({"questions": GENERATED})]
    httpx2_mock.post(EMB).mock(side_effect=embeddings(VECTORS))
    (score,) = evaluate(make_llm(tmp_path), [sample()]).scores[METRIC]
    assert score.value == pytest.approx(EXPECTED) and chat.call_count == 2


def test_embedding_model_is_required(tmp_path: Path) -> None:
    with pytest.raises(MetricError, match="--embedding-model"):
        evaluate(make_llm(tmp_path), [sample()], model=None)
