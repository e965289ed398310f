"""``ragjudge rag`` from the command line (LLM replies mocked with respx)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import respx

from ragjudge.cli import main

BASE = "http://rag-cli.test/v1"
URL = BASE + "/chat/completions"


def write(tmp_path: Path, rows: list[dict[str, Any]], name: str = "s.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


ROWS = [
    {"id": "q1", "retrieved": ["doc-7", "doc-3", "doc-1", "doc-9", "doc-2"], "expected_output": ["doc-3", "doc-9"]},
    {"id": "q2", "retrieved": ["doc-1"], "expected_output": ["doc-5"]},
]


def test_deterministic_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, ROWS)
    assert main(["rag", str(p), "-m", "hit@5,mrr", "-m", "ndcg@5", "-f", "json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    agg = {a["metric"]: a for a in data["aggregates"]}
    assert agg["hit@5"]["mean"] == 0.5 and agg["mrr"]["mean"] == 0.25
    assert round(agg["ndcg@5"]["mean"] * 2, 2) == 0.65
    assert data["samples"][0]["scores"]["mrr"] == {"value": 0.5}


def test_table_per_sample_and_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, ROWS + [{"id": "q3", "retrieved": ["x"]}])
    out = tmp_path / "out.md"
    assert main(["rag", str(p), "-m", "recall@5", "-q", "-f", "markdown", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "| recall@5 |" in text and "q3" in text and "no gold (relevant ids" in text
    assert capsys.readouterr().out == ""


def test_skip_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, ROWS + [{"id": "bad", "retrieved": "doc-1"}])
    assert main(["rag", str(p), "-m", "hit@5"]) == 2
    err = capsys.readouterr().err
    assert "ragjudge: error:" in err and "sample 'bad'" in err and "retrieved" in err
    assert main(["rag", str(p), "-m", "hit@5", "--skip-invalid", "-f", "csv"]) == 0
    cap = capsys.readouterr()
    assert "skipped invalid sample" in cap.err and "sample 'bad'" in cap.err
    assert cap.out.startswith("metric,mean")


def test_llm_metric_needs_model_and_bad_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, ROWS)
    assert main(["rag", str(p), "-m", "faithfulness"]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["rag", str(p), "-m", "ndcg@x"]) == 2
    assert "cutoff" in capsys.readouterr().err


def _reply(obj: Any) -> respx.MockResponse:
    return respx.MockResponse(200, json={
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": json.dumps(obj)}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
    })


ANSWERS = {
    "relevance_listwise": {"grades": [3, 0, 2]},
    "context_recall": {"attributed": [True, False]},
    "faithfulness_claims": {"claims": ["x", "y", "z", "w"]},
    "faithfulness_verify": {"verdicts": [True, True, True, False]},
    # what relevance_listwise and context_recall answer, in one call
    "context_review": {"grades": [3, 0, 2], "sources": [[2], []]},
}


def test_llm_metrics_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                httpx2_mock: respx.Router, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TEST_KEY", "sk-test")
    httpx2_mock.post(URL).mock(side_effect=lambda req: _reply(
        ANSWERS[json.loads(req.content)["response_format"]["json_schema"]["name"]]))
    p = write(tmp_path, [{
        "user_input": "q", "retrieved_contexts": ["a", "b", "c"], "reference": "Ref one. Ref two.", "response": "resp",
    }])
    argv = ["rag", str(p), "-m", "context_precision,context_recall", "-m", "faithfulness",
            "--model", "m", "--base-url", BASE, "--api-key-env", "RAG_TEST_KEY",
            "--cache", str(tmp_path / "c.sqlite"), "-f", "json"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    agg = {a["metric"]: a["mean"] for a in json.loads(cap.out)["aggregates"]}
    assert agg["context_precision"] == pytest.approx((1 + 2 / 3) / 2)
    assert agg["context_recall"] == 0.5 and agg["faithfulness"] == 0.75
    assert "3 calls" in cap.err
    # stderr is not a terminal here: a few plain progress lines, as judge and synth print
    assert "rag samples: 1/1 samples, 100%" in cap.err
    # second run: everything from the cache; --no-progress prints none
    assert main(argv + ["--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "3 cached" in err and "rag samples" not in err
    assert len(httpx2_mock.calls) == 3
    # dry run: nothing sent, everything already cached
    assert main(argv + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: 3 requests for 1 samples, 3 already cached -> 0 calls" in out
    assert len(httpx2_mock.calls) == 3


def test_answer_relevance_by_embedding(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       httpx2_mock: respx.Router, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TEST_KEY", "sk-test")
    questions = ["what is x", "define x", "x means?"]
    httpx2_mock.post(URL).mock(return_value=_reply({"questions": questions}))
    vectors = {"q": [1.0, 0.0], "what is x": [1.0, 0.0], "define x": [0.0, 1.0], "x means?": [3.0, 4.0]}

    def emb(req: Any) -> respx.MockResponse:
        body = json.loads(req.content)
        assert body["model"] == "emb-m"
        return respx.MockResponse(200, json={
            "object": "list", "model": "emb-m",
            "data": [{"index": i, "embedding": vectors[t]} for i, t in enumerate(body["input"])],
            "usage": {"prompt_tokens": 9, "total_tokens": 9}})

    httpx2_mock.post(BASE + "/embeddings").mock(side_effect=emb)
    p = write(tmp_path, [{"user_input": "q", "response": "x is a letter."}])
    common = ["rag", str(p), "--model", "m", "--base-url", BASE, "--api-key-env", "RAG_TEST_KEY",
              "--cache", str(tmp_path / "c.sqlite"), "-f", "json"]
    # the embedding variant needs --embedding-model; --embedding-model needs that metric
    assert main([*common, "-m", "answer_relevance(by=embedding)"]) == 2
    assert "--embedding-model" in capsys.readouterr().err
    assert main([*common, "-m", "faithfulness", "--embedding-model", "emb-m"]) == 2
    assert "--embedding-model" in capsys.readouterr().err
    assert not httpx2_mock.calls
    assert main([*common, "-m", "answer_relevance(by=embedding)", "--embedding-model", "emb-m"]) == 0
    cap = capsys.readouterr()
    agg = {a["metric"]: a["mean"] for a in json.loads(cap.out)["aggregates"]}
    assert agg["answer_relevance(by=embedding)"] == pytest.approx((1 + 0 + 0.6) / 3)
    assert "9 embedding tokens" in cap.err


def test_fail_under_gates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, ROWS)
    assert main(["rag", str(p), "-m", "hit@5", "--fail-under", "hit@5=0.5"]) == 0
    capsys.readouterr()
    # a gate on a metric not in -m is evaluated too; canonical names match (success@5 = hit@5)
    assert main(["rag", str(p), "-m", "hit@5", "--fail-under", "mrr=0.3", "--fail-under", "success@5=0.4"]) == 1
    err = capsys.readouterr().err
    assert "fail-under: mrr = 0.2500 < 0.3" in err and "hit@5" not in err
    # a metric with no determined value fails its gate; a bad gate is a usage error
    q = write(tmp_path, [{"id": "x", "retrieved": ["a"]}], "nogold.jsonl")
    assert main(["rag", str(q), "-m", "hit@5", "--fail-under", "hit@5=0.1"]) == 1
    assert "no determined value" in capsys.readouterr().err
    for bad in ["hit@5", "hit@5=abc", "hit@5=nan"]:
        assert main(["rag", str(p), "-m", "hit@5", "--fail-under", bad]) == 2
        assert "--fail-under" in capsys.readouterr().err


def test_interval_columns_match_evaluate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rag", str(write(tmp_path, ROWS)), "-m", "hit@5", "-f", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "metric,mean,ci_low,ci_high,n,undetermined"


def test_deepeval_camel_case_file_and_unknown_keys_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"input": "Where?", "actualOutput": "Paris.", "expectedOutput": "Paris",
             "retrievalContext": ["It is in Paris."], "additionalMetadata": {"a": 1}, "comments": None},
            {"input": "When?", "actualOutput": "1889", "expectedOutput": "It was finished in March 1889 "
             "after two years, two months and five days of construction.", "retrievalContext": ["In 1889."]}]
    p = tmp_path / "deepeval.json"
    p.write_text(json.dumps(rows), encoding="utf-8")
    assert main(["rag", str(p), "-m", "containment@1", "-f", "json", "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("ragjudge: warning: ignored unrecognised sample field(s)") == 1
    assert "additionalMetadata" in cap.err and "comments" not in cap.err
    data = json.loads(cap.out)
    assert data["samples"][0]["scores"]["containment@1"] == {"value": 1.0}
    # a long reference alone: undetermined with the reason, not a silent 0
    second = data["samples"][1]["scores"]["containment@1"]
    assert second["value"] is None and "whole reference" in second["reason"]


def test_mostly_failed_run_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          httpx2_mock: respx.Router, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TEST_KEY", "sk-test")
    httpx2_mock.post(URL).mock(return_value=respx.MockResponse(503, json={"error": {"message": "down"}}))
    p = write(tmp_path, [{"id": str(i), "user_input": "q", "response": "r"} for i in range(3)])
    argv = ["rag", str(p), "-m", "answer_relevance", "--model", "m", "--base-url", BASE,
            "--api-key-env", "RAG_TEST_KEY", "--no-cache", "--max-attempts", "1"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "3 of 3 LLM requests failed" in err and "answer_relevance call failed" in err


def test_synth_and_ragas_testset_fields_are_read_without_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a row as `ragjudge synth` writes samples.jsonl (plus a run's ids), and RAGAS's testset column
    rows = [{"id": "s1", "user_input": "q?", "reference": "r", "reference_context_ids": ["d1"],
             "reference_contexts": ["t"], "style": "keyword", "retrieved": ["d1", "d2"]},
            {"id": "s2", "user_input": "q2?", "reference_context_ids": ["d3"], "retrieved": ["d2"],
             "synthesizer_name": "single_hop_specifc_query_synthesizer", "extra_field": 1}]
    assert main(["rag", str(write(tmp_path, rows)), "-m", "hit@2", "-f", "csv"]) == 0
    err = capsys.readouterr().err
    assert err.count("ignored unrecognised sample field(s)") == 1  # a really unknown field still warns
    assert "extra_field" in err and "style" not in err and "synthesizer_name" not in err


def test_a_run_cut_short_by_the_budget_exits_4_with_the_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], httpx2_mock: respx.Router,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TEST_KEY", "sk-test")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 1.0, "output": 1.0}}))
    p = write(tmp_path, [{"id": str(i), "user_input": "q", "response": "r"} for i in range(3)])
    argv = ["rag", str(p), "-m", "answer_relevance", "--model", "m", "--base-url", BASE,
            "--api-key-env", "RAG_TEST_KEY", "--no-cache", "--prices", str(prices), "--max-cost", "0.000001"]
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "stopped by --max-cost 1e-06: 3 of 3 samples" in err and not httpx2_mock.calls


def test_a_run_stopped_by_a_revoked_key_writes_the_report_of_what_it_has(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], httpx2_mock: respx.Router,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TEST_KEY", "sk-test")
    seen = {"calls": 0}

    def effect(request: Any) -> respx.MockResponse:
        seen["calls"] += 1
        if seen["calls"] > 1:
            return respx.MockResponse(401, json={"error": {"message": "Incorrect API key provided",
                                                           "type": "invalid_request_error"}})
        return _reply({"reasoning": "ok", "grade": 3})

    httpx2_mock.post(URL).mock(side_effect=effect)
    p = write(tmp_path, [{"id": str(i), "user_input": f"q{i}", "response": "r"} for i in range(3)])
    out = tmp_path / "report.json"
    argv = ["rag", str(p), "-m", "answer_relevance", "--model", "m", "--base-url", BASE,
            "--api-key-env", "RAG_TEST_KEY", "--cache", str(tmp_path / "c.sqlite"), "--concurrency", "1",
            "-f", "json", "-q", "-o", str(out), "--no-progress"]
    assert main(argv) == 2  # as judge exits for a run-stopping error
    err = capsys.readouterr().err
    assert "wrote the report of the 1 of 3 samples scored before it" in err and "Traceback" not in err
    assert err.count("ragjudge: error:") == 1
    scores = [s["scores"]["answer_relevance"] for s in json.loads(out.read_text())["samples"]]
    assert sum(s["value"] is not None for s in scores) == 1
    assert all("the run stopped" in s["reason"] for s in scores if s["value"] is None)
