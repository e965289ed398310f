"""Property-based fuzz of the live service from its own OpenAPI document (schemathesis):
a bounded number of generated requests per operation, and none may get a 5xx."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # schemathesis against a real uvicorn process

pytest.importorskip("fastapi", reason="the server tests need the server extra")
schemathesis = pytest.importorskip("schemathesis", reason="the fuzz test needs schemathesis (dev extra)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from _server import ServerProcess  # noqa: E402

TOKEN = "fuzz-token"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    # Jobs the fuzzer manages to start point at a closed loopback port: nothing leaves the host.
    srv = ServerProcess(tmp_path_factory.mktemp("fuzz"), "--base-url", "http://127.0.0.1:9/v1",
                        "--max-attempts", "1", "--timeout", "2", "--max-pairs", "20000",
                        env={"OPENAI_API_KEY": "sk-fuzz"}, token=TOKEN)
    with srv:
        yield srv


def test_no_server_errors(live: ServerProcess) -> None:
    api = schemathesis.openapi.from_url(live.url + "/openapi.json", headers=live.headers())
    seen = []
    statuses: set[int] = set()
    modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
    for result in api.get_all_operations():
        op = result.ok()
        seen.append(f"{op.method.upper()} {op.path}")
        strategy = op.as_strategy(modes[0]) | op.as_strategy(modes[1])

        @settings(max_examples=25, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def check(case: object) -> None:
            response = case.call(base_url=live.url, headers=live.headers(), timeout=30)
            statuses.add(response.status_code)
            assert response.status_code < 500, (case.method, case.path, response.status_code,
                                                 response.text[:500])
            if response.status_code < 300:
                case.validate_response(response)  # the body matches the documented schema
            assert "Traceback" not in response.text and "sk-fuzz" not in response.text

        check()
    assert {200, 400, 404, 422} <= statuses  # the fuzz reached past the schema and the guards
    assert {"POST /v1/evaluate", "POST /v1/compare", "POST /v1/rag", "POST /v1/judge",
            "POST /v1/synth", "GET /v1/jobs/{job_id}", "DELETE /v1/jobs/{job_id}", "GET /v1/metrics"} <= set(seen)


_ids = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_qrels = st.dictionaries(_ids, st.dictionaries(_ids, st.integers(-3, 5), max_size=5), max_size=5)
_run = st.one_of(
    st.dictionaries(_ids, st.dictionaries(
        _ids, st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=6), max_size=5),
    st.dictionaries(_ids, st.lists(_ids, max_size=6), max_size=5),
    st.text(max_size=80),
)
_metrics = st.lists(st.sampled_from(["ndcg@3", "map", "P_5", "mrr@2", "rbp(p=0.5,gain=graded)",
                                     "bpref", "judged@2", "err@3", "recall_all", "num_rel_ret"]),
                    min_size=1, max_size=4, unique=True)


def test_valid_shapes_never_fail_and_match_the_library(live: ServerProcess) -> None:
    """Schema-valid inputs with odd ids, grades and scores: a report equal to the library's,
    or a one-line 400 -- never a 5xx."""
    from ragjudge.server.models import EvaluateRequest
    from ragjudge.server.service import evaluate_json

    import json as _json

    with live.client() as c:
        @settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(qrels=_qrels, run=_run, metrics=_metrics, skip=st.booleans())
        def check(qrels: dict, run: object, metrics: list, skip: bool) -> None:
            body = {"qrels": qrels, "runs": {"r": run}, "metrics": metrics, "skip_missing": skip}
            r = c.post("/v1/evaluate", json=body)
            assert r.status_code in (200, 400, 422), (r.status_code, r.text[:300])
            if r.status_code == 400:
                assert "\n" not in r.json()["detail"]
            if r.status_code == 200:  # the same request through the library directly
                want = evaluate_json(EvaluateRequest.model_validate(body), 10**9)
                assert r.json() == _json.loads(want)

        check()
