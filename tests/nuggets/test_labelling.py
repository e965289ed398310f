"""Answers drawn for people to assign (seeded, every run's answer to a drawn query, all its
nuggets), the labels log read back as human assignments (skips and incomplete queries left
out), and the labels a target PPI width needs, checked by simulation with a fixed seed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragjudge.errors import InputError
from ragjudge.nuggets import AssignedNugget, Assignment, nugget_agreement
from ragjudge.nuggets.labelling import (
    human_assignments,
    parse_nugget_to_label,
    plan_nugget_labels,
    replay_nugget_labels,
    sample_nuggets_to_label,
)

LAB = ("support", "partial_support", "not_support")


def _answers(n_queries: int, runs: tuple[str, ...], seed: int, flip: float = 0.0,
             base: list[Assignment] | None = None) -> list[Assignment]:
    """Runs of different quality answering ``n_queries`` with 6 nuggets each; with ``base``, the
    same answers with each label changed at random with probability ``flip`` (an LLM's view)."""
    rng = random.Random(seed)
    if base is not None:
        return [Assignment(a.qid, a.run_id, tuple(
            AssignedNugget(n.text, n.importance, rng.choice(LAB) if rng.random() < flip else n.assignment)
            for n in a.nuggets), a.query, a.answer_text) for a in base]
    out = []
    for k, run in enumerate(runs):
        for q in range(n_queries):
            good = rng.random() < 0.3 + 0.2 * k
            out.append(Assignment(f"q{q}", run, tuple(
                AssignedNugget(f"fact {q}.{i}", "vital" if i < 3 else "okay",
                               rng.choice(LAB[:2] if good else LAB[1:])) for i in range(6)),
                f"query {q}", f"answer of {run} to {q}"))
    return out


def test_sample_is_seeded_and_holds_every_runs_answer_with_all_nuggets() -> None:
    llm = _answers(30, ("a", "b", "c"), 1)
    t1 = sample_nuggets_to_label(llm, 5, seed=3, metric="vital")
    assert t1.to_jsonl() == sample_nuggets_to_label(llm, 5, seed=3, metric="vital").to_jsonl()
    assert t1.to_jsonl() != sample_nuggets_to_label(llm, 5, seed=4, metric="vital").to_jsonl()
    back = parse_nugget_to_label(t1.to_jsonl())
    assert back.queries == t1.queries and len(back.answers) == 15 and back.items == 90
    assert [a["qid"] for a in back.answers] == [q for q in t1.queries for _ in range(3)]
    assert {(a["qid"], a["run_id"]) for a in back.answers} == {(q, r) for q in t1.queries for r in "abc"}
    assert all(n["llm"] in LAB for a in back.answers for n in a["nuggets"]) and back.meta["metric"] == "vital"
    with pytest.raises(InputError, match="positive"):
        sample_nuggets_to_label(llm, 0)
    with pytest.raises(InputError, match="unknown nugget score"):
        sample_nuggets_to_label(llm, 2, metric="recall")
    with pytest.raises(InputError, match="not a nugget to-label file"):
        parse_nugget_to_label('{"kind": "meta", "format": "ragjudge-to-label/1"}\n')


def test_labels_log_read_back_only_complete_queries_and_fully_assigned_answers() -> None:
    tl = sample_nuggets_to_label(_answers(4, ("a", "b"), 2), 2, seed=0)
    first, second = tl.queries
    log = []
    for a in tl.answers:
        for i in range(len(a["nuggets"])):
            lab = None if (a["qid"], a["run_id"], i) == (first, "b", 5) else "support"
            if a["qid"] == second and i == 5:
                continue  # the second query is not complete
            log.append({"op": "label", "qid": a["qid"], "run_id": a["run_id"], "nugget": i,
                        "assignment": lab, "who": "ana"})
    log += [{"op": "label", "qid": first, "run_id": "a", "nugget": 0, "assignment": "not_support", "who": "bo"},
            {"op": "undo", "who": "bo"}]
    human = human_assignments(tl, replay_nugget_labels(log))
    # run b's answer to the first query has a skipped nugget: no human score; bo's label undone
    assert [(h.qid, h.run_id) for h in human] == [(first, "a")]
    assert all(n.assignment == "support" for n in human[0].nuggets)
    assert len(human_assignments(tl, replay_nugget_labels(log), complete_only=False)) == 1


def test_the_planned_number_of_queries_gives_about_the_target_width() -> None:
    truth = _answers(400, ("a", "b"), 5)
    llm = _answers(0, (), 6, flip=0.3, base=truth)
    rng = np.random.default_rng(7)
    pilot_q = {f"q{i}" for i in rng.choice(400, 40, replace=False)}
    pilot = [a for a in truth if a.qid in pilot_q]
    width = 0.08
    plans = {p["run"]: p for p in plan_nugget_labels(llm, pilot, width, metric="all")}
    assert set(plans) == {"a", "b"}
    for run, p in plans.items():
        assert p["n_ppi"] < p["n_human_only"] <= 400 and p["correlation"] > 0.5
        # draw that many queries, label them (the truth), and measure the interval PPI gives
        widths = []
        for rep in range(20):
            qs = {f"q{i}" for i in np.random.default_rng(100 + rep).choice(400, p["n_ppi"], replace=False)}
            human = [a for a in truth if a.qid in qs and a.run_id == run]
            est = nugget_agreement([a for a in llm if a.run_id == run], human, n_resamples=10).ppi[run]
            widths.append(est.ci_high - est.ci_low)
        assert 0.7 * width <= float(np.mean(widths)) <= 1.3 * width, (run, p["n_ppi"], np.mean(widths))
    with pytest.raises(InputError, match="no run has 2 answers"):
        plan_nugget_labels(llm, pilot[:1], width)
