"""Prediction-powered inference: many LLM labels, a few human ones, an honest interval.

Setting: a metric has a value per query (or per RAG sample). The LLM judge labels all N
queries; humans label a simple random sample of n of them. The estimand is the mean the metric
would have under human labels on all N queries. With Y the human-label value and f the
LLM-label value of a query, the PPI estimator (Angelopoulos et al., Science 2023) is

    theta = lambda * mean_N(f) + mean_n(Y - lambda * f)

-- the LLM mean corrected by the mean human-minus-LLM difference on the labelled queries
(lambda = 1: classic PPI). PPI++ (Angelopoulos, Duchi & Zrnic 2023) picks the lambda that
minimises the variance, so a weak judge is trusted less and the interval is never wider than
the human-only one. Because f is known on every query, theta - truth is the sampling error of
mean_n(Y - lambda f) (a difference estimator, Cochran 1977 ch. 7), so

* ``population="finite"`` (default; the estimand is the mean over these N queries):
  Var = (1 - n/N) s^2(Y - lambda f) / n and lambda* = cov(Y, f) / var(f);
* ``population="infinite"`` (the N queries are themselves a sample of a larger population):
  Var = (1 - n/N) s^2(Y - lambda f) / n + s^2(Y) / N, with the same lambda*. The error splits
  into mean_N(Y) - mu (the queries drawn) and theta - mean_N(Y) (the labels drawn), which are
  uncorrelated. ppi_py's formula, s^2(Y - lambda f)/n + lambda^2 s^2(f)/N with
  lambda* = cov / ((1 + n/N) var f), is for an unlabelled set *apart* from the labelled one;
  here the LLM labels every query, the labelled ones included, and that formula runs short
  (0.89 coverage at n = 50, N = 200 in the simulation of ``benchmarks/bench_trust.py``).

The two estimands have names in every output: ``collection`` (= ``population="finite"``: the
mean over the N queries at hand) and ``population`` (= ``"infinite"``: the mean of the
population the N queries were drawn from). An interval for one is not an interval for the
other: the collection interval ignores the variation of the queries themselves.

Small samples and bounded metrics. Three rules keep the interval honest when n is small or the
values pile up at an end of the metric's range; ``benchmarks/bench_trust.py`` chose them by
seeded simulation and prints their coverage (docs/concepts/estimands.md shows its table):

* lambda is fitted only from ``TUNE_MIN`` (30) labelled queries on; below, PPI++ is classic
  PPI (lambda = 1), since a lambda fitted on a handful of values makes the interval run short
  (0.86-0.92 coverage at n = 8 in the simulation). Constant LLM values on the labelled queries
  leave lambda unidentified: every lambda is unbiased, and lambda = 1 keeps the judge.
* The residual variance is estimated with pseudo-residuals: two at the residuals' mean plus and
  minus ``c``, each with weight ``w`` (the variance estimate is (SS + 2 w c^2) / (n - ddof + 2 w)).
  For graded values, ``w`` = 2 and ``c^2`` = the larger of the human and LLM sample variances
  (an Agresti-Coull-style "plus four": a few agreeing or skewed residuals cannot shrink the
  interval below what one disagreement of typical size would give). For two-point values at
  the ends of the metric's range (hit, success...), ``c`` = the range and ``w`` = 1/2 -- the
  Agresti-Min (2005) adjustment of a paired difference of proportions, which Y - f is. The
  human-only interval uses the same pseudo-values on Y. This replaces a variance floor that
  covered 0.57 of the time where it applied.
* Intervals are clipped to the metric's range (``bounds``); the estimate says so (``clipped``).

Under ``MIN_LABELS`` (30) labelled queries, every output says the sample is small and what
width to expect from ``MIN_LABELS`` labels (the variance :func:`plan_labels` uses).

Intervals are theta +- t_{n-1} * se (Student t, which keeps small pilots honest). Everything is
vectorised over rows, so a simulation of thousands of studies is a few array operations.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from .._lazy import optional
from ..data import Qrels, Run
from ..errors import InputError
from ..evaluate import evaluate
from ..measures import parse_measure, spec_of
from ..render import ResultSurface, render_table
from ..stats import t_two_sided_p
from .agreement import grades_in_scale
from .resample import Interval

__all__ = [
    "METHODS",
    "PPIEstimate",
    "PPIReport",
    "ppi_mean",
    "ppi_means",
    "ppi_evaluate",
    "ppi_scores",
    "ppi_samples",
    "parse_scores",
    "read_scores",
    "plan_labels",
    "plan_evaluation",
    "t_quantile",
]

Method = Literal["ppi++", "ppi"]
Population = Literal["finite", "infinite"]
#: The estimand of each ``population`` setting, as outputs name it.
ESTIMANDS = {"finite": "collection", "infinite": "population"}
#: ``--estimand`` values and the ``population`` setting each means.
POPULATION_OF = {v: k for k, v in ESTIMANDS.items()}
ESTIMAND_TEXT = {
    "collection": "the mean over this collection's queries",
    "population": "the mean over the population the queries were drawn from",
}
#: ``ppi++`` (power-tuned lambda, default) or ``ppi`` (classic, lambda = 1).
METHODS: tuple[str, ...] = ("ppi++", "ppi")
#: PPI++ fits lambda from this many labelled queries on (classic PPI below).
TUNE_MIN = 30
#: Weight of each of the two pseudo-residuals of graded and of two-point (binary) values.
PSEUDO_GRADED = 2.0
PSEUDO_BINARY = 0.5
#: Fewer labelled queries than this: the outputs say the sample is small.
MIN_LABELS = 30


@lru_cache(maxsize=1024)
def t_quantile(confidence: float, df: float) -> float:
    """Two-sided Student t critical value: P(|T_df| <= t) = confidence (bisection on
    :func:`ragjudge.stats.t_two_sided_p`, to 1e-12; above 1000 df the Cornish-Fisher
    expansion of Abramowitz & Stegun 26.7.5, accurate to ~1e-9 there)."""
    alpha = 1.0 - confidence
    if df > 1000:
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
                + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > alpha:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


def _check(confidence: float, method: str, population: str) -> None:
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence}", field="confidence")
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}", field="method")
    if population not in ("finite", "infinite"):
        raise InputError(f"population must be finite or infinite, got {population!r}",
                         field="population")


def _bounds_of(bounds: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(k,)`` low and high ends of each row's range (NaN: unbounded)."""
    if bounds is None:
        return np.full(k, np.nan), np.full(k, np.nan)
    b = np.asarray(bounds, dtype=np.float64)
    b = np.broadcast_to(b.reshape(-1, 2) if b.ndim > 1 else b[None, :], (k, 2))
    return b[:, 0].copy(), b[:, 1].copy()


