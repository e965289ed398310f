"""Reports read back from where they were logged: :func:`load_mlflow`.

A report logged with ``log_mlflow`` (or ``--mlflow``) keeps its full JSON as an artifact; this
module rebuilds the report value from it, so a notebook can compare, render or plot a run logged
last week as if it had just been computed. :func:`report_from_dict` does the rebuilding from any
``to_dict()`` / ``-f json`` output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputError
from ..rag.report import RagReport, Score
from ..report import Comparison, CompareReport, Report
from .mlflow import read_logged

__all__ = ["load_mlflow", "report_from_dict"]


def _report(d: Mapping[str, Any]) -> Report:
    per_query = d.get("per_query")
    if not isinstance(per_query, Mapping):
        raise InputError("a report without per-query values cannot be rebuilt (logged with per_query=False?)",
                         field="per_query")
    metrics = list(d.get("mean") or {})
    qids = list(per_query)
    values = {m: np.array([np.nan if per_query[q].get(m) is None else float(per_query[q][m])
                           for q in qids], dtype=np.float64) for m in metrics}
    meta = dict(d.get("meta") or {})
    meta.pop("undetermined", None)  # recomputed from the values
    report = Report(str(d.get("run")), qids, values, meta)
    # The logged means are the report's own (sums and geometric means included): keep them.
    report.mean = {m: d["mean"][m] for m in metrics}
    return report


def _compare(d: Mapping[str, Any]) -> CompareReport:
    runs = [r for r in d.get("runs") or []]
    if not runs:
        raise InputError("a comparison without runs", field="runs")
    reports = {str(r["run"]): _report(r) for r in runs}
    ci = {str(r["run"]): {m: (tuple(v) if v is not None else None) for m, v in (r.get("ci") or {}).items()}
          for r in runs}
    comparisons = [Comparison(**{**c, "delta_ci": tuple(c["delta_ci"]) if c.get("delta_ci") else None})
                   for c in d.get("comparisons") or []]
    baseline = comparisons[0].baseline if comparisons else str(runs[0]["run"])
    return CompareReport(reports, baseline, ci, comparisons, d.get("meta") or {})


def _rag(d: Mapping[str, Any]) -> RagReport:
    aggregates = d.get("aggregates") or []
    metrics = [str(a["metric"]) for a in aggregates]
    rows = d.get("samples")
    if not isinstance(rows, list):
        raise InputError("a RAG report without per-sample scores cannot be rebuilt", field="samples")
    scores = {m: [Score((r["scores"].get(m) or {}).get("value"), (r["scores"].get(m) or {}).get("reason"))
                  for r in rows] for m in metrics}
    return RagReport(metrics, [str(r["sample"]) for r in rows], scores,
                     definitions={str(a["metric"]): a.get("definition") for a in aggregates
                                  if a.get("definition")},
                     usage=d.get("usage") or {}, invalid=d.get("invalid_samples") or [],
                     settings=d.get("settings") or {})


_BUILDERS = {"Report": _report, "CompareReport": _compare, "RagReport": _rag}


def report_from_dict(data: Mapping[str, Any], kind: str | None = None) -> Report | CompareReport | RagReport:
    """The report value of a ``to_dict()`` (or ``-f json``) output: a :class:`~ragjudge.Report`,
    :class:`~ragjudge.CompareReport` or :class:`~ragjudge.RagReport`, recognised from its keys
    unless ``kind`` names the type."""
    if kind is None:
        kind = ("RagReport" if "aggregates" in data else "CompareReport" if "runs" in data
                and "comparisons" in data else "Report" if "per_query" in data else None)
    build = _BUILDERS.get(kind or "")
    if build is None:
        raise InputError(f"cannot rebuild a {kind or 'report of this shape'} (Report, CompareReport and "
                         "RagReport can be; ragjudge.integrations.mlflow.read_logged returns any "
                         "logged report's JSON)", field="report")
    try:
        return build(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"not a {kind}'s JSON: {exc}", field="report") from None


def load_mlflow(run_id: str, prefix: str = "") -> Report | CompareReport | RagReport:
    """The report logged to MLflow run ``run_id`` by ``log_mlflow`` (under ``prefix`` when
    several reports share the run), rebuilt from its JSON artifact: the same per-query or
    per-sample values, means, intervals, tests and settings, ready to render, compare or plot."""
    kind, data = read_logged(run_id, prefix)
    return report_from_dict(data, kind)
