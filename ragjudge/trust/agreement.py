"""How far LLM labels can stand in for human ones, with bootstrap intervals.

Two questions matter when an LLM judge replaces assessors (Faggioli et al. 2023; Upadhyay et al.
2024, UMBRELA): do the labels agree pair by pair, and -- what evaluation actually needs -- do the
*systems* come out in the same order? :func:`label_agreement` answers the first on the pairs both
qrels judge; :func:`ranking_agreement` the second, by evaluating every run under both qrels.

Every statistic comes with a seeded 95% percentile bootstrap interval that resamples *queries*
(the unit the collection was sampled by; pairs inside a query are not independent). All
statistics are computed from resampled confusion matrices / per-query score sums, vectorised
over resamples.

Label level (rows: reference = human, columns: candidate = LLM):

* Cohen's kappa (Cohen 1960) on the full scale and binarised at ``rel``;
* weighted kappa, linear |i-j| and quadratic (i-j)^2 weights on grade distances (Cohen 1968);
* Krippendorff's alpha with the ordinal metric (Krippendorff 2011, "Computing Krippendorff's
  alpha-reliability"), from the coincidence matrix of the two raters;
* the confusion matrix with row percentages, exact agreement, binary precision/recall;
* leniency: mean candidate grade minus mean reference grade, overall and per reference grade
  (Clarke & Dietz 2024 find LLM judges lenient).

System level, per metric, on the queries both qrels judge:

* Kendall's tau-b (Kendall 1945), Spearman's rho (Pearson correlation of average ranks);
* tau-ap (Yilmaz, Aslam & Robertson 2008): top-weighted, the reference ordering is the truth and
  the candidate's ordering is walked top-down; reference ties count half;
* rank-biased overlap, extrapolated (RBO_ext, Webber, Moffat & Zobel 2010, eq. 32), p = 0.9;
* swaps: among the system pairs that differ significantly under the reference labels (paired
  t test by default, or randomization test; Holm-adjusted over all pairs; :mod:`ragjudge.stats`),
  how many the candidate labels put in the opposite order.

Statistics that cannot be computed are ``None`` with a reason in ``notes``, never NaN.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data import Qrels, Run
from ..errors import InputError
from ..render import ResultSurface, format_value, html_note, render_table
from ..stats import holm, paired_t_test, randomization_tests
from .resample import Interval, percentile_interval, resampled_sums
from ..evaluate import evaluate
from .._lazy import optional

__all__ = [
    "AgreementReport",
    "Interval",
    "label_agreement",
    "ranking_agreement",
    "cohen_kappa",
    "kendall_tau_b",
    "tau_ap",
    "spearman_rho",
    "rank_biased_overlap",
    "krippendorff_alpha_ordinal",
    "krippendorff_alpha_raters",
    "grades_in_scale",
    "LABEL_STATS",
    "RANKING_STATS",
]

#: Label-level statistics, in report order.
LABEL_STATS: tuple[str, ...] = (
    "exact_agreement",
    "cohen_kappa",
    "weighted_kappa_linear",
    "weighted_kappa_quadratic",
    "krippendorff_alpha",
    "binary_kappa",
    "binary_precision",
    "binary_recall",
    "leniency",
)
#: System-level statistics per metric, in report order.
RANKING_STATS: tuple[str, ...] = ("kendall_tau_b", "tau_ap", "spearman_rho", "rbo")

_DEFAULT_RESAMPLES = 1000


# ----------------------------------------------------------------------------- label statistics
def _weights(m: int, kind: str | None, values: np.ndarray | None = None) -> np.ndarray:
    g = np.arange(m, dtype=np.float64) if values is None else np.asarray(values, dtype=np.float64)
    d = g[:, None] - g[None, :]
    if kind is None:
        return (d != 0).astype(np.float64)
    if kind == "linear":
        return np.abs(d)
    if kind == "quadratic":
        return d * d
    raise ValueError(f"weights must be None, 'linear' or 'quadratic', not {kind!r}")


def _kappas(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """kappa = 1 - sum(w O) / sum(w E) of a stack ``(B, m, m)`` of confusion counts."""
    n = c.sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.einsum("bi,bj->bij", c.sum(axis=2), c.sum(axis=1)) / n[:, None, None]
        denom = (w * expected).sum(axis=(1, 2))
        k = 1.0 - (w * c).sum(axis=(1, 2)) / denom
    k[(n == 0) | (denom <= 1e-12 * np.maximum(n, 1))] = np.nan
    return k


def cohen_kappa(confusion: np.ndarray, *, weights: str | None = None) -> float | None:
    """Cohen's kappa of a square confusion matrix (rows: rater A, columns: rater B).

    kappa = 1 - sum(w * O) / sum(w * E), where O are observed proportions, E = outer product of
    the marginals, and w the disagreement weights: 0/1 (``weights=None``, Cohen 1960), |i-j|
    (``"linear"``) or (i-j)^2 (``"quadratic"``, Cohen 1968), i, j the row/column indices.
    ``None`` when undefined (no observations, or no expected disagreement).
    """
    c = np.asarray(confusion, dtype=np.float64)
    v = _kappas(c[None], _weights(c.shape[0], weights))[0]
    return None if not np.isfinite(v) else float(v)


def _alpha_ordinal(c: np.ndarray) -> np.ndarray:
    """Krippendorff's ordinal alpha of a stack of two-rater confusion matrices: the
    coincidences are o = C + C^T (each pair contributes both ordered values)."""
    return _alpha_from_coincidences(c + np.transpose(c, (0, 2, 1)))


def _alpha_from_coincidences(o: np.ndarray) -> np.ndarray:
    """Ordinal alpha of a stack ``(B, m, m)`` of coincidence matrices (Krippendorff 2011):
    n_c the marginals, N = sum n_c, delta^2(c, k) = (sum_{g=c}^{k} n_g - (n_c + n_k) / 2)^2,
    alpha = 1 - (N - 1) sum o delta^2 / sum_{c,k} n_c n_k delta^2."""
    nc = o.sum(axis=2)
    total = nc.sum(axis=1)
    m = o.shape[1]
    i, j = np.indices((m, m))
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    cum = np.cumsum(nc, axis=1)
    span = cum[:, hi] - cum[:, lo] + nc[:, lo]
    delta = (span - (nc[:, i] + nc[:, j]) / 2.0) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        num = (total - 1.0) * (o * delta).sum(axis=(1, 2))
        den = (np.einsum("bi,bj->bij", nc, nc) * delta).sum(axis=(1, 2))
        a = 1.0 - num / den
    a[(total < 2) | (den <= 0)] = np.nan
    return a


def krippendorff_alpha_raters(values: np.ndarray) -> float | None:
    """Krippendorff's ordinal alpha of any number of raters with missing values.

    ``values``: ``(raters, units)`` integer grades, negative = missing. Units with fewer than
    two values are not pairable and left out; a unit with m values adds
    (n_u n_u^T - diag(n_u)) / (m - 1) to the coincidences, n_u its counts per grade.
    """
    v = np.asarray(values, dtype=np.int64)
    if v.ndim != 2 or not v.size or (v < 0).all():
        return None
    grades = np.unique(v[v >= 0])
    onehot = (v[:, :, None] == grades[None, None, :]).sum(axis=0).astype(np.float64)  # (units, m)
    m_u = onehot.sum(axis=1)
    keep = m_u >= 2
    if not keep.any():
        return None
    n_u, m_u = onehot[keep], m_u[keep]
    o = (np.einsum("ui,uj->ij", n_u / (m_u - 1)[:, None], n_u)
         - np.diag((n_u / (m_u - 1)[:, None]).sum(axis=0)))
    a = _alpha_from_coincidences(o[None])[0]
    return None if not np.isfinite(a) else float(a)


def krippendorff_alpha_ordinal(confusion: np.ndarray) -> float | None:
    """Krippendorff's alpha (ordinal metric) of two raters from their confusion matrix, whose
    rows and columns are the ordered grades. ``None`` when undefined (one value only)."""
    v = _alpha_ordinal(np.asarray(confusion, dtype=np.float64)[None])[0]
    return None if not np.isfinite(v) else float(v)


def _label_stats(c: np.ndarray, grades: np.ndarray, rel: int) -> dict[str, np.ndarray]:
    """Every label statistic of a stack ``(B, m, m)`` of confusion matrices over ``grades``."""
    m = len(grades)
    n = c.sum(axis=(1, 2))
    rows = c.sum(axis=2)
    cols = c.sum(axis=1)
    pos = grades >= rel
    b = np.stack([
        np.stack([c[:, ~pos][:, :, ~pos].sum(axis=(1, 2)), c[:, ~pos][:, :, pos].sum(axis=(1, 2))], -1),
        np.stack([c[:, pos][:, :, ~pos].sum(axis=(1, 2)), c[:, pos][:, :, pos].sum(axis=(1, 2))], -1),
    ], 1)
    g = grades.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            "exact_agreement": np.trace(c, axis1=1, axis2=2) / n,
            "cohen_kappa": _kappas(c, _weights(m, None)),
            "weighted_kappa_linear": _kappas(c, _weights(m, "linear", g)),
            "weighted_kappa_quadratic": _kappas(c, _weights(m, "quadratic", g)),
            "krippendorff_alpha": _alpha_ordinal(c),
            "binary_kappa": _kappas(b, _weights(2, None)),
            "binary_precision": b[:, 1, 1] / b[:, :, 1].sum(axis=1),
            "binary_recall": b[:, 1, 1] / b[:, 1, :].sum(axis=1),
            "leniency": (cols @ g - rows @ g) / n,
        }
        out["row_percent"] = 100.0 * c / rows[:, :, None]
        out["leniency_by_grade"] = (c @ g) / rows - g[None, :]
    return out


# ----------------------------------------------------------------------------- ranking statistics
def _pair_signs(x: np.ndarray) -> np.ndarray:
    """sign(x_i - x_j) for every ordered pair: ``(B, n) -> (B, n, n)``."""
    return np.sign(x[:, :, None] - x[:, None, :])


def _tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    n = x.shape[1]
    iu = np.triu_indices(n, 1)
    sx = _pair_signs(x)[:, iu[0], iu[1]]
    sy = _pair_signs(y)[:, iu[0], iu[1]]
    n0 = n * (n - 1) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (sx * sy).sum(axis=1) / np.sqrt((n0 - (sx == 0).sum(axis=1)) * (n0 - (sy == 0).sum(axis=1)))
    t[~np.isfinite(t)] = np.nan
    return t


def _avg_ranks(x: np.ndarray) -> np.ndarray:
    """1-based average ranks (ties share the mean of their positions), row-wise."""
    s = _pair_signs(x)
    return (s > 0).sum(axis=2) + ((s == 0).sum(axis=2) + 1) / 2.0


def _spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    rx = _avg_ranks(x)
    ry = _avg_ranks(y)
    rx = rx - rx.mean(axis=1, keepdims=True)
    ry = ry - ry.mean(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (rx * ry).sum(axis=1) / np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    r[~np.isfinite(r)] = np.nan
    return r


def _positions(x: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """0-based position of each item when sorted by ``x`` descending, ties by ``tiebreak``
    descending, then by item order."""
    order = np.lexsort((-tiebreak, -x), axis=-1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(x.shape[1])[None, :].repeat(x.shape[0], 0), axis=1)
    return pos


def _tau_ap(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """tau_AP = 2/(n-1) sum_{i=2}^{n} C(i)/(i-1) - 1 over the candidate's ordering (ties broken
    by the reference), C(i) = items above position i that the reference also puts above."""
    n = ref.shape[1]
    pos = _positions(cand, ref)
    above = pos[:, None, :] < pos[:, :, None]  # [b, i, j]: j above i in the candidate ordering
    sr = _pair_signs(ref)  # [b, i, j] = sign(ref_i - ref_j); correct when ref_j > ref_i
    correct = (sr < 0) + 0.5 * (sr == 0)
    c = (above * correct).sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(pos > 0, c / np.maximum(pos, 1), 0.0)
    return 2.0 / (n - 1) * terms.sum(axis=1) - 1.0


def _rbo(ref: np.ndarray, cand: np.ndarray, p: float) -> np.ndarray:
    """Extrapolated RBO of the two full orderings (same n items): with X_d the overlap of the
    top d, RBO_ext = (X_n/n) p^n + (1-p)/p sum_{d=1}^{n} (X_d/d) p^d."""
    n = ref.shape[1]
    a = _positions(ref, np.zeros_like(ref))
    b = _positions(cand, np.zeros_like(cand))
    deepest = np.maximum(a, b)
    counts = (deepest[:, :, None] == np.arange(n)[None, None, :]).sum(axis=1)
    x = np.cumsum(counts, axis=1)
    d = np.arange(1, n + 1, dtype=np.float64)
    return x[:, -1] / n * p**n + (1.0 - p) / p * (x / d * p**d).sum(axis=1)


def _one(fn: Any, x: Sequence[float], y: Sequence[float], *args: Any) -> float | None:
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} items but y has {len(y)}")
    if len(x) < 2:
        return None
    v = fn(np.asarray(x, dtype=np.float64)[None], np.asarray(y, dtype=np.float64)[None], *args)[0]
    return None if not np.isfinite(v) else float(v)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b between two score lists over the same items (Kendall 1945).

    tau_b = (C - D) / sqrt((n0 - n1) * (n0 - n2)), with C/D the concordant/discordant pairs,
    n0 = n(n-1)/2 and n1, n2 the pairs tied in x and in y. ``None`` when fewer than two items or
    one list is constant. Matches ``scipy.stats.kendalltau``.
    """
    return _one(_tau_b, x, y)


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson correlation of average ranks (matches ``scipy.stats.spearmanr``)."""
    return _one(_spearman, x, y)


def tau_ap(reference: Sequence[float], candidate: Sequence[float]) -> float | None:
    """AP rank correlation tau_AP (Yilmaz, Aslam & Robertson 2008) of the candidate's ordering
    against the reference (higher score = better). Asymmetric and top-weighted: swaps near the
    top cost more. Reference ties count as half-correct; candidate ties are broken by the
    reference (so a tie is not punished as a swap)."""
    return _one(_tau_ap, reference, candidate)


def rank_biased_overlap(x: Sequence[float], y: Sequence[float], p: float = 0.9) -> float | None:
    """Extrapolated rank-biased overlap (Webber et al. 2010, eq. 32) of the orderings of the
    same items by ``x`` and by ``y`` (ties broken by item order). 1 for identical orderings."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    return _one(_rbo, x, y, p)


