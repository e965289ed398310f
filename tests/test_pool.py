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

from ragjudge import evaluate
from ragjudge.cli import main
from ragjudge.judges.ondemand import LABEL_FREE_METRICS, pool_relative
from ragjudge.measures import parse_measure, spec_of

EX = Path(__file__).resolve().parents[1] / "examples"


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
