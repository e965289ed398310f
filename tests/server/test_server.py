"""The HTTP service over a real uvicorn process on a loopback port: every synchronous endpoint,
results identical to the library's, errors, auth and limits."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")
pytest.importorskip("uvicorn", reason="the server tests need the server extra")

import httpx  # noqa: E402
from _server import ROOT, ServerProcess  # noqa: E402

from ragjudge import compare, evaluate, known_measures, parse_qrels, read_qrels, read_run  # noqa: E402
from ragjudge.errors import InputError  # noqa: E402
from ragjudge.rag import evaluate_samples_sync, known_rag_metrics, read_samples  # noqa: E402

EX = ROOT / "examples"
QRELS = (EX / "qrels.txt").read_text()
RUNS = {p.stem: p.read_text() for p in sorted((EX / "runs").glob("*.run"))}
METRICS = ["ndcg@10", "map", "P_10", "recall@100", "rbp(p=0.8,gain=graded)@20"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    with ServerProcess(tmp_path_factory.mktemp("srv")) as srv:
        yield srv


@pytest.fixture()
def client(server: ServerProcess) -> httpx.Client:
    with server.client() as c:
        yield c


def _roundtrip(obj: object) -> object:
    return json.loads(json.dumps(obj))


# ----------------------------------------------------------------------------- results
@pytest.mark.slow  # a real uvicorn process
def test_evaluate_trec_text_is_the_librarys_report(client: httpx.Client) -> None:
    r = client.post("/v1/evaluate", json={"qrels": QRELS, "runs": {"bm25_raw": RUNS["bm25_raw"]},
                                          "metrics": METRICS})
    assert r.status_code == 200, r.text
    lib = evaluate(parse_qrels(QRELS, source="qrels"), read_run(EX / "runs/bm25_raw.run"), METRICS,
                   name="bm25_raw").to_dict()
    got = r.json()
    assert set(got) == set(lib) == {"run", "mean", "per_query", "meta"}  # the CLI's keys
    assert got["mean"] == lib["mean"] and got["per_query"] == _roundtrip(lib["per_query"])
    assert {k: v for k, v in got["meta"].items() if not k.endswith("source")} == \
        {k: v for k, v in _roundtrip(lib["meta"]).items() if not k.endswith("source")}


@pytest.mark.slow  # a real uvicorn process
def test_evaluate_matches_the_cli_json(client: httpx.Client, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ragjudge", "evaluate", str(EX / "qrels.txt"),
         str(EX / "runs/bm25_raw.run"), str(EX / "runs/term_overlap.run"), "--no-stats",
         "-m", "ndcg@10,map", "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, check=True)
    cli = json.loads(out.stdout)
    r = client.post("/v1/evaluate", json={
        "qrels": QRELS, "runs": {"bm25_raw": RUNS["bm25_raw"], "term_overlap": RUNS["term_overlap"]},
        "metrics": ["ndcg@10,map"]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert isinstance(got, list) and [g["run"] for g in got] == [c["run"] for c in cli]
    for g, c in zip(got, cli):
        assert g["mean"] == c["mean"] and g["per_query"] == c["per_query"]
        assert set(g["meta"]) == set(c["meta"])


@pytest.mark.slow  # a real uvicorn process
def test_evaluate_dict_and_id_list_shapes(client: httpx.Client) -> None:
    qrels = read_qrels(EX / "qrels.txt")
    run = read_run(EX / "runs/bm25_stemmed.run")
    body = {"qrels": qrels.to_dict(), "runs": {"s": run.to_dict()}, "metrics": METRICS,
            "per_query": False}
    r = client.post("/v1/evaluate", json=body)
    assert r.status_code == 200, r.text
    assert "per_query" not in r.json()
    assert r.json()["mean"] == evaluate(qrels, run, METRICS).mean
    # id lists: relevant ids (grade 1) and ranked ids
    gold = {q: [d for d, g in docs.items() if g > 0] for q, docs in qrels.to_dict().items()}
    ranked = {q: [d for d, _ in run.ranked(q)] for q in run.query_ids}
    r = client.post("/v1/evaluate", json={"qrels": gold, "runs": {"s": ranked}, "metrics": ["ndcg@10"]})
    assert r.status_code == 200, r.text
    from ragjudge import Qrels, Run

    lib = evaluate(Qrels.from_lists(list(gold.values()), list(gold)),
                   Run.from_lists(list(ranked.values()), list(ranked)), ["ndcg@10"])
    assert r.json()["mean"] == lib.mean


@pytest.mark.slow  # a real uvicorn process
def test_compare_is_the_librarys_compare(client: httpx.Client) -> None:
    body = {"qrels": QRELS, "runs": RUNS, "metrics": ["ndcg@10", "map"], "baseline": "bm25_raw",
            "resamples": 500, "seed": 3, "test": "t"}
    r = client.post("/v1/compare", json=body)
    assert r.status_code == 200, r.text
    lib = compare(parse_qrels(QRELS, source="qrels"), {n: read_run(EX / f"runs/{n}.run") for n in RUNS},
                  ["ndcg@10", "map"], baseline="bm25_raw", n_resamples=500, seed=3, test="t")
    got, want = r.json(), _roundtrip(lib.to_dict())
    assert got["comparisons"] == want["comparisons"] and got["meta"] == want["meta"]
    assert [x["ci"] for x in got["runs"]] == [x["ci"] for x in want["runs"]]
    assert [x["mean"] for x in got["runs"]] == [x["mean"] for x in want["runs"]]
    body["all_pairs"] = True
    r = client.post("/v1/compare", json=body)
    assert r.status_code == 200, r.text
    lib = compare(parse_qrels(QRELS, source="qrels"), {n: read_run(EX / f"runs/{n}.run") for n in RUNS},
                  ["ndcg@10", "map"], baseline="bm25_raw", n_resamples=500, seed=3, test="t",
                  all_pairs=True)
    assert r.json()["comparisons"] == _roundtrip(lib.to_dict())["comparisons"]
    assert len(r.json()["comparisons"]) == 2 * len(RUNS) * (len(RUNS) - 1) // 2


@pytest.mark.slow  # a real uvicorn process
def test_rag_deterministic_answers_at_once(client: httpx.Client) -> None:
    samples = [json.loads(line) for line in (EX / "rag_samples.jsonl").read_text().splitlines() if line]
    r = client.post("/v1/rag", json={"samples": samples, "metrics": ["hit@3", "ndcg@5", "mrr"]})
    assert r.status_code == 200, r.text
    lib = evaluate_samples_sync(read_samples(EX / "rag_samples.jsonl"), ["hit@3", "ndcg@5", "mrr"])
    assert r.json() == _roundtrip(lib.to_dict())


@pytest.mark.slow  # a real uvicorn process
def test_metrics_catalog_lists_every_metric(client: httpx.Client) -> None:
    r = client.get("/v1/metrics")
    assert r.status_code == 200
    by_name = {m["name"]: m for m in r.json()}
    assert set(by_name) == set(known_measures()) | set(known_rag_metrics())
    ndcg = by_name["ndcg"]
    assert ndcg["takes_cutoff"] and {p["name"] for p in ndcg["parameters"]} >= {"gain", "ideal", "discount"}
    assert "Jarvelin" in ndcg["definition"] and not ndcg["needs_llm"]
    assert by_name["rprec"]["takes_cutoff"] is False
    assert by_name["faithfulness"]["needs_llm"] and by_name["faithfulness"]["definition"]


@pytest.mark.slow  # a real uvicorn process
def test_health_version_docs(client: httpx.Client) -> None:
    assert client.get("/v1/health").json()["status"] == "ok"
    v = client.get("/v1/version").json()
    from ragjudge import __version__

    assert v["ragjudge"] == __version__ and v["api"] == "v1"
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/v1/evaluate", "/v1/compare", "/v1/rag", "/v1/judge", "/v1/jobs/{job_id}",
            "/v1/metrics", "/v1/health", "/v1/version"} <= set(spec["paths"])


# ----------------------------------------------------------------------------- errors
@pytest.mark.slow  # a real uvicorn process
def test_input_errors_read_like_the_cli(client: httpx.Client) -> None:
    bad = "q1 0 d1 1\nq1 0 d2 high\n"
    r = client.post("/v1/evaluate", json={"qrels": bad, "runs": {"a": "q1 Q0 d1 1 1.0 x\n"}})
    assert r.status_code == 400
    with pytest.raises(InputError) as exc:
        parse_qrels(bad, source="qrels")
    assert r.json()["detail"] == str(exc.value) == "qrels:2: grade: must be an integer, got 'high'"
    r = client.post("/v1/evaluate", json={"qrels": {"q1": ["d1"]}, "runs": {"bm25": "q1 Q0 d1 1 high t\n"}})
    assert r.status_code == 400 and r.json()["detail"].startswith("runs.bm25:1: score: "), r.text
    r = client.post("/v1/evaluate", json={"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}},
                                          "metrics": ["ndcg@x"]})
    assert r.status_code == 400 and r.json()["detail"].startswith("metrics: ")
    r = client.post("/v1/compare", json={"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]},
                                         "b": {"q1": ["d1"]}}, "baseline": "zz"})
    assert r.status_code == 400 and r.json()["detail"].startswith("baseline: ")


@pytest.mark.slow  # a real uvicorn process
def test_schema_errors_are_422_without_echo(client: httpx.Client) -> None:
    r = client.post("/v1/evaluate", json={"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}},
                                          "api_key": "sk-do-not-echo-me-123456"})
    assert r.status_code == 422 and r.json()["detail"] == "api_key: Extra inputs are not permitted"
    assert "sk-do-not-echo" not in r.text
    r = client.post("/v1/evaluate", content=b'{"qrels": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("body: invalid JSON")
    r = client.post("/v1/compare", json={"qrels": "x", "runs": {"a": "x"}})
    assert r.status_code == 422 and r.json()["detail"].startswith("runs: ")
    r = client.get("/v1/jobs/not-a-job")
    assert r.status_code == 422
    r = client.get("/v1/jobs/" + "0" * 32)
    assert r.status_code == 404


@pytest.mark.slow  # a real uvicorn process
def test_requests_cannot_choose_the_endpoint_or_a_prompt_file(client: httpx.Client) -> None:
    r = client.post("/v1/judge", json={"pairs": [{"qid": "q", "docid": "d", "query": "a", "passage": "b"}],
                                       "settings": {"model": "m", "base_url": "http://evil.example/v1"}})
    assert r.status_code == 422 and "settings.base_url" in r.json()["detail"]
    r = client.post("/v1/judge", json={"pairs": [{"qid": "q", "docid": "d", "query": "a", "passage": "b"}],
                                       "prompt": "/etc/passwd", "settings": {"model": "m"}})
    assert r.status_code == 400 and r.json()["detail"].startswith("prompt: unknown prompt")


# ----------------------------------------------------------------------------- hardening
@pytest.mark.slow  # a real uvicorn process
def test_bearer_token(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, token="s3cret-token") as srv:
        body = {"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}}
        assert httpx.post(srv.url + "/v1/evaluate", json=body).status_code == 401
        bad = httpx.post(srv.url + "/v1/evaluate", json=body, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
        basic = httpx.post(srv.url + "/v1/evaluate", json=body,
                           headers={"Authorization": "Basic s3cret-token"})
        assert basic.status_code == 401
        assert httpx.get(srv.url + "/v1/version").status_code == 401
        assert httpx.get(srv.url + "/v1/health").status_code == 200  # liveness stays open
        with srv.client() as c:
            assert c.post("/v1/evaluate", json=body).status_code == 200
            assert c.get("/v1/version").status_code == 200


def test_public_bind_needs_a_token(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from ragjudge.cli import main

    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on non-loopback address" in err and "Traceback" not in err
    from ragjudge.server import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")


@pytest.mark.slow  # a real uvicorn process
def test_size_limits_are_413(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, "--max-body-bytes", "20000", "--max-pairs", "50") as srv, srv.client() as c:
        r = c.post("/v1/evaluate", json={"qrels": QRELS, "runs": {"a": RUNS["bm25_raw"]}})
        assert r.status_code == 413 and "larger than 20,000 bytes" in r.json()["detail"]
        run = {f"q{i}": [f"d{j}" for j in range(10)] for i in range(6)}
        r = c.post("/v1/evaluate", json={"qrels": {"q1": ["d1"]}, "runs": {"a": run}})
        assert r.status_code == 413
        assert r.json()["detail"] == ("request has 61 query-document pairs; this server accepts at "
                                      "most 50 per request (ragjudge serve --max-pairs)")
        r = c.post("/v1/judge", json={"queries": {"q1": "x"}, "corpus": {"d0": "y"},
                                      "runs": {"a": run}, "depth": 10, "settings": {"model": "m"}})
        assert r.status_code == 413 and "queries x depth" in r.json()["detail"]
        # a chunked body (no Content-Length) is counted as it arrives
        big = json.dumps({"qrels": QRELS, "runs": {"a": "x"}}).encode()
        r = c.post("/v1/evaluate", content=iter([big[i:i + 4096] for i in range(0, len(big), 4096)]),
                   headers={"content-type": "application/json"})
        assert r.status_code == 413


@pytest.mark.slow  # a real uvicorn process
def test_per_client_concurrency_limit(tmp_path: Path) -> None:
    import threading
    import time

    with ServerProcess(tmp_path, "--client-concurrency", "1") as srv:
        # A request being processed (a compare of many runs, 100,000 resamples) holds this
        # client's one slot; a body still arriving does not (see test_server_lockout.py).
        runs = {f"r{i}": {f"q{q}": {f"d{d}": float((q * 7 + d * i) % 13) for d in range(30)}
                          for q in range(300)} for i in range(12)}
        qrels = {f"q{q}": {f"d{d}": 1 for d in range(0, 30, 3)} for q in range(300)}
        done: list[int] = []
        busy = threading.Thread(target=lambda: done.append(httpx.post(
            srv.url + "/v1/compare", json={"qrels": qrels, "runs": runs, "metrics": ["map", "ndcg@10"],
                                           "resamples": 100_000, "all_pairs": True},
            timeout=120).status_code), daemon=True)
        busy.start()
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline and not done:
            status = httpx.get(srv.url + "/v1/version").status_code
            if status == 429:
                break
            time.sleep(0.02)
        assert status == 429
        busy.join(120)
        assert done == [200]
        # the slot is given back when that request ends
        assert httpx.get(srv.url + "/v1/version").status_code == 200


@pytest.mark.slow  # a real uvicorn process
def test_cors_is_off_by_default(client: httpx.Client) -> None:
    r = client.options("/v1/evaluate", headers={"Origin": "http://evil.example",
                                                "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers
    r = client.get("/v1/version", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.slow  # subprocess
def test_core_does_not_import_the_web_stack() -> None:
    code = ("import sys, ragjudge, ragjudge.cli, ragjudge.server; ragjudge.cli.build_parser(); "
            "print('fastapi' in sys.modules or 'uvicorn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # a real uvicorn process
def test_cors_when_configured(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, "--cors-origin", "https://dash.example", token="t0k") as srv:
        pre = {"Origin": "https://dash.example", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization,content-type"}
        r = httpx.options(srv.url + "/v1/evaluate", headers=pre)  # a preflight has no token
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://dash.example"
        r = httpx.options(srv.url + "/v1/evaluate", headers={**pre, "Origin": "https://evil.example"})
        assert r.headers.get("access-control-allow-origin") != "https://evil.example"
        with srv.client() as c:
            r = c.get("/v1/version", headers={"Origin": "https://dash.example"})
            assert r.status_code == 200
            assert r.headers["access-control-allow-origin"] == "https://dash.example"
        spec = httpx.get(srv.url + "/openapi.json").json()
        assert "HTTPBearer" in spec["components"]["securitySchemes"]


def test_server_public_names() -> None:
    import ragjudge.server as server

    assert server.__all__ == ["ServerSettings", "create_app", "serve", "is_loopback"]
    settings = server.ServerSettings(port=0, model="m", cors_origins=("https://a.example",))
    assert server.ServerSettings.from_json(settings.to_json()) == settings
    assert settings.jobs_path().name == "jobs.sqlite"
