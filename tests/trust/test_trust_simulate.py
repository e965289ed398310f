"""Statistical claims checked by seeded simulation: simulated judges with a known confusion
matrix, agreement intervals that recover it, PPI intervals that cover the truth."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from ragjudge.data import Qrels
from ragjudge.trust import label_agreement
from ragjudge.trust.ppi import ppi_means
from ragjudge.trust.simulate import JUDGES, draw_labels, simulate_qrels, simulate_studies


def test_draw_labels_follows_the_confusion_matrix() -> None:
    true = np.repeat(np.arange(4), 20000)
    got = draw_labels(true, "lenient", seed=0)
    est = np.array([[np.mean(got[true == t] == g) for g in range(4)] for t in range(4)])
    assert np.abs(est - JUDGES["lenient"]).max() < 0.015
    assert (draw_labels(true, "lenient", seed=0) == got).all()  # seeded
    with pytest.raises(ValueError):
        draw_labels(np.array([4]), "noisy", seed=0)


def _population_stats(p_true: np.ndarray, confusion: np.ndarray) -> tuple[float, np.ndarray]:
    """Cohen's kappa of the population joint distribution diag(p) C."""
    joint = np.diag(p_true) @ confusion
    po = np.trace(joint)
    pe = float(joint.sum(axis=1) @ joint.sum(axis=0))
    return (po - pe) / (1 - pe), confusion * 100


@pytest.mark.parametrize("judge", ["lenient", "strict", "noisy"])
def test_agreement_intervals_recover_the_confusion_matrix_and_kappa(judge: str) -> None:
    p_true = np.array([0.55, 0.2, 0.15, 0.1])
    kappa, row_pct = _population_stats(p_true, JUDGES[judge])
    hits_kappa, hits_cells, cells = 0, 0, 0
    studies = 40
    for s in range(studies):
        rng = np.random.default_rng(100 + s)
        grades = rng.choice(4, size=(80, 12), p=p_true)
        human = Qrels.from_dict({f"q{i}": {f"d{j}": int(g) for j, g in enumerate(row)}
                                 for i, row in enumerate(grades)})
        llm = simulate_qrels(human, judge, seed=s)
        rep = label_agreement(human, llm, n_resamples=300, seed=s, scale=(0, 3))
        iv = rep.stats["cohen_kappa"]
        hits_kappa += iv.ci_low <= kappa <= iv.ci_high
        for i in range(4):
            for j in range(4):
                c = rep.row_percent[i][j]
                if c.ci_low is None or row_pct[i, j] in (0.0, 100.0):
                    continue  # structural zeros: the interval is the point [0, 0]
                cells += 1
                hits_cells += c.ci_low <= row_pct[i, j] <= c.ci_high
    # 95% intervals; percentile bootstrap on 80 queries runs a little short of nominal
    assert hits_kappa / studies >= 0.85
    assert hits_cells / cells >= 0.85
    # and the point estimate of leniency has the judge's sign
    lenient = float(p_true @ (JUDGES[judge] @ np.arange(4) - np.arange(4)))
    assert np.sign(rep.leniency) == np.sign(lenient)


@lru_cache(maxsize=None)
def _studies(judge: str, studies: int, big_n: int) -> tuple[np.ndarray, np.ndarray]:
    return simulate_studies(studies, big_n, judge, seed=7)


def _coverage(judge: str, n: int, method: str, studies: int = 600, big_n: int = 300):
    human, llm = _studies(judge, studies, big_n)
    truth = human.mean(axis=1)
    rng = np.random.default_rng(11)
    idx = np.argsort(rng.random((studies, big_n)), axis=1)[:, :n]  # simple random samples
    r = ppi_means(np.take_along_axis(human, idx, 1), np.take_along_axis(llm, idx, 1),
                  llm.mean(axis=1), llm.var(axis=1, ddof=1), big_n, method=method)  # type: ignore[arg-type]

    def cov(lo: str, hi: str) -> float:
        return float(np.mean((r[lo] <= truth) & (truth <= r[hi])))

    return cov("ci_low", "ci_high"), cov("human_low", "human_high"), cov("llm_low", "llm_high"), r


@pytest.mark.parametrize("judge", ["lenient", "strict", "noisy"])
@pytest.mark.parametrize("n", [50, 100])
def test_ppi_intervals_cover_the_true_mean(judge: str, n: int) -> None:
    for method in ("ppi++", "ppi"):
        ppi, human, _, r = _coverage(judge, n, method)
        assert 0.93 <= ppi <= 0.97, (method, ppi)
        assert 0.93 <= human <= 0.97
        if method == "ppi++":
            # never wider than human-only, study by study
            assert ((r["ci_high"] - r["ci_low"]) <= (r["human_high"] - r["human_low"]) + 1e-12).all()


def test_llm_only_intervals_miss_under_a_biased_judge() -> None:
    _, _, llm, r = _coverage("lenient", 50, "ppi++")
    assert llm < 0.10  # the lenient judge inflates nDCG; its own interval is confidently wrong
    assert np.mean(r["llm_mean"] - r["human_mean"]) > 0.1


def test_ppi_intervals_of_differences_between_systems_cover() -> None:
    # Two systems on the same simulated queries; the judge is lenient on both, but not equally.
    h1, l1 = _studies("lenient", 600, 300)
    h2, l2 = simulate_studies(600, 300, "noisy", seed=8)
    human, llm = h1 - h2, l1 - l2
    truth = human.mean(axis=1)
    rng = np.random.default_rng(12)
    idx = np.argsort(rng.random(human.shape), axis=1)[:, :60]
    r = ppi_means(np.take_along_axis(human, idx, 1), np.take_along_axis(llm, idx, 1),
                  llm.mean(axis=1), llm.var(axis=1, ddof=1), 300)
    cover = np.mean((r["ci_low"] <= truth) & (truth <= r["ci_high"]))
    assert 0.93 <= cover <= 0.97
    assert np.mean((r["llm_low"] <= truth) & (truth <= r["llm_high"])) < 0.5
