"""``/v1/evaluate`` and ``/v1/compare`` answer JSON bodies without FastAPI's request machinery
(:class:`ragjudge.server.app.FastJson`): the same request must get the same status and the
same bytes as through the FastAPI route, errors included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from fastapi.testclient import TestClient  # noqa: E402

from ragjudge.server import ServerSettings, create_app  # noqa: E402
from ragjudge.server import app as app_module  # noqa: E402

EX = Path(__file__).resolve().parents[2] / "examples"
QRELS = "".join((EX / "qrels.txt").read_text().splitlines(keepends=True)[:120])
RUN = "".join((EX / "runs/bm25_raw.run").read_text().splitlines(keepends=True)[:600])
RUN2 = "".join((EX / "runs/bm25_stemmed.run").read_text().splitlines(keepends=True)[:600])
# FastAPI decodes any application/*+json body; the fast path takes only application/json
SLOW = {"content-type": "application/vnd.ragjudge+json"}
FAST = {"content-type": "application/json"}


@pytest.fixture()
def client(monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.delenv("RAGJUDGE_TOKEN", raising=False)
    # no lifespan needed; a 500 is compared as a response, not raised
    return TestClient(create_app(ServerSettings(max_pairs=5_000)), raise_server_exceptions=False)


@pytest.fixture()
def fast_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per request the fast path tried: whether it answered (True) or handed on."""
    calls: list[bool] = []
    real = app_module._decode

    def spy(*args: Any) -> Any:
        out = real(*args)
        calls.append(out is not None)  # decoded: answered here, library errors included
        return out

    monkeypatch.setattr(app_module, "_decode", spy)
    return calls


def _both(client: TestClient, path: str, body: bytes) -> tuple[Any, Any]:
    fast = client.post(path, content=body, headers=FAST)
    slow = client.post(path, content=body, headers=SLOW)
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content), (fast.text, slow.text)
    assert fast.headers["content-type"] == slow.headers["content-type"]
    return fast, slow


@pytest.mark.parametrize("body", [
    {"qrels": QRELS, "runs": {"bm25": RUN}},
    {"qrels": QRELS, "runs": {"bm25": RUN}, "per_query": False, "metrics": ["ndcg@10", "map"]},
    {"qrels": QRELS, "runs": {"a": RUN, "b": RUN2}, "rel": 2, "skip_missing": True},
    {"qrels": {"q1": {"d1": 2, "d2": 0}}, "runs": {"a": {"q1": {"d1": 0.5, "d2": 2.5e-300}}}},
    {"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d2", "d1"]}}, "metrics": ["mrr,p@1"]},
])
def test_evaluate_answers_as_the_route_does(client: TestClient, fast_calls: list[bool],
                                            body: dict[str, Any]) -> None:
    fast, _ = _both(client, "/v1/evaluate", json.dumps(body).encode())
    assert fast.status_code == 200 and fast_calls == [True]


@pytest.mark.parametrize("body", [
    # numbers as strings, booleans as grades and scores: lax validation takes them alike
    (b'{"qrels": {"q1": {"d1": "2", "d2": true}}, "runs": {"a": {"q1": {"d1": "0.5", "d2": false}}},'
     b' "rel": "1", "per_query": "false"}'),
    # a repeated key: the last value wins, in the first one's place, on both paths
    (b'{"qrels": {"q1": ["d1"], "q2": ["d2"], "q1": ["d3"]}, "runs": {"a": {"q1": ["d3"]},'
     b' "b": {"q1": ["d1"]}, "a": {"q1": ["d1", "d3"]}}}'),
    # an integer beyond 2**53 as a score, an id spelled NaN
    b'{"qrels": {"q1": ["NaN"]}, "runs": {"a": {"q1": {"NaN": 9007199254740993, "d": 1e-400}}}}',
])
def test_lax_and_odd_bodies_answer_as_the_route_does(client: TestClient, fast_calls: list[bool],
                                                     body: bytes) -> None:
    fast, _ = _both(client, "/v1/evaluate", body)
    assert fast.status_code == 200 and fast_calls == [True]


