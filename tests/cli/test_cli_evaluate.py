from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ragjudge.cli import main

CONFORMANCE = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "trec_eval"

QRELS = "q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 2\nq2 0 d4 1\nq3 0 d5 1\n"
# q3 missing from the runs; q9 only in the runs.
RUN_A = "q1 Q0 d1 1 3.0 a\nq1 Q0 d2 2 2.0 a\nq2 Q0 d8 1 1.0 a\nq2 Q0 d4 2 0.5 a\nq9 Q0 d1 1 1 a\n"
RUN_B = "q1 Q0 d3 1 3.0 b\nq1 Q0 d1 2 2.0 b\nq2 Q0 d4 1 1.0 b\nq3 Q0 d5 1 1.0 b\n"


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name, text in (("qrels", QRELS), ("a", RUN_A), ("b", RUN_B)):
        p = tmp_path / (f"{name}.run" if name != "qrels" else "qrels.txt")
        p.write_text(text)
        paths[name] = str(p)
    return paths


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _bad(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# ----------------------------------------------------------------------------- output
def test_single_run_table(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "P_1,mrr")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["run", "P_1", "mrr"]
    assert lines[2].split() == ["a", "0.3333", "0.5000"]
    assert "1 qrels queries missing from the run" in out and "1 run-only queries ignored" in out


def test_default_metrics(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"])
    assert code == 0
    assert out.splitlines()[0].split() == ["run", "map", "mrr", "ndcg@10", "p@10", "recall@100"]


def test_skip_missing_and_rel(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "P_1", "--skip-missing",
                        "-f", "json")
    data = json.loads(out)
    assert code == 0 and data["mean"]["P_1"] == 0.5 and data["meta"]["num_q"] == 2
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "P_1", "--rel", "2",
                        "-f", "json")
    assert json.loads(out)["mean"]["P_1"] == 0.0


def test_each_metric_name_is_parsed_once(files: dict[str, str], capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """-m ndcg@10 is parsed by the command, once; the Measure travels down to the kernels."""
    from ragjudge.measures import grammar

    seen: list[str] = []
    real = grammar._parse
    monkeypatch.setattr(grammar, "_parse", lambda spec, rel: seen.append(spec) or real(spec, rel))
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "ndcg@10,P@5",
                        "-f", "json")
    assert code == 0 and list(json.loads(out)["mean"]) == ["ndcg@10", "P@5"]
    assert sorted(seen) == ["P@5", "ndcg@10"]
    seen.clear()
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], files["b"],
                        "-m", "ndcg@10,P@5", "--resamples", "10", "-f", "json")
    assert code == 0 and sorted(seen) == ["P@5", "ndcg@10"]


def test_rel_reaches_each_spec_once(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    # P(rel=1)@1 keeps its own threshold under --rel 2 (it is not parsed a second time with it).
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "P(rel=1)@1,P_1",
                        "--rel", "2", "-f", "json")
    assert code == 0 and json.loads(out)["mean"] == {"P(rel=1)@1": 1 / 3, "P_1": 0.0}


def test_json_shape(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "map", "-m", "ndcg@3",
                        "--format", "json")
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"run", "mean", "per_query", "meta"}
    assert data["run"] == "a" and list(data["mean"]) == ["map", "ndcg@3"]
    assert list(data["per_query"]) == ["q1", "q2", "q3"]
    assert data["meta"]["missing_queries"] == ["q3"] and data["meta"]["ignored_queries"] == ["q9"]


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown", "latex", "html", "trec"])
def test_every_format(files: dict[str, str], capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "map", "-f", fmt)
    assert code == 0 and "map" in out
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert rows[0] == ["run", "map"] and rows[1][0] == "a"
    if fmt == "markdown":
        assert out.startswith("| run | map |")
    if fmt == "latex":
        assert "\\toprule" in out
    if fmt == "html":
        assert out.startswith("<table")
    if fmt == "trec":
        assert out.splitlines() == ["runid                 \tall\ta",
                                    "num_q                 \tall\t3",
                                    out.splitlines()[2]]
        assert out.splitlines()[2].startswith("map")


