"""PPI at its edges: a perfect judge, few labels, binary metrics near their bounds, intervals
inside the metric's range, and a small sample said in every output. Coverage claims are
checked by seeded simulation (``benchmarks/bench_trust.py`` prints the full table)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragjudge.trust.ppi import MIN_LABELS, ppi_evaluate, ppi_mean, ppi_means
from ragjudge.trust.simulate import simulate_binary_studies, simulate_studies


def test_constant_llm_values_keep_the_judge() -> None:
    # 8 (and 40) queries labelled 1 by both; the LLM's mean over 500 is 0.856. Forcing lambda
    # to 0 would report the human-only 1.0 and throw the judge away.
    rng = np.random.default_rng(0)
    llm = (rng.random(500) < 0.856).astype(float)
    for n in (8, 40):
        ones = np.ones(n)
        e = ppi_mean(ones, ones, llm)
        assert e.lam == 1.0
        assert e.mean == pytest.approx(llm.mean())
        assert e.ci_low < llm.mean() < e.ci_high <= 1.0


def test_intervals_stay_in_the_metrics_range_and_say_when_cut() -> None:
    rng = np.random.default_rng(1)
    ones = np.ones(8)
    e = ppi_mean(ones, ones, np.ones(300))
    assert 0.0 <= e.ci_low <= e.ci_high <= 1.0 and e.clipped and e.binary
    assert e.ci_low < 1.0  # 8 agreeing labels cannot rule out disagreement elsewhere
    zeros = np.zeros(8)
    z = ppi_mean(zeros, zeros, np.zeros(300))
    assert z.ci_low == 0.0 and z.ci_high > 0.0 and z.clipped
    assert z.to_dict()["clipped"] is True and z.to_dict()["bounds"] == [0.0, 1.0]
    # an ndcg-like value with 4 labelled queries
    y, f = np.array([0.05, 0.0, 0.4, 0.1]), np.array([0.1, 0.05, 0.3, 0.0])
    s = ppi_mean(y, f, rng.random(100) * 0.3)
    assert 0.0 <= s.ci_low <= s.ci_high <= 1.0
    for e in (e, z, s):
        assert e.human_only.ci_low >= 0.0 and e.human_only.ci_high <= 1.0
        assert e.llm_only.ci_low >= 0.0 and e.llm_only.ci_high <= 1.0
    # values outside [0, 1] are not clipped there
    big = ppi_mean(np.array([3.0, 5.0, 4.0]), np.array([3.0, 4.0, 4.0]), np.full(50, 4.0))
    assert big.bounds is None and not big.clipped


def _coverage(human: np.ndarray, llm: np.ndarray, n: int, seed: int, **kw: object) -> float:
    rng = np.random.default_rng(seed)
    idx = np.argsort(rng.random(human.shape), axis=1)[:, :n]
    y, f = np.take_along_axis(human, idx, 1), np.take_along_axis(llm, idx, 1)
    r = ppi_means(y, f, llm.mean(1), llm.var(1, ddof=1), human.shape[1], bounds=(0.0, 1.0), **kw)  # type: ignore[arg-type]
    truth = human.mean(1)
    assert ((r["ci_low"] >= 0) & (r["ci_high"] <= 1)).all()
    return float(np.mean((r["ci_low"] <= truth) & (truth <= r["ci_high"])))


@pytest.mark.slow
@pytest.mark.parametrize("judge,hard", [("lenient", None), ("noisy", None),
                                        ("near-perfect", None), ("near-perfect", "noisy")])
def test_graded_coverage_at_8_and_15_labels(judge: str, hard: str | None) -> None:
    """nDCG@10, 1,500 seeded studies of N = 200: PPI++ covers >= 0.93 from 8 labels on (the
    old fitted-lambda interval covered 0.86-0.90 at n = 8)."""
    human, llm = simulate_studies(1500, 200, judge, seed=7, hard_judge=hard)
    for n in (8, 15, 40):
        assert _coverage(human, llm, n, seed=n) >= 0.93, (judge, hard, n)


@pytest.mark.slow
@pytest.mark.parametrize("err,corr", [(0.02, False), (0.10, False), (0.05, True)])
def test_binary_near_its_bound_covers_from_15_labels(err: float, corr: bool) -> None:
    """hit@k with a mean near 1: the old t interval covered 0.65 at n = 8 and 0.86 at n = 15."""
    human, llm = simulate_binary_studies(1500, 200, 0.95 if not corr else 0.9, err, seed=3,
                                         correlated=corr)
    for n in (15, 30, 60):
        assert _coverage(human, llm, n, seed=n) >= 0.90, (err, corr, n)
    assert _coverage(human, llm, 8, seed=8) >= 0.90


def test_a_small_sample_says_so_with_the_width_to_expect() -> None:
    rng = np.random.default_rng(2)
    truth = rng.beta(2, 3, 400)
    llm = np.clip(truth + rng.normal(0, 0.1, 400), 0, 1)
    e = ppi_mean(truth[:8], llm[:8], llm)
    line = e.small_sample()
    assert line is not None and "only 8 human-labelled" in line and str(MIN_LABELS) in line
    assert e.expected_width is not None and e.expected_width < e.width
    assert e.to_dict()["small_sample"] == line and "only 8" in e.describe()
    assert ppi_mean(truth[:40], llm[:40], llm).small_sample() is None


def test_ppi_report_and_cli_say_a_small_sample(tmp_path, capsys) -> None:
    from ragjudge.cli import main
    from ragjudge.data import Qrels, Run

    rng = np.random.default_rng(0)
    llm_rows, human_rows, run = [], [], {}
    for q in range(60):
        run[f"q{q}"] = {f"d{d}": float(10 - d) for d in range(10)}
        for d in range(10):
            g = int(rng.integers(0, 4))
            llm_rows.append(f"q{q} 0 d{d} {min(3, g + int(rng.integers(0, 2)))}")
            if q < 10:
                human_rows.append(f"q{q} 0 d{d} {g}")
    (tmp_path / "llm.qrels").write_text("\n".join(llm_rows))
    (tmp_path / "human.qrels").write_text("\n".join(human_rows))
    (tmp_path / "a.run").write_text("\n".join(f"{q} Q0 {d} {i + 1} {s} a" for q, docs in run.items()
                                              for i, (d, s) in enumerate(docs.items())))
    rep = ppi_evaluate(Qrels.from_dict({}) if False else __import__("ragjudge.io", fromlist=["x"]).read_qrels(
        str(tmp_path / "llm.qrels")), [Run.from_dict(run, name="a")], ["ndcg@10"],
        __import__("ragjudge.io", fromlist=["x"]).read_qrels(str(tmp_path / "human.qrels")))
    assert any("only 10 human-labelled" in n for n in rep.all_notes())
    base = ["evaluate", str(tmp_path / "llm.qrels"), str(tmp_path / "a.run"), "-m", "ndcg@10",
            "--human", str(tmp_path / "human.qrels"), "--ppi"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "only 10 human-labelled queries" in out and "expect widths near" in out
    assert main([*base, "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any("only 10" in n for n in data["meta"]["ppi"]["notes"])
    assert "only 10" in data["ppi"]["ndcg@10"]["small_sample"]


def test_ppi_samples_cli_says_a_small_sample(tmp_path, capsys) -> None:
    from ragjudge.cli import main

    rng = np.random.default_rng(5)
    truth = rng.random(60)
    llm = np.clip(truth + rng.normal(0, 0.1, 60), 0, 1)
    (tmp_path / "llm.csv").write_text("id,faith\n" + "\n".join(f"s{i},{v}" for i, v in enumerate(llm)))
    (tmp_path / "human.csv").write_text("id,faith\n" + "\n".join(f"s{i},{truth[i]}" for i in range(9)))
    assert main(["ppi-samples", str(tmp_path / "llm.csv"), "--human", str(tmp_path / "human.csv")]) == 0
    assert "note: only 9 human-labelled samples (fewer than 30)" in capsys.readouterr().out


def test_the_width_to_expect_is_what_30_alike_labels_give() -> None:
    rng = np.random.default_rng(3)
    llm = (rng.random(500) < 0.856).astype(float)
    few = ppi_mean(np.ones(8), np.ones(8), llm)
    more = ppi_mean(np.ones(MIN_LABELS), np.ones(MIN_LABELS), llm)
    assert few.expected_width == pytest.approx(more.width, rel=1e-9)
    assert more.small_sample() is None and few.width > 2 * more.width


def test_ppi_samples_cli_names_the_human_file_for_ids_it_cannot_pair(tmp_path, capsys) -> None:
    from ragjudge.cli import main

    (tmp_path / "llm.csv").write_text("id,faith\n" + "\n".join(f"s{i},0.5" for i in range(40)))
    (tmp_path / "human.csv").write_text("id,faith\n" + "\n".join(f"x{i},1" for i in range(35)))
    assert main(["ppi-samples", str(tmp_path / "llm.csv"), "--human", str(tmp_path / "human.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'human.csv'}: id: 35 human-labelled items" in err[0]