def test_a_large_body_answers_as_the_route_does(client: TestClient, fast_calls: list[bool]) -> None:
    pad = "x" * 600  # long ids: a body beyond the size decoded on the event loop
    run = "".join(f"q{i % 7} Q0 d{i}{pad} {i} {1 / (i + 1)} r\n" for i in range(500))
    qrels = "".join(f"q{i % 7} 0 d{i}{pad} {i % 3}\n" for i in range(0, 500, 3))
    body = json.dumps({"qrels": qrels, "runs": {"a": run}}).encode()
    assert len(body) > app_module._SMALL_BODY
    fast, _ = _both(client, "/v1/evaluate", body)
    assert fast.status_code == 200 and fast_calls == [True]


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The functions the app sends to a worker thread, in order."""
    sent: list[Any] = []
    real = app_module.run_in_threadpool

    async def counted(fn: Any, *args: Any) -> Any:
        sent.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(app_module, "run_in_threadpool", counted)
    return sent


@pytest.mark.parametrize("body, light", [
    ({"qrels": QRELS, "runs": {"bm25": RUN}}, True),
    ({"qrels": QRELS, "runs": {"bm25": RUN}, "metrics": ["ndcg@10,map", "P_5"]}, True),
    ({"qrels": QRELS, "runs": {"a": RUN, "b": RUN2}}, False),
    ({"qrels": QRELS, "runs": {"bm25": RUN}, "metrics": [f"ndcg@{k}" for k in range(1, 10)]}, False),
    ({"qrels": QRELS, "runs": {"bm25": RUN}, "metrics": ["all_trec"]}, False),  # one name, 67 measures
    ({"qrels": QRELS, "runs": {"bm25": RUN}, "metrics": ["P.5,10,15,20,30,100,200,500,1000"]}, False),
])
def test_only_light_evaluations_skip_the_worker_thread(client: TestClient, threads: list[Any],
                                                       body: dict[str, Any], light: bool) -> None:
    data = json.dumps(body).encode()
    assert client.post("/v1/evaluate", content=data, headers=FAST).status_code == 200
    assert (threads == []) is light
    threads.clear()
    data = json.dumps({**body, "resamples": 10}).encode()
    if len(body["runs"]) > 1:  # a comparison, however small, always takes a thread
        assert client.post("/v1/compare", content=data, headers=FAST).status_code == 200
        assert len(threads) == 1


def test_a_light_evaluation_beside_another_request_takes_the_worker_thread(
        client: TestClient, threads: list[Any]) -> None:
    data = json.dumps({"qrels": QRELS, "runs": {"bm25": RUN}}).encode()
    alone = client.post("/v1/evaluate", content=data, headers=FAST)
    assert alone.status_code == 200 and threads == []
    guard = client.app.middleware_stack  # type: ignore[attr-defined]
    while not isinstance(guard, app_module.Guard):
        guard = guard.app
    guard.active["192.0.2.7"] += 1  # another client's request in flight: the loop stays free
    beside = client.post("/v1/evaluate", content=data, headers=FAST)
    assert beside.content == alone.content and len(threads) == 1


def test_compare_answers_as_the_route_does(client: TestClient, fast_calls: list[bool]) -> None:
    body = {"qrels": QRELS, "runs": {"a": RUN, "b": RUN2}, "resamples": 200, "seed": 3}
    fast, _ = _both(client, "/v1/compare", json.dumps(body).encode())
    assert fast.status_code == 200 and fast_calls == [True]


@pytest.mark.parametrize("body, status, start", [
    (b'{"qrels": ', 422, "body: invalid JSON"),
    (b"", 422, "body: Field required"),
    (b"[1, 2]", 422, "body: "),
    (b'{"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}, "api_key": "sk-x"}', 422,
     "api_key: Extra inputs are not permitted"),
    (b'{"qrels": {"q1": {"d1": 1000000000000000000000000000000}}, "runs": {"a": {"q1": ["d1"]}}}',
     422, "qrels."),
    (b'{"qrels": {"q1": ["d1"]}, "runs": {}}', 422, "runs: "),
    # beyond standard JSON: json.loads takes them, so FastAPI's route decides
    (b'{"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": {"d1": NaN}}}}', None, ""),
    # a lone surrogate decodes (json.loads) but names no valid id: a 400 naming the field
    (b'{"qrels": {"q1": ["\\ud800"]}, "runs": {"a": {"q1": ["\\ud800"]}}}', 400,
     "qrels: docid: not valid Unicode"),
    (b'\xef\xbb\xbf{"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}}', None, ""),
    (b'{"qrels": {"q1": ["d1"]}, "runs": {"a": "\xff"}}', 400, ""),
])
def test_bad_bodies_get_the_routes_own_answer(client: TestClient, fast_calls: list[bool],
                                              body: bytes, status: int | None, start: str) -> None:
    fast, _ = _both(client, "/v1/evaluate", body)
    if status is not None:
        assert fast.status_code == status and fast.json()["detail"].startswith(start), fast.text
    assert fast_calls == [False]  # handed on: the answer is FastAPI's


@pytest.mark.parametrize("path, body, status, detail", [
    ("/v1/evaluate", {"qrels": "q1 0 d1 1\nq1 0 d2 high\n", "runs": {"a": "q1 Q0 d1 1 1.0 x\n"}},
     400, "qrels:2: grade: must be an integer, got 'high'"),
    ("/v1/evaluate", {"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}, "metrics": ["ndcg@x"]},
     400, "metrics: "),
    ("/v1/evaluate", {"qrels": QRELS, "runs": {"a": RUN * 10}}, 413, "request has "),
    ("/v1/compare", {"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}, "b": {"q1": ["d1"]}},
                     "baseline": "zz"}, 400, "baseline: "),
])
def test_library_errors_read_as_before(client: TestClient, fast_calls: list[bool], path: str,
                                       body: dict[str, Any], status: int, detail: str) -> None:
    fast, _ = _both(client, path, json.dumps(body).encode())
    assert fast.status_code == status and fast.json()["detail"].startswith(detail), fast.text
    assert fast_calls == [True]


def test_other_content_types_and_methods_are_the_routes(client: TestClient,
                                                        fast_calls: list[bool]) -> None:
    body = json.dumps({"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}}).encode()
    r = client.post("/v1/evaluate", content=body, headers={"content-type": "text/plain"})
    assert r.status_code == 422
    assert client.put("/v1/evaluate", content=body, headers=FAST).status_code == 405
    assert client.post("/v1/evaluate", content=body,
                       headers={"content-type": "Application/JSON; charset=utf-8"}).status_code == 200
    assert fast_calls == [True]


def test_the_guard_still_comes_first(monkeypatch: pytest.MonkeyPatch, fast_calls: list[bool]) -> None:
    monkeypatch.setenv("RAGJUDGE_TOKEN", "s3cret-token")
    client = TestClient(create_app(ServerSettings()))
    body = json.dumps({"qrels": {"q1": ["d1"]}, "runs": {"a": {"q1": ["d1"]}}}).encode()
    assert client.post("/v1/evaluate", content=body, headers=FAST).status_code == 401
    ok = client.post("/v1/evaluate", content=body,
                     headers={**FAST, "authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200 and fast_calls == [True]
