"""Significance tests and confidence intervals for paired per-query scores.

Small pure functions over 1-d float arrays; nothing here knows about runs or metrics.
Everything random takes a ``seed`` and builds its own :class:`numpy.random.Generator`, so a
result depends only on its inputs. scipy is not needed: the Student t tail comes from the
regularized incomplete beta function evaluated by a continued fraction.

References
----------
* R. A. Fisher (1935), *The Design of Experiments* -- the randomization test.
* M. D. Smucker, J. Allan, B. Carterette (2007), "A comparison of statistical significance
  tests for information retrieval evaluation", CIKM -- paired randomization test for IR.
* B. Phipson, G. K. Smyth (2010), "Permutation p-values should never be zero", SAGMB --
  the ``(b + 1) / (m + 1)`` Monte Carlo p-value.
* S. Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J. Stat.
* B. Efron, R. Tibshirani (1993), *An Introduction to the Bootstrap* -- percentile intervals.
* J. Cohen (1988), *Statistical Power Analysis for the Behavioral Sciences*, 2nd ed., eq. 2.3.5
  -- the paired effect size d_z.
* W. H. Press et al., *Numerical Recipes*, sec. 6.4 -- incomplete beta by continued fraction
  (modified Lentz, W. J. Lentz 1976).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .errors import InputError

__all__ = [
    "TestResult",
    "regularized_incomplete_beta",
    "t_two_sided_p",
    "paired_t_test",
    "randomization_test",
    "randomization_tests",
    "bootstrap_ci",
    "bootstrap_cis",
    "resampled_sums",
    "check_resampling",
    "holm",
    "cohens_dz",
    "win_tie_loss",
]

# Work budget of one vectorized chunk (matrix cells) for resampling; bounds memory.
_CHUNK_CELLS = 2_000_000


class TestResult(NamedTuple):
    """Outcome of a paired test: the statistic and the two-sided p-value."""

    statistic: float
    p_value: float


def _finite_matrix(values: Any, what: str) -> np.ndarray:
    """``values`` as a float64 (k, n) matrix of finite numbers, or a ValueError naming ``what``."""
    m = np.asarray(values, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"{what} must be a (k, n) matrix, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError(f"{what} must be finite")
    return m


def _as_1d(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{what} must be 1-dimensional, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{what} must be finite")
    return a


def _differences(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray | None) -> np.ndarray:
    x = _as_1d(a, "scores")
    if b is None:
        return x
    y = _as_1d(b, "scores")
    if x.shape != y.shape:
        raise ValueError(f"paired scores differ in length: {len(x)} vs {len(y)}")
    return x - y


# ----------------------------------------------------------------------------- t distribution
def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b) (Numerical Recipes 6.4), by the modified Lentz method.

    I_x(a,b) = x^a (1-x)^b / (a B(a,b)) * 1/(1+ d1/(1+ d2/(1+ ...))), with
    d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),  d_{2m} = m (b-m) x / ((a+2m-1)(a+2m)).
    """
    # Lentz's guard against a zero denominator (not a tolerance on the result).
    tiny = 1e-300
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        m2 = 2 * m
        # even step d_{2m}
        num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= d * c
        # odd step d_{2m+1}
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        f *= step
        # Converged when the last factor no longer changes f at double precision.
        if abs(step - 1.0) <= 4.0 * np.finfo(float).eps:
            return f
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) = B(x; a, b) / B(a, b) for a, b > 0 and 0 <= x <= 1.

    Uses the continued fraction directly when x < (a+1)/(a+b+2) (where it converges fast) and
    the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) otherwise (Numerical Recipes 6.4).
    """
    if not (a > 0 and b > 0):
        raise ValueError(f"a and b must be positive, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x == 0.0 or x == 1.0:
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with ``df`` degrees of freedom.

    P = I_{df/(df+t^2)}(df/2, 1/2)  (Abramowitz & Stegun 26.7.1 / 26.5.27).
    """
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isnan(t):
        raise ValueError("t statistic is NaN")
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


# ----------------------------------------------------------------------------- paired tests
def paired_t_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray | None = None) -> TestResult:
    """Paired two-sided Student t test of mean(a - b) = 0 (or mean(a) = 0 when ``b`` is None).

    t = mean(d) / (s_d / sqrt(n)), s_d the sample standard deviation (n - 1), df = n - 1
    (Student 1908). Matches ``scipy.stats.ttest_rel``. Degenerate cases are defined rather than
    NaN: all differences zero -> t = 0, p = 1; constant non-zero differences -> t = +-inf, p = 0.
    Needs at least 2 pairs.
    """
    d = _differences(a, b)
    n = len(d)
    if n < 2:
        raise ValueError(f"the t test needs at least 2 paired values, got {n}")
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        if mean == 0.0:
            return TestResult(0.0, 1.0)
        return TestResult(math.copysign(math.inf, mean), 0.0)
    t = mean / (sd / math.sqrt(n))
    return TestResult(t, t_two_sided_p(t, n - 1))


