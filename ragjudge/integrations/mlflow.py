"""A report in MLflow: :func:`log_mlflow` (``ragjudge.log_mlflow(result)``, any result).

What is logged, read from the report's own ``to_dict()`` (so it is the JSON output, nothing
more):

* metrics: each estimate with its interval as ``<metric>``, ``<metric>_ci_low``,
  ``<metric>_ci_high`` -- one run's means (:class:`~ragjudge.Report`); ``<run>/<metric>`` and the
  paired tests as ``<run>_vs_<baseline>/<metric>_delta`` (+ interval, ``_p``, ``_p_holm``,
  ``_d_z``) for a :class:`~ragjudge.CompareReport`; RAG metrics with ``_n`` and
  ``_undetermined`` and the LLM usage; agreement statistics; PPI estimates as
  ``<run>/<metric>_ppi`` (+ interval) beside the LLM-only and human-only ones;
* params: the settings the numbers rest on (``meta`` / ``settings``: measures and cutoffs,
  test, resamples, seed, alpha, estimand, grading; model and prompt id and sha where an LLM
  graded), flattened with dots;
* artifacts: ``ragjudge/<Type>.json`` (the full JSON, per query or sample; what
  :func:`ragjudge.load_mlflow` reads back), ``<Type>.txt`` (the table), the per-query or
  per-sample values as an MLflow table (``<Type>_table.json``, shown in the UI's artifact and
  evaluation views) and, when the report can plot and matplotlib is installed, ``<Type>.png``.

Metric names are canonical whatever spelling was asked (``P_10``, ``P@10`` and ``precision@10``
are all logged as ``precision_at_10``), so runs logged from different scripts line up; file
paths (``qrels_source``, ``run_source``...) are logged as file names, the full paths staying
in the JSON artifact. MLflow allows letters, digits and ``_ - . / : space`` in names: ``@`` is
written ``_at_`` and other characters ``_`` (``ndcg@10`` -> ``ndcg_at_10``); the JSON keeps the
exact names. A tracking store MLflow refuses (its file store, since MLflow 3.7, unless
``MLFLOW_ALLOW_FILE_STORE=true``) is one :class:`~ragjudge.errors.InputError` line naming
``MLFLOW_TRACKING_URI``.

It needs only a result's ``to_dict()`` and imports ``mlflow`` only when called.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .._lazy import optional
from ..errors import InputError, RagjudgeError

__all__ = ["log_mlflow", "mlflow_name", "tracking_values", "table_values", "read_logged"]

_BAD = re.compile(r"[^\w\-. :/]")
_MAX_PARAM = 6000
# Lists in meta that can be as long as the query set: in the JSON artifact, not in params.
_SKIP_PARAMS = frozenset({"missing_queries", "ignored_queries", "notes", "undetermined"})


def mlflow_name(name: str) -> str:
    """A metric or param name MLflow accepts (``ndcg@10`` -> ``ndcg_at_10``)."""
    out = _BAD.sub("_", str(name).replace("@", "_at_"))
    out = re.sub(r"_{2,}", "_", out).strip("_ ")
    out = re.sub(r"/{2,}", "/", out).strip("/")
    return out or "_"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    return None


class _Values:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.metrics: dict[str, float] = {}
        self.params: dict[str, str] = {}

    def metric(self, name: str, value: Any) -> None:
        v = _number(value)
        if v is not None:
            self.metrics[mlflow_name(self.prefix + name)] = v

    def interval(self, name: str, value: Any, ci: Any) -> None:
        self.metric(name, value)
        if isinstance(ci, (list, tuple)) and len(ci) == 2:
            self.metric(f"{name}_ci_low", ci[0])
            self.metric(f"{name}_ci_high", ci[1])

    def estimate(self, name: str, e: Mapping[str, Any], value_key: str = "value") -> None:
        """``{"value" | "mean", "ci_low", "ci_high"}`` -> three metrics."""
        self.metric(name, e.get(value_key, e.get("mean")))
        self.metric(f"{name}_ci_low", e.get("ci_low"))
        self.metric(f"{name}_ci_high", e.get("ci_high"))

    def param(self, name: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, Mapping):
            for k, v in value.items():
                if str(k) not in _SKIP_PARAMS:
                    self.param(f"{name}.{k}", v)
            return
        if isinstance(value, (list, tuple)):
            if not value or not all(isinstance(v, (str, int, float, bool)) for v in value):
                return
            value = ",".join(map(str, value))
        text = value if isinstance(value, str) else json.dumps(value)
        if name.endswith("_source") and isinstance(value, str) and "/" in value.replace("\\", "/"):
            text = value.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]  # a file name, not a machine's path
        if len(text) > _MAX_PARAM:
            text = text[: _MAX_PARAM - 3] + "..."
        self.params[mlflow_name(self.prefix + name)] = text

    def params_of(self, section: Any, under: str = "") -> None:
        if isinstance(section, Mapping):
            for k, v in section.items():
                if str(k) not in _SKIP_PARAMS:
                    self.param(f"{under}{k}", v)


def tracking_values(data: Mapping[str, Any], prefix: str = "") -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, params) MLflow gets for one report's ``to_dict()`` (see the module docstring)."""
    v = _Values(prefix)
    if "aggregates" in data:  # RagReport
        for a in data["aggregates"]:
            m = str(a["metric"])
            v.interval(m, a.get("mean"), a.get("ci"))
            v.metric(f"{m}_n", a.get("n"))
            v.metric(f"{m}_undetermined", a.get("undetermined"))
            v.param(f"definition.{m}", a.get("definition"))
        usage = data.get("usage") or {}
        for k, value in usage.items():
            if k == "model":
                v.param("model", value)
            else:
                v.metric(f"usage/{k}", value)
        v.params_of(data.get("settings"))
    elif "stats" in data and "confusion" in data:  # AgreementReport
        for k, e in (data.get("stats") or {}).items():
            v.estimate(str(k), e)
        for k in ("common_pairs", "common_queries", "reference_only", "candidate_only", "kendall_tau"):
            v.metric(k, data.get(k))
        for metric, stats in (data.get("ranking") or {}).items():
            for k, e in stats.items():
                v.estimate(f"ranking/{metric}/{k}", e)
        v.params_of(data.get("settings"))
    elif "runs" in data:  # CompareReport, PPIReport
        for r in data["runs"]:
            name = str(r.get("run"))
            ci = r.get("ci") or {}
            canon = _canonical(r)
            for m, mean in (r.get("mean") or {}).items():
                v.interval(f"{name}/{canon(m)}", mean, ci.get(m))
            for m, e in (r.get("ppi") or {}).items():
                v.estimate(f"{name}/{m}_ppi", e, "mean")
                v.estimate(f"{name}/{m}_llm_only", e.get("llm_only") or {})
                v.estimate(f"{name}/{m}_human_only", e.get("human_only") or {})
                v.metric(f"{name}/{m}_n_human", e.get("n_human"))
                v.param("estimand", e.get("estimand"))
            for m, e in (r.get("ppi_delta") or {}).items():
                v.estimate(f"{name}_vs_{e.get('baseline')}/{m}_ppi_delta", e, "mean")
            meta = r.get("meta") or {}
            v.param(f"{name}.run_source", meta.get("run_source"))
            if len(data["runs"]) == 1 or "ppi" in r:
                v.params_of({k: x for k, x in meta.items() if k not in ("run_source", "ppi")})
        canon = _canonical(data["runs"][0]) if data["runs"] else str
        for c in data.get("comparisons") or []:
            base = f"{c['run']}_vs_{c['baseline']}/{canon(c['metric'])}"
            v.interval(f"{base}_delta", c.get("delta"), c.get("delta_ci"))
            v.metric(f"{base}_p", c.get("p_value"))
            v.metric(f"{base}_p_holm", c.get("p_adjusted"))
            v.metric(f"{base}_d_z", c.get("effect_size"))
        v.params_of(data.get("meta"))
        v.params_of(data.get("settings"))
    elif isinstance(data.get("mean"), Mapping):  # Report
        canon = _canonical(data)
        for m, mean in data["mean"].items():
            v.metric(canon(m), mean)
        v.param("run", data.get("run"))
        v.params_of(data.get("meta"))
    else:  # any other result: its numbers and settings
        for k, value in data.items():
            if isinstance(value, Mapping) and k in ("settings", "meta"):
                v.params_of(value)
            elif isinstance(value, Mapping) and "ci_low" in value:
                v.estimate(str(k), value)
            else:
                v.metric(str(k), value)
    return v.metrics, v.params