def test_per_query_trec(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "P_1,mrr", "-q",
                        "-f", "trec")
    rows = [ln.split("\t") for ln in out.splitlines()]
    assert code == 0
    assert [(r[0].strip(), r[1], r[2]) for r in rows[:2]] == [("P_1", "q1", "1.0000"),
                                                             ("mrr", "q1", "1.0000")]
    assert ("mrr", "q3", "0.0000") in [(r[0].strip(), r[1], r[2]) for r in rows]
    assert rows[-1][1] == "all"


def test_per_query_table(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "mrr", "-q")
    lines = out.splitlines()
    assert lines[0].split() == ["run", "qid", "mrr"]
    assert [ln.split()[1] for ln in lines[2:6]] == ["q1", "q2", "q3", "all"]


def test_output_file(files: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "map", "-f", "json",
                        "-o", str(target))
    assert code == 0 and out == ""
    assert json.loads(target.read_text())["run"] == "a"
    code, _, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "map",
                        "-o", str(tmp_path / "no" / "such" / "dir.txt"))
    assert code == 2 and "cannot write output" in err


def test_trec_eval_conformance_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    if not (CONFORMANCE / "qrels.test").exists():
        pytest.skip(f"trec_eval conformance data not found at {CONFORMANCE}")
    code, out, _ = _run(capsys, "evaluate", str(CONFORMANCE / "qrels.test"),
                        str(CONFORMANCE / "results.test"), "-m", "map,P_10,num_rel_ret", "-f", "trec",
                        "-q")
    assert code == 0
    expected = {ln for ln in (CONFORMANCE / "out.test.aq").read_text().splitlines()
                if ln.split("\t")[0].strip() in ("map", "P_10", "num_rel_ret", "num_q")}
    got = set(out.splitlines())
    assert expected <= got


# ----------------------------------------------------------------------------- several runs
def test_several_runs_are_compared(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], files["b"], "-m", "map,mrr",
                        "--resamples", "500", "--seed", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["run", "metric", "mean"]
    assert "baseline" in lines[2].split() and lines[2].split()[0] == "a"  # + d_z, w/t/l columns
    assert lines[0].split()[-4:] == ["d_z", "wins", "ties", "losses"]
    assert "Holm" in out
    code, out, _ = _run(capsys, "compare", files["qrels"], files["a"], files["b"], "-m", "map",
                        "--baseline", "b", "--test", "t", "-f", "json")
    data = json.loads(out)
    assert code == 0
    assert [r["run"] for r in data["runs"]] == ["b", "a"]
    (c,) = data["comparisons"]
    assert c["baseline"] == "b" and c["run"] == "a" and c["test"] == "t"
    assert data["meta"]["test"] == "t" and "per_query" in data["runs"][0]


def test_same_seed_same_output(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", files["qrels"], files["a"], files["b"], "-m", "map", "--resamples", "300",
            "-f", "csv"]
    _, first, _ = _run(capsys, *argv, "--seed", "7")
    _, second, _ = _run(capsys, *argv, "--seed", "7")
    assert first == second


def test_no_stats_lists_runs(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], files["b"], "-m", "map",
                        "--no-stats")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["run", "map"]
    assert [ln.split()[0] for ln in lines[2:4]] == ["a", "b"]
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], files["b"], "-m", "map",
                        "--no-stats", "-f", "json")
    assert [d["run"] for d in json.loads(out)] == ["a", "b"]


def test_runs_with_the_same_stem_get_distinct_names(
    tmp_path: Path, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "x"
    other.mkdir()
    (other / "a.run").write_text(RUN_B)
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], str(other / "a.run"),
                        "-m", "map", "--no-stats", "-f", "json")
    names = [d["run"] for d in json.loads(out)]
    assert code == 0 and len(set(names)) == 2


