"""Label-free numbers that do not move with what else was judged: each run's mean over its own
queries (or a query set given), pool-free measures only down to the judge depth, a judge
grading the queries it chose named, and the CLI calling the library's one flow."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge.cli import main
from ragjudge.data import Run
from ragjudge.judges.ondemand import judge_circularity, pool_caveat, pool_relative

EX = Path(__file__).resolve().parents[2] / "examples"


def _runs(tmp: Path) -> dict[str, Path]:
    """Run a on 4 queries; run b on the same 4 and one more (so b's pool has a query a lacks)."""
    out = {}
    for name, src, n in (("a", "bm25_raw", 4), ("b", "bm25_stemmed", 5)):
        lines = (EX / "runs" / f"{src}.run").read_text().splitlines()
        keep = sorted({ln.split()[0] for ln in lines})[:n]
        path = tmp / f"{name}.run"
        path.write_text("".join(" ".join([*ln.split()[:5], name]) + "\n" for ln in lines
                                if ln.split()[0] in keep and int(ln.split()[3]) <= 12))
        out[name] = path
    return out


def _cli(sim: Any, runs: list[Path], *extra: str) -> list[str]:
    return ["evaluate", "none", *map(str, runs), "--judge", "sim-model",
            "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
            "--base-url", sim.base_url, "--no-cache", "--no-progress", "-f", "json", *extra]


def _by_run(out: str) -> dict[str, Any]:
    data = json.loads(out)
    if isinstance(data, dict) and "runs" in data:
        data = data["runs"]
    return {r["run"]: r for r in (data if isinstance(data, list) else [data])}


@pytest.mark.slow
def test_each_run_is_scored_on_its_own_queries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    runs = _runs(tmp_path)
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        assert main(_cli(sim, [runs["a"]], "--no-stats")) == 0
        alone = _by_run(capsys.readouterr().out)["a"]
        assert main(_cli(sim, [runs["a"], runs["b"]], "--no-stats")) == 0
        captured = capsys.readouterr()
        beside = _by_run(captured.out)
        # the same mean alone and beside a run with a query a lacks
        assert beside["a"]["mean"] == alone["mean"]
        assert beside["a"]["meta"]["num_q"] == 4 and beside["b"]["meta"]["num_q"] == 5
        assert "runs cover different query sets (a: 4, b: 5 queries)" in captured.err
        sets = beside["a"]["meta"]["judging"]["query_sets"]
        assert sets["scope"] == "own" and sets["per_run"] == {"a": 4, "b": 5} and sets["common"] == 4
        # a paired comparison is over the 4 common queries, and says so
        assert main(_cli(sim, [runs["a"], runs["b"]], "--test", "t", "--resamples", "200")) == 0
        cmp = json.loads(capsys.readouterr().out)
        assert {c["n"] for c in cmp["comparisons"]} == {4}
        # an explicit query set: every run on the same 5 queries, a lacking one scoring 0
        qset = tmp_path / "qset.txt"
        qset.write_text("".join(q + "\n" for q in sorted({ln.split()[0] for ln in
                                                         runs["b"].read_text().splitlines()})))
        assert main(_cli(sim, [runs["a"], runs["b"]], "--no-stats", "--query-set", str(qset))) == 0
        given = _by_run(capsys.readouterr().out)
        assert given["a"]["meta"]["num_q"] == 5 and given["a"]["meta"]["num_missing"] == 1
        for m, v in alone["mean"].items():
            assert given["a"]["mean"][m] == pytest.approx(v * 4 / 5)
        assert given["a"]["meta"]["judging"]["query_sets"]["scope"] == "given"
        # pool-free past the judge depth: named, in stderr and JSON (runs here are 12 deep)
        assert main(_cli(sim, [runs["a"]], "--no-stats", "-m", "num_rel_ret,p@5,p@10",
                         "--judge-depth", "5")) == 0
        captured = capsys.readouterr()
        judging = _by_run(captured.out)["a"]["meta"]["judging"]
        assert judging["past_depth"] == ["num_rel_ret", "p@10"] and judging["run_depth"] == 12
        assert "reach below the judge depth 5" in captured.err and "p@5" not in judging["past_depth"]


def test_pool_free_only_down_to_the_judge_depth() -> None:
    metrics = ["num_rel_ret", "p@20", "dcg", "mrr", "p@10", "ndcg(ideal=max)@10"]
    assert pool_relative(metrics) == []
    assert pool_relative(metrics, depth=10, run_depth=30) == ["num_rel_ret", "p@20", "dcg", "mrr"]
    # runs no deeper than the judge depth: every document they rank was judged
    assert pool_relative(metrics, depth=10, run_depth=10) == []
    info = {"depth": 10, "run_depth": 30, "pool_runs": ["a", "b"], "pairs": 50}
    line = pool_caveat(metrics, info, label_free=True)
    assert line is not None and "below the judge depth 10" in line and "num_rel_ret" in line
    assert "p@10" not in line.split(" relative to")[0]
    assert pool_caveat(["p@10"], info, label_free=True) is None


def _judge(model: str, prompt: str = "relevance") -> Any:
    return SimpleNamespace(llm=SimpleNamespace(model=model), prompt=SimpleNamespace(id=prompt))


def test_a_judge_grading_the_queries_it_made_is_named(tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "synth-001", "text": "q"}) + "\n")
    assert judge_circularity(_judge("gpt-4o-mini"), queries) is None  # no provenance beside it
    (tmp_path / "synth.jsonl").write_text("".join(json.dumps(c) + "\n" for c in [
        {"qid": "synth-001", "status": "kept", "generation": {"model": "gpt-4o-mini-2024-07-18"},
         "judgment": {"model": "llama-3.1-8b", "prompt_id": "synth-filter"}},
        {"qid": None, "status": "dropped", "generation": {"model": "claude-x"}, "judgment": None}]))
    line = judge_circularity(_judge("gpt-4o-mini"), str(queries))
    assert line is not None and "generated the queries" in line and "gpt-4o-mini" in line
    line = judge_circularity(_judge("llama-3.1-8b"), queries)
    assert line is not None and "filtered the queries" in line
    assert judge_circularity(_judge("claude-x"), queries) is None  # only kept queries count
    line = judge_circularity(_judge("other", prompt="synth-filter"), queries)
    assert line is not None and "prompt family (synth-filter)" in line
    assert judge_circularity(_judge("gpt-4o-mini"), {"synth-001": "q"}) is None