def _canonical(report: Mapping[str, Any]) -> Any:
    """Metric key -> its canonical spec (``P_10`` -> ``precision@10``), from the report's
    ``meta.measures``; keys without one stay as they are."""
    specs = (report.get("meta") or {}).get("measures") or {}
    return lambda key: str(specs.get(key, key))


def table_values(data: Mapping[str, Any]) -> dict[str, list[Any]] | None:
    """The per-query (``run``, ``query``, one column per canonical metric) or per-sample
    (``sample``, one column per metric, ``<metric>.reason`` for undetermined ones) columns of a
    report's ``to_dict()``, for ``MlflowClient.log_table``; ``None`` when it has no such rows."""
    if isinstance(data.get("samples"), list) and data["samples"]:  # RagReport
        metrics = [str(a["metric"]) for a in data.get("aggregates") or []]
        cols: dict[str, list[Any]] = {"sample": []}
        for m in metrics:
            cols[m] = []
            cols[f"{m}.reason"] = []
        for row in data["samples"]:
            cols["sample"].append(row.get("sample"))
            for m in metrics:
                score = (row.get("scores") or {}).get(m) or {}
                cols[m].append(score.get("value"))
                cols[f"{m}.reason"].append(score.get("reason"))
        return cols
    reports = data["runs"] if isinstance(data.get("runs"), list) else [data]
    reports = [r for r in reports if isinstance(r.get("per_query"), Mapping) and r["per_query"]]
    if not reports:
        return None
    canon = _canonical(reports[0])
    keys = list(next(iter(reports[0]["per_query"].values())))
    cols = {"run": [], "query": [], **{canon(k): [] for k in keys}}
    for r in reports:
        for qid, values in r["per_query"].items():
            cols["run"].append(r.get("run"))
            cols["query"].append(qid)
            for k in keys:
                cols[canon(k)].append(values.get(k))
    return cols


