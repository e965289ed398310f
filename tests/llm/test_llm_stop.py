"""A run-stopping refusal (a spend limit, a bad key) ends the run before any further request
goes out: the requests waiting at the runner's gate end with its reason instead of being sent."""

from __future__ import annotations

import asyncio

import pytest
from _faultserver import FaultServer

from ragjudge.errors import LLMError
from ragjudge.llm import LLM, Endpoint, Runner
from ragjudge.llm.providers.base import AttemptFailed, Failure, Verdict

MODELS = {"openai": "fault-model", "anthropic": "claude-fault-1"}


def _refused(reason: str) -> AttemptFailed:
    return AttemptFailed(Verdict(Failure("status", reason, "the server", 400), retry=False, reason=reason,
                                 status=400, final=LLMError(reason)))


def test_attempts_waiting_at_the_gate_end_with_the_stopping_reason() -> None:
    runner = Runner(concurrency=1)
    sent: list[int] = []

    async def one(i: int) -> None:
        async with runner.attempt():
            sent.append(i)
            await asyncio.sleep(0)
            if i == 0:
                raise _refused("spend limit reached")

    async def main() -> list[BaseException | None]:
        return await asyncio.gather(*(one(i) for i in range(5)), return_exceptions=True)

    got = asyncio.run(main())
    assert sent == [0]  # the others waited at the gate (slow start, then the in-flight limit)
    assert isinstance(got[0], AttemptFailed)
    assert all(isinstance(e, LLMError) and "spend limit reached" in str(e) for e in got[1:])


def test_a_retryable_failure_does_not_stop_the_others() -> None:
    runner = Runner(concurrency=1)
    sent: list[int] = []

    async def one(i: int) -> None:
        async with runner.attempt():
            sent.append(i)
            if i == 0:
                raise AttemptFailed(Verdict(Failure("status", "HTTP 500", "the server", 500), retry=True,
                                            reason="HTTP 500", status=500))

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(3)), return_exceptions=True)

    asyncio.run(main())
    assert sorted(sent) == [0, 1, 2]


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("api", list(MODELS))
def test_a_stopping_refusal_to_the_first_request_is_the_only_request(api: str, concurrency: int) -> None:
    if api == "anthropic":
        pytest.importorskip("anthropic")
    model = MODELS[api]
    with FaultServer({"spend_limit_400": 1.0}, api=api, model=model) as server:
        llm = LLM(Endpoint(model, provider=api, base_url=server.base_url, api_key="sk-ant-fault-0123456789",
                           backoff_base=0.001, patience=5, concurrency=concurrency),
                  cache=False)

        async def go() -> None:
            try:
                await llm.structured_many("relevance.v1", [{"query": f"q{i}", "passage": "p"} for i in range(6)],
                                          progress=False)
            finally:
                await llm.aclose()

        with pytest.raises(LLMError, match="limit|quota"):
            asyncio.run(go())
        stats = server.stats()
    assert stats["requests"] == 1 and stats["after_stop"] == 0, stats
