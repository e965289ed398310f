"""One judge, several endpoints: requests of one query stay on one endpoint, each endpoint
keeps its own limits, an endpoint that dies is drained and its work moves to the others
without paying twice, and one serving another model is dropped before anything is spent."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _loopback import simulator_thread

from ragjudge.errors import InputError, LLMError
from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM, Endpoint


def _pairs(queries: int, per: int) -> list[tuple[str, str]]:
    return [(f"query number {q}", f"passage {q}-{d} about things") for q in range(queries) for d in range(per)]


def _endpoints(*sims: Any, **kw: Any) -> list[Endpoint]:
    return [Endpoint("sim-model", base_url=s.base_url, api_key="sim", backoff_base=0.001, **kw) for s in sims]


def test_queries_stick_to_one_endpoint_and_shares_follow_rpm(tmp_path: Path) -> None:
    # The rates bind (each endpoint starts at most its rpm): shares follow them. (Where they
    # do not bind, an idle endpoint takes queued queries from the other.)
    with simulator_thread(latency=0.005) as a, simulator_thread(latency=0.005) as b:
        eps = [e.replace(rpm=rpm) for e, rpm in zip(_endpoints(a, b), (300.0, 900.0))]
        judge = LLMRelevanceJudge(llm=LLM(eps, cache=False), progress=False)
        js = judge.judge_many_sync(_pairs(15, 3))
        paid = (a.stats()["paid"], b.stats()["paid"])
    assert all(j.ok for j in js) and sum(paid) == 45
    by_query: dict[str, set[str]] = {}
    for j in js:
        by_query.setdefault(j.qid if hasattr(j, "qid") else j.query, set()).add(j.provenance.endpoint or "")
    assert all(len(v) == 1 for v in by_query.values())  # one query, one endpoint (prefix cache)
    assert paid[1] > paid[0]  # the endpoint with three times the rpm takes more of the queries


@pytest.mark.slow
def test_a_dead_endpoint_is_drained_and_nothing_is_lost_or_paid_twice(tmp_path: Path) -> None:
    with simulator_thread(latency=0.02) as a, simulator_thread(latency=0.02) as b, \
            simulator_thread(latency=0.02) as c:
        llm = LLM(_endpoints(a, b, c, concurrency=4), cache=False)
        judge = LLMRelevanceJudge(llm=llm, progress=False)
        stop = threading.Event()

        def kill_b() -> None:
            deadline = time.monotonic() + 30
            while b.stats()["paid"] < 8 and time.monotonic() < deadline and not stop.is_set():
                time.sleep(0.005)
            b.stop()

        killer = threading.Thread(target=kill_b)
        killer.start()
        try:
            js = judge.judge_many_sync(_pairs(30, 4))
        finally:
            stop.set()
            killer.join()
        paid = [s.stats()["paid"] for s in (a, c)]
        dup = [s.stats()["duplicate_paid"] for s in (a, c)]
    killed_paid = 8  # at least; what b answered before it died
    assert all(j.ok for j in js), [j.error for j in js if not j.ok][:3]
    assert sum(dup) == 0  # nothing paid twice on a live endpoint
    assert sum(paid) + killed_paid <= 120 + 4  # b's in-flight requests at the kill, at most
    assert llm.usage.calls >= sum(paid)
    # Down (its breaker open, probed now and then), not drained for good: a short outage
    # does not lose it for the whole run.
    assert llm.callers[1].down() and not any(c.drained for c in llm.callers)
    assert not llm.callers[0].down() and not llm.callers[2].down()
    assert {j.provenance.endpoint for j in js} >= {llm.callers[0].where(), llm.callers[2].where()}


def test_an_endpoint_serving_another_model_is_dropped_before_spending(tmp_path: Path) -> None:
    with simulator_thread(latency=0.0) as a, simulator_thread(latency=0.0, model="other-model") as b:
        llm = LLM(_endpoints(a, b), cache=False)
        js = LLMRelevanceJudge(llm=llm, progress=False).judge_many_sync(_pairs(10, 2))
        assert b.stats()["requests"] == 0 and a.stats()["paid"] == 20
    assert all(j.ok for j in js) and "other-model" in (llm.callers[1].drained or "")
    with simulator_thread(latency=0.0, model="other-model") as b:
        llm = LLM(_endpoints(b, b), cache=False)
        with pytest.raises(LLMError, match="no endpoint serves 'sim-model'"):
            LLMRelevanceJudge(llm=llm, progress=False).judge_many_sync(_pairs(1, 1))


def test_endpoints_must_serve_one_model() -> None:
    with pytest.raises(InputError, match="one model"):
        LLM([Endpoint("a", base_url="http://h/v1"), Endpoint("b", base_url="http://h2/v1")], cache=False)


def test_cli_judge_over_two_endpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main
    from ragjudge.io import read_qrels

    ex = Path(__file__).resolve().parents[2] / "examples"
    monkeypatch.setenv("SIM_KEY", "sim")
    with simulator_thread(latency=0.0) as a, simulator_thread(latency=0.0) as b:
        out = tmp_path / "q.txt"
        args = ["judge", "--queries", str(ex / "queries.jsonl"), "--corpus", str(ex / "corpus.jsonl"),
                "--run", str(ex / "runs" / "bm25_raw.run"), "--depth", "2", "--model", "sim-model",
                "--endpoint", f"{a.base_url},key_env=SIM_KEY,rpm=6000",
                "--endpoint", f"{b.base_url},key_env=SIM_KEY,weight=6000",
                "--no-cache", "--no-progress", "-o", str(out)]
        assert main(args) == 0
        paid = a.stats()["paid"], b.stats()["paid"]
    assert len(read_qrels(out)) == sum(paid) == 120 and min(paid) > 0
    capsys.readouterr()
    bad = args[: args.index("--endpoint")] + ["--endpoint", "http://h/v1,rpm=fast", "-o", str(out)]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--endpoint" in err and "rpm must be a float" in err


def test_the_service_builds_its_jobs_sessions_over_the_endpoints_it_was_given() -> None:
    pytest.importorskip("fastapi")
    from ragjudge.cli import build_parser
    from ragjudge.cli.serve import settings_from_args
    from ragjudge.server.models import ModelSettings
    from ragjudge.server.service import build_llm
    from ragjudge.server.settings import ServerSettings

    def serve(*argv: str) -> ServerSettings:
        return settings_from_args(build_parser().parse_args(["serve", "--model", "m", "--no-cache", *argv]))

    settings = serve("--endpoint", "http://a/v1,rpm=60", "--endpoint", "http://b/v1,weight=2,concurrency=4",
                     "--concurrency", "8")
    settings.check()
    llm = build_llm(settings, ModelSettings(), check_key=False)
    assert [c.endpoint.base_url for c in llm.callers] == ["http://a/v1", "http://b/v1"]
    assert (llm.callers[0].endpoint.rpm, llm.callers[0].endpoint.concurrency, llm.callers[1].endpoint.weight,
            llm.callers[1].endpoint.concurrency) == (60.0, 8, 2.0, 4)
    again = ServerSettings.from_json(settings.to_json())  # as passed to worker processes
    assert again.endpoints == settings.endpoints
    with pytest.raises(InputError, match="rpm must be a float") as err:
        serve("--endpoint", "http://a/v1,rpm=x")
    assert err.value.field == "--endpoint"
    with pytest.raises(InputError, match="not both") as err:
        serve("--endpoint", "http://a/v1", "--base-url", "http://b/v1")
    assert err.value.field == "--endpoint"


@pytest.mark.slow  # each endpoint gets its few seconds before it is given up
def test_when_every_endpoint_is_unreachable_the_run_stops_naming_them() -> None:
    """Two endpoints nobody listens on: both are drained, and the run stops with one error
    naming why (it waited for ever: the workers of a drained endpoint waited for the others
    to take its queue, and there were no others)."""
    eps = [Endpoint("sim-model", base_url=f"http://127.0.0.1:{port}/v1", api_key="sim",
                    backoff_base=0.001) for port in (1, 2)]
    judge = LLMRelevanceJudge(llm=LLM(eps, cache=False), progress=False)
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["out"] = judge.judge_many_sync(_pairs(3, 2))
        except LLMError as exc:
            box["error"] = exc

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(120)  # a bound on a hang, not a speed
    assert not worker.is_alive(), "the run never ended"
    assert "error" in box and "unreachable" in str(box["error"]), box