# ----------------------------------------------------------------------------- CI gate
def test_fail_under(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "mrr",
                          "--fail-under", "mrr=0.4")
    assert code == 0 and err == ""
    code, out, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "mrr",
                          "--fail-under", "mrr=0.6")
    assert code == 1 and "mrr" in out
    assert "fail-under: run a: mrr = 0.5000 < 0.6" in err
    # A gate on a metric not requested with -m is evaluated too, matched by canonical form.
    code, out, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "p@1",
                          "--fail-under", "P_1=0.5", "--fail-under", "rbp(p=0.5)@2=0.0")
    assert code == 1 and "P_1 = 0.3333 < 0.5" in err and "rbp" in out
    # With several runs every run is checked.
    code, _, err = _run(capsys, "evaluate", files["qrels"], files["a"], files["b"], "-m", "mrr",
                        "--no-stats", "--fail-under", "mrr=0.6")
    assert code == 1 and "run a:" in err and "run b:" not in err


# ----------------------------------------------------------------------------- bad input -> 2
@pytest.mark.parametrize(
    "argv_tail,message",
    [
        (["-m", "nosuchmetric"], "unknown metric"),
        (["-m", "ndcg@0"], "positive integer"),
        (["-m", "map(foo=1)"], "unknown parameter"),
        (["-m", "ndcg(gain=cubic)@10"], "bad value"),
        (["-m", "map", "--rel", "0"], ">= 1"),
        (["-m", "map", "--fail-under", "map"], "METRIC=VALUE"),
        (["-m", "map", "--fail-under", "map=high"], "not a number"),
        (["-m", "map", "--baseline", "nope"], "baseline"),
        (["-m", "map", "--resamples", "0"], "resamples"),
    ],
)
def test_bad_arguments_exit_2(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], argv_tail: list[str], message: str
) -> None:
    code, out, err = _run(capsys, "evaluate", files["qrels"], files["a"], *argv_tail)
    assert code == 2 and out == ""
    assert err.startswith("ragjudge: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "run_text,message",
    [
        ("q1 Q0 d1\n", "columns"),
        ("q1 Q0 d1 1 nan t\n", "finite"),
        ("", "empty"),
        ("q1 Q0 d1 1 1.0 t\nq1 Q0 d1 2 0.5 t\n", "duplicate"),
    ],
)
def test_bad_run_files_exit_2(
    tmp_path: Path, files: dict[str, str], capsys: pytest.CaptureFixture[str], run_text: str,
    message: str
) -> None:
    bad = _bad(tmp_path, "bad.run", run_text)
    code, out, err = _run(capsys, "evaluate", files["qrels"], bad, "-m", "map")
    assert code == 2 and out == ""
    assert err.startswith("ragjudge: error: ") and "bad.run" in err and message in err
    assert len(err.strip().splitlines()) == 1


def test_dedup_first_accepts_duplicates(
    tmp_path: Path, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _bad(tmp_path, "dup.run", "q1 Q0 d1 1 1.0 t\nq1 Q0 d1 2 0.5 t\n")
    code, _, _ = _run(capsys, "evaluate", files["qrels"], bad, "-m", "map", "--dedup", "first")
    assert code == 0


def test_missing_and_empty_files_exit_2(
    tmp_path: Path, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "evaluate", str(tmp_path / "nope.txt"), files["a"], "-m", "map")
    assert code == 2 and "nope.txt: file not found" in err
    code, _, err = _run(capsys, "evaluate", files["qrels"], str(tmp_path / "nope.run"), "-m", "map")
    assert code == 2 and "nope.run: file not found" in err
    empty = _bad(tmp_path, "empty.qrels", "")
    code, _, err = _run(capsys, "evaluate", empty, files["a"], "-m", "map")
    assert code == 2 and "empty.qrels" in err


def test_disjoint_query_ids_warn(
    tmp_path: Path, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    other = _bad(tmp_path, "other.run", "1 Q0 d1 1 1.0 t\n")
    code, out, err = _run(capsys, "evaluate", files["qrels"], other, "-m", "map")
    assert code == 0 and "0.0000" in out
    assert "warning: no query of run other is in the qrels" in err
    code, _, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "map")
    assert "warning" not in err


def test_compare_needs_two_runs(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "compare", files["qrels"], files["a"], "-m", "map")
    assert code == 2 and "at least 2 runs" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate"],
        ["evaluate", "q.txt"],
        ["evaluate", "q.txt", "r.txt", "--format", "xml"],
        ["evaluate", "q.txt", "r.txt", "--rel", "two"],
        ["evaluate", "q.txt", "r.txt", "--test", "wilcoxon"],
        ["evaluate", "q.txt", "r.txt", "--dedup", "last"],
    ],
)
def test_argparse_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_judged_only_and_depth(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    # q2 of run a: d8 (unjudged) then d4 (relevant) -- with -J, d4 moves up to rank 1
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "mrr", "-q", "-f",
                        "json")
    assert code == 0 and json.loads(out)["per_query"]["q2"]["mrr"] == 0.5
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "mrr,num_ret", "-J",
                        "-q", "-f", "json")
    got = json.loads(out)
    assert code == 0 and got["per_query"]["q2"] == {"mrr": 1.0, "num_ret": 1.0}
    assert got["meta"]["judged_only"] is True and got["meta"]["max_depth"] is None
    code, out, _ = _run(capsys, "evaluate", files["qrels"], files["a"], "-m", "num_ret",
                        "--max-depth", "1", "-f", "json")
    assert code == 0 and json.loads(out)["mean"]["num_ret"] == 2.0  # q1 and q2 cut to 1 each
    code, _, err = _run(capsys, "evaluate", files["qrels"], files["a"], "-M", "0")
    assert code == 2 and "max_depth" in err


