"""Rank fusion: hand-computed values, tie handling, validation, tuning, the CLI, and ranx."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ragjudge import Qrels, Run, evaluate
from ragjudge.cli import main
from ragjudge.errors import InputError
from ragjudge.fuse import fuse, tune_weights
from ragjudge.io import read_run

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

A = Run.from_dict({"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 1.0}}, name="A")
B = Run.from_dict({"q1": {"b": 10.0, "d": 5.0}, "q2": {"x": 2.0, "y": 4.0}}, name="B")


def test_rrf_hand_computed() -> None:
    out = fuse([A, B], method="rrf", rrf_k=60).to_dict()
    assert out["q1"]["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert out["q1"]["a"] == pytest.approx(1 / 61)
    assert out["q1"]["d"] == pytest.approx(1 / 62)
    assert out["q1"]["c"] == pytest.approx(1 / 63)
    assert out["q2"]["x"] == pytest.approx(1 / 61 + 1 / 62)
    assert [d for d, _ in fuse([A, B]).ranked("q1")] == ["b", "a", "d", "c"]


def test_combsum_minmax_and_combmnz() -> None:
    s = fuse([A, B], method="combsum").to_dict()
    # A q1: a=1, b=0.5, c=0; B q1: b=1, d=0
    assert s["q1"] == pytest.approx({"a": 1.0, "b": 1.5, "c": 0.0, "d": 0.0})
    m = fuse([A, B], method="combmnz").to_dict()
    assert m["q1"] == pytest.approx({"a": 1.0, "b": 3.0, "c": 0.0, "d": 0.0})
    # a single document: range 0 -> (s - min) / 1e-9 = 0, finite (ranx's floor)
    assert s["q2"] == pytest.approx({"x": 0.0, "y": 1.0})  # B: x=0, y=1; A: x alone -> 0


def test_weights_zmuv_rank() -> None:
    w = fuse([A, B], method="wsum", weights=[2.0, 1.0]).to_dict()
    assert w["q1"]["a"] == pytest.approx(2.0) and w["q1"]["b"] == pytest.approx(2.0)
    z = fuse([A, B], method="combsum", norm="zmuv").to_dict()
    sd = math.sqrt(2 / 3)
    assert z["q1"]["a"] == pytest.approx(1 / sd)
    assert z["q1"]["b"] == pytest.approx(0.0 + 1.0)
    r = fuse([A, B], method="combsum", norm="rank").to_dict()
    assert r["q1"] == pytest.approx({"a": 1.0, "b": 2 / 3 + 1.0, "c": 1 / 3, "d": 0.5})
    # a zero weight removes the run entirely (also from combmnz's count)
    only_a = fuse([A, B], method="combmnz", weights=[1.0, 0.0]).to_dict()
    assert set(only_a["q1"]) == {"a", "b", "c"} and "q2" in only_a


def test_ties_are_broken_like_trec_eval() -> None:
    t1 = Run.from_dict({"q": {"d1": 1.0, "d2": 1.0, "d3": 0.5}}, name="t1")
    t2 = Run.from_dict({"q": {"d3": 1.0, "d1": 0.1, "d2": 0.1}}, name="t2")
    # trec_eval order of t1: d2 (docid desc on a tie), d1, d3; of t2: d3, d2, d1
    out = fuse([t1, t2], method="rrf", rrf_k=0).to_dict()["q"]
    assert out == pytest.approx({"d2": 1 + 1 / 2, "d1": 1 / 2 + 1 / 3, "d3": 1 / 3 + 1})
    again = fuse([t1, t2], method="rrf", rrf_k=0)
    assert again == fuse([t1, t2], method="rrf", rrf_k=0)


def test_depth_cut() -> None:
    out = fuse([A, B], method="rrf", depth=1).to_dict()
    assert set(out["q1"]) == {"a", "b"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "borda"}, "unknown fusion method"),
        ({"norm": "l2"}, "unknown normalization"),
        ({"weights": [1.0]}, "1 weights given for 2 runs"),
        ({"weights": [1.0, float("nan")]}, "finite"),
        ({"weights": [0.0, 0.0]}, "every fusion weight is 0"),
        ({"rrf_k": -1}, "rrf_k"),
        ({"depth": 0}, "depth"),
    ],
)
def test_bad_options(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        fuse([A, B], **kwargs)


def test_needs_two_runs() -> None:
    with pytest.raises(InputError, match="at least two runs"):
        fuse([A])


def _example_runs() -> list[Run]:
    return [read_run(EXAMPLES / "runs" / f"{n}.run") for n in ("bm25_raw", "bm25_stemmed", "term_overlap")]


def test_tune_weights_on_one_split() -> None:
    from ragjudge.io import read_qrels

    qrels = read_qrels(EXAMPLES / "qrels.txt")
    qids = qrels.query_ids
    train = qrels.filter(qids[: len(qids) // 2])
    runs = _example_runs()
    tuning = tune_weights(runs, train, "ndcg@10", method="wsum", step=0.25)
    assert len(tuning.trials) == 15  # compositions of 4 quarters into 3 parts
    assert math.isclose(sum(tuning.weights), 1.0)
    equal = evaluate(train, fuse(runs, method="wsum"), ["ndcg@10"]).mean["ndcg@10"]
    assert tuning.score >= equal - 1e-12
    assert tuning.score == max(s for _, s in tuning.trials)
    assert tuning.to_dict()["metric"] == "ndcg@10"
    with pytest.raises(InputError, match="step"):
        tune_weights(runs, train, "ndcg@10", step=0.3)


@pytest.mark.slow  # peer cross-check (ranx compiles with numba)
def test_agrees_with_ranx_without_ties() -> None:
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(0)
    runs = []
    for r in _example_runs():
        d = r.to_dict()
        runs.append(Run.from_dict({q: {k: v + rng.uniform(0, 1e-6) for k, v in docs.items()}
                                   for q, docs in d.items()}, name=r.name))
    rx = [ranx.Run({q: dict(sorted(docs.items(), key=lambda kv: -kv[1])) for q, docs in r.to_dict().items()},
                   name=r.name) for r in runs]
    cases = [("rrf", None, "rrf", None), ("sum", "min-max", "combsum", "minmax"),
             ("mnz", "min-max", "combmnz", "minmax"), ("sum", "zmuv", "combsum", "zmuv"),
             ("sum", "rank", "combsum", "rank")]
    for rmethod, rnorm, method, norm in cases:
        theirs = (ranx.fuse(runs=rx, method=rmethod, norm=rnorm) if rnorm
                  else ranx.fuse(runs=rx, method=rmethod)).to_dict()
        ours = fuse(runs, method=method, norm=norm).to_dict()  # type: ignore[arg-type]
        assert sum(map(len, ours.values())) == sum(map(len, theirs.values()))
        for q, docs in theirs.items():
            for d, s in docs.items():
                assert ours[q][d] == pytest.approx(s, abs=1e-12), (method, norm, q, d)


def test_cli_fuse_and_tune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [str(EXAMPLES / "runs" / f"{n}.run") for n in ("bm25_raw", "term_overlap")]
    out = tmp_path / "fused.run"
    assert main(["fuse", *runs, "--method", "combmnz", "--name", "hyb", "-o", str(out)]) == 0
    fused = read_run(out)
    assert fused == fuse([read_run(p) for p in runs], method="combmnz", name="hyb")
    assert main(["fuse", *runs, "--tune-qrels", str(EXAMPLES / "qrels.txt"), "--method", "wsum",
                 "--step", "0.5", "-o", str(out)]) == 0
    assert "best weights" in capsys.readouterr().err
    assert main(["fuse", runs[0], "--weights", "1,2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragjudge: error:") and err.count("\n") == 1 and "at least two runs" in err
    assert main(["fuse", *runs, "--weights", "1"]) == 2
    assert "1 weights given for 2 runs" in capsys.readouterr().err
