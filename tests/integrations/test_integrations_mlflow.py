"""log_mlflow(report) and --mlflow against a real MLflow tracking store (sqlite under tmp_path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ragjudge
from ragjudge.integrations.mlflow import log_mlflow, mlflow_name, table_values, tracking_values

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_names_and_values_without_mlflow() -> None:
    assert mlflow_name("ndcg@10") == "ndcg_at_10"
    assert mlflow_name("context_precision(threshold=2)@5") == "context_precision_threshold_2_at_5"
    qrels = ragjudge.Qrels.from_dict({"q1": {"a": 1}, "q2": {"b": 1}})
    run = ragjudge.Run.from_dict({"q1": {"a": 2.0, "b": 1.0}, "q2": {"a": 2.0, "b": 1.0}})
    metrics, params = tracking_values(ragjudge.evaluate(qrels, run, ["P@1", "map"]).to_dict())
    # canonical names whatever the spelling asked (P@1, P_1, precision@1 line up)
    assert metrics == {"precision_at_1": 0.5, "map": 0.75}
    assert params["run"] == "run" and params["measures.P_at_1"] == "precision@1"
    got = ragjudge.evaluate(ragjudge.read_qrels(EXAMPLES / "qrels.txt"),
                            ragjudge.read_run(EXAMPLES / "runs" / "bm25_raw.run"), ["P_10"])
    metrics, params = tracking_values(got.to_dict())
    assert set(metrics) == {"precision_at_10"}
    # file names, not this machine's paths (the JSON artifact keeps the full ones)
    assert params["qrels_source"] == "qrels.txt" and params["run_source"] == "bm25_raw.run"
    table = table_values(got.to_dict())
    assert table is not None and set(table) == {"run", "query", "precision@10"}
    assert len(table["query"]) == 60 and table["precision@10"][0] == got.per_query[table["query"][0]]["P_10"]
    cmp = ragjudge.compare(qrels, {"a": run, "b": run}, ["map"], n_resamples=200)
    metrics, params = tracking_values(cmp.to_dict(), prefix="x/")
    assert {"x/a/map", "x/a/map_ci_low", "x/a/map_ci_high", "x/b_vs_a/map_delta",
            "x/b_vs_a/map_p_holm"} <= set(metrics)
    assert params["x/n_resamples"] == "200" and params["x/test"] == "randomization"


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ARTIFACTS_DESTINATION", str(tmp_path / "artifacts"))
    monkeypatch.chdir(tmp_path)  # the default artifact root (./mlruns) stays in tmp_path
    mlflow.set_tracking_uri(uri)
    yield mlflow
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]


@pytest.mark.slow
def test_reports_logged_with_intervals_params_and_artifacts(tracking) -> None:
    mlflow = tracking
    qrels = ragjudge.read_qrels(EXAMPLES / "qrels.txt")
    runs = {p.stem: ragjudge.read_run(p) for p in sorted((EXAMPLES / "runs").glob("*.run"))[:2]}
    report = ragjudge.compare(qrels, runs, ["ndcg@10", "map"], n_resamples=500)
    run_id = log_mlflow(report)
    got = mlflow.get_run(run_id)
    a, b = runs
    m = got.data.metrics
    assert m[f"{a}/ndcg_at_10"] == pytest.approx(report.mean[a]["ndcg@10"])
    lo, hi = report.ci[b]["map"]
    assert (m[f"{b}/map_ci_low"], m[f"{b}/map_ci_high"]) == pytest.approx((lo, hi))
    assert m[f"{b}_vs_{a}/map_p_holm"] == pytest.approx(report.comparison(b, "map").p_adjusted)
    assert got.data.params["n_resamples"] == "500"
    assert got.data.tags["ragjudge.report"] == "CompareReport"
    files = {f.path for f in mlflow.MlflowClient().list_artifacts(run_id, "ragjudge")}
    assert {"ragjudge/CompareReport.json", "ragjudge/CompareReport.txt"} <= files
    pytest.importorskip("matplotlib")
    assert "ragjudge/CompareReport.png" in files
    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="ragjudge/CompareReport.json")
    assert json.loads(Path(path).read_text())["meta"]["n_resamples"] == 500

    # into the active run, two reports side by side with prefixes
    with mlflow.start_run() as active:
        single = ragjudge.evaluate(qrels, runs[a], ["P@5"])
        assert log_mlflow(single, prefix="dev/") == active.info.run_id
        rag = ragjudge.evaluate_samples_sync(EXAMPLES / "rag_samples.jsonl", ["hit@5"], progress=False)
        log_mlflow(rag, prefix="rag/")
    data = mlflow.get_run(active.info.run_id).data
    assert data.metrics["dev/precision_at_5"] == pytest.approx(single.mean["P@5"])
    assert "rag/hit_at_5_ci_low" in data.metrics and data.params["rag/default_k"] == "5"


@pytest.mark.slow
def test_agreement_and_ppi_reports(tracking) -> None:
    mlflow = tracking
    human = ragjudge.Qrels.from_dict({f"q{i}": {"a": i % 2, "b": 1, "c": 0} for i in range(8)})
    llm = ragjudge.Qrels.from_dict({f"q{i}": {"a": 1, "b": 1, "c": int(i % 3 == 0)} for i in range(8)})
    agreement = ragjudge.label_agreement(human, llm)
    data = mlflow.get_run(log_mlflow(agreement)).data
    key = next(k for k in data.metrics if k.endswith("_ci_low"))
    assert key[: -len("_ci_low")] in data.metrics


def test_missing_mlflow_is_one_line(monkeypatch) -> None:
    import sys

    # an entry of None makes every import of it fail, whether or not an earlier test loaded it
    monkeypatch.setitem(sys.modules, "mlflow", None)
    report = ragjudge.evaluate(ragjudge.Qrels.from_dict({"q": {"a": 1}}),
                               ragjudge.Run.from_dict({"q": {"a": 1.0}}), ["map"])
    with pytest.raises(ragjudge.InputError, match=r"^log_mlflow needs mlflow: pip install -e '\.\[mlflow\]' in the ragjudge checkout$"):
        log_mlflow(report)


@pytest.mark.slow
def test_cli_mlflow_flag(tracking, capsys) -> None:
    from ragjudge.cli import main

    mlflow = tracking
    runs = sorted(str(p) for p in (EXAMPLES / "runs").glob("*.run"))[:2]
    assert main(["compare", str(EXAMPLES / "qrels.txt"), *runs, "-m", "map", "--resamples", "200",
                 "--mlflow"]) == 0
    err = capsys.readouterr().err
    run_id = err.split("MLflow run ")[1].split()[0]
    assert "bm25_raw/map" in mlflow.get_run(run_id).data.metrics
    assert main(["evaluate", str(EXAMPLES / "qrels.txt"), runs[0], "-m", "P@5", "--mlflow"]) == 0
    assert main(["rag", str(EXAMPLES / "rag_samples.jsonl"), "-m", "hit@5", "--mlflow", "--no-progress"]) == 0
    runs_logged = mlflow.search_runs(output_format="list")
    assert len(runs_logged) == 3


@pytest.mark.slow
def test_reports_round_trip_with_their_tables(tracking) -> None:
    mlflow = tracking
    qrels = ragjudge.read_qrels(EXAMPLES / "qrels.txt")
    runs = {p.stem: ragjudge.read_run(p) for p in sorted((EXAMPLES / "runs").glob("*.run"))[:2]}
    report = ragjudge.compare(qrels, runs, ["ndcg@10", "num_ret"], n_resamples=300)
    back = ragjudge.load_mlflow(log_mlflow(report))
    assert isinstance(back, ragjudge.CompareReport) and back.baseline == report.baseline
    assert back.mean == report.mean  # the summed num_ret included
    for name in runs:
        assert back.reports[name].per_query == report.reports[name].per_query
        assert back.ci[name] == {m: tuple(v) for m, v in report.ci[name].items()}
    assert [c.to_dict() for c in back.comparisons] == [c.to_dict() for c in report.comparisons]
    assert back.render("csv") == report.render("csv")

    rag = ragjudge.evaluate_samples_sync(EXAMPLES / "rag_samples.jsonl", ["hit@5", "mrr"])
    run_id = log_mlflow(rag)
    files = {f.path for f in mlflow.MlflowClient().list_artifacts(run_id, "ragjudge")}
    assert "ragjudge/RagReport_table.json" in files
    path = mlflow.MlflowClient().download_artifacts(run_id, "ragjudge/RagReport_table.json")
    table = json.loads(Path(path).read_text())
    assert table["columns"][:2] == ["sample", "hit@5"] and len(table["data"]) == len(rag.sample_ids)
    again = ragjudge.load_mlflow(run_id)
    assert again.values("mrr") == rag.values("mrr") and again.mean("hit@5") == rag.mean("hit@5")
    with pytest.raises(ragjudge.InputError, match="run_id"):
        ragjudge.load_mlflow("0" * 32)


@pytest.mark.slow
def test_a_refused_store_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    mlflow = pytest.importorskip("mlflow")
    from ragjudge.cli import main

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    try:
        report = ragjudge.evaluate(ragjudge.Qrels.from_dict({"q": {"a": 1}}),
                                   ragjudge.Run.from_dict({"q": {"a": 1.0}}), ["map"])
        try:
            log_mlflow(report)
        except ragjudge.InputError as exc:  # MLflow versions that refuse the file store
            assert str(exc).startswith("MLFLOW_TRACKING_URI: MLflow refused the tracking store file:")
            assert "\n" not in str(exc) and "sqlite:///mlflow.db" in str(exc)
            assert main(["evaluate", str(EXAMPLES / "qrels.txt"), str(EXAMPLES / "runs" / "bm25_raw.run"),
                         "-m", "map", "--mlflow"]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "Traceback" not in err
        else:
            pytest.skip(f"MLflow {mlflow.__version__} still accepts the file store")
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
