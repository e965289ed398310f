"""Overhead of ``run_retriever`` over calling a trivial retriever directly.

For 1,000 queries a retriever that returns 10 ``(id, score)`` pairs at once (no work, so only
the overhead shows) is timed three ways, best of ``--repeat``:

* direct: a loop calling it and keeping the results (the floor);
* direct + Run: the same loop, then ``Run.from_arrays`` (what a hand-written loop needs to be
  evaluated);
* ``run_retriever_sync`` (progress off), at concurrency 1 and 8, for a sync function, an async
  function, and, when langchain-core is installed, a LangChain ``BaseRetriever`` (whose own
  ``invoke`` is the direct baseline there).

Prints each time, per query, and the ratio to the direct loops::

    python benchmarks/bench_integrations.py [--queries 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from ragjudge import Run
from ragjudge.integrations import run_retriever_sync

DOCS = [(f"d{i}", 1.0 - i / 10) for i in range(10)]


def trivial(text: str) -> list[tuple[str, float]]:
    return DOCS


async def atrivial(text: str) -> list[tuple[str, float]]:
    return DOCS


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def direct(call: Callable[[str], Any], queries: dict[str, str], build: bool) -> Any:
    out = {q: call(t) for q, t in queries.items()}
    if not build:
        return out
    qs, ds, ss = [], [], []
    for q, hits in out.items():
        for d, s in hits:
            qs.append(q)
            ds.append(d)
            ss.append(s)
    return Run.from_arrays(qs, ds, ss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    queries = {f"q{i}": f"query text {i}" for i in range(args.queries)}

    floor = best(lambda: direct(trivial, queries, False), args.repeat)
    with_run = best(lambda: direct(trivial, queries, True), args.repeat)
    print(f"{args.queries} queries x {len(DOCS)} documents, best of {args.repeat}")
    print(f"{'way':<44}{'total ms':>10}{'us/query':>10}{'x direct':>10}{'x direct+Run':>14}")

    def row(label: str, seconds: float) -> None:
        print(f"{label:<44}{seconds * 1e3:>10.2f}{seconds / args.queries * 1e6:>10.1f}"
              f"{seconds / floor:>10.1f}{seconds / with_run:>14.2f}")

    row("direct loop", floor)
    row("direct loop + Run.from_arrays", with_run)
    for c in (1, 8):
        row(f"run_retriever_sync(sync fn, concurrency={c})",
            best(lambda: run_retriever_sync(trivial, queries, concurrency=c, progress=False), args.repeat))
    for c in (1, 8):
        row(f"run_retriever_sync(async fn, concurrency={c})",
            best(lambda: run_retriever_sync(atrivial, queries, concurrency=c, progress=False), args.repeat))
    row("asyncio.run(gather of the async fn)",
        best(lambda: asyncio.run(_gather(queries)), args.repeat))
    try:
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever
    except ImportError:
        print("langchain-core not installed: LangChain rows skipped")
        return

    docs = [Document(page_content="", id=d) for d, _ in DOCS]

    class Trivial(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):  # type: ignore[no-untyped-def]
            return docs

    r = Trivial()
    lc = best(lambda: [r.invoke(t) for t in queries.values()], args.repeat)
    row("LangChain: direct invoke loop", lc)
    for c in (1, 8):
        t = best(lambda: run_retriever_sync(r, queries, concurrency=c, progress=False), args.repeat)
        row(f"LangChain: run_retriever_sync(concurrency={c})", t)
        print(f"{'':<44}{'':>10}{'':>10}  {t / lc:.2f} x the direct invoke loop")


async def _gather(queries: dict[str, str]) -> list[Any]:
    return await asyncio.gather(*(atrivial(t) for t in queries.values()))


if __name__ == "__main__":
    main()
