"""``ragjudge nuggets assign`` and ``nuggets create`` stopped by a spend limit: what was made
before it is written (the rest failed with the stop as reason), the exit is non-zero, and a
rerun on the same cache pays only for what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _faultserver import FaultServer
from conftest import EX

from ragjudge.cli import main

NUGGETS = str(EX / "nuggets.jsonl")
ANSWERS = str(EX / "runs" / "run_a.jsonl")


def _assign(server: FaultServer, out: Path, cache: Path) -> int:
    return main(["nuggets", "assign", NUGGETS, ANSWERS, "-o", str(out), "--assign-window", "2",
                 "--concurrency", "1", "--no-progress", "--model", "fault-model", "--base-url", server.base_url,
                 "--cache", str(cache)])


@pytest.mark.parametrize("mode", ["spend_limit", "spend_limit_400"])
def test_assign_stopped_by_a_spend_limit_writes_what_it_has_and_a_rerun_pays_the_rest(
        mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fault")
    with FaultServer({}) as clean:  # the calls a whole run takes
        assert _assign(clean, tmp_path / "all.jsonl", tmp_path / "all.sqlite") == 0
    whole = clean.billed_calls
    capsys.readouterr()
    out, cache = tmp_path / "a.jsonl", tmp_path / "c.sqlite"
    # four answers, then the limit on every request
    with FaultServer({mode: 0.1}, seed=1) as limited:
        code = _assign(limited, out, cache)
    err = capsys.readouterr().err
    assert code == 2 and "quota" in err and limited.billed_calls == 4
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    grades = [n for r in rows for n in r["nuggets"]]
    made = [n for n in grades if n["assignment"] is not None]
    stopped = [n for n in grades if n["assignment"] is None]
    assert len(made) == 8  # four calls of two nuggets, paid for: kept
    assert stopped and all(n["failure"].startswith("not assigned: the run stopped") for n in stopped)
    assert f"8 of {len(grades)} nugget grades made, {len(stopped)} not made" in err
    assert "a rerun resumes from the cache" in err
    # the same command again, the limit raised: only the missing calls are paid
    with FaultServer({}) as again:
        assert _assign(again, out, cache) == 0
    assert again.billed_calls == whole - 4 and again.paid_twice == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(n["assignment"] is not None for r in rows for n in r["nuggets"])


def _create(server: FaultServer, out: Path, cache: Path) -> int:
    return main(["nuggets", "create", "--queries", str(EX / "topics.jsonl"), "--qrels", str(EX / "qrels.txt"),
                 "--corpus", str(EX / "passages.jsonl"), "-o", str(out), "--concurrency", "1", "--no-progress",
                 "--model", "fault-model", "--base-url", server.base_url, "--cache", str(cache)])


# seed 3: the limit from the third request on, two queries' nuggets made; seed 1: from the
# fifth, every query's nuggets made (one window each) and none of their importance
@pytest.mark.parametrize("seed, answered, sets, left", [
    (3, 2, 2, "the nuggets of "), (1, 4, 4, "the importance of t1, t2, t3, t4")])
def test_create_stopped_by_a_spend_limit_writes_the_queries_it_finished(
        seed: int, answered: int, sets: int, left: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fault")
    with FaultServer({}) as clean:
        assert _create(clean, tmp_path / "all.jsonl", tmp_path / "all.sqlite") == 0
    whole = clean.billed_calls
    capsys.readouterr()
    out, cache = tmp_path / "n.jsonl", tmp_path / "c.sqlite"
    with FaultServer({"spend_limit": 0.1}, seed=seed) as limited:
        code = _create(limited, out, cache)
    err = capsys.readouterr().err
    assert code == 2 and "quota" in err and limited.billed_calls == answered
    written = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(written) == sets and all(n["importance"] is None for s in written for n in s["nuggets"])
    assert f"the run stopped; wrote the nuggets of {sets} queries" in err and f"not made: {left}" in err
    assert "a rerun resumes from the cache" in err
    with FaultServer({}) as again:
        assert _create(again, out, cache) == 0
    assert again.billed_calls == whole - answered and again.paid_twice == 0
    def sets_of(path: Path) -> list[tuple[str, list[dict]]]:
        return [(r["qid"], r["nuggets"]) for r in map(json.loads, path.read_text().splitlines())]

    assert sets_of(out) == sets_of(tmp_path / "all.jsonl")  # the same nuggets as a run never stopped
