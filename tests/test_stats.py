from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ragjudge.stats import (
    bootstrap_ci,
    holm,
    paired_t_test,
    randomization_test,
    regularized_incomplete_beta,
    t_two_sided_p,
)


# ----------------------------------------------------------------------------- t distribution
def test_incomplete_beta_matches_scipy() -> None:
    special = pytest.importorskip("scipy.special")
    for a in (0.5, 1.0, 2.5, 10.0, 50.0, 500.0):
        for b in (0.5, 1.0, 3.0, 100.0):
            for x in np.linspace(0.0, 1.0, 41):
                expected = float(special.betainc(a, b, x))
                got = regularized_incomplete_beta(a, b, float(x))
                assert got == pytest.approx(expected, rel=1e-10, abs=1e-300), (a, b, x)


def test_incomplete_beta_closed_forms() -> None:
    # I_x(1, 1) = x ; I_x(a, 1) = x^a ; I_x(1, b) = 1 - (1-x)^b
    for x in (0.1, 0.37, 0.5, 0.93):
        assert regularized_incomplete_beta(1.0, 1.0, x) == pytest.approx(x, rel=1e-13)
        assert regularized_incomplete_beta(3.0, 1.0, x) == pytest.approx(x**3, rel=1e-13)
        assert regularized_incomplete_beta(1.0, 4.0, x) == pytest.approx(1 - (1 - x) ** 4, rel=1e-13)
    with pytest.raises(ValueError):
        regularized_incomplete_beta(0.0, 1.0, 0.5)
    with pytest.raises(ValueError):
        regularized_incomplete_beta(1.0, 1.0, 1.5)


def test_t_p_value_matches_scipy() -> None:
    st = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 10, 29, 100, 1000):
        for t in (0.0, 0.01, 0.5, 1.0, 1.96, 3.0, 5.0, 10.0, 40.0, -2.5):
            expected = 2 * float(st.t.sf(abs(t), df))
            assert t_two_sided_p(t, df) == pytest.approx(expected, rel=1e-9, abs=1e-300), (df, t)
    # Large df (100k queries): lgamma cancellation costs a few digits, still far below any alpha.
    assert t_two_sided_p(2.0, 1e5) == pytest.approx(2 * float(st.t.sf(2.0, 1e5)), rel=1e-8)
    assert t_two_sided_p(math.inf, 5) == 0.0
    # df = 1 is the Cauchy distribution: P(|T| >= 1) = 1/2 exactly.
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5, rel=1e-14)


def test_paired_t_test_matches_scipy_ttest_rel() -> None:
    st = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 20, 50, 300):
        a = rng.random(n)
        b = np.clip(a + rng.normal(0.02, 0.1, n), 0, 1)
        expected = st.ttest_rel(a, b)
        got = paired_t_test(a, b)
        assert got.statistic == pytest.approx(float(expected.statistic), rel=1e-10)
        assert got.p_value == pytest.approx(float(expected.pvalue), rel=1e-9)


