"""Reading RAG samples: RAGAS, DeepEval and id+text shapes; JSONL, JSON, CSV, DataFrame; errors."""

from __future__ import annotations

import json

import pytest

from ragjudge.errors import InputError
from ragjudge.rag.samples import (
    Context,
    Sample,
    as_samples,
    parse_samples,
    read_samples,
    samples_from_records,
)


def test_ragas_names():
    rec = {
        "user_input": "Where is the Eiffel tower?",
        "retrieved_contexts": ["It is in Paris.", "Berlin is in Germany."],
        "retrieved_context_ids": ["d1", "d2"],
        "reference": "In Paris.",
        "reference_context_ids": ["d1"],
        "reference_contexts": ["It is in Paris."],
        "response": "Paris",
    }
    (s,) = samples_from_records([rec])
    assert s.id == "1"
    assert s.question == "Where is the Eiffel tower?"
    assert s.contexts == (Context("d1", "It is in Paris."), Context("d2", "Berlin is in Germany."))
    assert s.context_ids == ["d1", "d2"]
    assert s.context_texts == ["It is in Paris.", "Berlin is in Germany."]
    assert s.reference == "In Paris."
    assert s.relevant == {"d1": 1}
    assert s.reference_contexts == ("It is in Paris.",)
    assert s.response == "Paris"


def test_deepeval_names_expected_output_string_is_the_reference():
    rec = {
        "input": "q",
        "actual_output": "a",
        "expected_output": "the answer",
        "retrieval_context": ["c1", "c2"],
        "context": ["gold text"],
    }
    (s,) = samples_from_records([rec])
    assert (s.question, s.response, s.reference) == ("q", "a", "the answer")
    assert s.relevant is None
    assert s.context_texts == ["c1", "c2"] and s.context_ids is None
    assert s.reference_contexts == ("gold text",)


def test_id_text_contract_with_gain_map_and_metadata_k():
    rec = {
        "id": "q7",
        "retrieved": [{"id": "a", "text": "A"}, {"id": 5, "text": "B"}],
        "expected_output": {"a": 2, "z": 1},
        "metadata": {"k": 3, "team": "x"},
    }
    (s,) = samples_from_records([rec])
    assert s.id == "q7"
    assert s.contexts == (Context("a", "A"), Context("5", "B"))
    assert s.relevant == {"a": 2, "z": 1}
    assert s.k == 3 and s.metadata["team"] == "x"
    # k resolution: sample metadata.k, else the metric's k, else the default.
    assert s.cutoff(10) == 3
    plain = Sample(id="x")
    assert plain.cutoff(10) == 10
    assert plain.cutoff(None) == 5
    assert plain.cutoff(None, default=7) == 7


def test_bare_list_of_ids_and_list_of_relevant_ids():
    (s,) = samples_from_records([{"retrieved": ["d7", "d3"], "expected_output": ["d3"]}])
    assert s.context_ids == ["d7", "d3"] and s.context_texts is None
    assert s.relevant == {"d3": 1}


def test_retrieved_context_ids_alone():
    (s,) = samples_from_records([{"retrieved_context_ids": ["a", "b"], "reference_context_ids": ["b"]}])
    assert s.context_ids == ["a", "b"]


@pytest.mark.parametrize(
    "rec, field, words",
    [
        ({"id": "s1", "user_input": 3}, "user_input", "must be a string"),
        ({"id": "s1", "retrieved_contexts": "one string"}, "retrieved_contexts", "must be a list"),
        ({"id": "s1", "retrieved_contexts": ["ok", 4]}, "retrieved_contexts[1]", "must be a string"),
        ({"id": "s1", "retrieved": [{"id": "a", "txt": "x"}]}, "retrieved[0]", "unknown keys"),
        ({"id": "s1", "expected_output": {"a": "high"}}, "expected_output['a']", "gain must be an integer"),
        ({"id": "s1", "retrieved": ["a"], "metadata": {"k": 0}}, "metadata.k", "positive integer"),
        ({"id": "s1", "retrieved_contexts": ["a"], "retrieved_context_ids": ["x", "y"]},
         "retrieved_context_ids", "has 2 ids but there are 1"),
        ({"id": "s1", "retrieved": [{"id": " "}]}, "retrieved[0].id", "must not be empty"),
        ({"id": "s1", "reference_context_ids": ["a"], "expected_output": ["b"]},
         "reference_context_ids", "given twice"),
        ({"foo": 1}, "sample", "no recognised field"),
    ],
)
def test_errors_name_sample_and_field(rec, field, words):
    with pytest.raises(InputError) as info:
        samples_from_records([rec], source="data.jsonl", line_numbers=[4])
    err = info.value
    assert err.field == field
    assert err.source == "data.jsonl" and err.line == 4
    assert words in str(err)
    label = "sample 's1'" if "id" in rec else "sample #1"
    assert label in str(err)