# ----------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class AgreementReport(ResultSurface):
    """Label agreement between a reference (human) and a candidate (LLM) qrels, and optionally
    the agreement of the system rankings they induce, every statistic with its interval.

    ``stats[name]`` is an :class:`Interval` (value, ci_low, ci_high) for every name in
    :data:`LABEL_STATS`; ``ranking[metric][name]`` likewise for :data:`RANKING_STATS`;
    ``swaps[metric]`` counts reversed significant pairs. The point values are also attributes
    (``report.cohen_kappa``) and ``kendall_tau`` maps metric -> tau-b.
    """

    common_pairs: int
    common_queries: int
    reference_only: int
    candidate_only: int
    labels: tuple[int, ...]
    confusion: tuple[tuple[int, ...], ...]
    rel: int
    stats: dict[str, Interval]
    row_percent: tuple[tuple[Interval, ...], ...]
    leniency_by_grade: dict[int, Interval]
    systems: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    ranking: dict[str, dict[str, Interval]] = field(default_factory=dict)
    swaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    # -- point values as attributes (the names earlier versions had) --------------------
    def __getattr__(self, name: str) -> Any:
        stats = self.__dict__.get("stats")
        if stats is not None and name in stats:
            return stats[name].value
        raise AttributeError(f"'AgreementReport' object has no attribute {name!r}")

    @property
    def kendall_tau(self) -> dict[str, float | None]:
        return {m: s["kendall_tau_b"].value for m, s in self.ranking.items()}

    # -- views ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values: counts, the confusion matrix (+ row % with intervals),
        every statistic as ``{"value", "ci_low", "ci_high"}`` and, for runs, the system level."""
        return {
            "common_pairs": self.common_pairs,
            "common_queries": self.common_queries,
            "reference_only": self.reference_only,
            "candidate_only": self.candidate_only,
            "labels": list(self.labels),
            "confusion": [list(r) for r in self.confusion],
            "row_percent": [[iv.to_dict() for iv in row] for row in self.row_percent],
            "rel": self.rel,
            "stats": {k: v.to_dict() for k, v in self.stats.items()},
            **{k: v.value for k, v in self.stats.items()},
            "leniency_by_grade": {str(g): iv.to_dict() for g, iv in self.leniency_by_grade.items()},
            "systems": self.systems,
            "ranking": {m: {k: v.to_dict() for k, v in s.items()} for m, s in self.ranking.items()},
            "kendall_tau": self.kendall_tau,
            "swaps": self.swaps,
            "settings": self.settings,
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def tables(self) -> list[tuple[str, list[str], list[list[Any]]]]:
        """(title, headers, rows) of every table of the report, in display order."""
        conf = int(round(100 * self.settings.get("confidence", 0.95)))
        ci = f"{conf}% CI"
        out: list[tuple[str, list[str], list[list[Any]]]] = []
        out.append((
            f"label agreement: {self.common_pairs} pairs judged by both, {self.common_queries} "
            f"queries (reference only: {self.reference_only}, candidate only: {self.candidate_only})",
            ["statistic", "value", f"{ci} low", f"{ci} high"],
            [[_LABEL_NAMES[k], *self.stats[k]] for k in LABEL_STATS],
        ))
        heads = ["reference \\ candidate", *(str(g) for g in self.labels), "n", "row % (CI)"]
        rows = []
        for g, counts, pct in zip(self.labels, self.confusion, self.row_percent):
            cells = " ".join(_pct(iv) for iv in pct)
            rows.append([str(g), *counts, sum(counts), cells])
        out.append(("confusion matrix (rows: reference grade, columns: candidate grade)", heads, rows))
        out.append((
            "leniency: mean candidate grade minus reference grade, per reference grade",
            ["reference grade", "leniency", f"{ci} low", f"{ci} high"],
            [[str(g), *iv] for g, iv in self.leniency_by_grade.items()],
        ))
        if self.ranking:
            heads = ["metric", *(f"{_RANK_NAMES[k]}" for k in RANKING_STATS), "significant pairs",
                     "swapped"]
            rows = []
            for m, s in self.ranking.items():
                sw = self.swaps.get(m, {})
                rows.append([m, *(_with_ci(s[k]) for k in RANKING_STATS),
                             sw.get("significant_pairs"), sw.get("swapped")])
            out.append((f"system ranking agreement over {len(self.systems)} runs ({ci} in brackets)",
                        heads, rows))
            metrics = list(self.ranking)
            heads = ["run", *(f"{m} ({w})" for m in metrics for w in ("reference", "candidate"))]
            rows = [[name, *(v[m][w] for m in metrics for w in ("reference", "candidate"))]
                    for name, v in self.systems.items()]
            out.append(("mean per run under each qrels", heads, rows))
        return out

    def __str__(self) -> str:
        parts = []
        for title, heads, rows in self.tables():
            parts.append(title + "\n" + render_table(heads, rows, "table"))
        s = self.settings
        parts.append(
            f"intervals: percentile bootstrap over queries, {s.get('n_resamples')} resamples, "
            f"seed {s.get('seed')}; binary statistics at grade >= {self.rel}"
        )
        parts.extend(f"note: {n}" for n in self.notes)
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"<AgreementReport {self.common_pairs} pairs, {len(self.systems)} runs>\n{self}"

    def _repr_html_(self) -> str:
        out = [render_table(h, r, "html", title=t) for t, h, r in self.tables()]
        out.extend(html_note(f"note: {n}") for n in self.notes)
        return "\n".join(out)

    def to_latex(self, digits: int = 3) -> str:
        """Every table as booktabs LaTeX (``\\usepackage{booktabs}``), one after another."""
        return "\n".join(f"% {t}\n" + render_table(h, r, "latex", digits=digits)
                         for t, h, r in self.tables())

    def to_dataframe(self) -> Any:
        """A long DataFrame, one row per statistic: ``level`` (label / ranking), ``metric``
        (empty for label statistics), ``statistic``, ``value``, ``ci_low``, ``ci_high``."""
        pd = optional("pandas", extra="pandas", what="to_dataframe()")
        rows = [("label", "", k, *iv) for k, iv in self.stats.items()]
        rows += [("label", "", f"leniency@{g}", *iv) for g, iv in self.leniency_by_grade.items()]
        rows += [("ranking", m, k, *iv) for m, s in self.ranking.items() for k, iv in s.items()]
        return pd.DataFrame(rows, columns=["level", "metric", "statistic", "value", "ci_low", "ci_high"])


_LABEL_NAMES = {
    "exact_agreement": "exact agreement",
    "cohen_kappa": "Cohen's kappa",
    "weighted_kappa_linear": "weighted kappa (linear)",
    "weighted_kappa_quadratic": "weighted kappa (quadratic)",
    "krippendorff_alpha": "Krippendorff's alpha (ordinal)",
    "binary_kappa": "binary kappa",
    "binary_precision": "binary precision",
    "binary_recall": "binary recall",
    "leniency": "leniency (mean grade difference)",
}
_RANK_NAMES = {"kendall_tau_b": "tau-b", "tau_ap": "tau-ap", "spearman_rho": "spearman",
               "rbo": "rbo"}


def _pct(iv: Interval) -> str:
    if iv.value is None:
        return "-"
    if iv.ci_low is None:
        return f"{iv.value:.0f}%"
    return f"{iv.value:.0f}%[{iv.ci_low:.0f}-{iv.ci_high:.0f}]"


def _with_ci(iv: Interval) -> str:
    if iv.value is None:
        return "-"
    if iv.ci_low is None:
        return format_value(iv.value, 3)
    return f"{iv.value:.3f} [{iv.ci_low:.3f}, {iv.ci_high:.3f}]"


# ----------------------------------------------------------------------------- inputs
def _check_common_queries(reference: Qrels, candidate: Qrels) -> list[str]:
    cand = set(candidate.query_ids)
    common = [q for q in reference.query_ids if q in cand]
    if not common:
        raise InputError(
            "the reference and candidate qrels have no query in common "
            f"({reference.num_queries} vs {candidate.num_queries} queries; check the query ids)",
            source=candidate.source, field="qid",
        )
    return common


def grades_in_scale(qrels: Qrels, scale: tuple[int, int] | None) -> dict[tuple[str, str], int]:
    """``{(qid, docid): grade}`` with negative grades (trec_eval's "unjudged") as 0; a grade
    outside ``scale`` (low, high) is an InputError naming the qrels, query and document."""
    out = {}
    for q, d, g in qrels.rows():
        g = max(int(g), 0)
        if scale is not None and not scale[0] <= g <= scale[1]:
            raise InputError(
                f"grade {g} of query {q!r}, document {d!r} is outside the scale {scale[0]}-{scale[1]}",
                source=qrels.source, field="grade",
            )
        out[(q, d)] = g
    return out


def _check_options(rel: int, n_resamples: int, confidence: float) -> None:
    if isinstance(rel, bool) or not isinstance(rel, int) or rel < 1:
        raise InputError(f"relevance threshold must be an integer >= 1, got {rel!r}", field="rel")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise InputError(f"n_resamples must be a positive integer, got {n_resamples!r}",
                         field="n_resamples")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence}", field="confidence")


# ----------------------------------------------------------------------------- label agreement
def label_agreement(
    reference: Qrels,
    candidate: Qrels,
    *,
    rel: int = 1,
    scale: tuple[int, int] | None = None,
    n_resamples: int = _DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> AgreementReport:
    """Agreement on the (query, document) pairs both qrels judge, with bootstrap intervals.

    Negative grades (trec_eval's "pooled but unjudged") are mapped to 0 before comparing, since
    both mean "not relevant" to every measure. ``rel`` is the binary relevance threshold;
    ``scale=(lo, hi)`` the label scale (default: the grades present); a grade outside it is an
    error. Intervals: percentile bootstrap resampling the queries that have common pairs,
    ``n_resamples`` times with ``seed``. Raises :class:`InputError` when the qrels share no query.
    """
    _check_options(rel, n_resamples, confidence)
    if scale is not None and (len(scale) != 2 or scale[0] > scale[1]):
        raise InputError(f"scale must be (low, high) with low <= high, got {scale!r}", field="scale")
    _check_common_queries(reference, candidate)
    ref = grades_in_scale(reference, scale)
    cand = grades_in_scale(candidate, scale)
    common = [p for p in ref if p in cand]
    present = {ref[p] for p in common} | {cand[p] for p in common}
    lo, hi = scale if scale is not None else (min(present, default=0), max(present, default=0))
    grades = np.arange(lo, hi + 1)
    m = len(grades)
    qids = list(dict.fromkeys(q for q, _ in common))
    qindex = {q: i for i, q in enumerate(qids)}
    per_query = np.zeros((max(len(qids), 1), m, m), dtype=np.float64)
    for p in common:
        per_query[qindex[p[0]], ref[p] - lo, cand[p] - lo] += 1
    total = per_query.sum(axis=0)
    notes: list[str] = []
    if not common:
        notes.append("the two qrels share no judged (query, document) pair")
    point = _label_stats(total[None], grades, rel)
    boot = _label_stats(
        resampled_sums(per_query.reshape(len(per_query), m * m), n_resamples, seed).reshape(-1, m, m),
        grades, rel,
    ) if common else point

    def iv(key: str, *index: int) -> Interval:
        v = point[key][(0, *index)]
        return percentile_interval(None if not np.isfinite(v) else float(v), boot[key][(slice(None), *index)],
                                   confidence)

    stats = {k: iv(k) for k in LABEL_STATS}
    for k, v in stats.items():
        if v.value is None and common:
            notes.append(f"{_LABEL_NAMES[k]} is undetermined: {_why(k)}")
    return AgreementReport(
        common_pairs=len(common),
        common_queries=len(qids),
        reference_only=len(ref) - len(common),
        candidate_only=len(cand) - len(common),
        labels=tuple(int(g) for g in grades),
        confusion=tuple(tuple(int(v) for v in row) for row in total),
        rel=rel,
        stats=stats,
        row_percent=tuple(tuple(iv("row_percent", i, j) for j in range(m)) for i in range(m)),
        leniency_by_grade={int(g): iv("leniency_by_grade", i) for i, g in enumerate(grades)},
        settings={"n_resamples": n_resamples, "seed": seed, "confidence": confidence,
                  "unit": "query", "method": "percentile bootstrap", "scale": [int(lo), int(hi)]},
        notes=tuple(notes),
    )


def _why(stat: str) -> str:
    if stat.startswith("binary_p"):
        return "no pair is relevant on that side at the binary threshold"
    if stat.startswith("leniency") or stat == "exact_agreement":
        return "no common pair"
    return "no expected disagreement (a rater uses a single label)"


# ----------------------------------------------------------------------------- ranking agreement
def ranking_agreement(
    reference: Qrels,
    candidate: Qrels,
    runs: Mapping[str, Run] | Sequence[Run],
    metrics: Sequence[str],
    *,
    rel: int = 1,
    scale: tuple[int, int] | None = None,
    n_resamples: int = _DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int | None = 0,
    alpha: float = 0.05,
    rbo_p: float = 0.9,
    test: str = "t",
) -> AgreementReport:
    """:func:`label_agreement` plus, per metric, how the orderings of the runs by their mean
    under the reference and under the candidate qrels agree: Kendall's tau-b, tau-ap,
    Spearman's rho and RBO with bootstrap intervals (queries resampled, the same resamples for
    every statistic), and the number of significantly different pairs (reference labels,
    paired ``test`` -- ``"t"`` or ``"randomization"`` with ``seed`` --, Holm over all pairs,
    level ``alpha``) that swap order. The t test is the default because its p-values have no
    floor: with k runs Holm needs p < alpha / (k (k - 1) / 2), below what 10,000 random sign
    flips can show once there are a few dozen runs. Runs are scored on the queries both qrels
    judge."""

    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha}", field="alpha")
    if not 0.0 < rbo_p < 1.0:
        raise InputError(f"rbo_p must be in (0, 1), got {rbo_p}", field="rbo_p")
    if test not in ("t", "randomization"):
        raise InputError(f"test must be 't' or 'randomization', got {test!r}", field="test")
    if not isinstance(runs, Mapping):
        runs = {r.name: r for r in runs}
    base = label_agreement(reference, candidate, rel=rel, scale=scale, n_resamples=n_resamples,
                           confidence=confidence, seed=seed)
    qids = _check_common_queries(reference, candidate)
    notes = list(base.notes)
    if len(qids) < min(reference.num_queries, candidate.num_queries) or \
            len(qids) < max(reference.num_queries, candidate.num_queries):
        notes.append(f"systems are scored on the {len(qids)} queries both qrels judge")
    ref_q, cand_q = reference.filter(qids), candidate.filter(qids)
    names = list(runs)
    metrics = list(metrics)
    # per[(metric, side)]: one row of per-query scores per run, queries in ``qids`` order
    per: dict[tuple[str, str], list[np.ndarray]] = {
        (m, side): [] for m in metrics for side in ("reference", "candidate")}
    for name in names:
        for side, q in (("reference", ref_q), ("candidate", cand_q)):
            rep = evaluate(q, runs[name], metrics, rel=rel)
            position = {x: i for i, x in enumerate(rep.qids)}
            order = np.array([position[x] for x in qids], dtype=np.int64)
            for m in metrics:
                # an undetermined per-query value counts as 0, as in trec_eval's averages
                per[(m, side)].append(np.nan_to_num(rep.values[m], nan=0.0)[order])
    systems: dict[str, dict[str, dict[str, float | None]]] = {n: {} for n in names}
    ranking: dict[str, dict[str, Interval]] = {}
    swaps: dict[str, dict[str, Any]] = {}
    nq = len(qids)
    for m in metrics:
        r = np.array(per[(m, "reference")], dtype=np.float64)
        c = np.array(per[(m, "candidate")], dtype=np.float64)
        for i, name in enumerate(names):
            systems[name][m] = {"reference": float(r[i].mean()), "candidate": float(c[i].mean())}
        if len(names) < 2:
            ranking[m] = {k: Interval(None, None, None) for k in RANKING_STATS}
            notes.append(f"system statistics on {m} need at least two runs")
            continue
        sums = resampled_sums(np.concatenate([r, c]).T, n_resamples, seed) / nq
        br, bc = sums[:, : len(names)], sums[:, len(names):]
        pr, pc = r.mean(axis=1)[None], c.mean(axis=1)[None]
        fns = {"kendall_tau_b": _tau_b, "tau_ap": _tau_ap, "spearman_rho": _spearman,
               "rbo": lambda a, b: _rbo(a, b, rbo_p)}
        ranking[m] = {}
        for k, fn in fns.items():
            v = fn(pr, pc)[0]
            ranking[m][k] = percentile_interval(None if not np.isfinite(v) else float(v),
                                                _by_chunks(fn, br, bc), confidence)
            if ranking[m][k].value is None:
                notes.append(f"{_RANK_NAMES[k]} on {m} is undetermined: a constant score")
        swaps[m] = _swaps(names, r, c, alpha=alpha, test=test, seed=seed)
    return AgreementReport(
        **{k: getattr(base, k) for k in base.__dataclass_fields__
           if k not in ("systems", "ranking", "swaps", "notes", "settings")},
        systems=systems,
        ranking=ranking,
        swaps=swaps,
        settings={**base.settings, "alpha": alpha, "test": test, "correction": "holm",
                  "rbo_p": rbo_p, "queries": nq},
        notes=tuple(notes),
    )


def _by_chunks(fn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fn`` over row blocks of the resampled scores: the pairwise (B, n, n) arrays of many
    systems stay within a few tens of MB."""
    rows = max(1, 2_000_000 // max(1, a.shape[1] ** 2))
    return np.concatenate([fn(a[i : i + rows], b[i : i + rows]) for i in range(0, len(a), rows)])


def _swaps(names: list[str], r: np.ndarray, c: np.ndarray, *, alpha: float, test: str,
           seed: int | None) -> dict[str, Any]:
    """System pairs significantly different under the reference and the candidate's verdict."""
    iu = np.triu_indices(len(names), 1)
    diffs = r[iu[0]] - r[iu[1]]
    if test == "t" and diffs.shape[1] >= 2:
        p_values = [paired_t_test(d).p_value for d in diffs]
    else:
        p_values = [t.p_value for t in randomization_tests(diffs, n_resamples=10_000, seed=seed)]
    adjusted = holm(p_values)
    sig, swapped, tied = 0, [], []
    for a, b, d, p in zip(iu[0].tolist(), iu[1].tolist(), diffs, adjusted):
        if p > alpha:
            continue
        sig += 1
        ref_sign = math.copysign(1.0, float(d.mean()))
        cand_diff = float(c[a].mean() - c[b].mean())
        if cand_diff == 0.0:
            tied.append([names[a], names[b]])
        elif math.copysign(1.0, cand_diff) != ref_sign:
            swapped.append([names[a], names[b]])
    return {"pairs": len(diffs), "significant_pairs": sig, "swapped": len(swapped),
            "tied": len(tied), "swapped_pairs": swapped, "tied_pairs": tied}
