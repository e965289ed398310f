"""The synth pipeline's scheduling: draws overlap (generation and judging in flight together),
yet what is generated, judged and kept depends only on the replies, never on their timing --
so a rerun from the cache pays nothing -- and no judge call is made for a query that cannot
be needed. Replies come from the in-process FakeLLM with seeded random delays (only which
calls were made and how many were in flight together are asserted on), or from a rate-limited
fake server on a virtual clock (the loop's own time: no real time passes, so a busy machine
cannot fail a test on wall time)."""

from __future__ import annotations

import asyncio
import random
import zlib
from typing import Any

from _synth_data import make_corpus, model_answer

from ragjudge.llm.fake import FakeLLM, Reply
from ragjudge.synth import synthesize


class Timed:
    """model_answer with a seeded random delay per call; records each call's prompt and
    variables, and the most generation and judge calls in flight at the same moment."""

    def __init__(self, seed: int, *, fail_every: int = 0) -> None:
        self.rng = random.Random(seed)
        self.fail_every = fail_every
        self.calls: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.inflight = {"gen": 0, "judge": 0}
        self.overlap = 0  # a generation and a judge call in flight together, this many times

    async def __call__(self, prompt: Any, v: Any) -> Any:
        kind = "gen" if prompt.id.startswith("synth_") else "judge"
        self.calls.append((prompt.id, tuple(sorted((k, str(x)) for k, x in v.items()))))
        self.inflight[kind] += 1
        if self.inflight["gen"] and self.inflight["judge"]:
            self.overlap += 1
        try:
            await asyncio.sleep(self.rng.uniform(0.0, 0.02))
        finally:
            self.inflight[kind] -= 1
        passages = [v[k] for k in ("passage", "passage_a", "passage_b") if k in v]
        if kind == "gen":
            obj, _ = model_answer(prompt.id, passages, "queries" in prompt.output_schema["properties"])
            return obj
        obj, dist = model_answer(prompt.id, [], False, v["query"], v["passage"])
        if self.fail_every and isinstance(obj, dict) and zlib.crc32(v["query"].encode()) % self.fail_every == 0:
            obj = {**obj, "grade": 0}  # a stricter judge for some queries: siblings and new draws
        return Reply(obj, probs=dist)


def _run(corpus: dict[str, str], n: int, timed: Timed) -> Any:
    llm = FakeLLM(timed, model="m")
    return asyncio.run(synthesize(corpus, n, llm=llm, progress=False, oversample=3))


def _outcome(result: Any) -> list[tuple[str, str, str | None, str | None]]:
    return [(c.id, c.status, c.dropped_by, c.query) for c in result.candidates]


def test_what_is_called_and_kept_does_not_depend_on_reply_timing() -> None:
    corpus = make_corpus(4)
    # the same replies, delivered in different orders (different delay seeds)
    runs = [(Timed(seed), None) for seed in (1, 2, 3)]
    results = []
    for timed, _ in runs:
        results.append(_run(corpus, 8, timed))
    first = results[0]
    assert first.ok and len(first.kept) == 8
    for timed_result in results[1:]:
        assert _outcome(timed_result) == _outcome(first)
    calls = [sorted(t.calls) for t, _ in runs]
    assert calls[1] == calls[0] and calls[2] == calls[0]


def test_a_stricter_judge_is_timing_independent_too() -> None:
    # Judge failures make siblings and replacement draws: the paths that depend on earlier
    # verdicts. Still the same calls and outcome whatever the order of replies.
    corpus = make_corpus(5)
    a, b = Timed(5, fail_every=3), Timed(9, fail_every=3)
    ra, rb = _run(corpus, 10, a), _run(corpus, 10, b)
    assert _outcome(ra) == _outcome(rb) and sorted(a.calls) == sorted(b.calls)
    assert any(c.dropped_by == "answerability" for c in ra.candidates)


def test_generation_and_judging_overlap() -> None:
    corpus = make_corpus(4)
    timed = Timed(4)
    result = _run(corpus, 8, timed)
    assert result.ok
    assert timed.overlap > 0  # judge calls ran while generation calls were still in flight


def test_no_judge_call_for_a_query_that_cannot_be_needed() -> None:
    # Every judge call is for a draw whose earlier draws hold fewer than n kept queries: the
    # judged draws past the n-th kept one are none.
    corpus = make_corpus(4)
    result = _run(corpus, 6, Timed(7))
    kept_draws = [c.draw for c in result.candidates if c.kept]
    nth = kept_draws[5]
    order = [d.id for d in _draw_order(result)]
    judged_after = [c for c in result.candidates if c.judgment is not None
                    and order.index(c.draw) > order.index(nth)]
    assert judged_after == []
    assert all(c.status != "kept" or c.qid for c in result.candidates)


