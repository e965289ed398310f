"""What a file is, from its content (:func:`ragjudge.io.sniff.sniff_kind`): the nugget files
beside the relevance ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragjudge.errors import InputError
from ragjudge.io.sniff import KINDS, NUGGET_TO_LABEL_FORMAT, sniff_kind

EX = Path(__file__).resolve().parents[2] / "examples" / "nuggets"
NUGGETS = [{"text": "a fact", "importance": "vital", "assignment": "support"}]


def _jsonl(*records: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_nugget_assignments_are_one_object_per_answer_with_its_nuggets() -> None:
    assert {"assignments", "nugget_tolabel"} <= set(KINDS)
    assert sniff_kind((EX / "human_assignments.jsonl").read_text(encoding="utf-8")) == "assignments"
    for qid in ("qid", "topic_id", "query_id"):
        text = _jsonl({qid: "t1", "run_id": "a", "nuggets": NUGGETS},
                      {qid: "t2", "run_id": "a", "nuggets": NUGGETS})
        assert sniff_kind(text) == "assignments"
        # one answer alone is one JSON document too: still assignments
        assert sniff_kind(_jsonl({qid: "t1", "nuggets": NUGGETS})) == "assignments"
    assert sniff_kind("\ufeff\n  " + _jsonl({"qid": "t1", "nuggets": []})) == "assignments"


def test_what_is_not_nugget_assignments() -> None:
    # a judgment (docid), a to-label record (kind), nuggets that are no list, no query id
    assert sniff_kind(_jsonl({"qid": "q", "docid": "d", "nuggets": [], "grade": 1})) == "judgments"
    assert sniff_kind(_jsonl({"kind": "meta", "qid": "q", "nuggets": []})) == "tolabel"
    with pytest.raises(InputError):
        sniff_kind(_jsonl({"qid": "q", "nuggets": "a fact"}, {"qid": "r", "nuggets": "b"}))
    with pytest.raises(InputError):
        sniff_kind(_jsonl({"run_id": "a", "nuggets": NUGGETS}, {"run_id": "b", "nuggets": NUGGETS}))


def test_a_nugget_to_label_file_is_told_from_a_to_label_file_of_pairs() -> None:
    meta = {"kind": "meta", "format": NUGGET_TO_LABEL_FORMAT, "seed": 0}
    answer = {"kind": "answer", "qid": "t1", "run_id": "a", "nuggets": [{"text": "x"}]}
    assert sniff_kind(_jsonl(meta, answer)) == "nugget_tolabel"
    assert sniff_kind(_jsonl(meta)) == "nugget_tolabel"
    pairs = {"kind": "meta", "format": "ragjudge-to-label/1", "seed": 0}
    assert sniff_kind(_jsonl(pairs, {"kind": "pair", "qid": "q", "docid": "d"})) == "tolabel"


def test_cannot_tell_names_the_roles_to_force() -> None:
    with pytest.raises(InputError, match="assignments") as err:
        sniff_kind("just some words\n", "x.txt")
    assert "nugget_tolabel" not in str(err.value)
