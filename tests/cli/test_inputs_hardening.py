"""Odd inputs end as a one-line error (exit 2) or are read correctly; none hangs or traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragjudge import evaluate, read_qrels, read_run
from ragjudge.cli import main
from ragjudge.errors import InputError
from ragjudge.io import streams
from ragjudge.stats import bootstrap_cis

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "examples"
QRELS = "q1 0 d1 1\nq1 0 d2 1\nq2 0 d3 1\n"
RUN = "q1 Q0 d1 1 3.0 r\nq1 Q0 d2 2 2.0 r\nq2 Q0 d3 1 1.0 r\n"


@pytest.mark.parametrize("eol", ["\r", "\r\n"], ids=["cr", "crlf"])
def test_other_line_endings_read_as_line_breaks(tmp_path: Path, eol: str) -> None:
    (tmp_path / "q").write_bytes(QRELS.replace("\n", eol).encode())
    (tmp_path / "r").write_bytes(RUN.replace("\n", eol).encode())
    (tmp_path / "q_lf").write_text(QRELS)
    (tmp_path / "r_lf").write_text(RUN)
    got = evaluate(read_qrels(tmp_path / "q"), read_run(tmp_path / "r"), ["map", "ndcg"]).mean
    want = evaluate(read_qrels(tmp_path / "q_lf"), read_run(tmp_path / "r_lf"), ["map", "ndcg"]).mean
    assert got == want and got["map"] == 1.0
    # Also a "\r" that ends one read and a "\n" that starts the next.
    assert len(read_run(tmp_path / "r")) == 3


def test_in_memory_text_with_cr_line_breaks() -> None:
    from ragjudge.io import parse_run

    assert len(parse_run(RUN.replace("\n", "\r"))) == 3


def test_binary_input_is_not_text(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(b"q1 Q0 d1 1 1.0 r\n" + bytes(range(256)))
    with pytest.raises(InputError) as info:
        read_run(blob)
    assert "not a text file" in str(info.value) and info.value.line == 2


def test_a_line_without_end_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "MAX_LINE", 1 << 16)
    long = tmp_path / "long"
    long.write_bytes(b"q1 Q0 d1 1 1.0 r " * 20_000)  # 340 kB and no line break
    with pytest.raises(InputError) as info:
        read_run(long)
    assert "line too long" in str(info.value)


@pytest.mark.slow  # subprocess
@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_dev_zero_is_refused_at_once() -> None:
    proc = subprocess.run([sys.executable, "-m", "ragjudge", "evaluate", str(EX / "qrels.txt"), "/dev/zero"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "ragjudge: error: /dev/zero:1: not a text file (a NUL byte)"


@pytest.mark.parametrize("extra, field", [
    (["-n", "100000000"], "-n"),
    (["--min-words", "100000"], "--min-words"),
    (["--judge-pool", "MISSING.run"], "MISSING.run"),
])
def test_synth_validates_before_planning(extra: list[str], field: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["synth", "--corpus", str(EX / "corpus.jsonl"), "--model", "m", "--base-url",
                 "http://127.0.0.1:9/v1", "--dry-run", "--no-cache", "-n", "10", *extra])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ragjudge: error: {field}") and "\n" not in err


@pytest.mark.parametrize("probs, why", [
    ({"0": -0.2, "1": 1.2}, "outside [0, 1]"),
    ({"0": 0.2, "1": 0.2}, "sum to 0.4"),
    ({"0": float("nan"), "1": 1.0}, "not a number"),
])
def test_soft_labels_must_be_distributions(tmp_path: Path, probs: dict[str, object], why: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    good = {"qid": "q1", "docid": "d1", "grade": 1, "probs": {"0": 0.25, "1": 0.75}, "error": None}
    bad = {**good, "docid": "d2", "probs": probs}
    soft = tmp_path / "j.jsonl"
    soft.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    (tmp_path / "r").write_text(RUN)
    code = main(["evaluate", "none", str(tmp_path / "r"), "--soft", str(soft), "-m", "p@2"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{soft}:2" in err and "probs" in err and why in err


def test_fuse_refuses_a_name_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = sorted(str(p) for p in (EX / "runs").glob("*.run"))[:2]
    assert main(["fuse", *runs, "--name", "a b", "-o", str(tmp_path / "f.run")]) == 2
    assert "--name" in capsys.readouterr().err
    assert not (tmp_path / "f.run").exists()


def test_a_null_sample_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = tmp_path / "s.jsonl"
    s.write_text(json.dumps({"id": None, "user_input": "q", "retrieved_contexts": ["a"],
                             "response": "r"}) + "\n")
    assert main(["rag", str(s), "-m", "hit@1"]) == 2
    assert "sample id is null" in capsys.readouterr().err


def test_a_negative_seed_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    runs = sorted(str(p) for p in (EX / "runs").glob("*.run"))
    assert main(["evaluate", str(EX / "qrels.txt"), *runs, "--seed", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "ragjudge: error: seed: must be a non-negative integer, got -1"


def test_resamples_beyond_memory_are_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import ragjudge.stats as stats

    monkeypatch.setattr(stats, "_available_memory", lambda: 1 << 30)
    runs = sorted(str(p) for p in (EX / "runs").glob("*.run"))
    assert main(["compare", str(EX / "qrels.txt"), *runs, "--resamples", "2000000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragjudge: error: resamples: 2000000000 bootstrap resamples") and "\n" not in err
    # Within memory, the same call works.
    assert bootstrap_cis([[0.1, 0.2, 0.3]], n_resamples=1000)[0][0] <= 0.2