class _Events(Timed):
    """Timed, also recording each call and the index build's start and end in one list."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.events: list[str] = []

    async def __call__(self, prompt: Any, v: Any) -> Any:
        self.events.append("call " + prompt.id)
        return await super().__call__(prompt, v)


def _slow_index(monkeypatch: Any, timed: _Events, seconds: float) -> list[int]:
    """The synth pipeline's LexicalIndex, slowed down by ``seconds``; the threads it was
    built in are returned (filled as it is)."""
    import threading
    import time

    import ragjudge.synth.generate as generate
    from ragjudge.synth import LexicalIndex

    threads: list[int] = []

    class Slow(LexicalIndex):
        def __init__(self, docs: Any, **kw: Any) -> None:
            timed.events.append("build starts")
            threads.append(threading.get_ident())
            time.sleep(seconds)  # importing bm25s and indexing a large corpus
            super().__init__(docs, **kw)
            timed.events.append("build ends")

    monkeypatch.setattr(generate, "LexicalIndex", Slow)
    return threads


def _account(result: Any) -> list[Any]:
    return [(c.id, c.status, c.dropped_by, c.reason, c.query, c.sources, c.pairing, c.scores)
            for c in result.candidates]


def test_the_first_calls_leave_before_the_index_is_built(monkeypatch: Any) -> None:
    import threading

    corpus = make_corpus(4)
    plain = _run(corpus, 8, Timed(5))
    timed = _Events(5)
    threads = _slow_index(monkeypatch, timed, 0.3)
    result = _run(corpus, 8, timed)
    first = timed.events.index("build starts")
    # generation calls went out (and one came back) before the build began, in another thread
    assert first > 0 and all(e.startswith("call synth_") for e in timed.events[:first])
    assert threads and threading.get_ident() not in threads
    assert timed.events.count("build starts") == 1
    # what was asked, paired, filtered, judged and kept is the same as with the index at hand
    assert result.ok and _account(result) == _account(plain)
    assert any(len(c.sources) == 2 for c in result.candidates)  # the multi style was paired


def test_draws_that_all_wait_for_the_index_start_its_build(monkeypatch: Any) -> None:
    # every draw a two-passage one: no call is out to wait for, the build starts at once
    corpus = make_corpus(4)
    timed = _Events(6)
    _slow_index(monkeypatch, timed, 0.05)
    llm = FakeLLM(timed, model="m")

    async def run() -> Any:
        return await asyncio.wait_for(synthesize(corpus, 4, llm=llm, progress=False, oversample=3,
                                                 styles="multi=1"), 30)

    result = asyncio.run(run())
    assert timed.events[0] == "build starts" and result.kept


def _draw_order(result: Any) -> list[Any]:
    class D:
        def __init__(self, did: str) -> None:
            self.id = did

    seen: list[str] = []
    for c in result.candidates:
        if c.draw not in seen:
            seen.append(c.draw)
    return [D(x) for x in seen]


# ----------------------------------------------------------------------------- a fake clock
class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready: sleeps
    take no real time, and the loop's ``time()`` is the wall time the run would have taken."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:  # type: ignore[override]
        ready, scheduled = self._ready, self._scheduled  # type: ignore[attr-defined]
        if not ready and scheduled:
            self._now = max(self._now, min(h.when() for h in scheduled))
        super()._run_once()  # type: ignore[misc]


class Paced:
    """A rate-limited server: one call starts every ``gap`` seconds of the loop's clock (first
    come, first served) and answers model_answer ``latency`` later; counts the calls in flight
    (started, not answered) at once."""

    def __init__(self, gap: float, latency: float) -> None:
        self.gap, self.latency = gap, latency
        self.next = 0.0
        self.calls = self.inflight = self.most = 0

    async def __call__(self, prompt: Any, v: Any) -> Any:
        self.calls += 1
        loop = asyncio.get_running_loop()
        start = max(loop.time(), self.next)
        self.next = start + self.gap
        await asyncio.sleep(start - loop.time())
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        await asyncio.sleep(self.latency)
        self.inflight -= 1
        passages = [v[k] for k in ("passage", "passage_a", "passage_b") if k in v]
        if prompt.id.startswith("synth_"):
            return model_answer(prompt.id, passages, "queries" in prompt.output_schema["properties"])[0]
        if zlib.crc32(v["query"].encode()) % 3 == 0:  # a third of the queries fail the judge
            return Reply({"reasoning": "no", "grade": 0}, probs=None)
        return Reply({"reasoning": "yes", "grade": 3}, probs=None)


def _distinct_corpus(k: int) -> dict[str, str]:
    """Passages of distinct made-up words: every query is new and finds its own passage."""
    rng = random.Random(0)
    return {f"d{i}": " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7))
                              for _ in range(24)) + "." for i in range(k)}


def _paced_run(n: int, gap: float, latency: float) -> tuple[Any, Paced, float]:
    server = Paced(gap, latency)
    llm = FakeLLM(server, model="m")

    async def main() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        result = await synthesize(_distinct_corpus(3 * n), n, llm=llm, progress=False, seed=2,
                                  styles="question=1")
        return result, loop.time() - t0

    loop = _VirtualLoop()  # not asyncio.Runner(loop_factory=...): Python 3.10 lacks it
    try:
        result, wall = loop.run_until_complete(main())
    finally:
        loop.close()
    return result, server, wall


def test_rounds_overlap_so_wall_time_is_close_to_calls_at_the_rate() -> None:
    # A server starting one call per `gap` and answering `latency` later (three in flight keep
    # it busy). No run can end before its last call, started at (calls - 1) x gap, is answered;
    # a pipelined run is allowed one gap more. Rounds -- generate, filter, judge, size the next
    # round -- leave the server idle for a latency at each round's end (the rounds design took
    # 83 s for its 77 calls here, against a floor of 79). The clock is the loop's own
    # (virtual): no real time passes, and a busy machine cannot fail the test. The session's
    # runner sends the very first request alone (its reply's headers set the pace): one more
    # latency at the start.
    gap, latency = 1.0, 3.0
    result, server, wall = _paced_run(30, gap, latency)
    assert result.ok and len(result.kept) == 30
    assert server.most >= 3  # the server was kept full
    assert wall <= server.calls * gap + 2 * latency, (wall, server.calls)
