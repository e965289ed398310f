"""The README's two opening commands are the contract with a new user: keep them true."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest

from ragjudge.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", quick, flags=re.S)]


def test_readme_opens_with_the_two_commands() -> None:
    cmds = _quick_start_commands()
    assert len(cmds) == 2
    main_job, tests = cmds
    assert "ragjudge evaluate" in main_job and "examples/" in main_job
    assert "pytest" in tests and "python3 -m venv" in tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    tests = _quick_start_commands()[1]
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert tests in ci_lines


def test_readme_main_job_works(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    main_job = _quick_start_commands()[0]
    evaluate_part = main_job.split("&&")[-1].strip()
    argv = shlex.split(evaluate_part)
    assert argv[0].endswith("ragjudge")
    monkeypatch.chdir(ROOT)
    expanded: list[str] = []
    for arg in argv[1:]:
        expanded.extend(sorted(glob.glob(arg)) if "*" in arg else [arg])
    assert main(expanded) == 0
    out = capsys.readouterr().out
    for run in ("bm25_stemmed", "bm25_raw", "term_overlap"):
        assert run in out
    assert "baseline" in out


def test_the_tour_says_which_files_are_yours_and_that_the_venv_is_active() -> None:
    # The tour types bare `ragjudge` and names files a reader does not have (bm25.run, q.jsonl):
    # the sentence before it says to activate the venv and which names stand for one's own files.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = text.split("## A tour", 1)[1].split("\n## ", 1)[0]
    intro, rest = tour.split("```sh", 1)
    commands = rest.split("```", 1)[0]
    assert "source .venv/bin/activate" in intro and "examples/" in intro
    written: set[str] = set()
    inputs: list[str] = []
    for line in commands.splitlines():
        words = shlex.split(line.split("#", 1)[0].rstrip("\\"))
        for i, word in enumerate(words):
            if i and words[i - 1] in ("-o", "--judgments"):
                written.add(word)
            elif re.search(r"\.(run|jsonl|qrels|txt)$", word) and not word.startswith("examples/"):
                if not any(word == w or word.startswith(w) for w in written if w.endswith("/") or w == word):
                    inputs.append(word)
    assert inputs  # the tour does use files of one's own
    assert [w for w in dict.fromkeys(inputs) if w.split("/")[-1] not in intro] == []