def test_paired_t_test_degenerate_cases_are_defined() -> None:
    assert paired_t_test([0.5, 0.2, 0.1], [0.5, 0.2, 0.1]) == (0.0, 1.0)
    t, p = paired_t_test([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert t == math.inf and p == 0.0
    with pytest.raises(ValueError):
        paired_t_test([0.1], [0.2])
    with pytest.raises(ValueError):
        paired_t_test([0.1, 0.2], [0.2])
    with pytest.raises(ValueError):
        paired_t_test([0.1, float("nan")], [0.2, 0.3])


# ----------------------------------------------------------------------------- randomization
def _brute_force_p(d: list[float]) -> float:
    """Exact sign-flip p-value by enumerating all 2^n assignments with exact rationals."""
    from fractions import Fraction

    fd = [Fraction(x).limit_denominator(10**6) for x in d]
    obs = abs(sum(fd))
    hits = sum(
        1 for signs in itertools.product((1, -1), repeat=len(fd)) if abs(sum(s * x for s, x in zip(signs, fd))) >= obs
    )
    return hits / 2 ** len(fd)


@pytest.mark.parametrize(
    "a,b",
    [
        ([0.5, 0.7, 0.2, 0.9, 0.4], [0.3, 0.6, 0.25, 0.5, 0.45]),
        ([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]),
        # Differences 0.1, 0.2, -0.3, 0.5: sign patterns tie the observed sum only in exact
        # arithmetic (0.1 + 0.2 - 0.3 = 0) -- floating point must not lose those ties.
        ([0.3, 0.4, 0.0, 0.6], [0.2, 0.2, 0.3, 0.1]),
        ([0.25, 0.5, 0.75, 1.0, 0.0, 0.5, 0.25, 0.125], [0.5, 0.25, 0.5, 0.5, 0.25, 0.25, 0.5, 0.375]),
    ],
)
def test_randomization_exact_matches_brute_force(a: list[float], b: list[float]) -> None:
    d = [x - y for x, y in zip(a, b)]
    stat, p = randomization_test(a, b, n_resamples=10_000)  # 2^n <= 10k -> exact enumeration
    assert stat == pytest.approx(float(np.mean(d)))
    assert p == pytest.approx(_brute_force_p(d), abs=1e-15)


def test_randomization_matches_scipy_permutation_test() -> None:
    st = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    d = rng.normal(0.05, 0.2, 11)
    expected = st.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative="two-sided", n_resamples=10**6
    ).pvalue
    assert randomization_test(d, n_resamples=4096).p_value == pytest.approx(float(expected), abs=1e-12)


def test_randomization_monte_carlo_is_reproducible_and_close_to_exact() -> None:
    rng = np.random.default_rng(11)
    a = rng.random(14)
    b = np.clip(a - rng.normal(0.08, 0.15, 14), 0, 1)
    exact = randomization_test(a, b, n_resamples=2**14).p_value
    p1 = randomization_test(a, b, n_resamples=5000, seed=1).p_value
    p1_again = randomization_test(a, b, n_resamples=5000, seed=1).p_value
    p2 = randomization_test(a, b, n_resamples=5000, seed=2).p_value
    assert p1 == p1_again
    assert p1 != p2
    assert abs(p1 - exact) < 0.03 and abs(p2 - exact) < 0.03
    # Monte Carlo p-values are never 0 (Phipson & Smyth): (b + 1) / (m + 1).
    big = randomization_test(np.ones(40), np.zeros(40), n_resamples=999, seed=0)
    assert big.p_value == pytest.approx(1 / 1000)


def test_randomization_identical_runs_p_is_one() -> None:
    assert randomization_test([0.2, 0.4, 0.9], [0.2, 0.4, 0.9]) == (0.0, 1.0)
    with pytest.raises(ValueError):
        randomization_test([], [])


# ----------------------------------------------------------------------------- holm
def test_holm_hand_example() -> None:
    # sorted: 0.005*4 = 0.02 ; 0.01*3 = 0.03 ; 0.03*2 = 0.06 ; 0.04*1 = 0.04 -> max(0.06, 0.04)
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([0.2]) == pytest.approx([0.2])
    assert holm([]) == []
    with pytest.raises(ValueError):
        holm([1.2])


def _holm_rejections(p: list[float], alpha: float) -> list[bool]:
    """Holm's sequentially rejective procedure, straight from the 1979 definition."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    reject = [False] * m
    for step, i in enumerate(order):
        if p[i] > alpha / (m - step):
            break
        reject[i] = True
    return reject


def test_holm_adjusted_p_agrees_with_sequential_procedure() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        p = list(rng.random(int(rng.integers(1, 8))) ** 3)
        adjusted = holm(p)
        for alpha in (0.01, 0.05, 0.1, 0.3):
            assert [a <= alpha for a in adjusted] == _holm_rejections(p, alpha)


# ----------------------------------------------------------------------------- bootstrap
def test_bootstrap_ci_reproducible_and_sane() -> None:
    rng = np.random.default_rng(0)
    x = rng.random(60)
    lo, hi = bootstrap_ci(x, n_resamples=4000, seed=42)
    assert (lo, hi) == bootstrap_ci(x, n_resamples=4000, seed=42)
    assert (lo, hi) != bootstrap_ci(x, n_resamples=4000, seed=43)
    assert lo < x.mean() < hi
    # Close to the normal-theory interval mean +- 1.96 s / sqrt(n).
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.15)
    assert bootstrap_ci([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3))
    lo90, hi90 = bootstrap_ci(x, n_resamples=4000, seed=42, confidence=0.9)
    assert lo <= lo90 and hi90 <= hi
    with pytest.raises(ValueError):
        bootstrap_ci([], n_resamples=10)
    with pytest.raises(ValueError):
        bootstrap_ci([0.1], confidence=1.0)


def test_bootstrap_matches_scipy_percentile_interval_roughly() -> None:
    st = pytest.importorskip("scipy.stats")
    x = np.random.default_rng(9).random(80)
    ref = st.bootstrap((x,), np.mean, method="percentile", n_resamples=20_000, random_state=1)
    lo, hi = bootstrap_ci(x, n_resamples=20_000, seed=1)
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=0.01)


# ----------------------------------------------------------------------------- batched forms
def test_batched_forms_equal_single_calls() -> None:
    from ragjudge.stats import bootstrap_cis, randomization_tests

    rng = np.random.default_rng(21)
    for n, resamples in ((6, 1000), (40, 700)):  # exact enumeration, then Monte Carlo
        X = rng.normal(0.02, 0.2, size=(4, n))
        X[2] = 0.0  # identical runs: p = 1
        batched = randomization_tests(X, n_resamples=resamples, seed=9)
        single = [randomization_test(row, n_resamples=resamples, seed=9) for row in X]
        # Same sign vectors; only the BLAS summation order may differ in the last bit.
        assert [r.p_value for r in batched] == [r.p_value for r in single]
        assert [r.statistic for r in batched] == pytest.approx([r.statistic for r in single], rel=1e-12)
        assert batched[2] == (0.0, 1.0)
        cis = bootstrap_cis(X, n_resamples=resamples, seed=9)
        expected = [bootstrap_ci(row, n_resamples=resamples, seed=9) for row in X]
        for got, exp in zip(cis, expected):
            assert got == pytest.approx(exp, rel=1e-12, abs=1e-15)
        assert cis[2] == (0.0, 0.0)
    with pytest.raises(ValueError):
        randomization_tests(np.zeros(3))
    with pytest.raises(ValueError):
        bootstrap_cis(np.zeros(3))