def randomization_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray | None = None,
    *,
    n_resamples: int = 10_000,
    seed: int | None = 0,
) -> TestResult:
    """Paired two-sided randomization (sign-flip permutation) test of mean(a - b) = 0.

    Under H0 each per-query difference d_i is as likely to be +d_i as -d_i (Fisher 1935;
    Smucker et al. 2007). Statistic: |mean(d)|. When 2^n <= ``n_resamples`` every sign vector is
    enumerated and p = #{s : |mean(s*d)| >= |mean(d)|} / 2^n exactly; otherwise ``n_resamples``
    random sign vectors give p = (b + 1) / (m + 1) (Phipson & Smyth 2010), reproducible by
    ``seed``. Returns (mean difference, p).
    """
    return randomization_tests(_differences(a, b)[None, :], n_resamples=n_resamples, seed=seed)[0]


def randomization_tests(
    differences: Sequence[Sequence[float]] | np.ndarray,
    *,
    n_resamples: int = 10_000,
    seed: int | None = 0,
) -> list[TestResult]:
    """:func:`randomization_test` of every row of a (k, n) matrix of paired differences.

    All rows share the same sign vectors (one matrix product per chunk), so each result equals
    ``randomization_test(row, n_resamples=..., seed=...)``.
    """
    D = _finite_matrix(differences, "differences")
    k, n = D.shape
    if n < 1:
        raise ValueError("the randomization test needs at least 1 paired value")
    check_resampling(n_resamples, seed)
    obs = np.abs(D.sum(axis=1))
    # Sums of the same numbers in another sign pattern can tie the observed sum mathematically
    # (e.g. 0.1 + 0.2 - 0.3 = 0) yet differ in the last bits; such ties must count as extreme.
    threshold = obs - 1e-12 * np.abs(D).sum(axis=1)
    counts = np.zeros(k, dtype=np.int64)
    rows = max(1, _CHUNK_CELLS // n)
    exact = n <= 62 and 2**n <= n_resamples
    if exact:
        total = 2**n
        bits = np.arange(n, dtype=np.uint64)
        for start in range(0, total, rows):
            codes = np.arange(start, min(total, start + rows), dtype=np.uint64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits[None, :]) & np.uint64(1)).astype(np.float64)
            counts += np.count_nonzero(np.abs(signs @ D.T) >= threshold[None, :], axis=0)
    else:
        rng = np.random.default_rng(seed)
        done = 0
        while done < n_resamples:
            m = min(rows, n_resamples - done)
            signs = rng.integers(0, 2, size=(m, n), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
            counts += np.count_nonzero(np.abs(signs @ D.T) >= threshold[None, :], axis=0)
            done += m
    out = []
    for i in range(k):
        mean = float(D[i].mean())
        if obs[i] == 0.0:
            out.append(TestResult(mean, 1.0))
        elif exact:
            out.append(TestResult(mean, int(counts[i]) / 2**n))
        else:
            out.append(TestResult(mean, (int(counts[i]) + 1) / (n_resamples + 1)))
    return out


# ----------------------------------------------------------------------------- intervals
def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean (Efron & Tibshirani 1993, ch. 13).

    Draw ``n_resamples`` samples of size n with replacement, take each sample's mean, and
    return the (1-c)/2 and (1+c)/2 quantiles of those means (linear interpolation). For a
    paired difference pass the per-query differences. Reproducible by ``seed``.
    """
    x = _as_1d(values, "values")
    return bootstrap_cis(x[None, :], n_resamples=n_resamples, confidence=confidence, seed=seed)[0]


def check_resampling(n_resamples: Any, seed: Any) -> None:
    """A resample count is a positive integer and a seed ``None`` or a non-negative integer
    (numpy refuses negative seeds deep inside; say it here, naming the parameter)."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise InputError(f"must be a positive integer, got {n_resamples!r}", field="resamples")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise InputError(f"must be a non-negative integer, got {seed!r}", field="seed")


def _available_memory() -> int | None:
    """Bytes of physical memory free now (``None`` where the system does not say)."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def resampled_sums(x: np.ndarray, n_resamples: int, seed: int | None) -> np.ndarray:
    """``(n_resamples, k)`` sums of the rows of the ``(n, k)`` matrix ``x`` over bootstrap
    resamples of its n rows (drawn with replacement, Efron & Tibshirani 1993).

    A resample is a vector of multiplicities (how often each row was drawn), so the k sums
    of a chunk of resamples are one matrix product, never a Python loop over resamples.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < 1:
        raise ValueError("the bootstrap needs at least one item")
    check_resampling(n_resamples, seed)
    # Every resampled sum is kept (the interval is their quantiles): refuse a count whose
    # table cannot fit in memory, in one line, instead of an allocation error deep in numpy.
    need = int(n_resamples) * max(1, x.shape[1]) * 8 * 2  # the sums and the quantile's copy
    free = _available_memory()
    if free is not None and need > free:
        most = max(1, free // (max(1, x.shape[1]) * 8 * 2))
        raise InputError(f"{n_resamples} bootstrap resamples of {x.shape[1]} value(s) need "
                         f"~{need / 2**30:.1f} GiB; {free / 2**30:.1f} GiB is free (at most ~{most} "
                         "resamples fit)", field="resamples")
    rng = np.random.default_rng(seed)
    out = np.empty((n_resamples, x.shape[1]), dtype=np.float64)
    rows = max(1, _CHUNK_CELLS // n)
    for start in range(0, n_resamples, rows):
        m = min(rows, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        flat = (idx + (np.arange(m, dtype=np.int64) * n)[:, None]).ravel()
        mult = np.bincount(flat, minlength=m * n).reshape(m, n).astype(np.float64)
        out[start : start + m] = mult @ x
    return out


def bootstrap_cis(
    matrix: Sequence[Sequence[float]] | np.ndarray,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> list[tuple[float, float]]:
    """:func:`bootstrap_ci` of every row of a (k, n) matrix, sharing the resamples.

    Each resample is a vector of multiplicities c (how often each of the n items was drawn), so
    the k resampled means are one matrix product c @ X.T / n; each result equals
    ``bootstrap_ci(row, ...)`` with the same seed.
    """
    X = _finite_matrix(matrix, "values")
    k, n = X.shape
    if n < 1:
        raise ValueError("the bootstrap needs at least 1 value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    check_resampling(n_resamples, seed)
    means = resampled_sums(X.T, n_resamples, seed) / n
    alpha = 1.0 - confidence
    q = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)
    # A constant sample has exactly that mean in every resample; keep it exact.
    lo = np.where(X.min(axis=1) == X.max(axis=1), X[:, 0], q[0])
    hi = np.where(X.min(axis=1) == X.max(axis=1), X[:, 0], q[1])
    return [(float(a), float(b)) for a, b in zip(lo, hi)]


# ----------------------------------------------------------------------------- multiplicity
def holm(p_values: Sequence[float] | np.ndarray) -> list[float]:
    """Holm (1979) step-down adjusted p-values, in the input order.

    With p_(1) <= ... <= p_(m) sorted ascending, adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    Rejecting where adj <= alpha controls the family-wise error rate at alpha.
    """
    p = _as_1d(p_values, "p-values")
    if ((p < 0) | (p > 1)).any():
        raise ValueError("p-values must be in [0, 1]")
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.maximum.accumulate(scaled)
    out = np.empty(m, dtype=np.float64)
    out[order] = adjusted
    return out.tolist()


# ----------------------------------------------------------------------------- effect sizes
def cohens_dz(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray | None = None) -> float | None:
    """Paired effect size d_z = mean(d) / s_d of the differences d = a - b (Cohen 1988).

    s_d is the sample standard deviation (n - 1), so d_z = t / sqrt(n) of :func:`paired_t_test`.
    Defined rather than NaN where it can be: all differences zero -> 0.0. ``None`` (undefined)
    with fewer than 2 pairs or constant non-zero differences (s_d = 0).
    """
    d = _differences(a, b)
    if len(d) < 2:
        return None
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return 0.0 if mean == 0.0 else None
    return mean / sd


def win_tie_loss(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray | None = None
) -> tuple[int, int, int]:
    """``(wins, ties, losses)``: how many paired differences d = a - b are > 0, = 0, < 0.

    A difference within 1e-12 of the larger magnitude is a tie: two scores computed from the
    same documents in another order may differ in the last bits.
    """
    d = _differences(a, b)
    if b is None:
        scale = np.abs(d)
    else:
        scale = np.maximum(np.abs(_as_1d(a, "scores")), np.abs(_as_1d(b, "scores")))
    tie = np.abs(d) <= 1e-12 * np.maximum(scale, 1.0)
    wins = int(np.count_nonzero((d > 0) & ~tie))
    losses = int(np.count_nonzero((d < 0) & ~tie))
    return wins, len(d) - wins - losses, losses
