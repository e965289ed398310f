"""Per-sample scores and the RAG report (aggregates, per-sample rows, renderers).

A :class:`Score` is either a value or "undetermined" with a reason -- never NaN, never a
silent 0. The mean, its 95% confidence interval and ``n`` are over determined samples only;
the undetermined count is reported beside them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InputError, MetricError
from ..render import ResultSurface, html_note, render_table
from .. import plots
from ..stats import bootstrap_ci
from .._lazy import optional

if TYPE_CHECKING:  # a type only: importing the llm package loads openai (~2 s)
    from ..llm.provenance import FailureKind

__all__ = ["Score", "Summary", "RagReport", "undetermined"]


@dataclass(frozen=True)
class Score:
    """One metric on one sample: ``value`` in [0, 1], or ``None`` with ``reason`` saying why.
    ``failure`` is set when the reason is a failed LLM call (its typed kind), ``None`` when the
    sample itself leaves the metric undetermined (no claims, no reference...)."""

    value: float | None
    reason: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    failure: FailureKind | None = None

    @property
    def determined(self) -> bool:
        return self.value is not None


def undetermined(reason: str, **detail: Any) -> Score:
    """A score that could not be computed, with the reason (e.g. ``"no claims in the response"``)."""
    return Score(None, reason, detail)


@dataclass(frozen=True)
class Summary:
    """Aggregate of one metric: mean and 95% CI over the ``n`` determined samples."""

    metric: str
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    undetermined: int
    reasons: Mapping[str, int]


def _summarize(metric: str, scores: Sequence[Score]) -> Summary:

    values = [s.value for s in scores if s.value is not None]
    reasons: dict[str, int] = {}
    for s in scores:
        if s.value is None:
            key = s.reason or "undetermined"
            reasons[key] = reasons.get(key, 0) + 1
    if not values:
        return Summary(metric, None, None, None, 0, len(scores), reasons)
    mean = sum(values) / len(values)
    # Percentile bootstrap of the mean (seeded, so a report is reproducible).
    lo, hi = bootstrap_ci(values, n_resamples=2000, seed=0) if len(values) > 1 else (mean, mean)
    return Summary(metric, mean, lo, hi, len(values), len(scores) - len(values), reasons)


class RagReport(ResultSurface):
    """Results of :func:`ragjudge.rag.evaluate_samples`.

    ``metrics`` are the result columns (canonical specs), ``sample_ids`` the samples in input
    order, ``scores[metric][i]`` the :class:`Score` of sample ``i``. ``definitions`` says what
    each column means, ``usage`` what the LLM calls cost, ``invalid`` which input samples were
    skipped (``skip_invalid``) and why.
    """

    def __init__(
        self,
        metrics: Sequence[str],
        sample_ids: Sequence[str],
        scores: Mapping[str, Sequence[Score]],
        *,
        definitions: Mapping[str, str] | None = None,
        usage: Mapping[str, Any] | None = None,
        invalid: Sequence[str] = (),
        settings: Mapping[str, Any] | None = None,
        canonical: Callable[[str], str] | None = None,
    ) -> None:
        self.metrics = list(metrics)
        # How another spelling of a metric maps to its column (``P_10`` -> ``precision@10``);
        # given by the evaluator, which knows the metric registry this value module sits below.
        self._canonical = canonical
        self.sample_ids = list(sample_ids)
        self.scores = {m: list(scores[m]) for m in self.metrics}
        for m in self.metrics:
            if len(self.scores[m]) != len(self.sample_ids):
                raise ValueError(f"metric {m}: {len(self.scores[m])} scores for {len(self.sample_ids)} samples")
        self.definitions = dict(definitions or {})
        self.usage = dict(usage or {})
        self.invalid = list(invalid)
        self.settings = dict(settings or {})
        self.summaries = {m: _summarize(m, self.scores[m]) for m in self.metrics}

    # -- access ------------------------------------------------------------------------
    def key(self, metric: str) -> str:
        """The column of ``metric`` as typed in any spelling (``P_10``, ``rbp(p=0.8,gain=graded)``)."""
        if metric in self.scores:
            return metric
        if self._canonical is None:
            raise KeyError(metric)
        try:
            column = self._canonical(metric)
        except MetricError:
            raise KeyError(metric) from None
        if column not in self.scores:
            raise KeyError(metric)
        return column

    def mean(self, metric: str) -> float | None:
        """Mean over determined samples (``None`` if none was determined)."""
        return self.summaries[self.key(metric)].mean

    def __getitem__(self, metric: str) -> list[Score]:
        return self.scores[self.key(metric)]

    def values(self, metric: str) -> list[float | None]:
        return [s.value for s in self.scores[self.key(metric)]]

    # -- tables --------------------------------------------------------------------------
    def aggregate_rows(self) -> tuple[list[str], list[list[Any]]]:
        # The interval columns are named as in ``ragjudge evaluate``/``compare`` output.
        headers = ["metric", "mean", "ci_low", "ci_high", "n", "undetermined"]
        rows = []
        for m in self.metrics:
            s = self.summaries[m]
            rows.append([m, s.mean, s.ci_low, s.ci_high, s.n, s.undetermined])
        return headers, rows

    def sample_rows(self) -> tuple[list[str], list[list[Any]]]:
        """One row per sample: every metric's value, then the reasons of undetermined ones."""
        headers = ["sample", *self.metrics, "reasons"]
        rows = []
        for i, sid in enumerate(self.sample_ids):
            row: list[Any] = [sid]
            reasons = []
            for m in self.metrics:
                sc = self.scores[m][i]
                row.append(sc.value)
                if sc.value is None:
                    reasons.append(f"{m}: {sc.reason}")
            row.append("; ".join(reasons))
            rows.append(row)
        return headers, rows

    def render(self, fmt: str = "table", *, per_sample: bool = False, digits: int = 4) -> str:
        """Aggregates (and, with ``per_sample``, one row per sample) as table/json/csv/markdown/html."""
        if fmt == "json":
            return json.dumps(self.to_dict(per_sample=per_sample), indent=2, ensure_ascii=False,
                              allow_nan=False) + "\n"
        headers, rows = self.aggregate_rows()
        text = render_table(headers, rows, fmt, digits=digits)
        if per_sample:
            sh, sr = self.sample_rows()
            sep = "\n" if fmt in ("table", "markdown", "html") else ""
            text += sep + render_table(sh, sr, fmt, digits=digits)
        return text

    def to_dict(self, *, per_sample: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "aggregates": [
                {
                    "metric": m,
                    "mean": s.mean,
                    "ci": None if s.mean is None else [s.ci_low, s.ci_high],
                    "n": s.n,
                    "undetermined": s.undetermined,
                    "undetermined_reasons": dict(s.reasons),
                    "definition": self.definitions.get(m),
                }
                for m, s in self.summaries.items()
            ],
            "usage": self.usage,
            "settings": self.settings,
            "invalid_samples": self.invalid,
        }
        if per_sample:
            out["samples"] = [
                {
                    "sample": sid,
                    "scores": {
                        m: (
                            {"value": self.scores[m][i].value}
                            if self.scores[m][i].value is not None
                            else {"value": None, "reason": self.scores[m][i].reason}
                        )
                        for m in self.metrics
                    },
                }
                for i, sid in enumerate(self.sample_ids)
            ]
        return out

    def to_dataframe(self, *, per_sample: bool = True) -> Any:
        """pandas DataFrame: one row per sample (value columns + ``<metric>.reason``), or the
        aggregates with ``per_sample=False``. Needs the ``pandas`` extra."""
        pd = optional("pandas", extra="pandas", what="to_dataframe()")
        if not per_sample:
            headers, rows = self.aggregate_rows()
            return pd.DataFrame(rows, columns=headers)
        data: dict[str, list[Any]] = {"sample": list(self.sample_ids)}
        for m in self.metrics:
            # None (not NaN) marks an undetermined value; the reason sits in its own column.
            data[m] = pd.array([s.value for s in self.scores[m]], dtype="Float64")
            data[f"{m}.reason"] = [s.reason for s in self.scores[m]]
        return pd.DataFrame(data)

    def plot(self, metrics: Sequence[str] | None = None, *, kind: str = "box", ax: Any = None) -> Any:
        """``kind="box"``: per-metric distributions over the samples, undetermined counts in the
        tick labels; ``"heatmap"``: per-sample scores for a few metrics (blank = undetermined).
        Returns the Axes; needs matplotlib (the ``plot`` extra)."""

        keys = [self.key(m) for m in metrics] if metrics else None
        if kind == "box":
            return plots.plot_rag(self, keys, ax=ax)
        if kind == "heatmap":
            return plots.plot_sample_heatmap(self, keys, ax=ax)
        raise InputError(f"kind must be 'box' or 'heatmap', got {kind!r}", field="kind")

    def to_latex(self, *, per_sample: bool = False, digits: int = 4) -> str:
        """The aggregates (and per-sample rows) as booktabs LaTeX (``\\usepackage{booktabs}``)."""
        return self.render("latex", per_sample=per_sample, digits=digits)

    def footer(self) -> str:
        """Why values are undetermined (top reasons per metric) and what the LLM calls cost."""
        parts = []
        for m, s in self.summaries.items():
            if s.reasons:
                top = sorted(s.reasons.items(), key=lambda x: -x[1])[:3]
                parts.append(f"{m} undetermined: " + ", ".join(f"{r} ({n})" for r, n in top))
        u = self.usage
        if u.get("calls") is not None:
            cost = u.get("cost_usd")
            parts.append(f"{u.get('calls')} LLM calls" + ("" if cost is None else f", ${cost:.4f}"))
        if self.invalid:
            parts.append(f"{len(self.invalid)} invalid samples skipped")
        return "; ".join(parts)

    def __str__(self) -> str:
        title = f"ragjudge RAG report ({len(self.sample_ids)} samples)"
        footer = self.footer()
        return render_table(*self.aggregate_rows(), "table", title=title) + (footer + "\n" if footer else "")

    def _repr_html_(self) -> str:
        footer = self.footer()
        return render_table(*self.aggregate_rows(), "html", title=f"ragjudge RAG report ({len(self.sample_ids)} samples)") + (
            html_note(footer) if footer else "")

    def __repr__(self) -> str:
        parts = []
        for m, s in self.summaries.items():
            mean = "-" if s.mean is None else f"{s.mean:.4f}"
            und = f" ({s.undetermined} undetermined)" if s.undetermined else ""
            parts.append(f"{m}={mean}{und}")
        return f"RagReport({len(self.sample_ids)} samples: " + ", ".join(parts) + ")"
