"""Nugget scores from fixed assignments: hand computations, the reference definitions, the
readers of the TREC RAG layouts and ``ragjudge nuggets score``."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

import pytest

from ragjudge.cli import main
from ragjudge.errors import InputError
from ragjudge.nuggets import (
    AssignedNugget,
    Assignment,
    answer_scores,
    parse_answers,
    parse_assignments,
    parse_nuggets,
    read_assignments,
    score_assignments,
)

EX = Path(__file__).resolve().parents[2] / "examples" / "nuggets"


def _a(qid: str, run: str, items: list[tuple[str, str]]) -> Assignment:
    return Assignment(qid, run, tuple(AssignedNugget(f"n{i}", imp, lab) for i, (imp, lab) in enumerate(items)))


def test_answer_scores_by_hand() -> None:
    # 3 vital (partial, support, not) and 2 okay (not, not)
    a = _a("t1", "r", [("vital", "partial_support"), ("vital", "support"), ("vital", "not_support"),
                       ("okay", "not_support"), ("okay", "not_support")])
    scores, why = answer_scores(a)
    assert why is None
    assert scores["strict_vital"] == pytest.approx(1 / 3)
    assert scores["vital"] == pytest.approx(1.5 / 3)
    assert scores["strict_all"] == pytest.approx(1 / 5)
    assert scores["all"] == pytest.approx(1.5 / 5)
    assert scores["weighted"] == pytest.approx((0.5 + 1.0) / (3 + 0.5 + 0.5))
    # okay partial support in the weighted score: weight 0.5 x credit 0.5
    b = _a("t2", "r", [("vital", "support"), ("okay", "partial_support")])
    assert answer_scores(b)[0]["weighted"] == pytest.approx((1 + 0.25) / 1.5)


def _reference_definitions(records: list[dict]) -> dict[str, float]:
    """The reference implementation's metric definitions written out by hand: fractions of
    (vital / all) nuggets supported, with 0.5 for partial support in the non-strict ones, and
    the plain mean over records."""
    out: dict[str, list[float]] = {"strict_vital": [], "vital": [], "strict_all": [], "all": []}
    for r in records:
        ns = r["nuggets"]
        v = [n for n in ns if n["importance"] == "vital"]
        full = lambda xs: sum(1 for n in xs if n["assignment"] == "support")
        half = lambda xs: sum(0.5 for n in xs if n["assignment"] == "partial_support")
        out["strict_vital"].append(full(v) / len(v))
        out["vital"].append((full(v) + half(v)) / len(v))
        out["strict_all"].append(full(ns) / len(ns))
        out["all"].append((full(ns) + half(ns)) / len(ns))
    return {k: mean(x) for k, x in out.items()}


def test_cross_check_reference_definitions() -> None:
    records = [json.loads(line) for line in (EX / "human_assignments.jsonl").read_text().splitlines()]
    for run in ("run_a", "run_b"):
        mine = score_assignments(read_assignments(EX / "human_assignments.jsonl"), baseline=run,
                                 n_resamples=200).reports[run].mean
        ref = _reference_definitions([r for r in records if r["run_id"] == run])
        for k, v in ref.items():
            assert mine[k] == pytest.approx(v, abs=1e-12), (run, k)


def test_no_vital_nugget_is_undetermined_not_zero() -> None:
    a = _a("t9", "r", [("okay", "support")])
    scores, why = answer_scores(a)
    assert scores["strict_vital"] is None and scores["vital"] is None
    assert scores["all"] == 1.0 and "no vital" in (why or "")
    failed = Assignment("t8", "r", (AssignedNugget("x", "vital", None, failure="refusal"),))
    scores, why = answer_scores(failed)
    assert all(v is None for v in scores.values()) and "refusal" in (why or "")
    rep = score_assignments([a, failed, _a("t1", "r", [("vital", "support")])], n_resamples=100)
    r = rep.reports["r"]
    assert r.mean["strict_vital"] == 1.0 and r.undetermined["strict_vital"] == 2
    assert r.mean["all"] == 1.0 and r.undetermined["all"] == 1


def test_run_report_intervals_and_tests() -> None:
    rep = score_assignments(read_assignments(EX / "human_assignments.jsonl"), n_resamples=500)
    assert rep.runs == ["run_a", "run_b", "run_c"]
    lo, hi = rep.ci["run_b"]["all"]
    assert lo <= rep.reports["run_b"].mean["all"] <= hi
    c = rep.comparison("run_b", "all")
    assert c.n == 3 and c.delta is not None and c.delta < 0
    # run_c answered t1 and t3 only in the human file: paired on those
    assert rep.comparison("run_c", "vital").n == 2


def test_readers_trec_layouts() -> None:
    sets = parse_nuggets('{"qid": "1", "query": "q", "nuggets": [{"text": "a", "importance": "vital"}, "b"]}\n')
    assert sets[0].nuggets[0].importance == "vital" and sets[0].nuggets[1].importance is None
    answers = parse_answers(json.dumps({
        "run_id": "r1", "topic_id": "2024-1", "topic": "why", "references": ["d1", "d2"],
        "response_length": 5, "answer": [{"text": "A.", "citations": [1, 0]}, {"text": "B.", "citations": []}]}))
    a = answers[0]
    assert (a.run_id, a.qid, a.references, a.sentences[0].citations) == ("r1", "2024-1", ("d1", "d2"), (1, 0))
    assert a.text == "A. B."
    plain = parse_answers('{"query_id": "q1", "answer": "text"}\n', source="dir/my_run.jsonl")
    assert plain[0].run_id == "my_run" and plain[0].sentences[0].text == "text"
    y25 = parse_answers(json.dumps({"metadata": {"run_id": "x", "narrative_id": "n1"}, "references": ["d"],
                                    "answer": [{"text": "s", "citations": [0]}]}))
    assert (y25[0].run_id, y25[0].qid) == ("x", "n1")
    ragas = parse_answers('{"id": "s1", "user_input": "q?", "response": "an answer", "retrieved_contexts": ["c"]}\n')
    assert ragas[0].qid == "s1" and ragas[0].text == "an answer"


@pytest.mark.parametrize("text, where", [
    ('{"run_id": "r", "topic_id": "1", "references": ["d"], "answer": [{"text": "a", "citations": [3]}]}',
     "answers.jsonl:1: answer[0].citations"),
    ('{"qid": "1", "nuggets": [{"text": "a", "importance": "vital", "assignment": "maybe"}]}',
     "answers.jsonl:1: nuggets[0].assignment"),
])
def test_bad_input_names_file_line_field(text: str, where: str) -> None:
    parse = parse_answers if "references" in text else parse_assignments
    with pytest.raises(InputError) as e:
        parse(text, source="answers.jsonl")
    assert str(e.value).startswith(where)


def test_two_grade_refuses_partial() -> None:
    text = '{"qid": "1", "run_id": "r", "nuggets": [{"text": "a", "importance": "vital", "assignment": "partial_support"}]}'
    assert parse_assignments(text)[0].nuggets[0].assignment == "partial_support"
    with pytest.raises(InputError):
        parse_assignments(text, labels=("support", "not_support"))


def test_cli_score_json_and_gates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(EX / "human_assignments.jsonl")
    assert main(["nuggets", "score", f, "-f", "json", "--resamples", "200"]) == 0
    data = json.loads(capsys.readouterr().out)
    run_b = next(r for r in data["runs"] if r["run"] == "run_b")
    assert set(run_b["mean"]) == {"strict_vital", "vital", "strict_all", "all", "weighted"}
    assert run_b["mean"]["strict_all"] == pytest.approx(mean([1 / 5, 1 / 4, 1 / 4]))
    assert len(run_b["ci"]["all"]) == 2
    assert main(["nuggets", "score", f, "--fail-under", "vital=0.5", "--resamples", "200"]) == 1
    assert "fail-under: run run_b: vital = 0.3889 < 0.5" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "1", "nuggets": [{"text": "a", "assignment": "support"}]}\n')
    assert main(["nuggets", "score", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1: nuggets[0].importance" in err and "Traceback" not in err


def test_read_texts_layouts(tmp_path: Path) -> None:
    from ragjudge.nuggets import read_texts

    seg = tmp_path / "segments.jsonl"
    seg.write_text(json.dumps({"docid": "msmarco_v2.1_doc_1#0", "url": "u", "title": "T", "headings": "H",
                               "segment": "body"}) + "\n" + json.dumps({"docid": "x#1", "segment": "other"}) + "\n")
    assert read_texts(seg, wanted={"msmarco_v2.1_doc_1#0"}) == {"msmarco_v2.1_doc_1#0": "T\nH\nbody"}
    topics = tmp_path / "topics.tsv"
    topics.write_text("2024-1\twhat is x\n2024-2\twhy y\n")
    assert read_texts(topics)["2024-2"] == "why y"
    beir = tmp_path / "q.jsonl"
    beir.write_text('{"_id": "q1", "text": "hello"}\n{"qid": "q2", "query": "hi"}\n')
    assert read_texts(beir) == {"q1": "hello", "q2": "hi"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "q1"}\n')
    with pytest.raises(InputError, match="bad.jsonl:1: text"):
        read_texts(bad)