@pytest.mark.slow
def test_label_free_on_its_own_synthetic_queries_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    qdir = tmp_path / "synth"
    qdir.mkdir()
    (qdir / "queries.jsonl").write_text((EX / "queries.jsonl").read_text())
    (qdir / "synth.jsonl").write_text(json.dumps(
        {"qid": "x", "status": "kept", "generation": {"model": "sim-model"}, "judgment": None}) + "\n")
    runs = _runs(tmp_path)
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        args = _cli(sim, [runs["a"]], "--no-stats")
        args[args.index("--queries") + 1] = str(qdir / "queries.jsonl")
        assert main(args) == 0
        captured = capsys.readouterr()
    assert "the judge sim-model grades queries it chose" in captured.err
    assert "generated the queries" in _by_run(captured.out)["a"]["meta"]["judging"]["circularity"]


@pytest.mark.slow
def test_the_cli_calls_the_librarys_judging_flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import ragjudge.judges.ondemand as ondemand

    calls = []
    real = ondemand.evaluate_with_judge

    async def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return await real(*args, **kwargs)

    monkeypatch.setattr(ondemand, "evaluate_with_judge", spy)
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    runs = _runs(tmp_path)
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        assert main(_cli(sim, [runs["a"]], "--no-stats")) == 0
    assert len(calls) == 1 and calls[0]["run_paths"] == [str(runs["a"])]


def test_ideal_max_with_a_top_grade_gaining_less_than_nothing_is_zero() -> None:
    from ragjudge import evaluate
    from ragjudge.measures import parse_measure, spec_of

    spec = "ndcg(ideal=max,top=1,gains=1:-1)@2"
    m = parse_measure(spec)
    ranked = [1, 0]
    assert spec_of(m).kernel(m, ranked, [1, 0], 1) == 0.0
    got = evaluate({"q1": {"d1": 1, "d2": 0}}, {"q1": {"d1": 2.0, "d2": 1.0}}, [spec]).mean[spec]
    assert got == 0.0


def test_run_depth_is_the_deepest_ranking() -> None:
    from ragjudge.judges.ondemand import run_depth

    runs = [Run.from_dict({"q1": {"a": 1.0, "b": 2.0, "c": 0.5}, "q2": {"x": 1.0}}),
            Run.from_dict({"q3": {"y": 1.0, "z": 0.5}})]
    assert run_depth(runs) == 3 and run_depth([]) == 0
