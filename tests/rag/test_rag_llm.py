"""LLM RAG metrics with respx-mocked replies (and, where only the metric logic is under test,
the in-process FakeLLM): every formula pinned on hand-computed examples."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import respx

from ragjudge.llm import LLM, FailureKind
from ragjudge.llm.fake import FakeLLM
from ragjudge.rag import evaluate_samples, evaluate_samples_sync
from ragjudge.rag.evaluate import plan_requests
from ragjudge.rag.metrics.context import context_precision_value, mean_normalized_grade

BASE = "http://rag.test/v1"
URL = BASE + "/chat/completions"
KEY = "sk-rag-test-0000"


def reply(obj: Any, *, prompt_tokens: int = 100, completion_tokens: int = 10) -> respx.MockResponse:
    body = {
        "id": "chatcmpl-rag",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "judge-model",
        "choices": [{
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": json.dumps(obj), "refusal": None},
            "logprobs": None,
        }],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return respx.MockResponse(200, json=body)


def schema_name(body: dict[str, Any]) -> str:
    return body["response_format"]["json_schema"]["name"]


def user_text(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][0]["content"]


class Script:
    """Answers each request by the prompt id in its response_format, and records the bodies."""

    def __init__(self, **answers: Callable[[dict[str, Any]], Any] | Any) -> None:
        self.answers = answers
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> respx.MockResponse:
        body = json.loads(request.content)
        self.bodies.append(body)
        ans = self.answers[schema_name(body)]
        if isinstance(ans, respx.MockResponse):
            return ans
        return reply(ans(body) if callable(ans) else ans)

    def of(self, name: str) -> list[dict[str, Any]]:
        return [b for b in self.bodies if schema_name(b) == name]


def make_llm(tmp_path: Path | None = None, **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite" if tmp_path is not None else False)
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("max_attempts", 2)
    return LLM("judge-model", base_url=BASE, api_key=KEY, **kw)


SAMPLE = {
    "id": "s1",
    "user_input": "Where is the Eiffel tower?",
    "retrieved_contexts": ["c one", "c two", "c three", "c four", "c five"],
    "reference": "The Eiffel tower is in Paris. It was built in 1889.",
    "response": "It is in Paris, built in 1889 by Eiffel.",
}


def run(samples: Any, metrics: Any, llm: Any, **kw: Any) -> Any:
    async def go() -> Any:
        try:
            return await evaluate_samples(samples, metrics, judge=llm, **kw)
        finally:
            await getattr(llm, "llm", llm).aclose()

    return asyncio.run(go())


# ----------------------------------------------------------------------------- pure kernels
def test_kernels_by_hand() -> None:
    g = [0, 3, 1, 2, 0]
    # context_relevance@5 = (0 + 3 + 1 + 2 + 0) / (5 * 3)
    assert mean_normalized_grade(g, 5, 3) == pytest.approx(6 / 15)
    assert mean_normalized_grade(g, 2, 3) == pytest.approx(3 / 6)
    # threshold 2: relevant at ranks 2 and 4. RAGAS: (1/2 + 2/4) / 2; IR@2: (1/2) / 2 known.
    assert context_precision_value(g, 5, 2, "ragas") == pytest.approx(0.5)
    assert context_precision_value(g, 2, 2, "ragas") == pytest.approx(0.5)
    assert context_precision_value(g, 2, 2, "ir") == pytest.approx(0.25)
    assert context_precision_value([0, 1, 0], 3, 2, "ragas") == 0.0
    assert context_precision_value([0, 1, 0], 3, 2, "ir") == 0.0
    assert context_precision_value([0, 0, 3], 2, 2, "ragas") == 0.0
    assert context_precision_value([0, 0, 3], 2, 2, "ir") == 0.0
    # threshold 1: ranks 2, 3, 4 -> (1/2 + 2/3 + 3/4) / 3
    assert context_precision_value(g, 5, 1, "ragas") == pytest.approx((1 / 2 + 2 / 3 + 3 / 4) / 3)


# ----------------------------------------------------------------------------- listwise grades
def test_one_listwise_call_feeds_relevance_precision_and_ndcg(httpx2_mock: respx.Router) -> None:
    script = Script(relevance_listwise={"grades": [0, 3, 1, 2, 0]})
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE], ["context_relevance", "context_precision", "context_precision(norm=ir)@2",
                         "context_ndcg@5", "context_err@5"], make_llm())
    assert len(script.bodies) == 1
    body = script.bodies[0]
    schema = body["response_format"]["json_schema"]["schema"]["properties"]["grades"]
    assert schema["minItems"] == schema["maxItems"] == 5
    assert "[1] c one" in user_text(body) and "[5] c five" in user_text(body)
    assert rep.mean("context_relevance") == pytest.approx(0.4)
    assert rep.mean("context_precision") == pytest.approx(0.5)
    assert rep.mean("context_precision(norm=ir)") == pytest.approx(0.5)
    assert rep.mean("context_precision(norm=ir)@2") == pytest.approx(0.25)
    dcg = 3 / math.log2(3) + 1 / math.log2(4) + 2 / math.log2(5)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert rep.mean("context_ndcg@5") == pytest.approx(dcg / idcg)
    # ERR with max grade 3: R(g) = (2^g - 1) / 2^3
    r = [(2**x - 1) / 8 for x in [0, 3, 1, 2, 0]]
    err, stay = 0.0, 1.0
    for i, ri in enumerate(r, start=1):
        err += stay * ri / i
        stay *= 1 - ri
    assert rep.mean("context_err@5") == pytest.approx(err)


def test_wrong_number_of_grades_is_repaired_then_undetermined(httpx2_mock: respx.Router) -> None:
    script = Script(relevance_listwise={"grades": [3, 3]})  # 5 passages, 2 grades: always wrong
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE], ["context_relevance"], make_llm())
    (score,) = rep["context_relevance"]
    assert score.value is None and score.reason.startswith("grading call failed")
    assert score.failure in (FailureKind.INVALID, FailureKind.UNPARSABLE)  # typed, not read from text
    assert len(script.bodies) == 2  # the one repair turn
    s = rep.summaries["context_relevance"]
    assert s.mean is None and s.undetermined == 1 and s.n == 0


# ----------------------------------------------------------------------------- faithfulness
def test_faithfulness_two_calls_all_claims_verified_together(httpx2_mock: respx.Router) -> None:
    script = Script(
        faithfulness_claims={"claims": ["It is in Paris.", "It was built in 1889.", "Eiffel built it."]},
        faithfulness_verify={"verdicts": [True, True, False]},
    )
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE], ["faithfulness"], make_llm())
    assert rep.mean("faithfulness") == pytest.approx(2 / 3)
    assert len(script.of("faithfulness_claims")) == 1
    (verify,) = script.of("faithfulness_verify")
    text = user_text(verify)
    assert "1. It is in Paris." in text and "3. Eiffel built it." in text
    # all retrieved chunks, not only top k, as one unnumbered context (verdicts never cite them)
    assert "c one\n\nc two\n\nc three\n\nc four\n\nc five" in text and "[1]" not in text
    v = verify["response_format"]["json_schema"]["schema"]["properties"]["verdicts"]
    assert v["minItems"] == v["maxItems"] == 3
    detail = rep["faithfulness"][0].detail
    assert detail["claims"][2] == ("Eiffel built it.", False)


def test_faithfulness_undetermined_cases() -> None:
    def claims(prompt: Any, v: dict[str, Any]) -> Any:
        return {"claims": [] if "Hello" in v["response"] else ["A fact."]}

    fake = FakeLLM({"faithfulness_claims": claims, "faithfulness_verify": {"verdicts": [True]}})
    samples = [
        {**SAMPLE, "id": "no-claims", "response": "Hello there!"},
        {**SAMPLE, "id": "empty", "response": "  "},
        {**SAMPLE, "id": "no-contexts", "retrieved_contexts": []},
        {**SAMPLE, "id": "ok", "response": "A fact."},
    ]
    rep = run(samples, ["faithfulness"], fake)
    reasons = {sid: sc.reason for sid, sc in zip(rep.sample_ids, rep["faithfulness"])}
    assert reasons == {
        "no-claims": "no claims in the response",
        "empty": "empty response",
        "no-contexts": "no retrieved texts",
        "ok": None,
    }
    s = rep.summaries["faithfulness"]
    assert (s.mean, s.n, s.undetermined) == (1.0, 1, 3)
    assert s.reasons["no claims in the response"] == 1
    assert all(sc.failure is None for sc in rep["faithfulness"])  # the samples, not a failed call
    # No NaN anywhere: JSON rendering is strict.
    data = json.loads(rep.render("json", per_sample=True))
    assert data["aggregates"][0]["undetermined"] == 3


def test_failed_call_is_undetermined_with_reason(httpx2_mock: respx.Router) -> None:
    err = respx.MockResponse(500, json={"error": {"message": "boom", "type": "server"}})
    script = Script(faithfulness_claims=err)
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE], ["faithfulness"], make_llm(max_attempts=2))
    (sc,) = rep["faithfulness"]
    assert sc.value is None and sc.reason.startswith("claim extraction call failed")
    assert sc.failure is FailureKind.RETRIES_EXHAUSTED
    assert len(script.bodies) == 2  # retried once by the client, then given up


# ----------------------------------------------------------------------------- context recall
def test_context_recall_one_call_on_top_k(httpx2_mock: respx.Router) -> None:
    # The units are the reference's sentences, numbered by ragjudge: one verdict each.
    sample = {**SAMPLE, "reference": "The tower is in Paris. It was built in 1889. It is iron. It is tall."}
    script = Script(context_recall={"attributed": [True, False, False, True]})
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([sample], ["context_recall@2"], make_llm())
    assert rep.mean("context_recall@2") == pytest.approx(0.5)
    assert rep["context_recall@2"][0].detail["statements"] == [
        ("The tower is in Paris.", True), ("It was built in 1889.", False), ("It is iron.", False),
        ("It is tall.", True)]
    (body,) = script.bodies
    text = user_text(body)
    assert "c one\n\nc two" in text and "c three" not in text  # the top k, unnumbered
    assert "1. The tower is in Paris.\n2. It was built in 1889.\n3. It is iron.\n4. It is tall." in text
    attributed = body["response_format"]["json_schema"]["schema"]["properties"]["attributed"]
    assert attributed["minItems"] == attributed["maxItems"] == 4


def test_context_recall_reasons(httpx2_mock: respx.Router) -> None:
    # A reply without a verdict per sentence is refused (repair turn included), never scored.
    script = Script(context_recall={"attributed": []})
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE, {**SAMPLE, "id": "s2", "reference": ""}], ["context_recall"], make_llm())
    reasons = [s.reason for s in rep["context_recall"]]
    assert reasons[0].startswith("context_recall call failed") and reasons[1] == "empty reference"


def test_usefulness_variant_and_answer_relevance(httpx2_mock: respx.Router) -> None:
    script = Script(
        context_usefulness={"useful": [True, False, True, False, False]},
        answer_relevance={"reasoning": "Mostly.", "grade": 2},
    )
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE], ["context_precision(by=reference)", "answer_relevance"], make_llm())
    # useful at ranks 1 and 3: RAGAS AP = (1/1 + 2/3) / 2; IR (all 5 known) is the same here.
    assert rep.mean("context_precision(by=reference)") == pytest.approx((1 + 2 / 3) / 2)
    assert rep.mean("context_precision(by=reference,norm=ir)") == pytest.approx((1 + 2 / 3) / 2)
    assert rep.mean("answer_relevance") == pytest.approx(2 / 3)
    assert len(script.of("context_usefulness")) == 1  # one call serves both normalisations


# ----------------------------------------------------------------------------- request budget
ANSWERS_4 = {
    "relevance_listwise": {"grades": [3, 0, 2, 0, 0]},
    "context_recall": {"attributed": [True, True]},
    "faithfulness_claims": {"claims": ["a", "b"]},
    "faithfulness_verify": {"verdicts": [True, False]},
}
# The review call answers what relevance_listwise and context_recall answer above (SAMPLE's
# reference has two sentences).
REVIEW = {"grades": [3, 0, 2, 0, 0], "sources": [[1, 3], [2]]}
BUDGET = ["context_precision", "context_recall", "faithfulness"]


def test_default_settings_need_three_requests_per_sample() -> None:
    fake = FakeLLM({**ANSWERS_4, "context_review": REVIEW}, prompt_tokens=100, completion_tokens=10)
    samples = [{**SAMPLE, "id": f"s{i}", "user_input": f"question {i}"} for i in range(3)]
    rep = run(samples, BUDGET, fake)
    assert len(fake.calls) == 3 * 3
    assert sorted(c.prompt_id for c in fake.calls) == sorted(
        ["context_review", "faithfulness_claims", "faithfulness_verify"] * 3)
    assert rep.usage["calls"] == 9 and rep.usage["total_tokens"] == 9 * 110
    # hand-computed: grades [3,0,2,0,0] >= 2 at ranks 1, 3 -> (1 + 2/3) / 2
    assert rep.mean("context_precision") == pytest.approx((1 + 2 / 3) / 2)
    assert rep.mean("faithfulness") == 0.5 and rep.mean("context_recall") == 1.0
    assert len(plan_requests(samples, BUDGET)) == 9


def test_separate_calls_give_the_same_values_in_four_requests() -> None:
    fake = FakeLLM(ANSWERS_4, prompt_tokens=100, completion_tokens=10)
    samples = [{**SAMPLE, "id": f"s{i}", "user_input": f"question {i}"} for i in range(3)]
    rep = run(samples, BUDGET, fake, separate_calls=True)
    assert sorted(c.prompt_id for c in fake.calls) == sorted(
        ["relevance_listwise", "context_recall", "faithfulness_claims", "faithfulness_verify"] * 3)
    assert rep.mean("context_precision") == pytest.approx((1 + 2 / 3) / 2)
    assert rep.mean("faithfulness") == 0.5 and rep.mean("context_recall") == 1.0
    assert len(plan_requests(samples, BUDGET, separate_calls=True)) == 12


def test_review_call_gives_recall_at_k_from_the_cited_passages() -> None:
    # Three sentences: cited by passage 4, by passages 1 and 5, by none. @1: 1/3; @4: 2/3.
    review = {"grades": [2, 0, 0, 1, 0], "sources": [[4], [5, 1], []]}
    fake = FakeLLM({"context_review": review})
    sample = {**SAMPLE, "reference": "The tower is in Paris. It was built in 1889. It is iron."}
    rep = run([sample], ["context_recall@1", "context_recall@4", "context_relevance@5"], fake)
    assert len(fake.calls) == 1  # one call serves both cutoffs and the grades
    (call,) = fake.calls
    assert call.variables["reference"] == "1. The tower is in Paris.\n2. It was built in 1889.\n3. It is iron."
    assert rep["context_recall@4"][0].detail["statements"] == [
        ("The tower is in Paris.", True), ("It was built in 1889.", True), ("It is iron.", False)]
    assert rep.mean("context_recall@1") == pytest.approx(1 / 3)
    assert rep.mean("context_recall@4") == pytest.approx(2 / 3)
    assert rep.mean("context_relevance@5") == pytest.approx((2 + 1) / 3 / 5)


def test_both_paths_score_the_reference_sentences() -> None:
    # Review and separate call: the same units (ragjudge's split), the same values.
    sample = {**SAMPLE, "reference": "The tower is in Paris. It was built in 1889. It is iron."}
    fake = FakeLLM({**ANSWERS_4, "context_review": {"grades": [3, 0, 2, 0, 0], "sources": [[1], [], [2, 4]]},
                    "context_recall": {"attributed": [True, False, True]}})
    one = run([sample], ["context_precision", "context_recall"], fake)
    two = run([sample], ["context_precision", "context_recall"], fake, separate_calls=True)
    assert one.mean("context_recall") == two.mean("context_recall") == pytest.approx(2 / 3)
    assert one["context_recall"][0].detail == two["context_recall"][0].detail
    assert [c.variables["reference"] for c in fake.calls if "reference" in c.variables] == [
        "1. The tower is in Paris.\n2. It was built in 1889.\n3. It is iron."] * 2


def test_review_applies_only_where_both_answers_are_asked() -> None:
    # context_recall alone, precision by reference, pointwise grading, no reference, or more
    # chunks than one listwise window: the separate prompts, as before.
    fake = FakeLLM({**ANSWERS_4, "context_review": REVIEW, "relevance": {"reasoning": "r", "grade": 2},
                    "context_usefulness": {"useful": [True, False, True, False, False]}})
    run([SAMPLE], ["context_recall"], fake)
    run([SAMPLE], ["context_precision(by=reference)", "context_recall"], fake)
    assert sorted(c.prompt_id for c in fake.calls) == ["context_recall", "context_recall", "context_usefulness"]
    fake.calls.clear()
    run([{**SAMPLE, "id": "s2", "reference": None}, SAMPLE], ["context_precision", "context_recall"], fake)
    assert sorted(c.prompt_id for c in fake.calls) == ["context_review", "relevance_listwise"]
    fake.calls.clear()
    run([SAMPLE], ["context_precision", "context_recall"], fake, grading="pointwise")
    assert "context_review" not in {c.prompt_id for c in fake.calls}


def test_a_cited_passage_out_of_range_is_repaired_not_scored() -> None:
    from ragjudge.rag.metrics import Setup
    from ragjudge.rag.metrics.base import review_request
    from ragjudge.rag.samples import as_samples

    (s,) = as_samples([SAMPLE])
    r = review_request(s, Setup(review=True))
    assert r is not None and r.parse is not None
    lists = r.prompt.output_schema["properties"]["sources"]
    assert lists["minItems"] == lists["maxItems"] == 2  # one list per sentence of the reference
    assert (lists["items"]["items"]["minimum"], lists["items"]["items"]["maximum"]) == (1, 5)
    with pytest.raises(ValueError, match="passage numbers 1-5, got 6"):
        r.parse({"grades": [0] * 5, "sources": [[6], []]})
    assert review_request(s, Setup(review=False)) is None


def test_the_review_prompt_grades_on_the_listwise_scale() -> None:
    # A prompt's scale lives in its front-matter: the two prompts that give chunk grades must
    # state the same one, or a run's grades would change meaning with its metric set.
    from ragjudge.llm.prompts import load_prompt
    from ragjudge.rag.metrics import Setup

    review, listwise = load_prompt(Setup.REVIEW), load_prompt(Setup.LISTWISE)
    assert review.labels == listwise.labels and review.label_field == listwise.label_field


def test_pointwise_uses_relevance_prompt_and_shares_the_judge_cache(
    httpx2_mock: respx.Router, tmp_path: Path
) -> None:
    grades = {"c one": 0, "c two": 3, "c three": 1, "c four": 2, "c five": 0}

    def grade(body: dict[str, Any]) -> Any:
        passage = re.search(r"<passage>\n(.*)\n</passage>", user_text(body), re.S).group(1)
        return {"reasoning": "r", "grade": grades[passage]}

    script = Script(relevance=grade)
    httpx2_mock.post(URL).mock(side_effect=script)
    rep = run([SAMPLE], ["context_precision"], make_llm(tmp_path), grading="pointwise")
    assert len(script.bodies) == 5
    assert rep.mean("context_precision") == pytest.approx(0.5)
    # A second run, and the relevance judge itself, are served from the same cache.
    rep2 = run([SAMPLE], ["context_relevance"], make_llm(tmp_path), grading="pointwise")
    assert rep2.mean("context_relevance") == pytest.approx(0.4)
    from ragjudge.judges import LLMRelevanceJudge

    judge = LLMRelevanceJudge(llm=make_llm(tmp_path))

    async def one() -> Any:
        try:
            return await judge.judge(SAMPLE["user_input"], "c two")
        finally:
            await judge.llm.aclose()

    j = asyncio.run(one())
    assert j.grade == 3 and j.cached
    assert len(script.bodies) == 5
    # And a judge passed as judge= grades pointwise with its own prompt.
    judge2 = LLMRelevanceJudge(llm=make_llm(tmp_path))
    rep3 = run([SAMPLE], ["context_relevance"], judge2, grading="pointwise")
    assert rep3.mean("context_relevance") == pytest.approx(0.4)


def test_sync_twin_inside_a_running_loop(httpx2_mock: respx.Router) -> None:
    script = Script(answer_relevance={"reasoning": "ok", "grade": 3})
    httpx2_mock.post(URL).mock(side_effect=script)

    async def inside() -> Any:
        return evaluate_samples_sync([SAMPLE], ["answer_relevance"], judge=make_llm())

    rep = asyncio.run(inside())
    assert rep.mean("answer_relevance") == 1.0


def test_llm_metric_without_judge_is_an_error() -> None:
    from ragjudge.errors import MetricError

    with pytest.raises(MetricError, match="need an LLM judge"):
        evaluate_samples_sync([SAMPLE], ["faithfulness"])


def test_faithfulness_in_one_step() -> None:
    from ragjudge.errors import MetricError

    # faithfulness(steps=1): the claims and their verdicts from one call with the contexts.
    fake = FakeLLM({"faithfulness_check": {"claims": [
        {"claim": "It is in Paris.", "supported": True}, {"claim": "Built in 1890.", "supported": False},
        {"claim": " ", "supported": True}]}})
    rep = run([SAMPLE], ["faithfulness(steps=1)"], fake)
    assert [c.prompt_id for c in fake.calls] == ["faithfulness_check"]
    assert rep.mean("faithfulness(steps=1)") == 0.5  # the blank claim is not a claim
    (score,) = rep["faithfulness(steps=1)"]
    assert score.detail["claims"] == [("It is in Paris.", True), ("Built in 1890.", False)]
    assert len(plan_requests([SAMPLE], ["faithfulness(steps=1)"])) == 1
    none = FakeLLM({"faithfulness_check": {"claims": []}})
    (empty,) = run([SAMPLE], ["faithfulness(steps=1)"], none)["faithfulness(steps=1)"]
    assert empty.value is None and empty.reason == "no claims in the response"
    with pytest.raises(MetricError, match="steps must be"):
        run([SAMPLE], ["faithfulness(steps=3)"], none)
