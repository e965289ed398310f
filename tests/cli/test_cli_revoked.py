"""A key revoked mid-run stops the run with one line, and what was judged before is written
(qrels and judgments), with a word on resuming from the cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import respx
from _judge_cli import base_args, files, rule  # noqa: F401 -- the fixture is used by name
from _llm_fakes import SECRET, URL, error, grader

from ragjudge.cli import main
from ragjudge.io import read_qrels


def _revoked_after(n: int) -> Any:
    grade = grader(rule)
    seen = {"calls": 0}

    def effect(request: Any) -> respx.MockResponse:
        seen["calls"] += 1
        if seen["calls"] > n:
            return error(401, f"Incorrect API key provided: {SECRET}")
        return grade(request)

    return effect, seen


def test_a_revoked_key_writes_what_was_judged(httpx2_mock: respx.Router, files: dict[str, Path],  # noqa: F811
                                              capsys: pytest.CaptureFixture[str]) -> None:
    effect, seen = _revoked_after(3)
    httpx2_mock.post(URL).mock(side_effect=effect)
    out = files["dir"] / "o.qrels"
    judgments = files["dir"] / "j.jsonl"
    code = main(base_args(files, "-o", str(out), "--judgments", str(judgments), "--concurrency", "1"))
    assert code == 2
    err = capsys.readouterr().err
    assert "authentication failed" in err and SECRET not in err and "Traceback" not in err
    assert "wrote the 3 judgments made before it" in err and "a rerun resumes from the cache" in err
    assert len(read_qrels(out)) == 3
    assert len([json.loads(x) for x in judgments.read_text().splitlines()]) == 3

    # The rerun with a good key pays only for the rest.
    rerun = httpx2_mock.post(URL).mock(side_effect=grader(rule))
    before = rerun.call_count
    assert main(base_args(files, "-o", str(out), "--judgments", str(judgments))) == 0
    assert len(read_qrels(out)) == 5
    assert rerun.call_count - before == 2  # the three judged before were not paid for again
    assert seen["calls"] >= 4


def _evaluate_args(f: dict[str, Path], *extra: str) -> list[str]:
    return ["evaluate", "none", str(f["r1"]), "--judge", "judge-model", "--queries", str(f["q"]),
            "--corpus", str(f["c"]), "--base-url", "http://llm.test/v1", "--api-key-env", "JUDGE_KEY",
            "--cache", str(f["dir"] / "cache.sqlite"), "--no-progress", "-m", "p@3", *extra]


def test_evaluate_with_a_judge_keeps_what_was_judged_when_the_key_is_revoked(
        httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    effect, _ = _revoked_after(2)
    httpx2_mock.post(URL).mock(side_effect=effect)
    saved = files["dir"] / "llm.qrels"
    judgments = files["dir"] / "j.jsonl"
    code = main(_evaluate_args(files, "--save-qrels", str(saved), "--judgments", str(judgments),
                               "--concurrency", "1"))
    assert code == 2
    err = capsys.readouterr().err
    assert "authentication failed" in err and "Traceback" not in err
    assert "wrote the 2 judgments made before it" in err
    assert len(read_qrels(saved)) == 2 and len(judgments.read_text().splitlines()) == 2


def test_evaluate_with_a_judge_refuses_an_unwritable_output_before_any_call(
        httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    blocker = files["dir"] / "file"
    blocker.write_text("x")
    code = main(_evaluate_args(files, "--judgments", str(blocker / "sub" / "j.jsonl")))
    assert code == 2
    assert "cannot write here" in capsys.readouterr().err
    assert len(httpx2_mock.calls) == 0