def _refused(exc: Exception, mlflow: Any) -> InputError:
    """A store MLflow will not use, as one line naming where it is configured."""
    uri = mlflow.get_tracking_uri()
    message = " ".join(str(getattr(exc, "message", None) or exc).split())
    first = message.split(". ", 1)[0].rstrip(".")
    hint = ""
    if "filesystem" in message.lower() or "file store" in message.lower():
        hint = " (use a database store such as sqlite:///mlflow.db, or set MLFLOW_ALLOW_FILE_STORE=true)"
    return InputError(f"MLflow refused the tracking store {uri}: {first}{hint}",
                      field="MLFLOW_TRACKING_URI")


def read_logged(run_id: str, prefix: str = "") -> tuple[str, dict[str, Any]]:
    """The report type and the JSON :func:`log_mlflow` logged to MLflow run ``run_id``
    (under ``prefix`` when several reports share the run)."""
    mlflow = _mlflow()
    client = mlflow.MlflowClient()
    folder = f"{prefix.strip('/')}/ragjudge" if prefix.strip("/") else "ragjudge"
    try:
        kind = client.get_run(run_id).data.tags.get(mlflow_name(f"{prefix}ragjudge.report"))
        if not kind:
            raise InputError(f"MLflow run {run_id} has no ragjudge report" + (
                f" under prefix {prefix!r}" if prefix else ""), field="run_id")
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(run_id, f"{folder}/{kind}.json", tmp)
            with open(path, encoding="utf-8") as f:
                return kind, json.load(f)
    except InputError:
        raise
    except Exception as exc:  # MlflowException: no such run, a refused store...
        if type(exc).__name__ != "MlflowException":
            raise
        if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) or "not found" in str(exc).lower():
            raise InputError(f"no MLflow run {run_id!r} with a ragjudge report in "
                             f"{mlflow.get_tracking_uri()}", field="run_id") from None
        raise _refused(exc, mlflow) from None


