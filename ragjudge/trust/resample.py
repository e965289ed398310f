"""Seeded bootstrap over queries, shared by the agreement statistics.

A bootstrap resample of n queries is a vector of multiplicities (how often each query was
drawn); any statistic that is a function of per-query *sums* (confusion counts, metric totals)
is then one matrix product per chunk of resamples, never a Python loop over resamples.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Interval", "resampled_sums", "percentile_interval"]

# Work budget of one chunk (matrix cells) of multiplicities; bounds memory on big collections.
_CHUNK_CELLS = 2_000_000


class Interval(NamedTuple):
    """A point value with its confidence interval; any part may be ``None`` (undetermined)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high}


def resampled_sums(x: np.ndarray, n_resamples: int, seed: int | None) -> np.ndarray:
    """``(n_resamples, k)`` sums of the rows of the ``(n, k)`` matrix ``x`` over bootstrap
    resamples of its n rows (drawn with replacement, Efron & Tibshirani 1993)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < 1:
        raise ValueError("the bootstrap needs at least one item")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
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


def percentile_interval(
    value: float | None, resampled: np.ndarray, confidence: float
) -> Interval:
    """Percentile interval of a statistic from its resampled values (NaN = undefined in that
    resample, left out). Undetermined (``None`` bounds) when the point value is, or when more
    than half of the resamples are undefined."""
    v = None if value is None or not np.isfinite(value) else float(value)
    r = np.asarray(resampled, dtype=np.float64)
    ok = r[np.isfinite(r)]
    if v is None or len(ok) * 2 < len(r) or not len(ok):
        return Interval(v, None, None)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(ok, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(v, float(lo), float(hi))
