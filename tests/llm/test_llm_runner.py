"""The runner: concurrency cap, rpm throttle, tpm budget and adaptation to server signals."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import respx
from _llm_fakes import BASE, SECRET, URL, error, grade_reply, ok

from ragjudge.llm.providers.openai import rate_info
from ragjudge.llm import LLM, Runner
from ragjudge.llm.endpoint import DEFAULT_CONCURRENCY
from ragjudge.llm.providers.openai import parse_duration
from ragjudge.llm.runner import HEADROOM


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
    assert r.concurrency == DEFAULT_CONCURRENCY and r.rpm is None and r.tpm is None
    with pytest.raises(ValueError):
        Runner(concurrency=0)
    with pytest.raises(ValueError):
        Runner(rpm=0)


def test_headers_set_the_ceiling_with_headroom() -> None:
    r = Runner()
    r.observe(rate_info({"x-ratelimit-limit-requests": "600", "x-ratelimit-limit-tokens": "150000"}), 200)
    assert r.rpm == pytest.approx(600 * HEADROOM) and r.tpm == pytest.approx(150000 * HEADROOM)
    # A user cap below the server's wins; one above it does not.
    low = Runner(rpm=100)
    low.observe(rate_info({"x-ratelimit-limit-requests": "600"}), 200)
    assert low.rpm == 100
    high = Runner(rpm=10_000)
    high.observe(rate_info({"x-ratelimit-limit-requests": "600"}), 200)
    assert high.rpm == pytest.approx(588)


def test_remaining_budget_covers_new_attempts_or_they_wait() -> None:
    r = Runner()

    async def main() -> None:
        async with r.attempt(100):
            r.observe(rate_info({"x-ratelimit-remaining-tokens": "150", "x-ratelimit-reset-tokens": "30s"}), 200)
        # 150 tokens were left when the reporting attempt was admitted.
        assert r._budget_wait(100) == 0
        assert r._budget_wait(200) > 25
        async with r.attempt(100):  # spends 100 of the 150
            pass
        assert r._budget_wait(100) > 25 and r._budget_wait(50) == 0
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(r.attempt(100).__aenter__(), 0.05)

    asyncio.run(main())


def test_a_stale_report_lets_one_probe_through() -> None:
    r = Runner()

    async def main() -> None:
        async with r.attempt(10):
            r.observe(rate_info({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "0s"}), 200)
        async with r.attempt(10):  # the report expired: this one probes
            assert r._budget_wait(10) > 0  # ...and the next waits for the probe's fresh report
            r.observe(rate_info({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "10s"}), 200)
        assert r._budget_wait(10) == 0

    asyncio.run(main())


def test_429_without_headers_learns_a_rate_and_pauses() -> None:
    import time

    r = Runner(adaptive=False)  # 30 attempts in flight at once, as 16 workers' retries may be

    async def main() -> None:
        gate = asyncio.Event()

        async def call(status: int, headers: dict[str, str]) -> None:
            async with r.attempt():
                await gate.wait()
                r.observe(rate_info(headers), status)

        async with r.attempt():  # slow start: the probe goes alone
            r.observe(rate_info({}), 200)
        # Then a burst: 30 attempts in flight at once, unthrottled; the server takes 20.
        tasks = [asyncio.create_task(call(200, {})) for _ in range(20)]
        tasks += [asyncio.create_task(call(429, {"retry-after": "2"})) for _ in range(10)]
        while r.started < 31:  # all admitted (no rate known yet: unthrottled)
            await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    # The first nine 429s could be rejections at random: each only waits; ten in a row (known
    # outcomes, in start order) are the limit.
    assert r.rate_limited == 10 and r.isolated_429 == 9
    assert r._cooldown_until > time.monotonic() + 1
    # 21 accepted starts over (a few ms observed + the 2 s Retry-After): ~630 rpm; 90% of it.
    # The old rule divided a minute's successes by a whole minute: ~20 rpm.
    assert r.rpm == pytest.approx(0.9 * 21 / 2.0 * 60, rel=0.05)
    # All ten 429s came from attempts started before the cut: one episode, not ten cuts.
    assert r.learner.cuts == 1


def test_429_with_budget_left_is_isolated() -> None:
    import time

    r = Runner()
    r.observe(rate_info({"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "250",
               "x-ratelimit-remaining-tokens": "90000", "retry-after": "5"}), 429)
    assert r.isolated_429 == 1 and r._cooldown_until < time.monotonic()
    r.observe(rate_info({"x-ratelimit-remaining-requests": "0", "retry-after": "5"}), 429)
    assert r.isolated_429 == 1 and r._cooldown_until > time.monotonic() + 4


def test_429_with_limit_header_keeps_the_header_ceiling() -> None:
    r = Runner()
    r.observe(rate_info({"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "0",
               "retry-after-ms": "100"}), 429)
    assert r.adaptive_rpm is None and r.rpm == pytest.approx(588)


def test_starts_are_evenly_spaced_at_the_rpm() -> None:
    r = Runner(rpm=600)

    async def main() -> tuple[float, float]:
        import time

        t0 = time.monotonic()
        for _ in range(3):
            async with r.attempt():
                pass
        return t0, r._state().next_start

    t0, next_start = asyncio.run(main())
    # One start every 60/600 s: after three starts the next slot is >= 0.3 s after the first.
    assert next_start - t0 >= 0.3 - 1e-9
    assert r.started == 3


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


def test_overloaded_replies_and_timeouts_cut_the_adaptive_limit() -> None:
    import httpx2
    import openai

    r = Runner()
    assert r.concurrency_limit == 1  # the first request goes alone (slow start)
    assert r.limiter is not None
    r.limiter.limit = 8

    async def main() -> None:
        async with r.attempt():
            r.observe(rate_info({}), 503)  # "overloaded": the server asks for less
        assert r.concurrency_limit == 4
        req = httpx2.Request("POST", URL)
        with pytest.raises(openai.APITimeoutError):
            async with r.attempt():
                raise openai.APITimeoutError(request=req)
        assert r.concurrency_limit == 2
        async with r.attempt():
            r.observe(rate_info({}), 500)  # a plain server error says nothing about load
        assert r.concurrency_limit == 2

    asyncio.run(main())
    assert Runner(adaptive=False).concurrency_limit == DEFAULT_CONCURRENCY


def test_a_resend_after_a_429_goes_at_the_front_of_the_schedule() -> None:
    # The requests queued behind one the server refused keep their order behind its resend: it
    # does not wait out the whole schedule again (at a pace cut by 429s that outlasted the
    # patience of the requests at the back).
    from ragjudge.llm.providers.base import RateInfo

    runner = Runner(concurrency=8, adaptive=False)  # the pacing alone orders the starts
    limits = RateInfo(limit_requests=300)  # pace 294 rpm: a start every ~0.2 s
    order: list[str] = []

    async def one(name: str, refused: bool = False) -> None:
        if refused:
            with pytest.raises(RuntimeError):
                async with runner.attempt():
                    order.append(name + "1")
                    await asyncio.sleep(0.05)  # the others take the next slots meanwhile
                    runner.observe(RateInfo(limit_requests=300, retry_after=0.05), 429)
                    raise RuntimeError("429")
        async with runner.attempt():
            order.append(name)
            runner.observe(limits, 200)

    async def main() -> None:
        await one("warm-up")  # its reply states the limit: the others are paced from the start
        first = asyncio.create_task(one("a", refused=True))
        await asyncio.sleep(0)  # `a` takes the first slot, the others the next ones
        await asyncio.gather(first, *(one(n) for n in "bcdef"))

    asyncio.run(main())
    assert order[:2] == ["warm-up", "a1"] and order.index("a") <= 3, order  # not behind b..f
    assert sorted(order) == sorted(["warm-up", "a1", "a", *"bcdef"])
