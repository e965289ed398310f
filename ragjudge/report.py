"""Evaluation results (:class:`Report`, :class:`CompareReport`, :class:`Comparison`).

They render through :mod:`ragjudge.render` (tables in every format, trec_eval's lines); the
names ``FORMATS``, ``TREC_FORMAT``, ``format_value``, ``render_table`` and ``render_trec`` are
re-exported here for the callers that import them from this module.

Reports are plain values: they hold floats and strings only, never call back into the engine,
and pandas is imported only by ``to_dataframe()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from .errors import InputError
from .measures import aggregate
from .render import (
    FORMATS,
    ResultSurface,
    TREC_FORMAT,
    Table,
    html_note,
    format_value,
    latex_escape,
    dumps,
    plain,
    render_table,
    render_trec,
)
from . import plots
from ._lazy import optional

__all__ = [
    "FORMATS",
    "TREC_FORMAT",
    "format_value",
    "render_table",
    "render_trec",
    "render_reports",
    "Report",
    "CompareReport",
    "Comparison",
]

def _pandas() -> Any:
    return optional("pandas", extra="pandas", what="to_dataframe()")


def _value_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# ----------------------------------------------------------------------------- Report
class Report(ResultSurface):
    """Result of evaluating one run: per-query values and their means, plus how they were made.

    * ``run`` -- the run's name; ``metrics`` -- the metric keys exactly as requested;
    * ``mean`` -- ``{metric: float}``: the mean over the evaluated queries (``None`` when no
      query could be scored); the counts ``num_ret``, ``num_rel``, ``num_rel_ret`` are summed,
      as trec_eval does (their keys are listed in ``summed``), and ``gm_map`` is a geometric
      mean (keys in ``geometric``);
    * ``per_query`` -- ``{qid: {metric: float}}`` in trec_eval query order;
    * ``meta`` -- ``num_q``, the queries missing from the run / only in the run, ``rel``,
      ``skip_missing``, sources, canonical measure specs, ...
    * ``undetermined`` -- ``{metric: count}`` of per-query values that could not be computed
      (shown as ``None``/``-`` and left out of the mean, never counted as 0).

    Render with :meth:`render`, ``str(report)``, :meth:`to_json`, :meth:`to_dataframe`; in Jupyter
    the report shows itself as an HTML table.
    """

    def __init__(
        self,
        run: str,
        qids: Sequence[str],
        values: Mapping[str, np.ndarray],
        meta: Mapping[str, Any] | None = None,
        *,
        summed: Sequence[str] = (),
        geometric: Sequence[str] = (),
    ) -> None:
        self.run = run
        self.qids: list[str] = list(qids)
        self.metrics: list[str] = list(values)
        arrays: dict[str, np.ndarray] = {}
        for key, arr in values.items():
            a = np.array(arr, dtype=np.float64)  # a copy: the report never aliases caller data
            if a.shape != (len(self.qids),):
                raise ValueError(f"metric {key!r}: {a.shape} values for {len(self.qids)} queries")
            a.flags.writeable = False
            arrays[key] = a
        self.values: dict[str, np.ndarray] = arrays
        self.undetermined: dict[str, int] = {
            k: int((~np.isfinite(a)).sum()) for k, a in arrays.items() if not np.isfinite(a).all()
        }
        #: Metrics aggregated by a sum instead of a mean (trec_eval's counts num_ret, ...).
        self.summed: list[str] = [k for k in self.metrics if k in set(summed)]
        #: Metrics aggregated by a geometric mean (trec_eval's gm_map).
        self.geometric: list[str] = [k for k in self.metrics if k in set(geometric)]
        self.mean: dict[str, float | None] = {}
        for k, a in arrays.items():
            ok = a[np.isfinite(a)]
            if not len(ok):
                self.mean[k] = None
            else:
                kind = "sum" if k in self.summed else "gmean" if k in self.geometric else "mean"
                self.mean[k] = aggregate(kind, ok)
        self.meta: dict[str, Any] = dict(meta or {})
        self.meta.setdefault("num_q", len(self.qids))
        if self.undetermined:
            self.meta["undetermined"] = dict(self.undetermined)
        self._per_query: dict[str, dict[str, float | None]] | None = None

    # -- views -------------------------------------------------------------------
    @property
    def per_query(self) -> dict[str, dict[str, float | None]]:
        """``{qid: {metric: value}}``; a value that could not be computed is ``None``."""
        if self._per_query is None:
            cols = {k: [_value_or_none(x) for x in a.tolist()] for k, a in self.values.items()}
            self._per_query = {
                q: {k: cols[k][i] for k in self.metrics} for i, q in enumerate(self.qids)
            }
        return self._per_query

    @property
    def num_queries(self) -> int:
        return len(self.qids)

    def to_dict(self, *, per_query: bool = True) -> dict[str, Any]:
        """``{"run", "mean", "per_query", "meta"}`` -- plain JSON-ready Python values."""
        out: dict[str, Any] = {"run": self.run, "mean": plain(self.mean)}
        if per_query:
            out["per_query"] = self.per_query
        out["meta"] = plain(self.meta)
        return out

    def to_json(self, *, per_query: bool = True, indent: int | None = 2) -> str:
        return dumps(self.to_dict(per_query=per_query), indent=indent)

    def to_dataframe(self, *, per_query: bool = False) -> Any:
        """A pandas DataFrame: one row (index = run name) of means, or one row per query."""
        pd = _pandas()
        if per_query:
            df = pd.DataFrame({k: self.values[k] for k in self.metrics}, index=self.qids)
            df.index.name = "qid"
            return df
        df = pd.DataFrame([self.mean], index=[self.run], columns=self.metrics)
        df.index.name = "run"
        return df

    def table(self, *, per_query: bool = False) -> tuple[list[str], list[list[Any]]]:
        """Headers and rows of the human table (means; with ``per_query`` one row per query
        followed by the ``all`` row)."""
        if per_query:
            headers = ["run", "qid", *self.metrics]
            pq = self.per_query
            rows = [[self.run, q, *(pq[q][k] for k in self.metrics)] for q in self.qids]
            rows.append([self.run, "all", *(self.mean[k] for k in self.metrics)])
            return headers, rows
        return ["run", *self.metrics], [[self.run, *(self.mean[k] for k in self.metrics)]]

    def render(self, fmt: str = "table", *, per_query: bool = False, digits: int = 4) -> str:
        """Render as table | json | csv | markdown | latex | html | trec (trec_eval's output)."""
        return render_reports([self], fmt, per_query=per_query, digits=digits)

    def to_latex(self, *, per_query: bool = False, digits: int = 4) -> str:
        """A booktabs LaTeX table (``\\usepackage{booktabs}``) of the means (or per query)."""
        return self.render("latex", per_query=per_query, digits=digits)

    def plot(self, metric: str | None = None, *, kind: str = "hist", ax: Any = None) -> Any:
        """Per-query distribution of ``metric`` (``kind="hist"`` or ``"box"``), or with
        ``kind="pr"`` the interpolated precision-recall curve (evaluate with
        ``ragjudge.plots.PR_METRICS``); returns the Axes. Needs matplotlib (the ``plot`` extra)."""

        if kind == "pr":
            return plots.plot_pr(self, ax=ax)
        return plots.plot_distribution(self, metric, kind=kind, ax=ax)

    def footer(self) -> str:
        m = self.meta
        parts = [f"{m.get('num_q', len(self.qids))} queries"]
        if m.get("num_missing"):
            how = "skipped" if m.get("skip_missing") else "scored as empty rankings"
            parts.append(f"{m['num_missing']} qrels queries missing from the run ({how})")
        if m.get("num_ignored"):
            parts.append(f"{m['num_ignored']} run-only queries ignored")
        if self.undetermined:
            parts.append("undetermined: " + ", ".join(f"{k} {v}" for k, v in self.undetermined.items()))
        return "; ".join(parts)

    def __str__(self) -> str:
        return self.render("table") + self.footer() + "\n"

    def __repr__(self) -> str:
        return f"<Report run={self.run!r}, {len(self.qids)} queries>\n{self}"

    def _repr_html_(self) -> str:
        h, r = self.table()
        return render_table(h, r, "html", title=f"ragjudge: {self.run}") + (
            html_note(self.footer())
        )


def render_reports(
    reports: Sequence[Report], fmt: str = "table", *, per_query: bool = False, digits: int = 4
) -> str:
    """Several runs evaluated on the same metrics in one output (one row per run).

    ``json`` gives the :meth:`Report.to_dict` object for one run and a list of them for more;
    ``trec`` gives trec_eval's lines, one block per run.
    """
    if not reports:
        raise ValueError("no reports to render")
    if fmt == "json":
        data: Any = [r.to_dict() for r in reports]
        if len(reports) == 1:
            data = data[0]
        return dumps(data) + "\n"  # to_dict() is plain already: no second walk
    if fmt == TREC_FORMAT:
        return "".join(
            render_trec(r.mean, r.per_query if per_query else None, runid=r.run,
                        num_q=r.num_queries, integer=r.summed)
            for r in reports
        )
    headers: list[str] = []
    rows: list[list[Any]] = []
    for r in reports:
        h, rr = r.table(per_query=per_query)
        if headers and h != headers:
            # Different metric sets cannot share columns: fall back to the union.
            raise ValueError("reports with different metrics cannot be rendered in one table")
        headers = h
        rows.extend(rr)
    text = render_table(headers, rows, fmt, digits=digits)
    if fmt == "table" and max(map(len, text.splitlines())) > WIDE:
        # Many metrics (-m all_trec): a line per metric (and query) reads; 100 columns do not.
        if per_query:
            long = [[r[0], r[1], h, v] for r in rows for h, v in zip(headers[2:], r[2:])]
            return render_table(["run", "qid", "metric", "value"], long, fmt, digits=digits)
        by_metric = [[h, *(r[j] for r in rows)] for j, h in enumerate(headers[1:], 1)]
        return render_table(["metric", *(str(r[0]) for r in rows)], by_metric, fmt, digits=digits)
    return text


#: A text table wider than this many characters is shown a metric per line.
WIDE = 160


# ----------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Comparison:
    """One paired test of ``run`` against ``baseline`` on ``metric``.

    ``delta`` = mean(run - baseline) over the ``n`` paired queries, ``delta_ci`` its bootstrap
    interval; ``p_value`` is the raw two-sided p, ``p_adjusted`` Holm-adjusted within the metric's
    family (all runs compared with the baseline on that metric); ``significant`` is
    ``p_adjusted <= alpha``. When the test cannot be run, the p-values are ``None`` and ``note``
    says why. ``wins``/``ties``/``losses``: queries where run > = < baseline; ``effect_size``:
    the paired Cohen's d_z = mean(d) / sd(d) (``None`` when undefined: constant non-zero
    differences or fewer than 2 pairs). In an all-pairs comparison ``baseline`` is the other run
    of the pair.
    """

    metric: str
    run: str
    baseline: str
    n: int
    delta: float | None
    delta_ci: tuple[float, float] | None
    statistic: float | None
    p_value: float | None
    p_adjusted: float | None
    significant: bool | None
    test: str
    note: str | None = None
    wins: int | None = None
    ties: int | None = None
    losses: int | None = None
    effect_size: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["delta_ci"] = list(self.delta_ci) if self.delta_ci is not None else None
        return plain(d)


class CompareReport(ResultSurface):
    """Several runs on the same qrels and metrics, with confidence intervals and paired tests.

    ``reports`` -- ``{run: Report}`` (baseline first); ``ci`` -- ``{run: {metric: (lo, hi)}}``
    bootstrap intervals of each mean; ``comparisons`` -- one :class:`Comparison` per
    (metric, non-baseline run); ``meta`` -- test, resamples, seed, alpha, confidence, correction.
    """

    def __init__(
        self,
        reports: Mapping[str, Report],
        baseline: str,
        ci: Mapping[str, Mapping[str, tuple[float, float] | None]],
        comparisons: Sequence[Comparison],
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.reports: dict[str, Report] = dict(reports)
        self.baseline = baseline
        self.ci = {r: dict(v) for r, v in ci.items()}
        self.comparisons: list[Comparison] = list(comparisons)
        self.meta: dict[str, Any] = dict(meta or {})
        first = next(iter(self.reports.values()))
        self.metrics: list[str] = list(first.metrics)

    @property
    def runs(self) -> list[str]:
        return list(self.reports)

    @property
    def mean(self) -> dict[str, dict[str, float | None]]:
        """``{run: {metric: mean}}``."""
        return {name: dict(r.mean) for name, r in self.reports.items()}

    @property
    def all_pairs(self) -> bool:
        """Whether every pair of runs was tested (else each run against the baseline)."""
        return bool(self.meta.get("all_pairs", False))

    def comparison(self, run: str, metric: str, vs: str | None = None) -> Comparison:
        """The test of ``run`` against ``vs`` (default: the baseline) on ``metric``. In an
        all-pairs report a pair is stored once; asking for it the other way round returns the
        stored :class:`Comparison` with the roles swapped (delta, interval, d_z and
        wins/losses negated or exchanged; the p-values are the same)."""
        vs = self.baseline if vs is None else vs
        for c in self.comparisons:
            if c.metric != metric:
                continue
            if c.run == run and c.baseline == vs:
                return c
            if c.run == vs and c.baseline == run:
                return _swapped(c)
        raise KeyError((run, metric, vs))

    def to_dict(self, *, per_query: bool = True) -> dict[str, Any]:
        """``{"runs": [per-run objects with "ci"], "comparisons": [...], "meta": {...}}``."""
        runs = []
        for name, r in self.reports.items():
            d = r.to_dict(per_query=per_query)
            d["ci"] = {m: (list(v) if v is not None else None) for m, v in self.ci[name].items()}
            runs.append(d)
        return {
            "runs": plain(runs),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "meta": plain(self.meta),
        }

    def to_json(self, *, per_query: bool = True, indent: int | None = 2) -> str:
        return dumps(self.to_dict(per_query=per_query), indent=indent)

    def table(self) -> Table:
        """Long table. Baseline mode: one row per (run, metric) with mean, CI, delta vs baseline,
        its interval, p, Holm p, significance, Cohen's d_z and win/tie/loss counts. All-pairs
        mode: :meth:`pairs_table` (the means and their intervals are :meth:`means_table`)."""
        if self.all_pairs:
            return self.pairs_table()
        headers = ["run", "metric", "mean", "ci_low", "ci_high", "delta", "delta_low",
                   "delta_high", "p", "p_holm", "sig", "d_z", "wins", "ties", "losses"]
        rows: list[list[Any]] = []
        for (name, m, *cells) in self.means_table().rows:
            row: list[Any] = [name, m, *cells]
            if name == self.baseline:
                row += [None, None, None, None, None, "baseline", None, None, None, None]
            else:
                row += _comparison_cells(self.comparison(name, m))
            rows.append(row)
        return Table(headers, rows)

    def means_table(self) -> Table:
        """One row per (run, metric): mean and its bootstrap interval (a :class:`~ragjudge.render.Table`)."""
        rows: list[list[Any]] = []
        for name, r in self.reports.items():
            for m in self.metrics:
                ci = self.ci[name].get(m)
                rows.append([name, m, r.mean[m], ci[0] if ci else None, ci[1] if ci else None])
        return Table(["run", "metric", "mean", "ci_low", "ci_high"], rows)

    def pairs_table(self) -> Table:
        """One row per test (metric, run, vs): delta = mean(run - vs), its interval, p, Holm p,
        significance, Cohen's d_z and win/tie/loss counts of run against vs, as a
        :class:`~ragjudge.render.Table` (``records()``, ``to_dataframe()``, ``render(fmt)``)."""
        headers = ["metric", "run", "vs", "delta", "delta_low", "delta_high", "p", "p_holm",
                   "sig", "d_z", "wins", "ties", "losses"]
        rows = [[c.metric, c.run, c.baseline, *_comparison_cells(c)] for c in self.comparisons]
        return Table(headers, rows)

    def to_dataframe(self) -> Any:
        """:meth:`table` as a pandas DataFrame (all-pairs: one row per tested pair)."""
        pd = _pandas()
        headers, rows = self.table()
        return pd.DataFrame(rows, columns=headers)

    def to_latex(self, metrics: Sequence[str] | None = None, *, digits: int = 3,
                 caption: str | None = None, label: str | None = None) -> str:
        """A paper-style booktabs table: runs as rows, metrics as columns, the best mean of each
        metric in bold, and a dagger on runs significantly different from the baseline
        (Holm-adjusted p <= alpha; an up/down arrow gives the direction). Needs
        ``\\usepackage{booktabs}`` and ``amssymb``."""
        metrics = list(metrics or self.metrics)
        unknown = [m for m in metrics if m not in self.metrics]
        if unknown:
            raise InputError(f"metric(s) not in the report: {', '.join(unknown)}", field="metrics")
        means = self.mean
        best = {}
        for m in metrics:
            vals = [v for v in (means[r][m] for r in self.runs) if v is not None]
            best[m] = max(vals) if vals else None
        lines = ["\\begin{table}[t]", "\\centering"]
        if caption is not None:
            lines.append(f"\\caption{{{latex_escape(caption)}}}")
        if label is not None:
            lines.append(f"\\label{{{label}}}")
        lines += ["\\begin{tabular}{l" + "r" * len(metrics) + "}", "\\toprule"]
        lines.append("Run & " + " & ".join(latex_escape(m) for m in metrics) + " \\\\")
        lines.append("\\midrule")
        for run in self.runs:
            cells = []
            for m in metrics:
                v = means[run][m]
                if v is None:
                    cells.append("--")
                    continue
                text = f"{v:.{digits}f}"
                if best[m] is not None and round(v, digits) == round(best[m], digits):
                    text = f"\\textbf{{{text}}}"
                if run != self.baseline:
                    c = self.comparison(run, m)
                    if c.significant and c.delta is not None:
                        arrow = "\\uparrow" if c.delta > 0 else "\\downarrow"
                        text += f"$^{{\\dagger{arrow}}}$"
                cells.append(text)
            name = latex_escape(run) + (" (baseline)" if run == self.baseline else "")
            lines.append(name + " & " + " & ".join(cells) + " \\\\")
        alpha = self.meta.get("alpha", 0.05)
        lines += ["\\bottomrule", "\\end{tabular}"]
        lines.append(
            f"\\\\[2pt]\\footnotesize{{Best in bold; $^\\dagger$ significantly different from "
            f"{latex_escape(self.baseline)} (Holm-adjusted $p \\le {alpha:g}$).}}"
        )
        lines.append("\\end{table}")
        return "\n".join(lines) + "\n"

    def plot(self, metric: str | None = None, *, kind: str = "means", run: str | None = None,
             ax: Any = None) -> Any:
        """``kind="means"``: forest plot of every run's mean and interval, significance against
        the baseline marked; ``"differences"``: per-query differences of ``run`` (default the
        first non-baseline run) against the baseline, sorted, with win/tie/loss counts;
        ``"hist"``/``"box"``: per-query distributions; ``"pr"``: precision-recall curves (compare
        with ``ragjudge.plots.PR_METRICS``). Returns the Axes (matplotlib needed)."""

        if kind == "means":
            return plots.plot_means(self, metric, ax=ax)
        if kind == "differences":
            others = [r for r in self.runs if r != self.baseline]
            return plots.plot_differences(self, run or (others[0] if others else self.baseline), metric, ax=ax)
        if kind == "pr":
            return plots.plot_pr(self, ax=ax)
        return plots.plot_distribution(self, metric, kind=kind, ax=ax)

    def render(self, fmt: str = "table", *, per_query: bool = False, digits: int = 4) -> str:
        """Render as table | json | csv | markdown | latex | html | trec.

        ``trec`` prints each run's trec_eval block (no statistics: trec_eval has no such lines);
        ``per_query`` adds per-query values to json and trec output.
        """
        if fmt == "json":
            return dumps(self.to_dict(per_query=per_query)) + "\n"
        if fmt == TREC_FORMAT:
            return render_reports(list(self.reports.values()), fmt, per_query=per_query)
        if fmt == "latex":
            return self.to_latex(digits=min(digits, 4))
        if fmt == "csv" and per_query:
            # One well-formed table (pandas.read_csv reads it): per-query rows and an "all" row
            # per run; the statistics are in the plain csv (without per_query).
            return render_reports(list(self.reports.values()), fmt, per_query=True, digits=digits)
        headers, rows = self.table()
        text = render_table(headers, rows, fmt, digits=digits, p_values=_P_COLUMNS)
        if self.all_pairs and fmt in ("table", "markdown", "html"):
            # Human formats show the means first; csv stays one table (the pairs).
            mh, mr = self.means_table()
            sep = "\n" if fmt != "html" else ""
            text = render_table(mh, mr, fmt, digits=digits) + sep + text
        return text

    def footer(self) -> str:
        m = self.meta
        conf = m.get("confidence", 0.95)
        test = m.get("test", "?")
        if test == "randomization":
            test = f"paired randomization test ({m.get('n_resamples', '?')} sign flips)"
        elif test == "t":
            test = "paired t test"
        family = ("all pairs of runs; p_holm = Holm-adjusted over all pairs, per metric"
                  if self.all_pairs else
                  f"baseline {self.baseline}; p_holm = Holm-adjusted over the runs compared "
                  f"with the baseline, per metric")
        return (
            f"{family}; {test}; * = p_holm <= {m.get('alpha', 0.05)}; "
            f"d_z = mean / sd of the per-query differences; wins/ties/losses per query; "
            f"{int(round(conf * 100))}% percentile bootstrap intervals "
            f"({m.get('n_resamples', '?')} resamples, seed {m.get('seed', '?')})"
        )

    def __str__(self) -> str:
        return self.render("table") + self.footer() + "\n"

    def __repr__(self) -> str:
        return f"<CompareReport runs={self.runs!r}, baseline={self.baseline!r}>\n{self}"

    def _repr_html_(self) -> str:
        h, r = self.table()
        text = render_table(h, r, "html", title="ragjudge comparison", p_values=_P_COLUMNS)
        if self.all_pairs:
            mh, mr = self.means_table()
            text = render_table(mh, mr, "html", title="ragjudge runs") + text
        return text + html_note(self.footer())


#: The p-value columns of :meth:`CompareReport.table` (``< 0.0001`` in human formats).
_P_COLUMNS = ("p", "p_holm")


def _comparison_cells(c: Comparison) -> list[Any]:
    """delta, its interval, p, Holm p, sig, d_z, wins, ties, losses of one comparison."""
    sig = None if c.significant is None else ("*" if c.significant else "")
    lo, hi = c.delta_ci if c.delta_ci else (None, None)
    return [c.delta, lo, hi, c.p_value, c.p_adjusted, sig, c.effect_size, c.wins, c.ties, c.losses]


def _swapped(c: Comparison) -> Comparison:
    """``c`` seen from the other run: baseline - run."""
    neg = (lambda x: None if x is None else -x)
    ci = None if c.delta_ci is None else (-c.delta_ci[1], -c.delta_ci[0])
    return replace(c, run=c.baseline, baseline=c.run, delta=neg(c.delta), delta_ci=ci,
                   statistic=neg(c.statistic), effect_size=neg(c.effect_size),
                   wins=c.losses, losses=c.wins)