def _mlflow() -> Any:
    return optional("mlflow", extra="mlflow", what="log_mlflow")


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _figure(report: Any) -> Any:
    """The report's default plot as a matplotlib Figure, or ``None`` (no plot, no matplotlib)."""
    plot = getattr(report, "plot", None)
    if not callable(plot):
        return None
    try:
        ax = plot()
    except (ImportError, RagjudgeError):
        return None
    return getattr(ax, "figure", None) or getattr(ax, "get_figure", lambda: None)()


def log_mlflow(report: Any, run: Any = None, prefix: str = "", *, figures: bool = True) -> str:
    """Log ``report`` (a ragjudge result, or a list of them) to MLflow; returns the run id.

    ``run``: an MLflow run id or run object to log into; default the active run
    (``mlflow.start_run()``), else a new run, ended afterwards, in the experiment and tracking
    store MLflow is configured with (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``).
    ``prefix`` goes before every metric, param and artifact name, so several reports can share a
    run (MLflow refuses a param logged twice with different values).
    """
    if isinstance(report, (list, tuple)):
        if not report:
            raise InputError("no reports to log")
        run_id = ""
        for r in report:
            name = getattr(r, "run", None) or type(r).__name__
            run_id = log_mlflow(r, run_id or run, f"{prefix}{name}/" if len(report) > 1 else prefix,
                                figures=figures)
        return run_id
    mlflow = _mlflow()
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    text = report.to_json()
    data = json.loads(text)
    metrics, params = tracking_values(data, prefix)
    kind = type(report).__name__
    started = None
    try:
        client = mlflow.MlflowClient()
        if run is not None:
            run_id = run if isinstance(run, str) else run.info.run_id
        elif mlflow.active_run() is not None:
            run_id = mlflow.active_run().info.run_id
        else:
            started = mlflow.start_run()
            run_id = started.info.run_id
    except MlflowException as exc:
        raise _refused(exc, mlflow) from None
    status = "FINISHED"
    try:
        now = int(time.time() * 1000)
        ms = [Metric(k, val, now, 0) for k, val in metrics.items()]
        ps = [Param(k, val) for k, val in params.items()]
        tags = [RunTag(mlflow_name(f"{prefix}ragjudge.report"), kind)]
        for i, chunk in enumerate(_chunks(ms, 1000)):
            client.log_batch(run_id, metrics=chunk, tags=tags if i == 0 else [])
        if not ms:
            client.log_batch(run_id, tags=tags)
        for chunk in _chunks(ps, 100):
            client.log_batch(run_id, params=chunk)
        folder = f"{prefix.strip('/')}/ragjudge" if prefix.strip("/") else "ragjudge"
        client.log_text(run_id, text, f"{folder}/{kind}.json")
        client.log_text(run_id, str(report), f"{folder}/{kind}.txt")
        table = table_values(data)
        if table is not None:
            client.log_table(run_id, data=table, artifact_file=f"{folder}/{kind}_table.json")
        fig = _figure(report) if figures else None
        if fig is not None:
            import matplotlib.pyplot as plt

            client.log_figure(run_id, fig, f"{folder}/{kind}.png")
            plt.close(fig)
    except BaseException:
        status = "FAILED"
        raise
    finally:
        if started is not None:
            mlflow.end_run(status)
    return str(run_id)
