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


# ----------------------------------------------------------------------------- malformed inputs, item by item
def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("ragjudge: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_run_line_with_a_seventh_column_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q").write_text(QRELS)
    (tmp_path / "r").write_text(RUN.replace("q2 Q0 d3 1 1.0 r", "q2 Q0 d3 1 1.0 r 0.5"))
    assert main(["evaluate", str(tmp_path / "q"), str(tmp_path / "r"), "-m", "map"]) == 0
    err = capsys.readouterr().err
    # Read as trec_eval reads it, and said once, naming the first such line.
    assert err.strip() == (f"ragjudge: warning: {tmp_path / 'r'}:3: 1 line(s) with more than 6 columns; "
                           "the text after column 6 is ignored, as trec_eval does")


def test_a_nan_sample_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = tmp_path / "s.jsonl"
    good = json.dumps({"id": "a", "user_input": "q", "retrieved_contexts": ["a"], "response": "r"})
    s.write_text(good + "\n" + good.replace('"a"', "NaN", 1) + "\n")
    assert main(["rag", str(s), "-m", "hit@1"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{s}:2: id:" in line and "nan" in line


def _judgment(docid: str, grade: int, probs: dict[str, float] | None = None, prompt: str = "relevance") -> str:
    return json.dumps({"qid": "q1", "docid": docid, "grade": grade, "probs": probs, "error": None,
                       "prompt_id": prompt, "prompt_version": "1"}) + "\n"


@pytest.mark.parametrize("lines, where", [
    # outside the scale of the prompt the record names
    ([_judgment("d1", 1), _judgment("d2", 9)], ":2: grade: grade 9 is outside the scale [0, 1, 2, 3]"),
    ([_judgment("d1", 1, {"0": 0.5, "9": 0.5}, prompt="relevance")], ":1: probs: grade 9 is outside"),
    # a foreign prompt: its own distribution rules the grade out
    ([_judgment("d1", 9, {"0": 0.25, "1": 0.75}, prompt="mine")], ":1: grade: grade 9 has no probability"),
    # the same pair twice with different labels
    ([_judgment("d1", 1), _judgment("d2", 0), _judgment("d1", 3)], ":3: docid: query 'q1', document 'd1' is judged on line 1"),
])
def test_soft_labels_off_scale_or_twice_are_refused(tmp_path: Path, lines: list[str], where: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    soft = tmp_path / "j.jsonl"
    soft.write_text("".join(lines))
    (tmp_path / "r").write_text(RUN)
    assert main(["evaluate", "none", str(tmp_path / "r"), "--soft", str(soft), "-m", "p@2"]) == 2
    assert f"{soft}{where}" in _one_line(capsys.readouterr().err)


def test_the_same_soft_label_twice_counts_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    once.write_text(_judgment("d1", 1, {"0": 0.5, "1": 0.5}) + _judgment("d2", 0))
    twice.write_text(_judgment("d1", 1, {"0": 0.5, "1": 0.5}) + _judgment("d2", 0) + _judgment("d1", 1, {"0": 0.5, "1": 0.5}))
    (tmp_path / "r").write_text(RUN)
    outs = []
    for f in (once, twice):
        assert main(["evaluate", "none", str(tmp_path / "r"), "--soft", str(f), "-m", "p@2", "-f", "json"]) == 0
        outs.append(json.loads(capsys.readouterr().out)["mean"])
    assert outs[0] == outs[1]


def test_a_pool_label_outside_the_judge_scale_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    pool = tmp_path / "pool.qrels"
    pool.write_text("q01 0 volc-01 2\nq01 0 volc-02 9\n")
    code = main(["evaluate", "none", str(EX / "runs" / "bm25_raw.run"), "--judge", "m", "--queries",
                 str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"), "--base-url",
                 "http://127.0.0.1:9/v1", "--no-cache", "--no-progress", "--pool", str(pool), "-m", "p@2"])
    assert code == 2
    assert f"{pool}:2: grade: grade 9 of query 'q01', document 'volc-02' is outside the judge's scale" \
        in _one_line(capsys.readouterr().err)


def test_an_endpoint_option_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                 "--run", str(EX / "runs" / "bm25_raw.run"), "--model", "m", "--dry-run", "--no-cache",
                 "--endpoint", "http://127.0.0.1:9/v1,rpm=5,rpm=7"])
    assert code == 2
    assert "endpoint: rpm is given twice in 'http://127.0.0.1:9/v1,rpm=5,rpm=7'" in _one_line(capsys.readouterr().err)


def _batch_args(tmp: Path, *extra: str) -> list[str]:
    return ["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
            "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "1", "--model", "judge-model",
            "--base-url", "http://127.0.0.1:9/v1", "--cache", str(tmp / "c.sqlite"), "--no-progress",
            "-o", str(tmp / "q.txt"), *extra]


def _batch_lines(tmp: Path) -> list[dict[str, object]]:
    from _llm_fakes import grade_reply

    req = tmp / "req.jsonl"
    assert main(_batch_args(tmp, "--export-batch", str(req))) == 0
    return [{"custom_id": json.loads(x)["custom_id"], "response": {"status_code": 200, "body": grade_reply(2)}}
            for x in req.read_text().splitlines()]


def test_a_custom_id_answered_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from _llm_fakes import grade_reply

    lines = _batch_lines(tmp_path)
    again = {"custom_id": lines[0]["custom_id"], "response": {"status_code": 200, "body": grade_reply(0)}}
    res = tmp_path / "res.jsonl"
    res.write_text("".join(json.dumps(x) + "\n" for x in [*lines, again]))
    capsys.readouterr()
    assert main(_batch_args(tmp_path, "--import-batch", str(res))) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{res}:{len(lines) + 1}: custom_id:" in line and "a second time" in line
    assert not (tmp_path / "q.txt").exists()
    # Answered in the output file and again in a second one: refused too.
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text("".join(json.dumps(x) + "\n" for x in lines))
    two.write_text(json.dumps(again) + "\n")
    assert main(_batch_args(tmp_path, "--import-batch", str(one), str(two))) == 2
    assert f"{two}:1: custom_id:" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("kind", ["latin1", "gzip", "gzip-latin1"])
def test_import_batch_of_odd_bytes(tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    lines = _batch_lines(tmp_path)
    capsys.readouterr()
    text = "".join(json.dumps(x) + "\n" for x in lines).encode()
    res = tmp_path / "res.jsonl"
    if kind == "gzip":  # a gzip file is read as such (its magic bytes), whatever its name
        res.write_bytes(gzip.compress(text))
        assert main(_batch_args(tmp_path, "--import-batch", str(res))) == 0
        assert len(read_qrels(tmp_path / "q.txt")) == len(lines)
        return
    bad = text + b'{"custom_id": "caf\xe9"}\n'
    res.write_bytes(gzip.compress(bad) if kind == "gzip-latin1" else bad)
    assert main(_batch_args(tmp_path, "--import-batch", str(res))) == 2
    assert f"{res}:{len(lines) + 1}: invalid UTF-8" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("role", ["", "result="])
@pytest.mark.parametrize("text, where", [
    ('{"runs": [{"run": "a", "mean": {"map": 0.1}}\n', ":2: json: not valid JSON"),
    ('{"runs": [{"run": "a", "mean": 5}]}', ": result: not a result"),
])
def test_ui_with_a_broken_result_json(tmp_path: Path, role: str, text: str, where: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.server.ui.workspace import Workspace

    res = tmp_path / "res.json"
    res.write_text(text)
    if not role and where.startswith(": result"):
        where = ": JSON that is neither"  # the sniffer names what it found
    if not role and "json:" in where:
        where = ":1: json: not valid JSON"  # the sniffer reads a broken document's first line
    with pytest.raises(InputError) as info:
        Workspace([role + str(res)])
    assert str(info.value).startswith(f"{res}{where}"), str(info.value)


def test_a_soft_judgments_file_with_a_bom_or_gzip_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    text = _judgment("d1", 1, {"0": 0.5, "1": 0.5}) + _judgment("d2", 0)
    (tmp_path / "r").write_text(RUN)
    (tmp_path / "plain.jsonl").write_text(text)
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    (tmp_path / "z.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    means = []
    for name in ("plain.jsonl", "bom.jsonl", "z.jsonl.gz"):
        assert main(["evaluate", "none", str(tmp_path / "r"), "--soft", str(tmp_path / name), "-m", "p@2",
                     "-f", "json"]) == 0, capsys.readouterr().err
        means.append(json.loads(capsys.readouterr().out)["mean"])
    assert means[0] == means[1] == means[2]
    (tmp_path / "bad.jsonl").write_bytes(text.encode() + b'{"qid": "caf\xe9"}\n')
    assert main(["evaluate", "none", str(tmp_path / "r"), "--soft", str(tmp_path / "bad.jsonl"), "-m", "p@2"]) == 2
    assert f"{tmp_path / 'bad.jsonl'}:3: invalid UTF-8" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("data", [b'{"m": {"input": 1, "output": 2}}'.replace(b"m", b"caf\xe9"),
                                  '{"m": 1}'.encode("utf-16")])
def test_a_prices_file_that_is_not_utf8_is_one_line(tmp_path: Path, data: bytes,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.json"
    prices.write_bytes(data)
    code = main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                 "--run", str(EX / "runs" / "bm25_raw.run"), "--model", "m", "--dry-run", "--no-cache",
                 "--prices", str(prices)])
    assert code == 2
    assert f"{prices}:1: invalid UTF-8" in _one_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- an outside probe's finds
@pytest.mark.parametrize("edit, where", [
    ({"qid": None}, ":2: qid: expected a non-empty id, got null"),  # was read as a query named "None"
    ({"docid": {"a": 1}}, ':2: docid: expected a non-empty id, got {"a": 1}'),
    ({"qid": " "}, ':2: qid: expected a non-empty id, got " "'),
    ({"probs": {"high": 1.0}}, ":2: probs: grade 'high' is not an integer"),
])
def test_a_soft_label_without_ids_is_refused(tmp_path: Path, edit: dict[str, object], where: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    soft = tmp_path / "j.jsonl"
    bad = {**json.loads(_judgment("d2", 1)), **edit}
    soft.write_text(_judgment("d1", 1) + json.dumps(bad) + "\n")
    (tmp_path / "r").write_text(RUN)
    assert main(["evaluate", "none", str(tmp_path / "r"), "--soft", str(soft), "-m", "p@2"]) == 2
    assert f"{soft}{where}" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("flag", ["-o", "--span-scores"])
def test_rag_output_that_is_a_folder_is_one_line_before_any_work(tmp_path: Path, flag: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # It was a traceback after the metrics (and their LLM calls) were done.
    samples = EX / "traces" / "langfuse.jsonl" if flag == "--span-scores" else EX / "rag_samples.jsonl"
    assert main(["rag", str(samples), "-m", "hit_rate", flag, str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("flag, url, why", [
    ("--base-url", "http://127.0.0.1:99999/v1", "not a URL (Port out of range 0-65535)"),
    ("--base-url", "ftp://127.0.0.1/v1", "not an http:// or https:// URL with a host"),
    ("--base-url", "localhost:8000/v1", "not an http:// or https:// URL with a host"),
    ("--endpoint", "http://127.0.0.1:99999/v1", "not a URL (Port out of range 0-65535)"),
    ("--endpoint", "http:///v1", "not an http:// or https:// URL with a host"),
])
def test_an_endpoint_url_that_cannot_be_called_is_one_line(flag: str, url: str, why: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # A port of 99999 failed every pair as a "malformed reply" (exit 3) after the run started.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    code = main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                 "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "1", "--model", "m", "--no-cache",
                 "-o", str(tmp_path / "o.qrels"), "--no-progress", flag, url])
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"ragjudge: error: {flag}: ") and why in line


def test_a_pool_with_bad_utf8_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    pool = tmp_path / "pool.qrels"
    pool.write_bytes(b"q01 0 volc-01 2\nq01 0 volc-\xff 1\n")
    code = main(["evaluate", "none", str(EX / "runs" / "bm25_raw.run"), "--judge", "m", "--queries",
                 str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"), "--base-url",
                 "http://127.0.0.1:9/v1", "--no-cache", "--no-progress", "--pool", str(pool), "-m", "p@2"])
    assert code == 2
    assert _one_line(capsys.readouterr().err) == f"ragjudge: error: {pool}:2: invalid UTF-8"


def test_synth_output_in_the_way_is_one_line_before_any_call(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # It was found after the generation calls were paid ("cannot write output: File exists").
    blocker = tmp_path / "out"
    blocker.write_text("a file where the folder should be")
    code = main(["synth", "--corpus", str(EX / "corpus.jsonl"), "--model", "m", "--base-url",
                 "http://127.0.0.1:9/v1", "--no-cache", "-n", "2", "-o", str(blocker), "--no-progress"])
    assert code == 2
    assert _one_line(capsys.readouterr().err) == f"ragjudge: error: {blocker}: is a file; give a folder for the outputs"


@pytest.mark.parametrize("command", [
    ["rag", str(EX / "rag_samples.jsonl"), "-m", "hit_rate"],
    ["evaluate", str(EX / "qrels.txt"), str(EX / "runs" / "bm25_raw.run"), "-m", "map"],
])
@pytest.mark.parametrize("where", ["folder", "missing"])
def test_a_junit_path_that_cannot_be_written_is_refused_first(command: list[str], where: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # It was a traceback after the work (IsADirectoryError, FileNotFoundError).
    path = tmp_path if where == "folder" else tmp_path / "no" / "j.xml"
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--junit", str(path), "--fail-under", f"{command[-1]}=0.1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "argument --junit:" in err


@pytest.mark.parametrize("make, kind", [
    (lambda b: __import__("bz2").compress(b), "bzip2-compressed; decompress it first"),
    (lambda b: __import__("lzma").compress(b), "xz-compressed; decompress it first"),
    (lambda b: b"\x28\xb5\x2f\xfd\x04\x00\x00" + b, "zstd-compressed; decompress it first"),
    (lambda b: b"PAR1\x15\x00" + b, "a Parquet file; write it as JSONL first"),
    (lambda b: b"SQLite format 3\x00" + b, "an SQLite database"),
])
def test_a_binary_file_of_a_known_kind_says_what_it_is(tmp_path: Path, make: object, kind: str) -> None:
    f = tmp_path / "qrels.txt"
    f.write_bytes(make(QRELS.encode() * 50))  # type: ignore[operator]
    with pytest.raises(InputError) as info:
        read_qrels(f)
    assert str(info.value).startswith(f"{f}: not a text file: {kind}")


def test_simulate_judge_with_a_negative_seed_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # numpy's ValueError traced.
    assert main(["simulate-judge", str(EX / "qrels.txt"), "--seed", "-3", "-o", str(tmp_path / "o.qrels")]) == 2
    assert _one_line(capsys.readouterr().err) == "ragjudge: error: seed: must be a non-negative integer, got -3"


@pytest.mark.parametrize("text, why", [
    ('{"q1": {"d1": 1e20}}', "grade: grade of query 'q1', document 'd1' is out of range"),  # OverflowError traced
    ('{"q1": {"d1": 100000000000000000000000}}', "grade: grade of query 'q1', document 'd1' is out of range"),
    ('{"q1": {"d1": 1}, "q1": {"d2": 1}}', "json: 'q1' is given twice in one JSON object"),  # the first q1 was lost
    ('{"q1": {"d1": 3, "d1": 0}}', "json: 'd1' is given twice in one JSON object"),  # the 3 was lost
])
def test_json_qrels_with_a_huge_grade_or_a_key_twice_are_refused(tmp_path: Path, text: str, why: str) -> None:
    f = tmp_path / "q.json"
    f.write_text(text)
    with pytest.raises(InputError) as info:
        read_qrels(f)
    assert str(info.value).startswith(f"{f}: {why}")


def test_a_json_run_with_a_document_twice_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text('{"q1": {"d1": 1.0, "d2": 0.5, "d1": 0.1}}')
    with pytest.raises(InputError, match="'d1' is given twice in one JSON object"):
        read_run(f)
