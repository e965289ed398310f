"""``ragjudge judge`` end to end: files in, qrels and judgments out, through the real openai
client mocked at the HTTP layer; plus a kill -9 resume test against a loopback server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import respx
from _judge_cli import base_args, files, rule  # noqa: F401 -- the fixture is used by name
from _llm_fakes import BASE, SECRET, URL, error, grade_reply, grader, ok

from ragjudge.cli import main
from ragjudge.io import read_qrels

REPO = Path(__file__).resolve().parents[2]


def test_judge_then_evaluate(httpx2_mock: respx.Router, files: dict[str, Path],
                             capsys: pytest.CaptureFixture[str]) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=grader(rule))
    out, jl = files["dir"] / "llm.qrels", files["dir"] / "judgments.jsonl"
    assert main(base_args(files, "-o", str(out), "--judgments", str(jl))) == 0
    assert route.call_count == 5  # 5 distinct pooled pairs across both runs
    qrels = read_qrels(out)
    assert qrels.to_dict() == {"q1": {"d1": 3, "d2": 1, "d4": 0}, "q2": {"d3": 3, "d4": 0}}
    lines = [json.loads(x) for x in jl.read_text().splitlines()]
    assert len(lines) == 5 and all(x["prompt_id"] == "relevance" and x["prompt_sha"] for x in lines)
    assert all(x["reasoning"] == "Because." and x["error"] is None for x in lines)
    err = capsys.readouterr().err
    assert "judged 5/5 pairs" in err and SECRET not in err
    assert SECRET not in out.read_text() and SECRET not in jl.read_text()
    # The qrels feed `ragjudge evaluate` directly.
    assert main(["evaluate", str(out), str(files["r1"]), "-m", "ndcg@3", "-f", "json"]) == 0
    report = capsys.readouterr().out
    assert "ndcg" in report
    # Rerun: zero calls.
    assert main(base_args(files, "-o", str(out))) == 0
    assert route.call_count == 5
    assert "(5 from cache); 0 calls" in capsys.readouterr().err


def test_fill_keeps_human_labels(httpx2_mock: respx.Router, files: dict[str, Path]) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=grader(rule))
    human = files["dir"] / "human.qrels"
    human.write_text("q1 0 d1 1\nq1 0 d2 2\n")
    out = files["dir"] / "filled.qrels"
    assert main(base_args(files, "--fill", str(human), "-o", str(out))) == 0
    assert route.call_count == 1  # only q1/d4 is a hole; q2 has no human labels
    assert read_qrels(out).to_dict() == {"q1": {"d1": 1, "d2": 2, "d4": 0}}


def test_dry_run_spends_nothing(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # The httpx2_mock fixture's router, built by hand so an uncalled route is the expected outcome.
    with respx.mock(using="httpcore2", assert_all_called=False) as mock:
        route = mock.post(URL).mock(side_effect=grader(rule))
        assert main(base_args(files, "--dry-run")) == 0
    out = capsys.readouterr().out
    assert route.call_count == 0
    assert "5 requests, 0 already cached" in out and "5 calls" in out and "unknown" in out
    # A dry run needs no API key, even for OpenAI itself.
    args = base_args(files, "--dry-run")
    i = args.index("--base-url")
    del args[i:i + 4]  # --base-url URL --api-key-env VAR
    args[args.index("judge-model")] = "gpt-4o-mini"
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "gpt-4o-mini" in out and "$" in out


def test_max_cost_and_prices(httpx2_mock: respx.Router, files: dict[str, Path],
                             capsys: pytest.CaptureFixture[str]) -> None:
    route = httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2, prompt_tokens=1000, completion_tokens=0)))
    prices = files["dir"] / "prices.json"
    prices.write_text(json.dumps({"judge-model": {"input": 1.0, "output": 1.0}}))
    out = files["dir"] / "o.qrels"
    args = base_args(files, "--prices", str(prices), "--max-cost", "0.0035", "--concurrency", "1", "-o", str(out))
    assert main(args) == 4  # cut short by the budget: not a finished result
    err = capsys.readouterr().err
    assert route.call_count == 2 and "stopped by --max-cost 0.0035: 3 of 5 pairs not judged" in err
    assert len(read_qrels(out)) == 2


def test_failures_reported_and_left_out(httpx2_mock: respx.Router, files: dict[str, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # Failing, not down (a server failing every call is declared down and stops the run: see
    # tests/llm/test_llm_health.py).
    route = httpx2_mock.post(URL)
    route.side_effect = [ok(grade_reply(1)), error(503, "down"), error(503, "down"), ok(grade_reply(2)),
                         error(503, "down")]
    out = files["dir"] / "o.qrels"
    # Most calls failed: the qrels are written, a summary says why, the exit status is 3.
    assert main(base_args(files, "--max-attempts", "1", "--concurrency", "1", "-o", str(out))) == 3
    err = capsys.readouterr().err
    assert "3 judgments failed" in err and "retries exhausted: 3" in err
    assert "3 of 5 judgments failed" in err and err.splitlines()[-1].startswith("ragjudge: error:")
    assert len(read_qrels(out)) == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (["--model", ""], "no model given"),
        (["--depth", "0"], "--depth"),
        (["--concurrency", "0"], "--concurrency"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--max-tokens", "-5"], "--max-tokens"),
        (["--no-cache"], "contradict"),
        (["--all-queries"], "only makes sense with --fill"),
        (["--max-cost", "nan"], "--max-cost"),
        (["--max-cost", "-1"], "--max-cost"),
        (["--rpm", "nan"], "--rpm"),
        (["--rpm", "inf"], "--rpm"),
        (["--tpm", "-3"], "--tpm"),
        (["--timeout", "nan"], "--timeout"),
        (["--patience", "nan"], "--patience"),
        (["--patience", "-1"], "--patience"),
        (["--timeout", "inf"], "--timeout"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_bad_flags(files: dict[str, Path], capsys: pytest.CaptureFixture[str], change: list[str],
                   message: str) -> None:
    assert main(base_args(files, *change, "-o", str(files["dir"] / "o.qrels"))) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragjudge: error:") and message in err and err.count("\n") == 1


def test_max_tokens_flag_reaches_the_request(httpx2_mock: respx.Router, files: dict[str, Path]) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=grader(rule))
    jl = files["dir"] / "judgments.jsonl"
    assert main(base_args(files, "--max-tokens", "64", "-o", str(files["dir"] / "o.qrels"),
                          "--judgments", str(jl))) == 0
    assert route.call_count == 5
    assert all(json.loads(c.request.content)["max_tokens"] == 64 for c in route.calls)
    assert all(json.loads(x)["params"]["max_tokens"] == 64 for x in jl.read_text().splitlines())


def test_bad_inputs_are_one_line_errors(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    bad_run = files["dir"] / "bad.trec"
    bad_run.write_text("q1 Q0 missing-doc 1 1.0 x\n")
    args = base_args(files, "-o", str(files["dir"] / "o.qrels"))
    args[args.index(str(files["r2"]))] = str(bad_run)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "missing-doc" in err and "not in the corpus" in err and "bad.trec" in err

    no_text = files["dir"] / "q.tsv"
    no_text.write_text("q1\tcapital of france\n")
    args = base_args(files, "-o", str(files["dir"] / "o.qrels"))
    args[args.index(str(files["q"]))] = str(no_text)
    assert main(args) == 2
    assert "query 'q2' has no text" in capsys.readouterr().err

    args = base_args(files, "-o", str(files["dir"] / "o.qrels"))
    args[args.index(str(files["c"]))] = str(files["dir"] / "nope.jsonl")
    assert main(args) == 2
    assert "nope.jsonl" in capsys.readouterr().err

    assert main(base_args(files)) == 2
    assert "no output file" in capsys.readouterr().err


def test_unwritable_judgments_file(httpx2_mock: respx.Router, files: dict[str, Path],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=grader(rule))
    blocker = files["dir"] / "a-file"
    blocker.write_text("x")
    bad = blocker / "j.jsonl"  # its directory is a file
    assert main(base_args(files, "-o", str(files["dir"] / "o.qrels"), "--judgments", str(bad))) == 2
    err = capsys.readouterr().err
    assert "j.jsonl" in err and err.count("\n") == 1 and route.call_count == 0
    # A missing directory is created before the first call.
    new = files["dir"] / "no" / "such" / "dir" / "j.jsonl"
    assert main(base_args(files, "-o", str(files["dir"] / "o.qrels"), "--judgments", str(new))) == 0
    assert len(new.read_text().splitlines()) == 5


def test_bad_key_is_a_clear_error(httpx2_mock: respx.Router, files: dict[str, Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    httpx2_mock.post(URL).mock(return_value=error(401, f"Incorrect API key provided: {SECRET}"))
    assert main(base_args(files, "-o", str(files["dir"] / "o.qrels"))) == 2
    err = capsys.readouterr().err
    assert "authentication failed" in err and SECRET not in err


def test_batch_flag_goes_through_batch_mode(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.judges import batch
    from ragjudge.judges.relevance import JudgeResult, Judgment
    from ragjudge.llm import Provenance, Usage

    seen: dict[str, Any] = {}

    def fake(judge: Any, queries: Any, corpus: Any, runs: Any, depth: int, **kw: Any) -> JudgeResult:
        seen.update(kw, depth=depth, runs=[r.name for r in runs], model=judge.llm.model)
        j = Judgment.record("q1", "d1", 2, None, "r", Provenance("judge-model", "relevance", "1", "sha"),
                     Usage(1, 5, 0, 5), 0.0, None)
        from ragjudge import Qrels

        return JudgeResult(Qrels.from_dict({"q1": {"d1": 2}}), [j], Usage(1, 5, 0, 5), None)

    monkeypatch.setattr(batch, "judge_with_batch_sync", fake)
    out = files["dir"] / "b.qrels"
    state = files["dir"] / "state.sqlite"
    assert main(base_args(files, "--batch", "--batch-state", str(state), "-o", str(out))) == 0
    assert seen == {"qrels": None, "all_queries": False, "state_path": str(state), "depth": 3,
                    "runs": ["bm25", "dense"], "model": "judge-model"}
    assert read_qrels(out).to_dict() == {"q1": {"d1": 2}}


# ----------------------------------------------------------------------------- kill -9
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    paid = 0
    lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        time.sleep(0.05)  # a little latency so the kill lands mid-run
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.paid += 1  # type: ignore[attr-defined]
        payload = json.dumps(grade_reply(len(body["messages"][-1]["content"]) % 4)).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.slow  # subprocess killed with SIGKILL, loopback server
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_kill_9_then_resume_pays_at_most_in_flight(files: dict[str, Path], tmp_path: Path) -> None:
    n = 60
    corpus = tmp_path / "big.tsv"
    corpus.write_text("".join(f"d{i}\tpassage number {i} " + "x" * i + "\n" for i in range(n)))
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tsome query\n")
    run = tmp_path / "r.trec"
    run.write_text("".join(f"q1 Q0 d{i} {i + 1} {n - i} r\n" for i in range(n)))
    server = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    cache = tmp_path / "resume.sqlite"
    args = ["judge", "--queries", str(queries), "--corpus", str(corpus), "--run", str(run),
            "--depth", str(n), "--model", "m", "--base-url", url, "--cache", str(cache),
            "--concurrency", "4", "--no-progress", "-o", str(tmp_path / "out.qrels")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "ragjudge", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while server.paid < 15 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()  # type: ignore[union-attr]
        time.sleep(0.2)  # let requests the dead client left behind finish on the server
        paid_before = server.paid
        import sqlite3

        committed = sqlite3.connect(str(cache)).execute("SELECT COUNT(*) FROM answers").fetchone()[0]
        assert 0 < committed <= paid_before <= committed + 4  # lost: at most the in-flight calls
        # Resume in-process: only the judgments not committed are paid for.
        assert main(args) == 0
        assert server.paid - paid_before == n - committed
        assert len(read_qrels(tmp_path / "out.qrels")) == n
    finally:
        server.shutdown()


# ----------------------------------------------------------------------------- input errors and limits
def test_bad_prices_file_is_a_one_line_error(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    prices = files["dir"] / "prices.json"
    prices.write_text('{"judge-model": {"input": NaN, "output": 1.0}}')
    args = base_args(files, "--prices", str(prices), "--max-cost", "1", "-o", str(files["dir"] / "o.qrels"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragjudge: error:") and "prices.json" in err and err.count("\n") == 1


@pytest.mark.parametrize("name, check", [
    ("out.json", lambda text: json.loads(text)["q1"]["d1"] == 3),
    ("out.tsv", lambda text: text.startswith("query-id\tcorpus-id\tscore\n") and "q1\td1\t3" in text),
    ("out.qrels", lambda text: "q1 0 d1 3" in text),
])
def test_output_format_follows_the_file_name(httpx2_mock: respx.Router, files: dict[str, Path],
                                             name: str, check: Any) -> None:
    httpx2_mock.post(URL).mock(side_effect=grader(rule))
    out = files["dir"] / "new" / "dir" / name  # missing directories are created
    assert main(base_args(files, "-o", str(out))) == 0
    assert check(out.read_text())
    assert read_qrels(out).to_dict()["q1"]["d1"] == 3
    assert not list(out.parent.glob(".*probe*"))


def test_ids_the_format_cannot_hold_are_refused_before_any_call(
    httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=grader(rule))
    corpus = files["dir"] / "corpus2.jsonl"
    corpus.write_text(files["c"].read_text() + json.dumps({"_id": "doc with space", "text": "Paris x"}) + "\n")
    run = files["dir"] / "spaced.json"
    run.write_text(json.dumps({"q1": {"doc with space": 9.0, "d1": 1.0}}))
    args = ["judge", "--queries", str(files["q"]), "--corpus", str(corpus), "--run", str(run),
            "--depth", "3", "--model", "judge-model", "--base-url", BASE, "--api-key-env", "JUDGE_KEY",
            "--no-cache", "--no-progress", "-o", str(files["dir"] / "o.qrels")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "doc with space" in err and "nothing was judged" in err and err.count("\n") == 1
    assert route.call_count == 0
    # JSON holds any id: the same job with -o x.json runs.
    args[-1] = str(files["dir"] / "o.json")
    assert main(args) == 0 and route.call_count == 2


def test_unwritable_output_is_refused_before_any_call(
    httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # No route is mocked: a call would fail the judgments (exit 1), not give exit status 2.
    assert main(base_args(files, "-o", str(files["dir"]))) == 2  # a directory
    blocker = files["dir"] / "file"
    blocker.write_text("x")
    assert main(base_args(files, "-o", str(blocker / "sub" / "o.qrels"))) == 2  # parent is a file
    assert main(base_args(files, "-o", str(files["dir"] / "o.qrels"),
                          "--judgments", str(blocker / "j.jsonl"))) == 2
    err = capsys.readouterr().err
    assert err.count("ragjudge: error:") == 3 and not httpx2_mock.calls


def test_redirected_progress_is_a_few_plain_lines(
    httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    httpx2_mock.post(URL).mock(side_effect=grader(rule))
    args = [a for a in base_args(files, "-o", str(files["dir"] / "o.qrels")) if a != "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("judging (")]
    assert "\r" not in err and 1 <= len(progress) <= 11
    assert progress[-1].startswith("judging (judge-model): 5/5 items, 100% (cached=0 failed=0")
    # run again: every item is a cache hit, counted as such, not as a call
    assert main(args) == 0
    again = [line for line in capsys.readouterr().err.splitlines() if line.startswith("judging (")]
    assert again[-1].startswith("judging (judge-model): 5/5 items, 100% (cached=5 failed=0")


def test_replies_without_usage_are_reported_and_costed(
    httpx2_mock: respx.Router, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    def effect(request: Any) -> respx.MockResponse:
        body = grade_reply(2)
        body["usage"] = {"prompt_tokens": "n/a"}
        return ok(body)

    httpx2_mock.post(URL).mock(side_effect=effect)
    assert main(base_args(files, "-o", str(files["dir"] / "o.qrels"))) == 0
    err = capsys.readouterr().err
    assert "5 replies carried no readable usage: counted at their worst case" in err
