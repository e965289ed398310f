"""Citation support and the ALCE citation precision and recall."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import EX, oracle

from ragjudge.llm.fake import Failure, FakeLLM
from ragjudge.nuggets import (
    CitedAnswer,
    citation_scores,
    cite_support_sync,
    estimate_cite,
    read_answers,
    read_support,
    support_pairs,
)

C = EX / "passages.jsonl"


def test_alce_by_hand() -> None:
    # s1 cites d1 (full) and d2 (none), jointly full; s2 cites d3 (partial), jointly partial;
    # s3 cites nothing. recall = 1/3; precision: d1 relevant, d2 not, d3 not (s2 unsupported) = 1/3
    a = CitedAnswer("r", "q", ("s1", "s2", "s3"),
                    ((("d1", "full"), ("d2", "none")), (("d3", "partial"),), ()),
                    ("full", "partial", None))
    assert citation_scores(a) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    # a partial citation that is part of a jointly supported sentence is relevant
    b = CitedAnswer("r", "q", ("s",), ((("d1", "partial"), ("d2", "partial")),), ("full",))
    assert citation_scores(b) == (1.0, 1.0)
    none = CitedAnswer("r", "q", ("s",), ((),), (None,))
    assert citation_scores(none) == (None, 0.0)  # cites nothing: recall 0, precision undefined


def test_cite_one_call_per_answer() -> None:
    llm = FakeLLM(oracle)
    answers = [a for x in "abc" for a in read_answers(EX / "runs" / f"run_{x}.jsonl")]
    res = cite_support_sync(answers, llm=llm, corpus=C)
    assert len(llm.calls) == 12 and res.failed == 0
    a1 = next(a for a in res.answers if a.run_id == "run_a" and a.qid == "t1")
    assert [lab for ps in a1.pairs for _, lab in ps] == ["full", "full", "full"]
    b3 = next(a for a in res.answers if a.run_id == "run_b" and a.qid == "t3")
    assert b3.joint[1] is None  # the uncited sentence
    _, r = citation_scores(b3)
    assert r == pytest.approx(0.5)
    rep = res.score(n_resamples=200)
    assert rep.reports["run_a"].mean["citation_recall"] > rep.reports["run_c"].mean["citation_recall"]
    assert a1.provenance["prompt_id"] == "citation_support"
    assert estimate_cite(answers, llm=FakeLLM(oracle), corpus=C).calls == 12


def test_failures_and_unknown_text(tmp_path: Any) -> None:
    def reply(prompt: Any, v: Any) -> Any:
        return Failure("truncated", "cut") if "Colosseum" in v["passages"] else oracle(prompt, v)

    answers = read_answers(EX / "runs" / "run_c.jsonl")
    res = cite_support_sync(answers, llm=FakeLLM(reply), corpus=C)
    t3 = next(a for a in res.answers if a.qid == "t3")
    assert "truncated" in (t3.reason or "") and citation_scores(t3) == (None, None)
    assert res.failed == 1 and res.reports()["run_c"].meta["reasons"]["t3"].startswith("truncated")
    nocorpus = cite_support_sync(answers, llm=FakeLLM(oracle))
    assert all("unknown" in (a.reason or "") for a in nocorpus.answers)
    out = tmp_path / "cite.jsonl"
    res.write(out)
    assert read_support(out) == support_pairs(res.answers)


def test_read_human_support() -> None:
    human = read_support(EX / "human_support.jsonl")
    assert human[("run_b", "t1", 1, "p13")] == "none" and len(human) == 12
