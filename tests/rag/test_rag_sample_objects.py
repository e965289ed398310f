"""Samples from the objects and files users already have: RAGAS, DeepEval (objects and camelCase
JSON), Hugging Face datasets, pydantic models, dataclasses -- by duck typing -- plus JSONL with a
byte-order mark or U+2028 inside strings. Look-alike classes mirror the real ones' fields; the
real packages are tried too when installed."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any, Optional

import pytest
from pydantic import BaseModel, Field

from ragjudge.errors import InputError
from ragjudge.rag import as_samples, evaluate_samples_sync, read_samples

Q, CTX, RESP, REF = "Where is the tower?", ["It is in Paris.", "Paris is in France."], "In Paris.", "Paris"


# ----------------------------------------------------------------------------- look-alikes
class SingleTurnSample(BaseModel):  # ragas.dataset_schema.SingleTurnSample's fields
    user_input: Optional[str] = None
    retrieved_contexts: Optional[list[str]] = None
    reference_contexts: Optional[list[str]] = None
    response: Optional[str] = None
    multi_responses: Optional[list[str]] = None
    reference: Optional[str] = None
    rubrics: Optional[dict[str, str]] = None


class RagasEvaluationDataset(BaseModel):
    samples: list[SingleTurnSample]


class LLMTestCase(BaseModel):  # deepeval.test_case.LLMTestCase (pydantic, camelCase aliases)
    input: str
    actual_output: Optional[str] = Field(default=None, serialization_alias="actualOutput")
    expected_output: Optional[str] = Field(default=None, serialization_alias="expectedOutput")
    context: Optional[list[str]] = None
    retrieval_context: Optional[list[str]] = Field(default=None, serialization_alias="retrievalContext")
    additional_metadata: Optional[dict[str, Any]] = Field(default=None, serialization_alias="additionalMetadata")
    tools_called: Optional[list[Any]] = Field(default=None, serialization_alias="toolsCalled")
    token_cost: Optional[float] = None
    name: Optional[str] = None


@dataclasses.dataclass
class OldLLMTestCase:  # deepeval < 1.0 kept test cases as dataclasses
    input: str
    actual_output: Optional[str] = None
    expected_output: Optional[str] = None
    retrieval_context: Optional[list[str]] = None


class DeepEvalDataset:  # deepeval.dataset.EvaluationDataset: test_cases and goldens
    def __init__(self, test_cases: list[Any], goldens: list[Any] = ()) -> None:
        self.test_cases = list(test_cases)
        self.goldens = list(goldens)


class HFDataset:  # datasets.Dataset: rows as dicts when iterated, columns by name
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self._rows = rows
        self.column_names = list(rows[0])

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Any:
        return iter(self._rows)

    def __getitem__(self, key: Any) -> Any:
        return [r[key] for r in self._rows] if isinstance(key, str) else self._rows[key]


def _one(data: Any) -> Any:
    (s,) = as_samples(data)
    return s


def _same(s: Any, *, reference: str | None = REF) -> None:
    assert s.question == Q and s.response == RESP and s.reference == reference
    assert s.context_texts == CTX


def test_ragas_objects() -> None:
    sample = SingleTurnSample(user_input=Q, retrieved_contexts=CTX, response=RESP, reference=REF)
    _same(_one(sample))
    _same(_one([sample]))
    _same(_one(RagasEvaluationDataset(samples=[sample])))


def test_deepeval_objects_and_camel_case_json(tmp_path: Path) -> None:
    case = LLMTestCase(input=Q, actual_output=RESP, expected_output=REF, retrieval_context=CTX,
                       context=["Paris is the capital."])
    s = _one(case)
    _same(s)
    assert s.reference_contexts == ("Paris is the capital.",)
    _same(_one(DeepEvalDataset([case])))
    _same(_one(DeepEvalDataset([], goldens=[case])))
    _same(_one(OldLLMTestCase(Q, RESP, REF, CTX)))
    # DeepEval's saved JSON uses the camelCase aliases; they were silently ignored before.
    path = tmp_path / "deepeval.json"
    path.write_text(json.dumps([case.model_dump(by_alias=True)]), encoding="utf-8")
    _same(read_samples(path)[0])
    rep = evaluate_samples_sync(path, ["containment@2"])
    assert rep.values("containment@2") == [1.0]


def test_hugging_face_dataset_and_plain_dataclasses() -> None:
    _same(_one(HFDataset([{"question": Q, "contexts": CTX, "answer": RESP, "ground_truth": REF}])))

    @dataclasses.dataclass
    class Mine:
        question: str
        retrieved_contexts: list[str]
        response: str
        reference: str

    _same(_one([Mine(Q, CTX, RESP, REF)]))


def test_unrecognised_keys_are_listed_once() -> None:
    rows = [{"user_input": Q, "retrieved_contexts": CTX, "response": RESP, "reference": REF,
             "rubrics": {"a": "b"}, "toolsCalled": ["x"], "empty": None} for _ in range(3)]
    for i, r in enumerate(rows):
        r["id"] = str(i)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = as_samples(rows)
    assert len(got) == 3
    msgs = [str(w.message) for w in caught]
    assert msgs == ["ignored unrecognised sample field(s): rubrics, toolsCalled"]


def test_jsonl_with_bom_and_line_separators_inside_strings(tmp_path: Path) -> None:
    text = "\ufeff" + json.dumps({"user_input": "a\u2028b", "response": "c\u2029d\x0ce",
                                 "retrieved_contexts": ["x\x85y"]}, ensure_ascii=False) + "\r\n" + \
        json.dumps({"user_input": "q2", "response": "r2"}) + "\n"
    path = tmp_path / "s.jsonl"
    path.write_text(text, encoding="utf-8")
    got = read_samples(path)
    assert [s.question for s in got] == ["a\u2028b", "q2"]
    assert got[0].response == "c\u2029d\x0ce" and got[0].context_texts == ["x\x85y"]


def test_real_ragas_objects() -> None:
    ragas = pytest.importorskip("ragas")
    sample = ragas.SingleTurnSample(user_input=Q, retrieved_contexts=CTX, response=RESP, reference=REF)
    _same(_one(ragas.EvaluationDataset(samples=[sample])))


def test_real_deepeval_objects() -> None:
    pytest.importorskip("deepeval")
    from deepeval.test_case import LLMTestCase as Real

    _same(_one([Real(input=Q, actual_output=RESP, expected_output=REF, retrieval_context=CTX)]))


def test_real_hugging_face_dataset() -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"user_input": Q, "retrieved_contexts": CTX, "response": RESP,
                                      "reference": REF}])
    _same(_one(ds))


def test_csv_cells_longer_than_the_csv_module_default(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("user_input,retrieved_contexts,response\nq,\"['" + "x" * 200_000 + "']\",r\n",
                    encoding="utf-8")
    (s,) = read_samples(path)
    assert len(s.context_texts[0]) == 200_000


def test_gzip_and_pipes_are_read_as_streams(tmp_path: Path) -> None:
    import gzip
    import os
    import threading

    line = json.dumps({"id": "p", "user_input": Q, "retrieved_contexts": CTX}) + "\n"
    gz = tmp_path / "s.jsonl.gz"
    gz.write_bytes(gzip.compress(line.encode("utf-8")))
    assert [s.id for s in read_samples(gz)] == ["p"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(gzip.compress(line.encode("utf-8"))))
    writer.start()
    try:
        assert [s.id for s in read_samples(fifo)] == ["p"]
    finally:
        writer.join()
    with pytest.raises(InputError, match="is a directory"):
        read_samples(tmp_path)
