"""``ragjudge nuggets`` end to end against the loopback simulator (slow: a server thread)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _loopback import simulator_thread
from conftest import EX

from ragjudge.cli import main

RUNS = [str(EX / "runs" / f"run_{x}.jsonl") for x in "abc"]


@pytest.mark.slow
def test_assign_then_score(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    out = tmp_path / "assign.jsonl"
    cache = tmp_path / "cache.sqlite"
    with simulator_thread(latency=0.0) as sim:
        base = ["--model", "sim", "--base-url", sim.base_url, "--cache", str(cache), "--no-progress"]
        assert main(["nuggets", "assign", str(EX / "nuggets.jsonl"), *RUNS, "-o", str(out), *base]) == 0
        err = capsys.readouterr().err
        assert "assign: 12 calls (0 cached" in err
        # resumed / repeated: everything from the cache
        assert main(["nuggets", "assign", str(EX / "nuggets.jsonl"), *RUNS, "-o", str(out), *base]) == 0
        assert "assign: 0 calls (12 cached" in capsys.readouterr().err
        assert sim.stats()["paid"] == 12 and sim.stats()["duplicate_paid"] == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12 and all(n["assignment"] for r in rows for n in r["nuggets"])
    assert rows[0]["provenance"]["prompt_id"] == "nugget_assign"
    assert main(["nuggets", "score", str(out), "-f", "json", "--resamples", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in data["runs"]] == ["run_a", "run_b", "run_c"]


@pytest.mark.slow
def test_create_from_qrels_then_assign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    made, out = tmp_path / "nuggets.jsonl", tmp_path / "assign.jsonl"
    with simulator_thread(latency=0.0) as sim:
        base = ["--model", "sim", "--base-url", sim.base_url, "--no-cache", "--no-progress"]
        assert main(["nuggets", "create", "--queries", str(EX / "topics.jsonl"), "--qrels",
                     str(EX / "qrels.txt"), "--corpus", str(EX / "passages.jsonl"), "-o", str(made), *base]) == 0
        assert "for 4 queries; 8 calls" in capsys.readouterr().err
        assert main(["nuggets", "assign", str(made), *RUNS, "-o", str(out), "--score", *base]) == 0
    sets = [json.loads(x) for x in made.read_text().splitlines()]
    assert [s["qid"] for s in sets] == ["t1", "t2", "t3", "t4"]
    assert all(n["importance"] in ("vital", "okay") and n["sources"] for s in sets for n in s["nuggets"])
    assert "run_c" in capsys.readouterr().out


def test_create_needs_passages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nuggets", "create", "--queries", str(EX / "topics.jsonl"), "-o", "x.jsonl",
                 "--model", "m"]) == 2
    assert "--qrels" in capsys.readouterr().err


@pytest.mark.slow
def test_cite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    labels = tmp_path / "support.jsonl"
    with simulator_thread(latency=0.0) as sim:
        assert main(["nuggets", "cite", *RUNS, "--corpus", str(EX / "passages.jsonl"), "--labels",
                     str(labels), "-f", "json", "--resamples", "100", "--model", "sim", "--base-url",
                     sim.base_url, "--no-cache", "--no-progress"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["runs"][0]["mean"]) == {"citation_precision", "citation_recall"}
    assert len(labels.read_text().splitlines()) == 12
