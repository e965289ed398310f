"""The anthropic provider against the fault matrix's Messages API server (``tests/_faultserver.py``):
each form in which the API says a spend or usage limit is reached stops the run at once with
one line, nothing resent, what was paid for written; a malformed request or a real rate limit is
not taken for one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _faultserver import FaultServer

from ragjudge.cli import main
from ragjudge.errors import LLMError
from ragjudge.llm import LLM, Endpoint

pytest.importorskip("anthropic", reason="the anthropic provider's tests need the anthropic SDK")

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples"
MODEL = "claude-fault-1"
KEY = "sk-ant-fault-0123456789"


class _Limited(FaultServer):
    """A Messages API server whose every reply is one error (status, body, headers)."""

    def __init__(self, status: int, error: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__({}, api="anthropic", model=MODEL)
        reply = (status, {"type": "error", "error": error, "request_id": "req_x"}, headers or {})
        self.api.error = lambda mode: reply  # type: ignore[method-assign]
        self.modes = {"spend_limit": 1.0}  # every request answered by api.error


def _ask(server: FaultServer, patience: float = 5.0) -> Any:
    llm = LLM(Endpoint(MODEL, provider="anthropic", base_url=server.base_url, api_key=KEY, backoff_base=0.001,
                       patience=patience), cache=False)

    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "volcano ash flights", "passage": "ash cloud"})
        finally:
            await llm.aclose()

    return asyncio.run(go())


SELF_SET = {"type": "invalid_request_error",
            "message": "You have reached your specified API usage limits. You will regain access on "
                       "2026-12-01 at 00:00 UTC."}
WORKSPACE = {"type": "invalid_request_error",
             "message": "You have reached your specified workspace API usage limits. You will regain access on "
                        "2026-12-01 at 00:00 UTC."}
NO_CREDIT = {"type": "invalid_request_error",
             "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
                        "to upgrade or purchase credits."}
TIER_CAP = {"type": "rate_limit_error", "message": "Your request was rejected; usage resumes at 2026-12-01.",
            "details": {"error_code": "enforced_spend_limit_reached"}}


@pytest.mark.parametrize("status, error, headers", [
    (400, SELF_SET, None),
    (400, WORKSPACE, None),
    (400, NO_CREDIT, None),
    (429, TIER_CAP, None),
    # the tier's cap with a retry-after far away is still not a rate limit
    (429, TIER_CAP, {"retry-after": "3600"}),
], ids=["400-self-set", "400-workspace", "400-no-credit", "429-details", "429-details-retry-after"])
def test_each_form_of_a_reached_spend_limit_stops_at_once(status: int, error: dict[str, Any],
                                                          headers: dict[str, str] | None) -> None:
    with _Limited(status, error, headers) as server:
        with pytest.raises(LLMError, match="spend limit reached") as err:
            _ask(server)
        asked = server.stats()["requests"]
    assert asked == 1  # never resent
    assert "\n" not in str(err.value) and KEY not in str(err.value)
    assert f"HTTP {status}" in str(err.value)


def test_a_malformed_request_and_a_rate_limit_are_not_a_spend_limit() -> None:
    bad = {"type": "invalid_request_error", "message": "max_tokens: Field required"}
    with _Limited(400, bad) as server, pytest.raises(LLMError) as err:
        _ask(server)
    assert "spend limit" not in str(err.value) and "bad request" in str(err.value)
    rate = {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}
    with _Limited(429, rate, {"retry-after": "0"}) as server:
        out = _ask(server, patience=1.0)  # retried for the patience, then the item fails
        asked = server.stats()["requests"]
    assert not out.ok and asked > 1


@pytest.mark.parametrize("mode", ["spend_limit", "spend_limit_400"])
def test_a_spend_limit_mid_run_stops_the_cli_and_writes_what_it_has(mode: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAGJUDGE_TEST_ANTHROPIC_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    # four answers, then the limit on every request
    with FaultServer({mode: 0.1}, seed=1, api="anthropic", model=MODEL) as server:
        code = main(["judge", "--queries", str(EX / "queries.jsonl"), "--corpus", str(EX / "corpus.jsonl"),
                     "--run", str(EX / "runs" / "bm25_raw.run"), "--depth", "3", "-o", str(tmp_path / "q.txt"),
                     "--judgments", str(tmp_path / "j.jsonl"), "--concurrency", "1", "--no-progress",
                     "--provider", "anthropic", "--model", MODEL, "--base-url", server.base_url,
                     "--api-key-env", "RAGJUDGE_TEST_ANTHROPIC_KEY", "--cache", str(tmp_path / "c.sqlite")])
        stats = server.stats()
    err = capsys.readouterr().err
    assert code not in (0, None) and "spend limit reached" in err
    assert len([line for line in err.splitlines() if "spend limit reached" in line]) == 1
    # nothing resent, nothing sent after the refusal (one request in flight at a time)
    assert stats["resent_after_stop"] == 0 and stats["after_stop"] == 0
    graded = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert len([j for j in graded if j.get("grade") is not None]) == 4  # what was paid for is written


@pytest.mark.parametrize("mode", ["gzip", "reset", pytest.param("stall", marks=pytest.mark.slow)])
def test_a_billed_reply_whose_body_cannot_be_read_is_counted(mode: str, tmp_path: Path) -> None:
    """A 200 whose body then stalls, breaks off or does not decode was billed: it is counted
    (at its worst case), so the reported cost is never below what the server billed."""
    from _faultserver import PRICES

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({MODEL: PRICES}))
    with FaultServer({mode: 0.5}, api="anthropic", model=MODEL, stall_s=5.0) as server:
        llm = LLM(Endpoint(MODEL, provider="anthropic", base_url=server.base_url, api_key=KEY, backoff_base=0.001,
                           timeout=1.0), cache=False, prices=str(prices))

        async def go() -> list[Any]:
            try:
                return [await llm.structured("relevance.v1", {"query": f"volcano ash {i}", "passage": "ash cloud"})
                        for i in range(4)]
            finally:
                await llm.aclose()

        outs = asyncio.run(go())
        stats = server.stats()
    assert all(o.ok for o in outs) and stats["outcomes"].get(mode)
    assert llm.usage.calls == stats["billed_calls"]  # every billed reply counted
    assert llm.cost is not None and llm.cost >= stats["spend"] - 1e-12
