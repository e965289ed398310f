"""Label-free values that do not move with the pool: pool-free measures (nDCG against the best
DCG@k of the scale, P@k, RBP, MRR) are the label-free defaults, and a run scores the same alone
or beside others; pool-relative ones carry the pool they are relative to, and a warning."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge import evaluate, evaluate_with_judge_sync
from ragjudge.cli import main
from ragjudge.judges.ondemand import LABEL_FREE_METRICS, pool_relative
from ragjudge.measures import parse_measure, spec_of

EX = Path(__file__).resolve().parents[2] / "examples"


def test_ndcg_against_the_best_dcg_the_scale_allows_by_hand() -> None:
    qrels = {"q1": {"d1": 3, "d2": 1, "d9": 3}}
    run = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}}
    got = evaluate(qrels, run, ["ndcg(ideal=max)@3", "ndcg(ideal=max,top=1,gain=exp)@2"]).mean
    # DCG@3 = 3/1 + 1/log2(3); the best DCG@3 on a 0-3 scale is 3 * (1 + 1/log2(3) + 1/2)
    assert got["ndcg(ideal=max)@3"] == pytest.approx((3 + 1 / math.log2(3)) / (3 * (1 + 1 / math.log2(3) + 0.5)))
    # exp gain, top grade 1: best DCG@2 = 1 + 1/log2(3); DCG@2 = 7 + 1/log2(3)
    assert got["ndcg(ideal=max,top=1,gain=exp)@2"] == pytest.approx((7 + 1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_ideal_max_needs_a_cutoff() -> None:
    from ragjudge.errors import MetricError

    with pytest.raises(MetricError):
        parse_measure("ndcg(ideal=max)")


def test_the_registry_says_which_measures_move_with_the_pool() -> None:
    for name in LABEL_FREE_METRICS:
        m = parse_measure(name)
        assert spec_of(m).is_pool_free(m), name
    assert pool_relative(["ndcg@10", "map", "recall@100", "p@10", "ndcg(ideal=max)@10", "rprec"]) == \
        ["ndcg@10", "map", "recall@100", "rprec"]


def _evaluate(sim: Any, *runs: str, extra: tuple[str, ...] = ()) -> list[str]:
    return ["evaluate", "none", *[str(EX / "runs" / f"{r}.run") for r in runs], "--judge", "sim-model",
            "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
            "--base-url", sim.base_url, "--no-cache", "--no-progress", "-f", "json", "--no-stats", *extra]


@pytest.mark.slow
def test_a_run_scores_the_same_alone_or_pooled(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        assert main(_evaluate(sim, "bm25_raw")) == 0
        alone = json.loads(capsys.readouterr().out)
        alone = alone if isinstance(alone, dict) else alone[0]
        assert main(_evaluate(sim, "bm25_raw", "bm25_stemmed")) == 0
        pooled = [r for r in json.loads(capsys.readouterr().out) if r["run"] == "bm25_raw"][0]
        assert list(alone["mean"]) == list(LABEL_FREE_METRICS)
        assert alone["mean"] == pooled["mean"]
        assert alone["meta"]["judging"]["pool_caveat"] is None
        # a pool-relative metric is named with its pool, in stderr and in the JSON
        assert main(_evaluate(sim, "bm25_raw", extra=("-m", "ndcg@10"))) == 0
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        out = out if isinstance(out, dict) else out[0]
        assert "ndcg@10 is relative to the pool judged in this command" in captured.err
        assert "a single run" in out["meta"]["judging"]["pool_caveat"]
        assert out["meta"]["judging"]["pool_runs"] == ["bm25_raw"]


# ----------------------------------------------------------------------------- a pool you keep
def _small_runs(tmp: Path, n_queries: int = 6) -> dict[str, Path]:
    """The first queries of two bundled runs (fast to judge), as run files in ``tmp``."""
    out = {}
    for name in ("bm25_raw", "bm25_stemmed"):
        lines = (EX / "runs" / f"{name}.run").read_text().splitlines()
        keep = sorted({ln.split()[0] for ln in lines})[:n_queries]
        path = tmp / f"{name}.run"
        path.write_text("".join(ln + "\n" for ln in lines if ln.split()[0] in keep))
        out[name] = path
    return out


def _pooled(sim: Any, runs: list[Path], *extra: str) -> list[str]:
    return ["evaluate", "none", *map(str, runs), "--judge", "sim-model",
            "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
            "--base-url", sim.base_url, "--no-cache", "--no-progress", "-f", "json", "--no-stats",
            "-m", "ndcg@10,ndcg(ideal=max)@10", *extra]


def _one(out: str, run: str) -> dict[str, Any]:
    data = json.loads(out)
    return next(r for r in (data if isinstance(data, list) else [data]) if r["run"] == run)


@pytest.mark.slow
def test_a_kept_pool_grows_and_rescores_the_runs_recorded_in_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge import read_qrels
    from ragjudge.judges.pool import Pool

    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    runs = _small_runs(tmp_path)
    pool = tmp_path / "labels.pool"
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        # both runs judged in one command, no pool kept: the reference values
        assert main(_pooled(sim, [runs["bm25_raw"], runs["bm25_stemmed"]])) == 0
        together = json.loads(capsys.readouterr().out)
        union = together[0]["meta"]["judging"]["pairs"]
        assert main(_pooled(sim, [runs["bm25_raw"]], "--pool", str(pool))) == 0
        first = _one(capsys.readouterr().out, "bm25_raw")
        alone = first["meta"]["judging"]["pairs"]
        assert first["meta"]["judging"]["pool"]["labels"] == alone < union
        assert main(_pooled(sim, [runs["bm25_stemmed"]], "--pool", str(pool))) == 0
        captured = capsys.readouterr()
        second = _one(captured.out, "bm25_stemmed")
    raw_together = _one(json.dumps(together), "bm25_raw")["mean"]
    # only the pairs the pool lacked were judged (no cache: every judged pair is a call)
    assert second["meta"]["judging"]["pairs"] == union - alone
    assert second["meta"]["judging"]["pool"]["labels"] == union
    assert second["mean"] == _one(json.dumps(together), "bm25_stemmed")["mean"]
    # the earlier run is scored again against the grown pool: the pool-relative value moves,
    # the pool-free one does not, and the output says which
    (moved,) = second["meta"]["judging"]["pool"]["rescored"]
    assert moved["run"] == "bm25_raw" and moved["changed"] == ["ndcg@10"]
    assert moved["before"]["ndcg@10"] == first["mean"]["ndcg@10"] != raw_together["ndcg@10"]
    assert moved["after"] == pytest.approx(raw_together)
    assert "bm25_raw: ndcg@10" in captured.err and "unchanged: ndcg(ideal=max)@10" in captured.err
    assert "relative to the pool" in captured.err and str(pool) in second["meta"]["judging"]["pool_caveat"]
    # the file is qrels for every command, and keeps each label's provenance and the runs
    assert len(read_qrels(pool)) == union
    kept = Pool.load(pool)
    assert len(kept) == union and set(kept.records) == set(kept.grades)
    assert {r["model"] for r in kept.records.values()} == {"sim-model"}
    assert kept.runs["bm25_raw"].labels == union
    assert kept.runs["bm25_raw"].mean == pytest.approx(raw_together)
    assert main(["evaluate", str(pool), str(runs["bm25_raw"]), "-m", "ndcg@10", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"]["ndcg@10"] == pytest.approx(raw_together["ndcg@10"])


@pytest.mark.slow
def test_a_run_the_pool_cannot_rescore_is_named_as_judged_in_another_pool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    runs = _small_runs(tmp_path)
    pool = tmp_path / "labels.pool"
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        assert main(_pooled(sim, [runs["bm25_raw"]], "--pool", str(pool))) == 0
        capsys.readouterr()
        runs["bm25_raw"].unlink()
        assert main(_pooled(sim, [runs["bm25_stemmed"]], "--pool", str(pool))) == 0
        captured = capsys.readouterr()
    meta = _one(captured.out, "bm25_stemmed")["meta"]["judging"]
    assert "judged in different pools" in meta["pool_warning"]
    assert "ragjudge: warning: runs in the pool" in captured.err and "is gone" in captured.err
    assert meta["pool"]["rescored"][0]["after"] is None


def test_a_pool_of_another_judge_or_a_damaged_one_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.errors import InputError
    from ragjudge.judges.pool import Pool

    pool = Pool(path=tmp_path / "p.pool")
    pool.check_judge("model-a", "relevance.v1@0123456789ab")
    pool.save()
    with pytest.raises(InputError, match="use another pool file"):
        Pool.load(pool.path).check_judge("model-b", "relevance.v1@0123456789ab")
    bad = tmp_path / "bad.pool"
    bad.write_text("q1 0 d1 3\n#label {not json\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sim")
    runs = _small_runs(tmp_path, 1)
    code = main(["evaluate", "none", str(runs["bm25_raw"]), "--judge", "m", "--queries",
                 str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                 "--base-url", "http://127.0.0.1:9/v1", "--pool", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "bad.pool:2: label:" in err


def test_pool_file_round_trip_keeps_labels_provenance_and_runs(tmp_path: Path) -> None:
    from ragjudge import Run, read_qrels
    from ragjudge.judges import Judgment
    from ragjudge.judges.pool import Pool

    def judgment(q: str, d: str, g: int | None) -> Judgment:
        return Judgment.from_dict({"qid": q, "docid": d, "grade": g, "model": "m", "prompt_id": "relevance",
                                   "prompt_sha": "ab" * 32, "reasoning": "because",
                                   "error": None if g is not None else "bad reply",
                                   "failure": None if g is not None else "invalid"})

    pool = Pool(path=tmp_path / "sub" / "p.pool")
    assert pool.add([judgment("q1", "d1", 3), judgment("q1", "d2", 0), judgment("q2", "d1", None)]) == 2
    assert pool.add([judgment("q1", "d1", 1), judgment("q2", "d9", 2)]) == 1  # a kept label wins
    run = Run.from_dict({"q1": {"d1": 2.0, "d2": 1.0}}, name="r")
    pool.record(run, path=None, depth=10, mean={"p@1": 1.0})
    pool.save()
    back = Pool.load(pool.path)
    assert back.grades == {("q1", "d1"): 3, ("q1", "d2"): 0, ("q2", "d9"): 2}
    assert back.records[("q1", "d1")]["reasoning"] == "because"
    assert back.runs["r"].mean == {"p@1": 1.0} and back.runs["r"].labels == 3
    assert read_qrels(pool.path).to_dict() == {"q1": {"d1": 3, "d2": 0}, "q2": {"d9": 2}}
    assert back.text() == pool.text()


def test_label_free_defaults_follow_the_judge_scale() -> None:
    from ragjudge.judges.ondemand import label_free_metrics

    assert label_free_metrics(3) == list(LABEL_FREE_METRICS)
    assert label_free_metrics(4)[0] == "ndcg(ideal=max,top=4)@10"
    m = parse_measure(label_free_metrics(4)[0])
    assert spec_of(m).is_pool_free(m)


@pytest.mark.slow
def test_library_runs_evaluated_one_at_a_time_share_a_kept_pool(tmp_path: Path) -> None:
    from ragjudge.judges import LLMRelevanceJudge

    runs = _small_runs(tmp_path)
    pool = tmp_path / "lib.pool"
    metrics = ["ndcg@10", "p@10"]
    with simulator_thread(judge="overlap", latency=0.0) as sim:
        def judge() -> Any:
            return LLMRelevanceJudge("sim-model", base_url=sim.base_url, api_key="sim", cache=False,
                                     progress=False)

        texts = {"queries": EX / "queries.jsonl", "corpus": EX / "corpus.jsonl"}
        with pytest.warns(UserWarning, match="a single run"):
            first = evaluate_with_judge_sync(judge(), runs["bm25_raw"], metrics, pool=pool, **texts)
        with pytest.warns(UserWarning, match="relative to the pool"):
            second = evaluate_with_judge_sync(judge(), runs["bm25_stemmed"], metrics, pool=pool,
                                              **texts)
    pooled = second.meta["judging"]["pool"]
    assert pooled["runs"] == ["bm25_raw", "bm25_stemmed"]
    assert second.meta["judging"]["pairs"] == pooled["labels"] - first.meta["judging"]["pool"]["labels"]
    (again,) = pooled["rescored"]
    assert again["before"] == first.mean and again["changed"] == ["ndcg@10"]
    assert again["after"]["p@10"] == first.mean["p@10"]
    with pytest.raises(TypeError, match="evaluate_with_judge"):
        evaluate(None, runs["bm25_raw"], metrics, pool=pool)


def test_the_service_catalog_says_which_measures_are_pool_free() -> None:
    from ragjudge.server.catalog import metric_catalog

    by_name = {m["name"]: m for m in metric_catalog()}
    assert by_name["precision"]["pool_free"] is True and by_name["map"]["pool_free"] is False
    assert by_name["ndcg"]["pool_free"] == "depends on the parameters"
