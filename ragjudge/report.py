"""Evaluation results (:class:`Report`, :class:`CompareReport`) and the shared renderers.

:func:`render_table` turns ``headers`` + ``rows`` into one of :data:`FORMATS`; every report in
ragjudge (ranking, comparison, RAG) renders through it, so a table looks the same everywhere.
:func:`render_trec` writes trec_eval's ``measure<TAB>qid<TAB>value`` lines.

Reports are plain values: they hold floats and strings only, never call back into the engine,
and pandas is imported only by ``to_dataframe()``.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from .errors import InputError
from .measures import aggregate

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

#: Formats :func:`render_table` understands.
FORMATS: tuple[str, ...] = ("table", "json", "csv", "markdown", "latex", "html")
#: The extra format a ranking report supports (trec_eval's own output).
TREC_FORMAT = "trec"

_MISSING = "-"


# ----------------------------------------------------------------------------- cells
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) or _is_np_number(value)


def _is_np_number(value: Any) -> bool:
    # numpy scalars without importing numpy here at module level for every renderer call.
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return kind in ("i", "u", "f") and getattr(value, "ndim", 1) == 0


def _plain(value: Any) -> Any:
    """JSON-safe Python value: numpy scalars -> Python numbers, non-finite floats -> None."""
    if _is_np_number(value):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        # Never emit NaN/Infinity: they are not JSON and ragjudge reports failures as data.
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def format_value(value: Any, digits: int = 4) -> str:
    """One cell as text: floats with ``digits`` decimals, integers as is, ``None`` as ``-``."""
    if value is None:
        return _MISSING
    if _is_np_number(value):
        value = value.item()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return _MISSING
        return f"{value:.{digits}f}"
    return str(value)


def _numeric_columns(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[bool]:
    """A column is numeric (right-aligned) when every non-empty cell is a number."""
    out = []
    for j in range(len(headers)):
        cells = [r[j] for r in rows if j < len(r) and r[j] is not None]
        out.append(bool(cells) and all(_is_number(c) for c in cells))
    return out


def _check_shape(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i} has {len(r)} cells, expected {len(headers)}")


# ----------------------------------------------------------------------------- renderers
_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(c, c) for c in text)


def _render_text(headers: Sequence[str], cells: list[list[str]], numeric: list[bool]) -> str:
    widths = [len(h) for h in headers]
    for r in cells:
        for j, c in enumerate(r):
            widths[j] = max(widths[j], len(c))

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[j]) if numeric[j] else v.ljust(widths[j]) for j, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out) + "\n"


def _render_markdown(headers: Sequence[str], cells: list[list[str]], numeric: list[bool]) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |"]
    out.append("|" + "|".join("---:" if n else ":---" for n in numeric) + "|")
    out.extend("| " + " | ".join(esc(c) for c in r) + " |" for r in cells)
    return "\n".join(out) + "\n"


def _render_latex(headers: Sequence[str], cells: list[list[str]], numeric: list[bool]) -> str:
    # booktabs layout: what papers use; needs \usepackage{booktabs}.
    spec = "".join("r" if n else "l" for n in numeric)
    out = [f"\\begin{{tabular}}{{{spec}}}", "\\toprule"]
    out.append(" & ".join(_latex_escape(h) for h in headers) + " \\\\")
    out.append("\\midrule")
    out.extend(" & ".join(_latex_escape(c) for c in r) + " \\\\" for r in cells)
    out += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(out) + "\n"


def _render_html(
    headers: Sequence[str], cells: list[list[str]], numeric: list[bool], title: str | None
) -> str:
    def td(tag: str, text: str, j: int) -> str:
        style = ' style="text-align:right"' if numeric[j] else ' style="text-align:left"'
        return f"<{tag}{style}>{html.escape(text)}</{tag}>"

    out = ['<table class="ragjudge">']
    if title:
        out.append(f"<caption>{html.escape(title)}</caption>")
    out.append("<thead><tr>" + "".join(td("th", h, j) for j, h in enumerate(headers)) + "</tr></thead>")
    out.append("<tbody>")
    out.extend("<tr>" + "".join(td("td", c, j) for j, c in enumerate(r)) + "</tr>" for r in cells)
    out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def _render_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    minimal = csv.writer(buf, lineterminator="\n")
    # QUOTE_MINIMAL does not quote a lone "\r" when the line terminator is "\n"; such rows are
    # written fully quoted so every reader splits them correctly.
    quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def write(cells: list[Any]) -> None:
        w = quoted if any(isinstance(c, str) and "\r" in c for c in cells) else minimal
        w.writerow(cells)

    write(list(headers))
    for r in rows:
        # Full precision (repr) for machines; empty cell for a missing value.
        write(["" if (v := _plain(c)) is None else v for c in r])
    return buf.getvalue()


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: str = "table",
    *,
    digits: int = 4,
    title: str | None = None,
) -> str:
    """Render a table in ``fmt`` (one of :data:`FORMATS`); the result ends with a newline.

    Cells may be strings, numbers or ``None`` (shown as ``-``, ``null`` in JSON, empty in CSV).
    Human formats (table, markdown, latex, html) round floats to ``digits`` decimals and
    right-align numeric columns; json and csv keep full precision. ``json`` is a list of
    ``{header: value}`` objects. ``title`` becomes the HTML caption / a first line of the text
    table; the machine formats ignore it.
    """
    headers = [str(h) for h in headers]
    _check_shape(headers, rows)
    if fmt == "json":
        data = [{h: _plain(c) for h, c in zip(headers, r)} for r in rows]
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "csv":
        return _render_csv(headers, rows)
    numeric = _numeric_columns(headers, rows)
    cells = [[format_value(c, digits) for c in r] for r in rows]
    if fmt == "table":
        text = _render_text(headers, cells, numeric)
        return f"{title}\n{text}" if title else text
    if fmt == "markdown":
        return _render_markdown(headers, cells, numeric)
    if fmt == "latex":
        return _render_latex(headers, cells, numeric)
    if fmt == "html":
        return _render_html(headers, cells, numeric, title)
    raise InputError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}", field="format")


def render_trec(
    mean: Mapping[str, Any],
    per_query: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    runid: str | None = None,
    num_q: int | None = None,
    integer: Sequence[str] = (),
) -> str:
    """trec_eval's output: ``measure<TAB>qid<TAB>value`` with the measure padded to 22 columns.

    Per-query lines (when ``per_query`` is given) come first, grouped by query in the given
    order, then the ``all`` lines with the means, led by ``runid`` and ``num_q`` like trec_eval.
    Floats print as ``%.4f``, integers (and the metrics named in ``integer``, e.g. counts) as
    integers, a missing value as ``-``.
    """
    as_int = set(integer)

    def cell(v: Any, name: str = "") -> str:
        if _is_np_number(v):
            v = v.item()
        if isinstance(v, float) and name in as_int and math.isfinite(v) and v == int(v):
            return str(int(v))
        if isinstance(v, float):
            return f"{v:.4f}" if math.isfinite(v) else _MISSING
        return _MISSING if v is None else str(v)

    lines: list[str] = []
    if per_query:
        for qid, values in per_query.items():
            for name, v in values.items():
                lines.append(f"{name:<22}\t{qid}\t{cell(v, name)}")
    if runid is not None and "runid" not in mean:
        lines.append(f"{'runid':<22}\tall\t{runid}")
    if num_q is not None and "num_q" not in mean:
        lines.append(f"{'num_q':<22}\tall\t{num_q}")
    for name, v in mean.items():
        lines.append(f"{name:<22}\tall\t{cell(v, name)}")
    return "\n".join(lines) + "\n" if lines else ""


# ----------------------------------------------------------------------------- helpers
def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("to_dataframe() needs pandas: pip install -e '.[pandas]' in the ragjudge checkout") from None
    return pandas


def _value_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


# ----------------------------------------------------------------------------- Report
class Report:
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
        out: dict[str, Any] = {"run": self.run, "mean": dict(self.mean)}
        if per_query:
            out["per_query"] = self.per_query
        out["meta"] = _plain(self.meta)
        return out

    def to_json(self, *, per_query: bool = True, indent: int | None = 2) -> str:
        return json.dumps(_plain(self.to_dict(per_query=per_query)), indent=indent,
                          ensure_ascii=False, allow_nan=False)

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
        from . import plots  # matplotlib is optional: loaded on first plot

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
            f"<p><small>{html.escape(self.footer())}</small></p>"
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
        return json.dumps(_plain(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
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
    return render_table(headers, rows, fmt, digits=digits)


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
        return _plain(d)


class CompareReport:
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
            "runs": _plain(runs),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "meta": _plain(self.meta),
        }

    def to_json(self, *, per_query: bool = True, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(per_query=per_query), indent=indent, ensure_ascii=False,
                          allow_nan=False)

    def table(self) -> tuple[list[str], list[list[Any]]]:
        """Long table. Baseline mode: one row per (run, metric) with mean, CI, delta vs baseline,
        its interval, p, Holm p, significance, Cohen's d_z and win/tie/loss counts. All-pairs
        mode: :meth:`pairs_table` (the means and their intervals are :meth:`means_table`)."""
        if self.all_pairs:
            return self.pairs_table()
        headers = ["run", "metric", "mean", "ci_low", "ci_high", "delta", "delta_low",
                   "delta_high", "p", "p_holm", "sig", "d_z", "wins", "ties", "losses"]
        rows: list[list[Any]] = []
        for (name, m, *cells) in self.means_table()[1]:
            row: list[Any] = [name, m, *cells]
            if name == self.baseline:
                row += [None, None, None, None, None, "baseline", None, None, None, None]
            else:
                row += _comparison_cells(self.comparison(name, m))
            rows.append(row)
        return headers, rows

    def means_table(self) -> tuple[list[str], list[list[Any]]]:
        """One row per (run, metric): mean and its bootstrap interval."""
        rows: list[list[Any]] = []
        for name, r in self.reports.items():
            for m in self.metrics:
                ci = self.ci[name].get(m)
                rows.append([name, m, r.mean[m], ci[0] if ci else None, ci[1] if ci else None])
        return ["run", "metric", "mean", "ci_low", "ci_high"], rows

    def pairs_table(self) -> tuple[list[str], list[list[Any]]]:
        """One row per test (metric, run, vs): delta = mean(run - vs), its interval, p, Holm p,
        significance, Cohen's d_z and win/tie/loss counts of run against vs."""
        headers = ["metric", "run", "vs", "delta", "delta_low", "delta_high", "p", "p_holm",
                   "sig", "d_z", "wins", "ties", "losses"]
        rows = [[c.metric, c.run, c.baseline, *_comparison_cells(c)] for c in self.comparisons]
        return headers, rows

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
            lines.append(f"\\caption{{{_latex_escape(caption)}}}")
        if label is not None:
            lines.append(f"\\label{{{label}}}")
        lines += ["\\begin{tabular}{l" + "r" * len(metrics) + "}", "\\toprule"]
        lines.append("Run & " + " & ".join(_latex_escape(m) for m in metrics) + " \\\\")
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
            name = _latex_escape(run) + (" (baseline)" if run == self.baseline else "")
            lines.append(name + " & " + " & ".join(cells) + " \\\\")
        alpha = self.meta.get("alpha", 0.05)
        lines += ["\\bottomrule", "\\end{tabular}"]
        lines.append(
            f"\\\\[2pt]\\footnotesize{{Best in bold; $^\\dagger$ significantly different from "
            f"{_latex_escape(self.baseline)} (Holm-adjusted $p \\le {alpha:g}$).}}"
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
        from . import plots  # matplotlib is optional: loaded on first plot

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
            return json.dumps(self.to_dict(per_query=per_query), indent=2, ensure_ascii=False,
                              allow_nan=False) + "\n"
        if fmt == TREC_FORMAT:
            return render_reports(list(self.reports.values()), fmt, per_query=per_query)
        if fmt == "latex":
            return self.to_latex(digits=min(digits, 4))
        if fmt == "csv" and per_query:
            # One well-formed table (pandas.read_csv reads it): per-query rows and an "all" row
            # per run; the statistics are in the plain csv (without per_query).
            return render_reports(list(self.reports.values()), fmt, per_query=True, digits=digits)
        headers, rows = self.table()
        text = render_table(headers, rows, fmt, digits=digits)
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
        text = render_table(h, r, "html", title="ragjudge comparison")
        if self.all_pairs:
            mh, mr = self.means_table()
            text = render_table(mh, mr, "html", title="ragjudge runs") + text
        return text + f"<p><small>{html.escape(self.footer())}</small></p>"


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
