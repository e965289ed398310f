"""Agreement of LLM with human assignments, run-level Kendall tau and PPI per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EX, oracle

from ragjudge.cli import main
from ragjudge.llm.fake import FakeLLM
from ragjudge.nuggets import (
    AssignedNugget,
    Assignment,
    assign_nuggets_sync,
    nugget_agreement,
    read_answers,
    read_assignments,
)

HUMAN = EX / "human_assignments.jsonl"


def _llm() -> list[Assignment]:
    answers = [a for x in "abc" for a in read_answers(EX / "runs" / f"run_{x}.jsonl")]
    return assign_nuggets_sync(EX / "nuggets.jsonl", answers, llm=FakeLLM(oracle)).assignments


def test_identical_labels_agree_perfectly() -> None:
    human = read_assignments(HUMAN)
    rep = nugget_agreement(human, human, n_resamples=100)
    assert rep.assignments is not None and rep.assignments.cohen_kappa == pytest.approx(1.0)
    assert rep.kendall_tau == pytest.approx(1.0)
    # PPI with perfect labels on every answer people assessed equals the human mean
    assert rep.ppi["run_b"].mean == pytest.approx(rep.systems["run_b"]["human"])


def test_kappa_by_hand_and_tau_sign() -> None:
    # one query, four nuggets: human 2,2,0,0 vs llm 2,0,0,0 -> po = 3/4, pe = (2*1 + 2*3)/16 = 1/2,
    # kappa = (0.75 - 0.5) / 0.5 = 0.5
    def a(run: str, labels: list[str], q: str = "q") -> Assignment:
        return Assignment(q, run, tuple(AssignedNugget(f"n{i}", "vital", lab) for i, lab in enumerate(labels)))

    h = [a("r1", ["support", "support", "not_support", "not_support"])]
    f = [a("r1", ["support", "not_support", "not_support", "not_support"])]
    assert nugget_agreement(f, h, n_resamples=50).assignments.cohen_kappa == pytest.approx(0.5)
    # two runs ordered one way by people and the other by the LLM: tau = -1
    h2 = [a("r1", ["support"]), a("r2", ["not_support"]), a("r1", ["support"], "p"), a("r2", ["not_support"], "p")]
    f2 = [a("r1", ["not_support"]), a("r2", ["support"]), a("r1", ["not_support"], "p"), a("r2", ["support"], "p")]
    assert nugget_agreement(f2, h2, n_resamples=50).kendall_tau == pytest.approx(-1.0)


def test_example_end_to_end_values() -> None:
    rep = nugget_agreement(_llm(), HUMAN, n_resamples=200)
    assert rep.assignments is not None and rep.assignments.common_pairs == 35
    assert 0.0 < rep.assignments.cohen_kappa < 1.0
    assert set(rep.ppi) == {"run_a", "run_b", "run_c"}
    e = rep.ppi["run_a"]
    assert e.ci_low < e.mean < e.ci_high and e.n_human == 3 and e.n_llm == 4


def test_cli_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.nuggets import write_assignments

    llm_file = tmp_path / "llm.jsonl"
    write_assignments(_llm(), llm_file)
    assert main(["nuggets", "agree", str(llm_file), str(HUMAN), "--support-llm", str(EX / "human_support.jsonl"),
                 "--support-human", str(EX / "human_support.jsonl"), "-f", "json", "--resamples", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kendall_tau"] is not None and data["support"]["cohen_kappa"] == pytest.approx(1.0)
    assert set(data["ppi"]) == {"run_a", "run_b", "run_c"}
    assert main(["nuggets", "agree", str(llm_file), str(HUMAN), "--support-llm", "x"]) == 2
