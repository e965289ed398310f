"""Seeded bootstrap over queries, shared by the agreement statistics.

A bootstrap resample of n queries is a vector of multiplicities (how often each query was
drawn); any statistic that is a function of per-query *sums* (confusion counts, metric totals)
is then one matrix product per chunk of resamples, never a Python loop over resamples.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..stats import resampled_sums  # the one multiplicity resampler (bootstrap_cis uses it too)

__all__ = ["Interval", "resampled_sums", "percentile_interval"]


class Interval(NamedTuple):
    """A point value with its confidence interval; any part may be ``None`` (undetermined)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None

    def to_dict(self) -> dict[str, float | None]:
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high}


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