def test_jsonl_skip_invalid_reports_bad_lines():
    text = "\n".join(
        [
            json.dumps({"id": "a", "retrieved": ["d1"], "expected_output": ["d1"]}),
            "{not json",
            "",
            json.dumps({"id": "b", "user_input": ["not", "a", "string"]}),
            json.dumps({"id": "c", "retrieved": ["d2"]}),
        ]
    )
    with pytest.raises(InputError) as info:
        parse_samples(text, source="x.jsonl")
    assert info.value.line == 2
    got = parse_samples(text, source="x.jsonl", skip_invalid=True)
    assert [s.id for s in got] == ["a", "c"]
    assert [(e.line, e.field) for e in got.invalid] == [(2, "json"), (4, "user_input")]
    assert "sample 'b'" in str(got.invalid[1])


def test_duplicate_ids_are_an_error():
    with pytest.raises(InputError, match="duplicate sample id"):
        parse_samples('{"id": "a", "retrieved": ["x"]}\n{"id": "a", "retrieved": ["y"]}\n')


def test_csv_with_python_and_json_list_cells(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(
        "user_input,retrieved_contexts,reference,metadata.k\n"
        "\"q1\",\"['Paris is big', \"\"It's in France\"\"]\",Paris,3\n"
        "q2,\"[\"\"x\"\"]\",,\n",
        encoding="utf-8",
    )
    got = read_samples(path)
    assert got[0].context_texts == ["Paris is big", "It's in France"]
    assert got[0].k == 3 and got[0].reference == "Paris"
    assert got[1].reference is None and got[1].k is None
    assert got[1].context_texts == ["x"]


def test_json_array_and_samples_key(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"samples": [{"id": "z", "retrieved": ["a"]}]}), encoding="utf-8")
    assert [s.id for s in read_samples(p)] == ["z"]
    # a name without a known extension (a pipe, /dev/stdin, .txt): the content decides
    (tmp_path / "s.txt").write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    assert [s.id for s in read_samples(tmp_path / "s.txt")] == ["z"]
    (tmp_path / "l.txt").write_text('{"id": "a", "retrieved": ["x"]}\n{"id": "b", "retrieved": ["y"]}\n',
                                    encoding="utf-8")
    assert [s.id for s in read_samples(tmp_path / "l.txt")] == ["a", "b"]
    (tmp_path / "c.txt").write_text("id,retrieved\nc,\"['x']\"\n", encoding="utf-8")
    assert [s.id for s in read_samples(tmp_path / "c.txt")] == ["c"]
    with pytest.raises(InputError, match="file not found"):
        read_samples(tmp_path / "missing.jsonl")


def test_dataframe_rows_with_nan_and_arrays():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    df = pd.DataFrame(
        {
            "user_input": ["q1", "q2"],
            "retrieved_contexts": [np.array(["a", "b"]), ["c"]],
            "reference": ["r1", float("nan")],
        }
    )
    got = as_samples(df)
    assert got[0].context_texts == ["a", "b"]
    assert got[1].reference is None


def test_as_samples_accepts_samples_and_dicts():
    s = Sample(id="a", question="q")
    assert list(as_samples([s])) == [s]
    assert as_samples([{"question": "q"}])[0].question == "q"
    with pytest.raises(InputError, match="duplicate"):
        as_samples([s, s])


def test_empty_file_is_an_error():
    with pytest.raises(InputError, match="no samples"):
        parse_samples("\n\n", source="e.jsonl")


def test_ragas_dataframe_csv_round_trip(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "user_input": ["q1"],
            "retrieved_contexts": [["It's in Paris, \"the\" city.", "b"]],
            "reference_context_ids": [["d1"]],
            "retrieved_context_ids": [["d1", "d2"]],
        }
    )
    path = tmp_path / "ragas.csv"
    df.to_csv(path, index=False)
    (s,) = read_samples(path)
    assert s.context_texts == ["It's in Paris, \"the\" city.", "b"]
    assert s.context_ids == ["d1", "d2"] and s.relevant == {"d1": 1}
