"""RAG samples from exported traces (OTLP/OpenInference, Phoenix, Langfuse) and scores back onto
their spans."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import respx

from ragjudge import read_traces
from ragjudge.cli import main
from ragjudge.errors import InputError
from ragjudge.rag import RagReport, Score, read_samples, span_scores
from ragjudge.rag.traces import select_traces, trace_format, trace_records

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OTLP = EXAMPLES / "traces" / "openinference_otlp.json"
LANGFUSE = EXAMPLES / "traces" / "langfuse.jsonl"
SAMPLES = [json.loads(line) for line in (EXAMPLES / "rag_samples.jsonl").read_text().splitlines()][:4]


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, float):
        v: dict[str, Any] = {"doubleValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, list):
        v = {"arrayValue": {"values": [
            {"kvlistValue": {"values": [_kv(k, x) for k, x in item.items()]}} for item in value]}}
    else:
        v = {"stringValue": value}
    return {"key": key, "value": v}


def _span(tid: str, sid: str, kind: str, start: int, attrs: dict[str, Any], parent: str = "") -> dict[str, Any]:
    return {"traceId": tid, "spanId": sid, "parentSpanId": parent, "name": kind.lower(),
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 10),
            "attributes": [_kv("openinference.span.kind", kind)] + [_kv(k, v) for k, v in attrs.items()]}


def _otlp(spans: list[dict[str, Any]]) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})


@pytest.mark.parametrize("path", [OTLP, LANGFUSE], ids=["otlp", "langfuse"])
def test_bundled_exports_give_the_samples_they_were_traced_from(path: Path) -> None:
    samples = read_traces(path)
    assert len(samples) == 4
    for s, row in zip(samples, SAMPLES):
        assert s.question == row["user_input"]
        assert s.response == row["response"]
        assert s.context_ids == row["retrieved_context_ids"]
        assert s.context_texts == row["retrieved_contexts"]
        assert s.metadata["trace_id"] and s.metadata["span_id"]
        assert s.metadata["context_scores"][0] == 1.0
    # read_samples (and so `ragjudge rag FILE`) recognises a trace export by its content
    assert [s.id for s in read_samples(path)] == [s.id for s in samples]


def test_otlp_variants_ids_array_documents_json_lines_and_several_retrievers() -> None:
    tid = bytes(range(16))
    b64 = base64.b64encode(tid).decode()  # the protobuf JSON mapping writes ids as base64
    docs = [{"document.id": "d1", "document.content": "one", "document.score": 0.9},
            {"document.id": "d2", "document.content": "two"}]
    line1 = _otlp([
        _span(b64, base64.b64encode(b"\x01" * 8).decode(), "RETRIEVER", 100,
              {"input.value": "q?", "retrieval.documents": docs}),
        _span(b64, base64.b64encode(b"\x02" * 8).decode(), "RETRIEVER", 150,
              {"input.value": "q again?", "retrieval.documents.0.document.id": "d2",
               "retrieval.documents.0.document.content": "two",
               "retrieval.documents.1.document.id": "d3",
               "retrieval.documents.1.document.content": "three"}),
    ])
    line2 = _otlp([
        _span(b64, base64.b64encode(b"\x03" * 8).decode(), "LLM", 200,
              {"output.value": json.dumps({"choices": [{"message": {"content": "the answer"}}]})}),
        _span(b64, base64.b64encode(b"\x00" * 8).decode(), "CHAIN", 50,
              {"input.value": json.dumps({"question": "the question"}), "output.value": "x"}),
        _span("ab" * 16, "cd" * 8, "LLM", 10, {"output.value": "no retrieval here"}),
    ])
    got = trace_records(line1 + "\n" + line2 + "\n")
    assert got.format == "otlp" and got.traces == 2 and got.without_retriever == 1
    (rec,) = got.records
    assert rec["id"] == tid.hex() and rec["metadata"]["trace_id"] == tid.hex()
    assert rec["metadata"]["span_id"] == (b"\x03" * 8).hex()  # the answer's span
    assert len(rec["metadata"]["retriever_span_ids"]) == 2
    # two retrievers feed one answer: their documents in order, d2 once; the chain's question
    assert [d["id"] for d in rec["retrieved"]] == ["d1", "d2", "d3"]
    assert rec["question"] == "the question" and rec["answer"] == "the answer"


def test_phoenix_span_table_rows() -> None:
    rows = [
        {"context.trace_id": "t1", "context.span_id": "r1", "parent_id": None, "span_kind": "RETRIEVER",
         "start_time": "2026-11-28T10:00:00+00:00", "end_time": "2026-11-28T10:00:01+00:00",
         "attributes.input.value": "what?",
         "attributes.retrieval.documents": [{"document.id": "a", "document.content": "A text",
                                             "document.score": 0.5}]},
        {"context.trace_id": "t1", "context.span_id": "l1", "parent_id": None, "span_kind": "LLM",
         "start_time": "2026-11-28T10:00:02+00:00", "end_time": "2026-11-28T10:00:03+00:00",
         "attributes.llm.output_messages": [{"message.role": "assistant", "message.content": "that"}]},
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    assert trace_format(text) == "phoenix"
    (rec,) = trace_records(text).records
    assert rec["question"] == "what?" and rec["answer"] == "that"
    assert rec["retrieved"] == [{"id": "a", "text": "A text"}]
    assert rec["metadata"]["span_id"] == "l1"


def test_langfuse_observations_api_page_and_langchain_documents() -> None:
    page = {"data": [
        {"id": "o1", "traceId": "T", "type": "SPAN", "name": "VectorStoreRetriever",
         "startTime": "2026-11-28T10:00:00Z", "input": "the query",
         "output": [{"page_content": "first", "metadata": {"source": "s1"}},
                    {"page_content": "second", "metadata": {"source": "s2"}}]},
        {"id": "o2", "traceId": "T", "type": "GENERATION", "name": "ChatOpenAI",
         "startTime": "2026-11-28T10:00:01Z", "output": {"role": "assistant", "content": "an answer"}},
    ], "meta": {"page": 1}}
    got = trace_records(json.dumps(page))
    assert got.format == "langfuse"
    (rec,) = got.records
    assert rec["retrieved"] == [{"id": "s1", "text": "first"}, {"id": "s2", "text": "second"}]
    assert rec["question"] == "the query" and rec["answer"] == "an answer"


def test_trace_sampling_is_stable_as_the_export_grows() -> None:
    records = [{"id": f"t{i}", "metadata": {"trace_id": f"t{i}"}} for i in range(400)]
    small = {r["id"] for r in select_traces(records[:200], fraction=0.25, seed=3)}
    large = {r["id"] for r in select_traces(records, fraction=0.25, seed=3)}
    assert small == {r for r in large if int(r[1:]) < 200}  # same traces kept, new ones added
    assert 60 <= len(large) <= 140
    assert [r["id"] for r in select_traces(records, limit=3)] == ["t0", "t1", "t2"]
    with pytest.raises(InputError, match="fraction"):
        select_traces(records, fraction=0.0)
    assert len(read_traces(OTLP, limit=2)) == 2


def test_span_scores_attach_values_and_keep_reasons_apart() -> None:
    samples = read_traces(LANGFUSE)
    ids = [s.id for s in samples]
    report = RagReport(["faithfulness"], ids, {"faithfulness": [
        Score(0.5), Score(None, "no claims in the response"), Score(1.0), Score(0.0)]})
    recs = span_scores(report, samples)
    assert [r["span_id"] for r in recs] == [f"{i}-gen" for i in ids]
    assert recs[0]["attributes"] == {"ragjudge.faithfulness": 0.5}
    assert recs[1]["attributes"] == {} and recs[1]["undetermined"] == {"faithfulness": "no claims in the response"}
    assert recs[3]["attributes"] == {"ragjudge.faithfulness": 0.0}
    assert recs[0]["retriever_span_ids"] == [f"{ids[0]}-ret"]


def test_not_a_trace_export_is_one_input_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}))
    with pytest.raises(InputError, match="traceId"):
        read_traces(p)
    p.write_text(json.dumps({"something": 1}))
    with pytest.raises(InputError, match="not a trace export"):
        read_traces(p)


BASE = "http://rag-traces.test/v1"
ANSWERS = {
    "faithfulness_claims": {"claims": ["x", "y", "z", "w"]},
    "faithfulness_verify": {"verdicts": [True, True, True, False]},
}


def _reply(req: Any) -> respx.MockResponse:
    name = json.loads(req.content)["response_format"]["json_schema"]["name"]
    return respx.MockResponse(200, json={
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": json.dumps(ANSWERS[name])}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}})


def test_cli_scores_traces_and_writes_span_records(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   httpx2_mock: respx.Router,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TRACE_KEY", "sk-test")
    httpx2_mock.post(BASE + "/chat/completions").mock(side_effect=_reply)
    out = tmp_path / "spans.jsonl"
    argv = ["rag", str(OTLP), "-m", "faithfulness", "--model", "m", "--base-url", BASE,
            "--api-key-env", "RAG_TRACE_KEY", "--cache", str(tmp_path / "c.sqlite"), "-f", "json",
            "--no-progress", "--span-scores", str(out), "--trace-limit", "3"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["aggregates"][0]["mean"] == 0.75
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 3 and all(r["attributes"] == {"ragjudge.faithfulness": 0.75} for r in recs)
    assert {r["trace_id"] for r in recs} == {s.metadata["trace_id"] for s in read_traces(OTLP, limit=3)}
    # samples that do not come from traces have no span to attach to
    plain = tmp_path / "s.jsonl"
    plain.write_text(json.dumps({"id": "a", "retrieved": ["x"], "expected_output": ["x"]}) + "\n")
    assert main(["rag", str(plain), "-m", "hit@1", "--span-scores", str(out)]) == 2
    assert "--span-scores" in capsys.readouterr().err


def test_cli_junit_report_has_one_case_per_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "q1", "retrieved": ["a", "b"], "expected_output": ["b"]},
        {"id": "q<2>", "retrieved": ["c"], "expected_output": ["d"]}]))
    junit = tmp_path / "gates.xml"
    assert main(["rag", str(p), "-m", "hit@2", "--fail-under", "hit@2=0.4",
                 "--fail-under", "mrr=0.9", "--junit", str(junit)]) == 1
    capsys.readouterr()
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"hit@2 >= 0.4", "mrr >= 0.9"}
    assert cases["hit@2 >= 0.4"].find("failure") is None
    failure = cases["mrr >= 0.9"].find("failure")
    assert failure is not None and "mrr = 0.2500 < 0.9" in (failure.get("message") or "")


def test_evaluate_and_compare_junit_read_by_a_junit_parser(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    junitparser = pytest.importorskip("junitparser")
    runs = sorted((EXAMPLES / "runs").glob("*.run"))
    junit = tmp_path / "ci.xml"
    status = main(["evaluate", str(EXAMPLES / "qrels.txt"), *map(str, runs), "-m", "ndcg@10",
                   "--fail-under", "ndcg@10=0.99", "--fail-if-worse", "bm25_stemmed",
                   "--resamples", "200", "--junit", str(junit)])
    capsys.readouterr()
    assert status == 1
    xml = junitparser.JUnitXml.fromfile(str(junit))
    cases = [c for suite in xml for c in suite]
    under = [c for c in cases if c.classname.endswith("fail_under")]
    worse = [c for c in cases if c.classname.endswith("fail_if_worse")]
    assert len(under) == len(runs) and all(not c.is_passed for c in under)
    assert len(worse) == len(runs) - 1
    failed_worse = [c for c in worse if not c.is_passed]
    # every failed case carries the stderr line; passed ones carry nothing
    assert all("worse than bm25_stemmed" in c.result[0].message for c in failed_worse)
    (suite,) = list(xml)
    assert suite.failures == len(under) + len(failed_worse) and suite.tests == len(cases)