def ppi_means(
    human: np.ndarray,
    llm_on_human: np.ndarray,
    llm_mean: np.ndarray,
    llm_var: np.ndarray,
    n_llm: int,
    *,
    method: Method = "ppi++",
    confidence: float = 0.95,
    population: Population = "finite",
    bounds: Any = None,
) -> dict[str, np.ndarray]:
    """Vectorised PPI over rows (independent studies or metrics).

    ``human``, ``llm_on_human``: ``(k, n)`` values on the n labelled queries; ``llm_mean``,
    ``llm_var``: ``(k,)`` mean and sample variance (ddof 1) of the LLM values over all
    ``n_llm`` queries. ``bounds``: the metric's range, ``(low, high)`` for every row or ``(k,
    2)`` (``None``: unbounded): intervals are clipped to it and two-point values at its ends
    get the binary rules (module docstring). Returns ``(k,)`` arrays: ``mean``, ``ci_low``,
    ``ci_high``, ``se``, ``lambda``, the human-only (``human_mean``, ``human_low``,
    ``human_high``) and LLM-only (``llm_low``, ``llm_high``) intervals for comparison, and the
    flags ``tuned`` (lambda fitted), ``binary`` and ``clipped``.
    """
    _check(confidence, method, population)
    y = np.atleast_2d(np.asarray(human, dtype=np.float64))
    f = np.atleast_2d(np.asarray(llm_on_human, dtype=np.float64))
    k, n = y.shape
    big_n = int(n_llm)
    if n < 2:
        raise InputError(f"PPI needs at least 2 human-labelled queries, got {n}", field="human")
    if big_n < n:
        raise InputError(f"{n} human-labelled queries but only {big_n} LLM-labelled ones",
                         field="human")
    fm = np.asarray(llm_mean, dtype=np.float64).reshape(-1)
    fv = np.asarray(llm_var, dtype=np.float64).reshape(-1)
    lo, hi = _bounds_of(bounds, k)
    reach = hi - lo  # NaN when unbounded
    finite = population == "finite"
    yc = y - y.mean(axis=1, keepdims=True)
    fc = f - f.mean(axis=1, keepdims=True)
    var_f = (fc * fc).sum(axis=1) / (n - 1)
    cov = (yc * fc).sum(axis=1) / (n - 1)
    tuned = method == "ppi++" and n >= TUNE_MIN
    fitted = np.full(k, False)
    if tuned:
        # Constant LLM values on the labelled queries leave lambda unidentified, not zero:
        # every lambda is unbiased, and lambda = 1 (classic PPI) keeps the judge.
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = np.where(var_f > 0, cov / np.where(var_f > 0, var_f, 1.0), 1.0)
        fitted = var_f > 0
    else:
        lam = np.ones(k)
    resid = y - lam[:, None] * f
    theta = resid.mean(axis=1) + lam * fm
    # Two-point values at the ends of the range (hit, success, p@1...): the Agresti-Min
    # adjustment of a paired difference of proportions. Otherwise "plus four" pseudo-residuals
    # one spread away (see "Small samples" in the module docstring).
    def at_ends(a: np.ndarray) -> np.ndarray:
        return ((a == lo[:, None]) | (a == hi[:, None])).all(axis=1)

    binary = np.isfinite(reach) & (reach > 0) & at_ends(y) & at_ends(f)
    spread = np.maximum(y.var(axis=1, ddof=1), f.var(axis=1, ddof=1))
    scale = np.maximum(np.abs(y).max(axis=1), np.abs(f).max(axis=1))
    fallback = np.where(np.isfinite(reach) & (reach > 0), reach, np.where(scale > 0, scale, 1.0))
    spread = np.where(spread > 0, spread, fallback * fallback / 4.0)
    reach2 = np.where(np.isfinite(reach), reach, 0.0) ** 2
    c2 = np.where(binary, reach2 * np.maximum(1.0, lam * lam), spread)
    h_c2 = np.where(binary, reach2, spread)
    w = np.where(binary, PSEUDO_BINARY, PSEUDO_GRADED)
    # A fitted lambda costs a degree of freedom (one more parameter, as in regression).
    ddof = np.where(fitted & (n > 2), 2, 1)
    r_ss = ((resid - resid.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    r_var = (r_ss + 2 * w * c2) / (n - ddof + 2 * w)
    y_var = ((yc * yc).sum(axis=1) + 2 * w * h_c2) / (n - 1 + 2 * w)
    fpc = 1.0 - n / big_n
    # theta - mu = (mean_N(Y) - mu) + (theta - mean_N(Y)): uncorrelated parts, so the
    # population estimand's variance is the collection's plus the queries' own s^2(Y) / N.
    extra = 0.0 if finite else y_var / big_n
    var = fpc * r_var / n + extra
    h_var = fpc * y_var / n + extra
    if tuned:
        # lambda = 0 is the human-only estimate; the tuned one is never allowed to be worse.
        worse = var > h_var
        lam = np.where(worse, 0.0, lam)
        theta = np.where(worse, y.mean(axis=1), theta)
        var = np.where(worse, h_var, var)
        r_var = np.where(worse, y_var, r_var)
        r_ss = np.where(worse, (yc * yc).sum(axis=1), r_ss)
        c2 = np.where(worse, h_c2, c2)
        ddof = np.where(worse, 1, ddof)
    t = t_quantile(confidence, n - 1)
    se = np.sqrt(np.maximum(var, 0.0))
    h_se = np.sqrt(h_var)
    l_se = np.sqrt(fv / big_n) if big_n > 1 else np.zeros_like(fm)
    t_llm = t_quantile(confidence, big_n - 1) if big_n > 1 else 0.0
    hm = y.mean(axis=1)

    def clip(a: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(lo), np.maximum(a, lo), a).clip(max=np.where(np.isfinite(hi), hi, np.inf))

    raw_low, raw_high = theta - t * se, theta + t * se
    low, high = clip(raw_low), clip(raw_high)
    return {
        "mean": theta, "ci_low": low, "ci_high": high, "se": se,
        "lambda": lam, "human_mean": hm, "human_low": clip(hm - t * h_se),
        "human_high": clip(hm + t * h_se), "llm_mean": fm, "llm_low": clip(fm - t_llm * l_se),
        "llm_high": clip(fm + t_llm * l_se),
        "tuned": fitted & (lam != 0.0), "binary": binary, "resid_var": r_var,
        "extra_var": np.broadcast_to(extra, (k,)).astype(np.float64), "human_var": y_var,
        # the residual variance with ``m`` labels is (ss_per_df * (m - ddof) + pseudo) /
        # (m - ddof + pseudo_weight): the observed spread, and the pseudo-residuals at m
        "ss_per_df": r_ss / np.maximum(n - ddof, 1), "pseudo": 2 * w * c2,
        "pseudo_weight": 2 * w + 0.0, "ddof": np.broadcast_to(ddof, (k,)).astype(np.float64),
        "clipped": (low != raw_low) | (high != raw_high),
    }


@dataclass(frozen=True)
class PPIEstimate(ResultSurface):
    """A prediction-powered estimate of a mean, beside the LLM-only and human-only ones."""

    mean: float
    ci_low: float
    ci_high: float
    n_human: int
    n_llm: int
    lam: float
    method: str
    llm_only: Interval
    human_only: Interval
    confidence: float = 0.95
    #: ``collection`` (the mean over these queries) or ``population`` (the mean over the
    #: population they were drawn from)
    estimand: str = "collection"
    #: lambda was fitted (PPI++ from ``TUNE_MIN`` labels on); false: lambda = 1 or 0 by rule
    tuned: bool = False
    #: two-point values at the ends of the range: the Agresti-Min interval
    binary: bool = False
    #: the interval was cut to the metric's range ``bounds``
    clipped: bool = False
    bounds: tuple[float, float] | None = None
    #: under ``MIN_LABELS`` labelled queries: the full width expected with ``MIN_LABELS``
    expected_width: float | None = None
    #: what the values are of, as the notes name them (``queries``, RAG ``samples``)
    unit: str = "queries"

    @property
    def width(self) -> float:
        return self.ci_high - self.ci_low

    def describe(self) -> str:
        """One line: the estimate, its interval, the estimand and the labels it stands on."""
        clip = "; clipped to the metric's range" if self.clipped else ""
        small = f"; {self.small_sample()}" if self.small_sample() else ""
        return (f"{self.mean:.4f} [{self.ci_low:.4f}, {self.ci_high:.4f}] ({self.confidence:.0%} "
                f"{self.method}, {self.estimand} mean; {self.n_human} human and {self.n_llm} LLM "
                f"labels, lambda {self.lam:.3f}{clip}{small})")

    def small_sample(self) -> str | None:
        """One line when fewer than :data:`MIN_LABELS` queries are human-labelled."""
        if self.n_human >= MIN_LABELS or self.n_human >= self.n_llm:
            return None
        more = ("" if self.expected_width is None else
                f"; with {MIN_LABELS} expect a width near {self.expected_width:.3f} "
                f"(now {self.width:.3f})")
        return f"only {self.n_human} human-labelled {self.unit} (fewer than {MIN_LABELS}){more}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``ppi`` entry: mean, ci_low, ci_high, n_human, n_llm, lambda (+ method and
        the LLM-only / human-only intervals)."""
        return {
            "mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high,
            "n_human": self.n_human, "n_llm": self.n_llm, "lambda": self.lam,
            "method": self.method, "confidence": self.confidence, "estimand": self.estimand,
            "tuned": self.tuned, "binary": self.binary, "clipped": self.clipped,
            "bounds": None if self.bounds is None else list(self.bounds),
            "small_sample": self.small_sample(), "expected_width": self.expected_width,
            "llm_only": self.llm_only.to_dict(), "human_only": self.human_only.to_dict(),
        }


def _finite(values: Any, what: str) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.isfinite(a).all():
        raise InputError(f"{what} must be finite numbers", field=what)
    return a


def ppi_mean(
    human: Sequence[float] | np.ndarray,
    llm_on_human: Sequence[float] | np.ndarray,
    llm_all: Sequence[float] | np.ndarray,
    *,
    method: Method = "ppi++",
    confidence: float = 0.95,
    population: Population = "finite",
    bounds: tuple[float, float] | None | Literal["auto"] = "auto",
) -> PPIEstimate:
    """PPI estimate of a mean from per-item values: ``human`` and ``llm_on_human`` on the n
    human-labelled items (same order), ``llm_all`` on all N items (the labelled ones included).
    ``bounds``: the metric's range (``"auto"``: [0, 1] when every value lies in it, else none).
    See the module docstring for the formulas."""
    y = _finite(human, "human")
    f = _finite(llm_on_human, "llm_on_human")
    a = _finite(llm_all, "llm_all")
    if len(y) != len(f):
        raise InputError(f"{len(y)} human values but {len(f)} LLM values on the same items",
                         field="llm_on_human")
    if len(y) < 2:
        raise InputError(f"PPI needs at least 2 human-labelled items, got {len(y)}", field="human")
    if bounds == "auto":
        bounds = unit_bounds(y, f, a)
    r = ppi_means(y[None], f[None], np.array([a.mean()]),
                  np.array([a.var(ddof=1) if len(a) > 1 else 0.0]), len(a),
                  method=method, confidence=confidence, population=population, bounds=bounds)
    g = {k: float(v[0]) for k, v in r.items()}
    expected = None
    if len(y) < MIN_LABELS <= len(a):
        m = MIN_LABELS - g["ddof"]
        at_m = (g["ss_per_df"] * m + g["pseudo"]) / (m + g["pseudo_weight"])
        expected = expected_width(at_m, g["extra_var"], MIN_LABELS, len(a), confidence)
    return PPIEstimate(
        mean=g["mean"], ci_low=g["ci_low"], ci_high=g["ci_high"], n_human=len(y), n_llm=len(a),
        lam=g["lambda"], method=method,
        llm_only=Interval(g["llm_mean"], g["llm_low"], g["llm_high"]),
        human_only=Interval(g["human_mean"], g["human_low"], g["human_high"]),
        confidence=confidence, estimand=ESTIMANDS[population], tuned=bool(g["tuned"]),
        binary=bool(g["binary"]), clipped=bool(g["clipped"]),
        bounds=None if bounds is None else (float(bounds[0]), float(bounds[1])),
        expected_width=expected,
    )


def unit_bounds(*values: np.ndarray) -> tuple[float, float] | None:
    """(0, 1) when every value lies in [0, 1] (a unit-range metric), else ``None``."""
    return (0.0, 1.0) if all(len(v) == 0 or (v.min() >= 0.0 and v.max() <= 1.0)
                             for v in values) else None


def expected_width(resid_var: float, extra_var: float, n: int, n_llm: int,
                   confidence: float = 0.95) -> float:
    """Full width of the interval with ``n`` labelled queries, for a residual variance
    ``resid_var`` (and the population estimand's ``extra_var``): 2 t sqrt((1 - n/N) s^2 / n +
    extra), the variance :func:`plan_labels` solves for n."""
    n = max(2, min(int(n), int(n_llm)))
    var = (1.0 - n / n_llm) * resid_var / n + extra_var
    return 2.0 * t_quantile(confidence, n - 1) * math.sqrt(max(var, 0.0))


def ppi_scores(
    llm: Mapping[str, float | None],
    human: Mapping[str, float | None],
    **options: Any,
) -> PPIEstimate:
    """:func:`ppi_mean` from ``{item id: value}`` maps (e.g. one RAG metric per sample id):
    ``llm`` covers every item, ``human`` a random subset. Items with an undetermined value
    (``None``/NaN) are left out; human items without an LLM value are an error."""

    def ok(v: Any) -> bool:
        return v is not None and math.isfinite(float(v))

    llm_ok = {k: float(v) for k, v in llm.items() if ok(v)}
    ids = [k for k, v in human.items() if ok(v)]
    missing = [k for k in ids if k not in llm_ok]
    if missing:
        raise InputError(f"{len(missing)} human-labelled items have no LLM value (first: {missing[0]!r})",
                         field="id")
    if not ids:
        raise InputError("the human and LLM scores have no item in common", field="id")
    return ppi_mean([float(human[k]) for k in ids], [llm_ok[k] for k in ids], list(llm_ok.values()),
                    **options)


def ppi_samples(
    llm: Any,
    human: Any,
    metrics: Sequence[str] | None = None,
    **options: Any,
) -> dict[str, PPIEstimate]:
    """PPI estimates of RAG sample metrics: ``llm`` is a :class:`ragjudge.rag.RagReport` (or
    ``{sample id: {metric: value}}``) over every sample, ``human`` the human scores of a random
    subset (the same two forms). ``metrics``: default every metric in both."""
    llm_scores = _scores_of(llm)
    human = _scores_of(human)
    names = list(metrics) if metrics is not None else [
        m for m in dict.fromkeys(k for v in llm_scores.values() for k in v)
        if any(m in h for h in human.values())]
    if not names:
        raise InputError("the human scores share no metric with the LLM scores", field="metric")
    out = {}
    for m in names:
        e = ppi_scores({k: v.get(m) for k, v in llm_scores.items()},
                       {k: v.get(m) for k, v in human.items()}, **options)
        _scale_check(m, llm_scores, human)
        out[m] = replace(e, unit="samples")
    return out


def _scale_check(metric: str, llm: Mapping[str, Mapping[str, Any]], human: Mapping[str, Mapping[str, Any]]) -> None:
    """Warn when one side's values of ``metric`` lie in [0, 1] and the other's do not: two
    scales (humans scoring 1-5), or a typo, move the estimate without a word otherwise."""
    def values(side: Mapping[str, Mapping[str, Any]]) -> list[float]:
        return [float(v[metric]) for v in side.values()
                if v.get(metric) is not None and math.isfinite(float(v[metric]))]

    a, h = values(llm), values(human)
    inside = [bool(x) and all(0.0 <= v <= 1.0 for v in x) for x in (a, h)]
    if a and h and inside[0] != inside[1]:
        out_side, vals = ("human", h) if inside[0] else ("LLM", a)
        other = "LLM" if out_side == "human" else "human"
        worst = max(vals, key=lambda v: max(v - 1.0, -v))
        warnings.warn(f"{metric}: the {other} scores lie in [0, 1] but a {out_side} score is {worst:g}: "
                      "two scales, or a typo? The estimate mixes them and its interval is not cut to "
                      "[0, 1]", stacklevel=3)


def _scores_of(obj: Any) -> dict[str, dict[str, float | None]]:
    if hasattr(obj, "sample_ids") and hasattr(obj, "values"):  # a RagReport
        cols = {m: obj.values(m) for m in obj.metrics}
        return {sid: {m: cols[m][i] for m in obj.metrics} for i, sid in enumerate(obj.sample_ids)}
    return {str(k): dict(v) for k, v in obj.items()}


def parse_scores(text: str, source: str = "<scores>") -> dict[str, dict[str, float | None]]:
    """Per-item scores ``{id: {metric: value}}`` from the JSON of ``ragjudge rag -f json -q``
    (``samples[].scores[metric].value``), JSON Lines objects with an ``id`` (or ``sample``,
    ``qid``) field and metric fields, or CSV with such a header."""
    stripped = text.lstrip("\ufeff").lstrip()
    if not stripped:
        raise InputError("empty scores file", source=source)
    out: dict[str, dict[str, float | None]] = {}
    if stripped.startswith("{") and '"samples"' in stripped[:200000]:
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON ({exc.msg})", source=source, line=exc.lineno) from None
        if isinstance(data, dict) and isinstance(data.get("samples"), list):
            for s in data["samples"]:
                vals = {m: v.get("value") if isinstance(v, dict) else v
                        for m, v in (s.get("scores") or {}).items()}
                _keep(out, str(s["sample"]), {m: _number(v, source, None, m) for m, v in vals.items()},
                      source, None)
            return out
    if stripped.startswith("{") and "\n" in stripped and not stripped.split("\n", 1)[0].strip().endswith("}"):
        # A pretty-printed object, not JSON Lines: the report of `rag -f json` without -q.
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict):
            raise InputError("a `ragjudge rag -f json` report without per-sample scores (its means "
                             "only); write it with -q (`ragjudge rag ... -f json -q`) to get them",
                             source=source, line=1)
    if stripped.startswith("{"):
        rows = []
        for i, line in enumerate(stripped.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((i, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise InputError(f"invalid JSON ({exc.msg})", source=source, line=i) from None
    else:
        records = list(csv.reader(io.StringIO(stripped)))
        header = records[0] if records else []
        rows = []
        for i, raw in enumerate(records[1:], 2):
            if not raw:
                continue
            if len(raw) != len(header):  # a value would land under the wrong metric
                raise InputError(f"expected {len(header)} columns ({', '.join(header)}), got {len(raw)}",
                                 source=source, line=i, field="columns")
            rows.append((i, dict(zip(header, raw))))
    for i, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"expected a JSON object, got {type(row).__name__}", source=source, line=i)
        key = next((k for k in ("id", "sample", "qid", "query_id") if k in row), None)
        if key is None:
            raise InputError("no id column (id, sample, qid or query_id)", source=source, line=i,
                             field="id")
        vals = {k: _number(v, source, i, k) for k, v in row.items() if k != key}
        _keep(out, str(row[key]), vals, source, i)
    return out


def _number(v: Any, source: str, line: int | None, field: str) -> float | None:
    """A score read from a file: a finite number, or None (null or an empty CSV field:
    undetermined). NaN or infinity is an error, never a label dropped without a word."""
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"not a number: {v!r}", source=source, line=line, field=field) from None
    if not math.isfinite(x):
        raise InputError(f"not a finite number: {v!r} (null, or an empty CSV field, is an "
                         "undetermined value)", source=source, line=line, field=field)
    return x


def _keep(out: dict[str, dict[str, float | None]], key: str, vals: dict[str, float | None],
          source: str, line: int | None) -> None:
    """``out[key] = vals``; the same id again with other values is an error (which is meant
    cannot be told), again with the same values it is counted once."""
    if key in out and out[key] != vals:
        raise InputError(f"{key!r} is given twice, with other values", source=source, line=line,
                         field="id")
    out[key] = vals


def read_scores(path: str) -> dict[str, dict[str, float | None]]:
    """:func:`parse_scores` of a file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise InputError(exc.strerror or "cannot read", source=str(path)) from None
    return parse_scores(text, source=str(path))


# ----------------------------------------------------------------------------- runs and qrels
@dataclass
class PPIReport(ResultSurface):
    """PPI estimates per run and metric (``estimates[run][metric]``) and of the differences of
    each run from the baseline (``differences[run][metric]``), with the LLM-only reports."""

    runs: list[str]
    metrics: list[str]
    estimates: dict[str, dict[str, PPIEstimate]]
    differences: dict[str, dict[str, PPIEstimate]]
    baseline: str
    reports: dict[str, Any] = field(default_factory=dict)  # LLM-only ragjudge Reports
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def run_dicts(self, *, per_query: bool = False) -> list[dict[str, Any]]:
        """One dict per run: its LLM-only report (``mean`` = LLM-only values, the PPI settings
        in ``meta["ppi"]``) plus ``ppi`` and, for runs other than the baseline, ``ppi_delta``
        (run minus baseline)."""
        out = []
        for r in self.runs:
            d = self.reports[r].to_dict(per_query=per_query) if r in self.reports else {"run": r}
            d.setdefault("meta", {})["ppi"] = {**self.settings, "notes": self.all_notes()}
            d["ppi"] = {m: e.to_dict() for m, e in self.estimates[r].items()}
            if r in self.differences:
                d["ppi_delta"] = {m: {**e.to_dict(), "baseline": self.baseline}
                                  for m, e in self.differences[r].items()}
            out.append(d)
        return out

    def to_dict(self) -> dict[str, Any]:
        """``{"runs": [...], "settings", "notes"}``, the runs as in :meth:`run_dicts`."""
        return {"runs": self.run_dicts(), "settings": self.settings, "notes": self.all_notes()}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def table(self, digits: int = 4) -> tuple[list[str], list[list[Any]]]:
        conf = int(round(100 * self.settings.get("confidence", 0.95)))
        heads = ["run", "metric", "LLM only", f"LLM {conf}% CI", "human only", f"human {conf}% CI",
                 self.settings.get("method", "ppi++").upper(), f"PPI {conf}% CI", "lambda", "n_human",
                 "n_llm"]
        rows = []

        def ci(lo: float | None, hi: float | None) -> str:
            return "-" if lo is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"

        for kind, table in (("", self.estimates), ("delta ", self.differences)):
            for r, per in table.items():
                for m, e in per.items():
                    name = f"{r} - {self.baseline}" if kind else r
                    rows.append([name, m, e.llm_only.value, ci(e.llm_only.ci_low, e.llm_only.ci_high),
                                 e.human_only.value, ci(e.human_only.ci_low, e.human_only.ci_high),
                                 e.mean, ci(e.ci_low, e.ci_high), e.lam, e.n_human, e.n_llm])
        return heads, rows

    def render(self, fmt: str = "table", digits: int = 4) -> str:
        if fmt == "json":
            runs = self.run_dicts()
            return json.dumps(runs[0] if len(runs) == 1 else runs, indent=2, allow_nan=False) + "\n"
        h, r = self.table(digits)
        return render_table(h, r, fmt, digits=digits)

    def footer(self) -> str:
        """What the table rests on, and the notes (lines under the plain table)."""
        s = self.settings
        estimand = ESTIMANDS.get(s.get("population", "finite"), "collection")
        foot = (f"{s.get('method', 'ppi++')}: LLM labels on {s.get('n_llm')} queries, human labels "
                f"on {s.get('n_human')} of them; estimand: {estimand} ({ESTIMAND_TEXT[estimand]}); "
                "Student t intervals")
        return foot + "\n" + "".join(f"note: {n}\n" for n in self.all_notes())

    def all_notes(self) -> list[str]:
        """The report's notes, then one line each for a small sample and for clipped intervals."""
        out = list(self.notes)
        ests = [e for table in (self.estimates, self.differences) for per in table.values()
                for e in per.values()]
        small = [e for e in ests if e.small_sample()]
        if small:
            widths = [e.expected_width for e in small if e.expected_width is not None]
            out.append(small[0].small_sample().split(";")[0]  # type: ignore[union-attr]
                       + ": small-sample intervals (classic PPI, plus-four pseudo-residuals) are "
                       "wide" + (f"; with {MIN_LABELS} labels expect widths near "
                                 f"{min(widths):.3f}-{max(widths):.3f} (plan-labels tells the n "
                                 "for a target width)" if widths else ""))
        clipped = sorted({f"{r}/{m}" for table in (self.estimates, self.differences)
                          for r, per in table.items() for m, e in per.items() if e.clipped})
        if clipped:
            out.append("intervals cut to the metric's range for " + ", ".join(clipped))
        return out

    def __str__(self) -> str:
        return self.render("table") + self.footer()

    def _repr_html_(self) -> str:
        h, r = self.table()
        return render_table(h, r, "html", title="prediction-powered estimates")

    def to_latex(self, digits: int = 4) -> str:
        """The estimates as a booktabs LaTeX table (``\\usepackage{booktabs}``)."""
        return self.render("latex", digits=digits)

    def to_dataframe(self) -> Any:
        """One row per (run or difference, metric), the columns of the table."""
        pd = optional("pandas", extra="pandas", what="to_dataframe()")
        h, r = self.table()
        return pd.DataFrame(r, columns=h)


def _per_query(rep: Any, metric: str) -> dict[str, float]:
    return {q: float(v) for q, v in zip(rep.qids, rep.values[metric]) if np.isfinite(v)}


def ppi_evaluate(
    llm_qrels: Qrels,
    runs: Mapping[str, Run] | Sequence[Run],
    metrics: Sequence[str],
    human_qrels: Qrels,
    *,
    method: Method = "ppi++",
    confidence: float = 0.95,
    population: Population = "finite",
    baseline: str | None = None,
    rel: int | None = None,
    scale: tuple[int, int] | None = None,
) -> PPIReport:
    """PPI estimates of each run's mean metric (and of each run's difference from ``baseline``,
    default the first run) from LLM qrels on all queries and human qrels on a random subset.

    The LLM-labelled queries are the LLM qrels' queries; the human-labelled ones those of the
    human qrels among them (human queries the LLM did not label are left out, with a note).
    Raises :class:`InputError` when the two share no query or fewer than 2, or when ``scale``
    (low, high) is given and a grade of either qrels lies outside it.
    """
    _check(confidence, method, population)
    if scale is not None:
        grades_in_scale(human_qrels, scale)
        grades_in_scale(llm_qrels, scale)
    names, llm_vals, hum_vals, reports, common, notes = _paired_values(
        llm_qrels, runs, metrics, human_qrels, rel)
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise InputError(f"baseline {baseline!r} is not one of the runs: {', '.join(names)}",
                         field="baseline")
    metrics = list(metrics)
    opts = dict(method=method, confidence=confidence, population=population)
    unit = {m: _unit_metric(m, rel) for m in metrics}
    estimates = {n: {m: ppi_scores(llm_vals[n][m], hum_vals[n][m], **opts,
                                   bounds=(0.0, 1.0) if unit[m] else None) for m in metrics}
                 for n in names}
    differences: dict[str, dict[str, PPIEstimate]] = {}
    for n in names:
        if n == baseline:
            continue
        differences[n] = {}
        for m in metrics:
            a, b = llm_vals[n][m], llm_vals[baseline][m]
            ha, hb = hum_vals[n][m], hum_vals[baseline][m]
            diff = {q: a[q] - b[q] for q in a if q in b}
            hdiff = {q: ha[q] - hb[q] for q in ha if q in hb}
            differences[n][m] = ppi_scores(diff, hdiff, **opts,
                                           bounds=(-1.0, 1.0) if unit[m] else None)
    return PPIReport(
        runs=names, metrics=metrics, estimates=estimates, differences=differences,
        baseline=baseline, reports=reports,
        settings={"method": method, "confidence": confidence, "population": population,
                  "estimand": ESTIMANDS[population],
                  "n_llm": llm_qrels.num_queries, "n_human": len(common),
                  "interval": "Student t, n_human - 1 df",
                  "human_source": human_qrels.source, "llm_source": llm_qrels.source},
        notes=notes,
    )


def _unit_metric(metric: str, rel: int | None) -> bool:
    """Whether every value of ``metric`` lies in [0, 1] (its range, for the intervals)."""
    m = parse_measure(metric, rel=rel)
    return bool(spec_of(m).in_unit_interval(m))


def _paired_values(llm_qrels: Qrels, runs: Mapping[str, Run] | Sequence[Run], metrics: Sequence[str],
                   human_qrels: Qrels, rel: int | None) -> tuple[Any, ...]:
    """Per-query values of every run and metric under the LLM qrels (all their queries) and
    under the human qrels (the human queries the LLM also labelled)."""

    if not isinstance(runs, Mapping):
        runs = {r.name: r for r in runs}
    if not runs:
        raise InputError("no runs given", field="runs")
    llm_q = set(llm_qrels.query_ids)
    common = [q for q in human_qrels.query_ids if q in llm_q]
    if not common:
        raise InputError("the human and LLM qrels have no query in common (check the query ids)",
                         source=human_qrels.source, field="qid")
    if len(common) < 2:
        raise InputError(f"PPI needs at least 2 human-labelled queries, got {len(common)}",
                         source=human_qrels.source, field="qid")
    notes = []
    if len(common) < human_qrels.num_queries:
        notes.append(f"{human_qrels.num_queries - len(common)} human-labelled queries have no LLM "
                     "labels and are left out")
    human_sub = human_qrels.filter(common)
    reports, llm_vals, hum_vals = {}, {}, {}
    for name, run in runs.items():
        reports[name] = evaluate(llm_qrels, run, list(metrics), rel=rel)
        hrep = evaluate(human_sub, run, list(metrics), rel=rel)
        llm_vals[name] = {m: _per_query(reports[name], m) for m in metrics}
        hum_vals[name] = {m: _per_query(hrep, m) for m in metrics}
    return list(runs), llm_vals, hum_vals, reports, common, notes


# ----------------------------------------------------------------------------- planning
def plan_labels(
    human: Sequence[float] | np.ndarray,
    llm_on_human: Sequence[float] | np.ndarray,
    n_llm: int,
    width: float,
    *,
    method: Method = "ppi++",
    confidence: float = 0.95,
    population: Population = "finite",
    bounds: tuple[float, float] | None | Literal["auto"] = "auto",
) -> dict[str, Any]:
    """How many human-labelled queries give a ``width``-wide interval (full width, high - low),
    from a pilot's human and LLM values on the same queries.

    With sigma^2 the pilot's variance of Y - lambda f (PPI) or of Y (human only) and z the
    normal quantile, the finite-population width 2 z sigma sqrt(1/n - 1/N) is solved for n:
    n = 1 / ((w / (2 z sigma))^2 + 1/N) (the population estimand: n = 1 / (((w / 2z)^2 -
    s^2(Y)/N) / sigma^2 + 1/N)). A pilot is an estimate: ask for some margin.
    """
    _check(confidence, method, population)
    y = _finite(human, "human")
    f = _finite(llm_on_human, "llm_on_human")
    if len(y) != len(f):
        raise InputError(f"{len(y)} human values but {len(f)} LLM values", field="llm_on_human")
    if len(y) < 2:
        raise InputError(f"a pilot needs at least 2 human-labelled queries, got {len(y)}",
                         field="human")
    if not width > 0:
        raise InputError(f"target width must be positive, got {width}", field="width")
    big_n = int(n_llm)
    if bounds == "auto":
        bounds = unit_bounds(y, f)
    r = ppi_means(y[None], f[None], np.array([f.mean()]), np.array([f.var(ddof=1)]),
                  max(big_n, len(y)), method=method, confidence=confidence, population=population,
                  bounds=bounds)
    lam = float(r["lambda"][0])
    z = t_quantile(confidence, 1e9)
    half = width / 2.0

    def needed(var_resid: float, extra: float) -> int | None:
        if var_resid <= 0:
            return 2
        room = (half / z) ** 2 - extra
        # None: unreachable, the population term s^2(Y)/N alone is wider than the target
        if room <= 0:
            return None
        return max(2, min(big_n, math.ceil(1.0 / (room / var_resid + 1.0 / big_n))))

    # The variances the intervals use (with their pseudo-residuals), so a pilot that agrees
    # on every query does not promise a point.
    v_ppi = float(r["resid_var"][0])
    v_h = float(r["human_var"][0])
    extra = float(r["extra_var"][0])  # the population estimand's s^2(Y) / N
    corr = float(np.corrcoef(y, f)[0, 1]) if np.std(y) > 0 and np.std(f) > 0 else None
    return {
        "width": width, "confidence": confidence, "method": method, "population": population,
        "estimand": ESTIMANDS[population],
        "n_pilot": len(y), "n_llm": big_n, "lambda": lam, "correlation": corr,
        "n_ppi": needed(v_ppi, extra), "n_human_only": needed(v_h, 0.0),
        "pilot_width": float(r["ci_high"][0] - r["ci_low"][0]),
    }


def plan_evaluation(
    llm_qrels: Qrels,
    runs: Mapping[str, Run] | Sequence[Run],
    metrics: Sequence[str],
    pilot_qrels: Qrels,
    width: float,
    *,
    method: Method = "ppi++",
    confidence: float = 0.95,
    population: Population = "finite",
    rel: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`plan_labels` for every run and metric, from LLM qrels on all queries and a pilot
    of human qrels on a few: one dict per (run, metric) with ``run`` and ``metric`` added."""
    names, llm_vals, hum_vals, _, _, _ = _paired_values(llm_qrels, runs, metrics, pilot_qrels, rel)
    out = []
    for n in names:
        for m in metrics:
            ids = [q for q in hum_vals[n][m] if q in llm_vals[n][m]]
            plan = plan_labels([hum_vals[n][m][q] for q in ids], [llm_vals[n][m][q] for q in ids],
                               llm_qrels.num_queries, width, method=method, confidence=confidence,
                               population=population,
                               bounds=(0.0, 1.0) if _unit_metric(m, rel) else None)
            out.append({"run": n, "metric": m, **plan})
    return out