class _Pipes:
    """``/dev/fd/N`` paths fed by threads, as bash's ``<(cat run)`` gives a command."""

    def __init__(self) -> None:
        self.threads: list = []
        self.fds: list[int] = []

    def __call__(self, text: str) -> str:
        import os
        import threading

        r, w = os.pipe()
        self.fds.append(r)

        def feed() -> None:
            with os.fdopen(w, "wb") as f:
                f.write(text.encode())

        t = threading.Thread(target=feed, daemon=True)
        t.start()
        self.threads.append(t)
        return f"/dev/fd/{r}"

    def close(self) -> None:
        import os

        for t in self.threads:
            t.join(5)
        for r in self.fds:
            try:
                os.close(r)
            except OSError:
                pass


@pytest.fixture()
def pipes():
    import sys

    if sys.platform != "linux":
        pytest.skip("/dev/fd paths of pipes: Linux")
    p = _Pipes()
    yield p
    p.close()


def test_runs_through_process_substitution_are_named_by_their_tag(
        files: dict[str, str], pipes: _Pipes, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "compare", files["qrels"], pipes(RUN_A),
                          pipes(RUN_B.replace(" b\n", " bee\n")), "-m", "P_1", "--resamples", "50",
                          "--baseline", "bee", "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [r["run"] for r in data["runs"]] == ["bee", "a"]
    assert data["comparisons"][0]["baseline"] == "bee"


def test_pipe_names_stay_unique_and_untagged_runs_keep_the_fd_name(
        files: dict[str, str], pipes: _Pipes, capsys: pytest.CaptureFixture[str]) -> None:
    same = pipes(RUN_A)
    second = pipes(RUN_A)
    msmarco = pipes("q1\td1\t1\nq2\td4\t1\n")  # no tag column
    code, out, err = _run(capsys, "evaluate", files["qrels"], same, second, msmarco, "-m", "P_1",
                          "--no-stats", "-f", "json")
    assert code == 0, err
    names = [r["run"] for r in json.loads(out)]
    assert names == ["a", f"a-{Path(second).name}", Path(msmarco).name]


def test_read_run_names_a_pipe_by_its_tag(pipes: _Pipes) -> None:
    from ragjudge import read_run
    from ragjudge.io.trec import run_tag

    assert read_run(pipes("# comment\n" + RUN_B)).name == "b"
    assert read_run(pipes(RUN_B), name="given").name == "given"
    assert run_tag(b"q1 Q0 d1 1 3.0 tag-x\n") == "tag-x"
    assert run_tag(b"q1 Q0 d1 1 3.0 cut-sho") is None  # an incomplete line says nothing
