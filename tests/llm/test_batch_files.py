"""Batch files both ways: the pooled pairs exported as an OpenAI batch input file, run by a
batch runner of one's own, and its output imported as judgments (checked, counted, cached)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _llm_fakes import grade_reply

from ragjudge.cli import main
from ragjudge.io import read_qrels

EX = Path(__file__).resolve().parents[2] / "examples"


def _runner(requests: Path, out: Path, *, drop: int = 0, fail: int = 0) -> int:
    """A stand-in for vllm run-batch: one output line per request, the grade from the passage
    length; the first ``drop`` requests get no line, the next ``fail`` an error line."""
    lines = []
    reqs = [json.loads(x) for x in requests.read_text(encoding="utf-8").splitlines()]
    for i, req in enumerate(reqs):
        assert req["url"] == "/v1/chat/completions" and req["body"]["model"] == "judge-model"
        if i < drop:
            continue
        if i < drop + fail:
            lines.append({"custom_id": req["custom_id"], "response": {"status_code": 500, "body": {}},
                          "error": {"message": "engine crashed"}})
            continue
        body = grade_reply(len(req["body"]["messages"][-1]["content"]) % 4)
        lines.append({"custom_id": req["custom_id"], "response": {"status_code": 200, "body": body}})
    out.write_text("".join(json.dumps(x) + "\n" for x in reversed(lines)), encoding="utf-8")
    return len(reqs)


def _args(tmp: Path, *extra: str) -> list[str]:
    return ["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
            "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "2", "--model", "judge-model",
            "--base-url", "http://127.0.0.1:9/v1", "--cache", str(tmp / "c.sqlite"), "--no-progress", *extra]


def test_export_run_elsewhere_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req, res = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    assert main(_args(tmp_path, "--export-batch", str(req))) == 0
    assert "wrote 120 requests" in capsys.readouterr().err
    assert _runner(req, res, drop=3, fail=2) == 120
    out = tmp_path / "q.txt"
    code = main(_args(tmp_path, "--import-batch", str(res), "-o", str(out), "--judgments",
                      str(tmp_path / "j.jsonl")))
    err = capsys.readouterr().err
    assert code == 0 and len(read_qrels(out)) == 115
    assert "5 judgments failed" in err and "other: 3, retries exhausted: 2" in err
    rows = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert sum(r["error"] is None for r in rows) == 115
    assert sorted(r["error"] for r in rows if r["error"]) == ["batch: engine crashed"] * 2 + ["not in the batch results"] * 3
    # Cached now: exporting again asks only for the five that failed; importing again pays nothing.
    assert main(_args(tmp_path, "--export-batch", str(req))) == 0
    assert "wrote 5 requests" in capsys.readouterr().err and len(req.read_text().splitlines()) == 5


def test_import_needs_no_key_and_bad_results_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert main(_args(tmp_path, "--import-batch", str(bad), "-o", str(tmp_path / "q.txt"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl:1: not JSON" in err


def _exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    req, res = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    assert main(_args(tmp_path, "--export-batch", str(req))) == 0
    _runner(req, res)
    capsys.readouterr()
    return req, res


def test_results_of_another_export_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, res = _exported(tmp_path, capsys)
    lines = res.read_text().splitlines()
    stray = json.loads(lines[0])
    stray["custom_id"] = "f" * 64
    res.write_text("\n".join(lines + [json.dumps(stray)]) + "\n")
    assert main(_args(tmp_path, "--import-batch", str(res), "-o", str(tmp_path / "q.txt"))) == 0
    assert f"{res}: 1 of 121 results answer no request of this command" in capsys.readouterr().err
    # Only results of another export (here: another depth): one line, nothing judged.
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({**json.loads(x), "custom_id": f"{i:064x}"}) + "\n"
                             for i, x in enumerate(lines)))
    assert main(_args(tmp_path / "fresh", "--import-batch", str(other), "-o", str(tmp_path / "q2.txt"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none of the 120 results answers a request of this command" in err


@pytest.mark.parametrize("text, why", [
    ("", "no batch results in the file(s)"),  # was: every pair failed, "other", exit 3
    ('{"custom_id": 5, "response": null}\n', ':1: custom_id: not a string: 5'),  # was "missing"
    ('[{"custom_id": "x"}]\n', ":1: not a result object (a JSON list)"),
])
def test_an_empty_or_odd_result_file_is_one_line(tmp_path: Path, text: str, why: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "results.jsonl"
    res.write_text(text)
    assert main(_args(tmp_path, "--import-batch", str(res), "-o", str(tmp_path / "q.txt"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err, err


def test_import_batch_and_batch_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, res = _exported(tmp_path, capsys)
    assert main(_args(tmp_path, "--import-batch", str(res), "--batch", "-o", str(tmp_path / "q.txt"))) == 2
    assert "--import-batch: " in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--batch"], ["--export-batch", "{tmp}/x.jsonl"]])
def test_batch_flags_and_the_ray_engine_are_refused_together(tmp_path: Path, flag: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # --batch --engine ray judged through neither: one flag was dropped without a word.
    flag = [f.format(tmp=tmp_path) for f in flag]
    assert main(_args(tmp_path, *flag, "--engine", "ray", "-o", str(tmp_path / "q.txt"))) == 2
    assert "--engine: " in capsys.readouterr().err
