"""No attempt outlives its deadline: a server that sends its headers and then trickles or stalls
its body fails the attempt as a timeout, retried within the budget, and the run ends."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import respx
from _llm_fakes import BASE, SECRET, URL, error, grade_reply, ok

from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM
from ragjudge.llm.client import (
    LATE,
    AttemptDeadline,
    ClientConfig,
    LLMClient,
    RejectedReply,
    classify_failure,
    within_deadline,
)
from ragjudge.llm.providers.openai import rate_info

_REPLY = json.dumps({
    "id": "x", "object": "chat.completion", "model": "m", "created": 0,
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": json.dumps({"grade": 2})}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
}).encode()


class _Trickler:
    """A loopback HTTP server whose replies send headers at once and then the body one byte
    every ``pace`` seconds (``stall=True``: a few bytes, then nothing until the client goes)."""

    def __init__(self, *, pace: float = 0.2, stall: bool = False,
                 on_request: Callable[[], None] | None = None) -> None:
        self.pace = pace
        self.on_request = on_request
        self.stall = stall
        self.requests = 0
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            await reader.readexactly(length)
            self.requests += 1
            if self.on_request is not None:
                self.on_request()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n" % len(_REPLY))
            await writer.drain()
            for i, byte in enumerate(_REPLY):
                if self.stall and i >= 5:
                    await asyncio.sleep(60)  # bounded: the server thread is a daemon anyway
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(self.pace)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                try:
                    await asyncio.wait_for(self._stop.wait(), timeout=120)
                except asyncio.TimeoutError:
                    pass
            current = asyncio.current_task()
            handlers = [t for t in asyncio.all_tasks() if t is not current]
            for t in handlers:
                t.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        self.loop.run_until_complete(main())
        self.loop.close()

    def __enter__(self) -> _Trickler:
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def _trickler(**kw: object) -> Iterator[_Trickler]:
    with _Trickler(**kw) as server:  # type: ignore[arg-type]
        yield server


@pytest.mark.parametrize("stall", [False, True], ids=["trickle", "stall"])
def test_a_trickling_body_fails_the_attempt_at_its_deadline(stall: bool) -> None:
    with _trickler(stall=stall) as server:
        client = LLMClient(ClientConfig(model="m", base_url=server.url, api_key="k", timeout=1.0,
                                        max_attempts=2, backoff_base=0.01))

        async def main() -> float:
            t0 = time.monotonic()
            with pytest.raises(RejectedReply) as info:
                await client.complete({"model": "m", "messages": [{"role": "user", "content": "q"}]})
            await client.close()
            assert "no complete reply within 1 s" in info.value.reason
            # The reply was on its way, so it may be billed: not retried here, but handed to
            # the session, which counts its worst case and re-admits the next attempt.
            assert info.value.usage is None and info.value.attempts == 1
            return time.monotonic() - t0

        elapsed = asyncio.run(main())
        # One second, not the ~60 s the body would take to arrive.
        assert elapsed < 30
        assert server.requests == 1


def test_the_deadline_is_a_timeout_for_the_runner() -> None:
    failure = classify_failure(AttemptDeadline(5.0, "http://h/v1"))
    assert failure.kind == "timeout" and "5 s" in failure.reason


@pytest.mark.slow
def test_a_judge_facing_a_trickling_server_ends_with_every_pair_failed_with_its_reason(
        tmp_path: Path) -> None:
    with _trickler() as server:
        llm = LLM(model="m", base_url=server.url, api_key="k", timeout=0.5, max_attempts=2,
                  backoff_base=0.01, cache=None)
        judge = LLMRelevanceJudge(llm=llm, progress=False)
        pairs = [("q1", "d1", "what is x", "x is y"), ("q1", "d2", "what is x", "z")]
        judgments = judge.judge_many_sync(pairs)
        assert len(judgments) == 2
        for j in judgments:
            assert j.grade is None
            assert "no complete reply within 0.5 s" in (j.error or "")
        # Two attempts per pair, each counted at its worst case (the reply may be billed).
        assert server.requests == 4
        assert llm.usage.calls == 4 and llm.usage.unknown == 4


@pytest.mark.slow
def test_the_judge_command_ends_against_a_trickling_server(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "what is x"}\n')
    (tmp_path / "c.jsonl").write_text('{"_id": "d1", "text": "x is y"}\n{"_id": "d2", "text": "z"}\n')
    (tmp_path / "run").write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d2 2 1.0 r\n")
    with _trickler() as server:
        env = {**os.environ, "OPENAI_API_KEY": "k"}
        proc = subprocess.run(
            [sys.executable, "-m", "ragjudge", "judge", "--run", str(tmp_path / "run"), "--queries",
             str(tmp_path / "q.jsonl"), "--corpus", str(tmp_path / "c.jsonl"), "--model", "m",
             "--base-url", server.url, "--timeout", "1", "--max-attempts", "2", "--no-cache",
             "-o", str(tmp_path / "out.qrels"), "--judgments", str(tmp_path / "j.jsonl"),
             "--no-progress"],
            capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in proc.stderr
    assert proc.returncode != 0  # every pair failed: a run that mostly failed exits non-zero
    assert "2 of 2 judgments failed" in proc.stderr
    lines = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert all("no complete reply within 1 s" in (rec["error"] or "") for rec in lines)


# -- waits are bounded by the patience and said --------------------------------------------
def _far_date(seconds: float) -> str:
    return email.utils.formatdate(time.time() + seconds, usegmt=True)


def test_a_retry_after_beyond_the_patience_fails_at_once_with_its_reason(
        httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(URL).mock(
        return_value=error(429, "slow down", headers={"retry-after": _far_date(3600)}))
    llm = LLM("judge-model", base_url=BASE, api_key=SECRET, cache=tmp_path / "c.sqlite",
              backoff_base=0.001, patience=30)

    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "q", "passage": "p"})
        finally:
            await llm.aclose()

    t0 = time.monotonic()
    out = asyncio.run(go())
    assert time.monotonic() - t0 < 20  # not an hour, not even the patience
    assert not out.ok
    assert "asked to wait" in out.error and "Retry-After" in out.error and "--patience 30" in out.error
    assert route.call_count == 1


def test_a_long_wait_is_said_once_on_stderr(httpx2_mock: respx.Router, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    import ragjudge.llm.client as client_mod

    monkeypatch.setattr(client_mod, "LONG_WAIT", 0.2)  # the real threshold is ~10 s
    route = httpx2_mock.post(URL)
    route.side_effect = [error(429, "slow down", headers={"retry-after": "1"}), ok(grade_reply(2))]
    llm = LLM("judge-model", base_url=BASE, api_key=SECRET, cache=tmp_path / "c.sqlite",
              backoff_base=0.001)

    async def go() -> Any:
        try:
            return await llm.structured("relevance.v1", {"query": "q", "passage": "p"})
        finally:
            await llm.aclose()

    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        out = asyncio.run(go())
    assert out.ok
    lines = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("rate limited by http://llm.test/v1")
    assert "waiting 1 s (Retry-After)" in lines[0]


def test_a_far_retry_after_does_not_pause_the_whole_run() -> None:
    from ragjudge.llm.runner import Runner

    runner = Runner(concurrency=4, patience=600)

    async def go() -> None:
        runner.observe(rate_info({"retry-after": _far_date(3600)}), 429)

        async def start() -> None:
            async with runner.attempt():
                pass

        # The other pairs go on at once: only the request that got the 429 ends (its wait
        # is refused by the client), the run is neither paused nor throttled for an hour.
        await asyncio.wait_for(start(), timeout=10)

    asyncio.run(go())
    # A lone header-less 429 is not yet a limit (only its request waits); were it one, its wait
    # beyond the patience would still keep it from pausing or throttling the run.
    assert runner.isolated_429 == 1 and runner.adaptive_rpm is None
    for _ in range(10):
        runner.learner.on_rejected(runner.learner.on_start(0.0))
    asyncio.run(go())
    assert runner.refused_waits == 1 and runner.adaptive_rpm is None


def test_a_judge_facing_far_retry_afters_grades_the_rest_and_fails_those_with_their_reason() -> None:
    from _loopback import simulator_thread

    pairs = [("q1", f"d{i}", "what is x", f"passage {i}") for i in range(12)]
    with simulator_thread(p_429=0.25, spurious_retry_after=3600.0, seed=11, latency=0.01) as sim:
        llm = LLM(model="sim-model", base_url=sim.base_url, api_key="k", cache=None, patience=600)
        judge = LLMRelevanceJudge(llm=llm, progress=False)

        async def go() -> list[Any]:
            try:
                # Hard bound: each far 429 used to pause every start for a minute.
                return await asyncio.wait_for(judge.judge_many(pairs), timeout=60)
            finally:
                await llm.aclose()

        judgments = asyncio.run(go())
        spurious = sim.stats()["spurious_429"]
    assert spurious >= 1
    failed = [j for j in judgments if j.grade is None]
    assert len(judgments) == 12 and len(failed) == spurious
    for j in failed:
        assert "asked to wait 3600 s (Retry-After)" in (j.error or "")


def test_a_long_pause_for_the_servers_reported_window_is_said(caplog: pytest.LogCaptureFixture) -> None:
    from ragjudge.llm.runner import Runner

    runner = Runner(concurrency=2)
    runner.where = "http://gw.test/***/v1"

    async def go() -> None:
        async with runner.attempt():  # a reply saying the window is spent for the next 30 s
            runner.observe(rate_info({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "30s"}), 200)

        async def start() -> None:
            async with runner.attempt():
                pass

        task = asyncio.create_task(start())
        deadline = time.monotonic() + 10
        while not any("waiting" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("rate limited by http://gw.test/***/v1: waiting 30 s (x-ratelimit-reset)")


@pytest.mark.slow
def test_evaluate_judge_takes_the_attempt_bounds_and_ends_against_a_trickling_server(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text('{"_id": "q1", "text": "what is x"}\n')
    (tmp_path / "c.jsonl").write_text('{"_id": "d1", "text": "x is y"}\n{"_id": "d2", "text": "z"}\n')
    (tmp_path / "run").write_text("q1 Q0 d1 1 2.0 r\nq1 Q0 d2 2 1.0 r\n")
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    with _trickler() as server:
        proc = subprocess.run(
            [sys.executable, "-m", "ragjudge", "evaluate", str(tmp_path / "qrels"), str(tmp_path / "run"),
             "--judge", "m", "--queries", str(tmp_path / "q.jsonl"), "--corpus", str(tmp_path / "c.jsonl"),
             "--base-url", server.url, "--timeout", "1", "--max-attempts", "1", "--patience", "30",
             "--no-cache", "--no-progress", "--judgments", str(tmp_path / "j.jsonl")],
            capture_output=True, text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": "k"})
    assert "Traceback" not in proc.stderr and "unrecognized" not in proc.stderr
    records = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert records and all("no complete reply within 1 s" in (r["error"] or "") for r in records)


def test_a_stall_of_our_own_loop_is_given_back_to_the_attempt() -> None:
    # A reply that arrived while the loop could not run (another thread holding the GIL, a
    # blocking call) waits in the socket: cutting the attempt off at its deadline would pay for
    # it again. The deadline's timer runs late by the stall, and the stall is given back.
    async def main() -> str:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[str] = loop.create_future()
        loop.call_later(0.05, time.sleep, 0.5)  # the loop stalls from 0.05 s to 0.55 s
        loop.call_later(0.1, reply.set_result, "reply")  # the reply comes during the stall
        return await within_deadline(0.2, reply, "http://h/v1")

    assert asyncio.run(main()) == "reply"


def test_a_server_that_never_answers_still_meets_the_deadline_after_a_stall_of_ours() -> None:
    async def main(stall: float) -> float:
        loop = asyncio.get_running_loop()
        never: asyncio.Future[str] = loop.create_future()
        if stall:
            loop.call_later(0.05, time.sleep, stall)
        t0 = loop.time()
        with pytest.raises(AttemptDeadline):
            await within_deadline(0.2, never, "http://h/v1")
        return loop.time() - t0

    assert asyncio.run(main(0.0)) < 0.2 + LATE
    # the stall given back once, at most the deadline again
    assert asyncio.run(main(0.5)) < 0.5 + 2 * 0.2 + LATE + 0.05


def test_a_reply_read_after_a_stall_of_ours_is_paid_once() -> None:
    loop = asyncio.new_event_loop()
    # the client's loop stalls past the deadline as the server answers (at once)
    stall = lambda: loop.call_soon_threadsafe(time.sleep, 1.0)
    with _trickler(pace=0.0, on_request=stall) as server:
        client = LLMClient(ClientConfig(model="m", base_url=server.url, api_key="k", timeout=0.5,
                                        max_attempts=2, backoff_base=0.01))

        async def main() -> Any:
            try:
                return await client.complete({"model": "m", "messages": [{"role": "user", "content": "q"}]})
            finally:
                await client.close()

        try:
            reply = loop.run_until_complete(main())
        finally:
            loop.close()
        assert json.loads(reply.text) == {"grade": 2} and reply.attempts == 1
        assert server.requests == 1
