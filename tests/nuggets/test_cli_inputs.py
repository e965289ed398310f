"""``ragjudge nuggets``: bad outputs and inputs are one line, exit 2, before any LLM call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EX

from ragjudge.cli import main
from ragjudge.cli import nuggets as cli_nuggets

RUN = str(EX / "runs" / "run_a.jsonl")
HUMAN = str(EX / "human_assignments.jsonl")


@pytest.fixture
def no_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the LLM session fails the test: the checks must come before it."""
    def boom(args: object) -> None:
        raise AssertionError("an LLM session was built before the inputs were checked")

    monkeypatch.setattr(cli_nuggets, "llm_from_args", boom)


def _one_line_error(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ragjudge: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], err
    return lines[0]


def _output_cases(tmp_path: Path) -> list[list[str]]:
    nug = str(EX / "nuggets.jsonl")
    return [
        ["nuggets", "score", HUMAN],
        ["nuggets", "agree", HUMAN, HUMAN],
        ["nuggets", "assign", nug, RUN, "--model", "m"],
        ["nuggets", "create", "--answers", RUN, "--model", "m"],
        ["nuggets", "cite", RUN, "--model", "m"],
    ]


@pytest.mark.parametrize("step", ["score", "agree", "assign", "create", "cite"])
def test_output_a_folder_is_one_line(step: str, tmp_path: Path, no_llm: None,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv = next(c for c in _output_cases(tmp_path) if c[1] == step)
    assert main([*argv, "-o", str(tmp_path)]) == 2
    _one_line_error(capsys, str(tmp_path), "directory")


@pytest.mark.parametrize("step", ["score", "agree", "assign", "create", "cite"])
def test_output_that_cannot_be_written_is_one_line(step: str, tmp_path: Path, no_llm: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A parent that is a file (so the folder cannot be made): refused before any work."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = str(blocker / "sub" / "out.txt")
    argv = next(c for c in _output_cases(tmp_path) if c[1] == step)
    assert main([*argv, "-o", target]) == 2
    _one_line_error(capsys, target, "cannot write")


def test_cite_labels_path_checked_first(tmp_path: Path, no_llm: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nuggets", "cite", RUN, "--labels", str(tmp_path), "--model", "m"]) == 2
    _one_line_error(capsys, str(tmp_path), "directory")


def test_score_output_in_a_missing_folder_is_written(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A missing parent folder is made, as every other command's output does (`rag`, `retrieve`)."""
    out = tmp_path / "new" / "scores.json"
    assert main(["nuggets", "score", HUMAN, "-f", "json", "--resamples", "50", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["runs"]


def test_assign_empty_nuggets_file(tmp_path: Path, no_llm: None,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "nuggets.jsonl"
    empty.write_text("")
    assert main(["nuggets", "assign", str(empty), RUN, "-o", str(tmp_path / "o.jsonl"), "--model", "m"]) == 2
    _one_line_error(capsys, str(empty), "no nuggets to assign")


def test_assign_queries_without_any_nugget(tmp_path: Path, no_llm: None,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Queries listed with empty nugget lists hold nothing to assign either."""
    nug = tmp_path / "nuggets.jsonl"
    nug.write_text('{"qid": "t1", "query": "q", "nuggets": []}\n')
    assert main(["nuggets", "assign", str(nug), RUN, "-o", str(tmp_path / "o.jsonl"), "--model", "m"]) == 2
    _one_line_error(capsys, str(nug), "no nuggets to assign")


def test_assign_empty_answers_file(tmp_path: Path, no_llm: None,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """One empty answers file among several is an error naming it: a truncated file or a wrong
    path, which a silent skip would turn into a run missing from the scores."""
    empty = tmp_path / "run_x.jsonl"
    empty.write_text("\n")
    assert main(["nuggets", "assign", str(EX / "nuggets.jsonl"), RUN, str(empty),
                 "-o", str(tmp_path / "o.jsonl"), "--model", "m"]) == 2
    _one_line_error(capsys, str(empty), "no answers")


def test_assign_answers_sharing_no_query_with_the_nuggets(tmp_path: Path, no_llm: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """An error, not a warning: an answers file none of whose queries has nuggets would be
    assigned nothing at all -- almost always ids spelled differently on the two sides (a
    prefix, another year's topics) -- so the one line names the file and shows the first ids of
    both sides. (Some answers without nuggets stay a warning per answer: partial pools are normal.)"""
    other = tmp_path / "run_z.jsonl"
    rows = [json.loads(x) for x in Path(RUN).read_text().splitlines() if x.strip()]
    for r in rows:
        r["topic_id"] = "2024-" + str(r.get("topic_id") or r.get("qid"))
        r.pop("qid", None)
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["nuggets", "assign", str(EX / "nuggets.jsonl"), RUN, str(other),
                 "-o", str(tmp_path / "o.jsonl"), "--model", "m"]) == 2
    line = _one_line_error(capsys, str(other), "2024-t1", "t1")
    assert "nuggets.jsonl" in line


def test_assign_cut_short_by_the_cap_exits_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A run --max-cost stopped before the end is not a finished result, even when fewer than
    half the grades are missing: exit 4 and one line saying how many, as `judge` does."""
    from conftest import oracle

    from ragjudge.llm.fake import FakeLLM

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"fake-model": {"input": 1.0, "output": 4.0}}))
    monkeypatch.setattr(cli_nuggets, "llm_from_args",
                        lambda args: FakeLLM(oracle, prices=str(prices), max_cost=0.01, concurrency=1))
    out = tmp_path / "a.jsonl"
    code = main(["nuggets", "assign", str(EX / "nuggets.jsonl"), RUN, str(EX / "runs" / "run_b.jsonl"),
                 str(EX / "runs" / "run_c.jsonl"), "-o", str(out), "--assign-window", "2",
                 "--model", "m", "--max-cost", "0.01", "--no-progress"])
    err = capsys.readouterr().err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    cut = sum(1 for r in rows for n in r["nuggets"] if (n.get("failure") or "").startswith("budget"))
    total = sum(len(r["nuggets"]) for r in rows)
    assert 0 < cut < total, err
    assert code == 4 and f"{cut} of {total} nugget grades not made" in err
