"""The runner: concurrency cap, rpm throttle, tpm budget and adaptation to server signals."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import respx
from test_llm_fakes import BASE, SECRET, URL, error, grade_reply, ok

from ragjudge.llm import LLM, Runner
from ragjudge.llm.runner import HEADROOM, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5), ("2", 2.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "", "soon", "1x", "s1"])
def test_parse_duration_rejects(text: Any) -> None:
    assert parse_duration(text) is None


def test_concurrency_cap_is_never_exceeded() -> None:
    runner = Runner(concurrency=3)
    peak = {"now": 0, "max": 0}

    async def job() -> None:
        async with runner.slot(10):
            async with runner.attempt():
                peak["now"] += 1
                peak["max"] = max(peak["max"], peak["now"])
                await asyncio.sleep(0.002)
                peak["now"] -= 1

    async def main() -> None:
        await asyncio.gather(*(job() for _ in range(20)))

    asyncio.run(main())
    assert peak["max"] == 3 and runner.started == 20


def test_defaults() -> None:
    r = Runner()
    assert r.concurrency == 16 and r.rpm is None and r.tpm is None
    with pytest.raises(ValueError):
        Runner(concurrency=0)
    with pytest.raises(ValueError):
        Runner(rpm=0)


def test_headers_set_the_ceiling_with_headroom() -> None:
    r = Runner()
    r.observe({"x-ratelimit-limit-requests": "600", "x-ratelimit-limit-tokens": "150000"}, 200)
    assert r.rpm == pytest.approx(600 * HEADROOM) and r.tpm == pytest.approx(150000 * HEADROOM)
    # A user cap below the server's wins; one above it does not.
    low = Runner(rpm=100)
    low.observe({"x-ratelimit-limit-requests": "600"}, 200)
    assert low.rpm == 100
    high = Runner(rpm=10_000)
    high.observe({"x-ratelimit-limit-requests": "600"}, 200)
    assert high.rpm == pytest.approx(588)


def test_remaining_zero_pauses_until_reset() -> None:
    r = Runner()
    r.observe({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "30s"}, 200)
    import time

    assert r._cooldown_until - time.monotonic() > 25


def test_429_without_headers_learns_a_rate_and_pauses() -> None:
    r = Runner()
    for _ in range(200):
        r.observe({}, 200)
    r.observe({"retry-after": "2"}, 429)
    assert r.rate_limited == 1
    assert r.rpm == pytest.approx(0.9 * 200)
    # A burst of 429s right after is one decrease, not one per reply.
    for _ in range(10):
        r.observe({}, 429)
    assert r.rpm == pytest.approx(0.9 * 200) and r.rate_limited == 11
    import time

    assert r._cooldown_until > time.monotonic()


def test_429_with_limit_header_keeps_the_header_ceiling() -> None:
    r = Runner()
    r.observe({"x-ratelimit-limit-requests": "600", "retry-after-ms": "100"}, 429)
    assert r.adaptive_rpm is None and r.rpm == pytest.approx(588)


def test_throttle_window_is_about_one_second() -> None:
    r = Runner(rpm=600)

    async def main() -> Any:
        async with r.attempt():
            pass
        return r._state().throttler

    t = asyncio.run(main())
    assert t.rate_limit == 10 and t.period == pytest.approx(1.0)
    slow = Runner(rpm=30)

    async def main2() -> Any:
        async with slow.attempt():
            pass
        return slow._state().throttler

    t2 = asyncio.run(main2())
    assert t2.rate_limit == 1 and t2.period == pytest.approx(2.0)


def test_tpm_reservation_waits_and_settles() -> None:
    r = Runner(tpm=100)

    async def main() -> None:
        async with r.slot(80) as first:
            # A second 80-token call does not fit beside the first.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(r._reserve(r._state(), 80), 0.05)
            first.settle(10)  # the reply used far fewer tokens than reserved
            second = await asyncio.wait_for(r._reserve(r._state(), 80), 5)
            assert second.tokens == 80

    asyncio.run(main())


def test_runner_learns_from_real_replies(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    headers = {"x-ratelimit-limit-requests": "120", "x-ratelimit-limit-tokens": "90000"}
    route = httpx2_mock.post(URL)
    route.side_effect = [error(429, "slow down", headers={"retry-after-ms": "1", **headers}),
                         ok(grade_reply(2), headers=headers)]
    llm = LLM("m", base_url=BASE, api_key=SECRET, cache=False, backoff_base=0.001)

    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "q", "passage": "p"})
        finally:
            await llm.aclose()

    assert asyncio.run(go()).ok
    assert llm.runner.rpm == pytest.approx(120 * HEADROOM)
    assert llm.runner.tpm == pytest.approx(90000 * HEADROOM)
    assert llm.runner.rate_limited == 1 and llm.runner.started == 2
