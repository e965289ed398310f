"""Many endpoints for one judge, against three loopback simulators.

Three simulators (``benchmarks/simulator.py`` in this process's threads) allow 200, 300 and 500
requests per minute; one ``LLMRelevanceJudge`` session spreads the pairs over them
(``LLM([Endpoint, ...])``, weights = their rpm). Halfway through, the 300 rpm one is killed.
Printed: the request rate while all three live against their combined ceiling (1,000 rpm), the
rate after the kill against the two left (700 rpm), each endpoint's 429s (over its limit),
pairs lost, and pairs paid more than once (paid calls beyond the pairs).

Figures from the simulator check plumbing, not quality.

Usage::

    python benchmarks/bench_endpoints.py              # 900 pairs, about a minute
    python benchmarks/bench_endpoints.py --pairs 400 --latency 0.2

Target: >= 90% of the combined rate while all three live, no endpoint over its limit, 0 pairs
lost, 0 paid twice.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import ragjudge  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))

from ragjudge.testing.simulator import SimConfig, SimulatorThread  # noqa: E402

from ragjudge.judges import LLMRelevanceJudge  # noqa: E402
from ragjudge.llm import LLM, Endpoint  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=900)
    ap.add_argument("--per-query", type=int, default=3, help="pairs per query (they share an endpoint)")
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument("--rpms", default="200,300,500")
    ap.add_argument("--kill", type=int, default=1, help="index of the endpoint killed halfway")
    args = ap.parse_args()
    rpms = [int(x) for x in args.rpms.split(",")]
    sims = [SimulatorThread(SimConfig(rpm=r, latency=args.latency, max_lifetime=1800)).start() for r in rpms]
    endpoints = [Endpoint("sim-model", base_url=s.base_url, api_key="sim", weight=float(r))
                 for s, r in zip(sims, rpms)]
    llm = LLM(endpoints, cache=False)
    judge = LLMRelevanceJudge(llm=llm, progress=False)
    pairs = [(f"query {i // args.per_query} about topic {i // args.per_query}", f"passage {i} text")
             for i in range(args.pairs)]
    marks: dict[str, float] = {}
    paid_at_kill: list[int] = []

    def killer() -> None:
        while sum(s.sim.stats()["paid"] for s in sims) < args.pairs // 2:
            time.sleep(0.01)
        marks["kill"] = time.monotonic()
        paid_at_kill.extend(s.sim.stats()["paid"] for s in sims)
        sims[args.kill].stop()

    t = threading.Thread(target=killer, daemon=True)
    start = time.monotonic()
    t.start()
    js = judge.judge_many_sync(pairs)
    end = time.monotonic()
    t.join(5)
    stats = [s.sim.stats() for s in sims]  # the counters, readable after a stop too
    for i, s in enumerate(sims):
        if i != args.kill:
            s.stop()
    before = sum(paid_at_kill)
    after = sum(st["paid"] for st in stats) - before
    ceiling = sum(rpms) / 60
    left = (sum(rpms) - rpms[args.kill]) / 60
    first, second = marks["kill"] - start, end - marks["kill"]
    # The first requests wait for the first reply's headers (slow start): the rate while all
    # three live is measured from the first paid reply on.
    print(f"pairs {args.pairs}, {args.per_query} per query, latency {args.latency} s, endpoints at {rpms} rpm; "
          f"endpoint {args.kill} ({rpms[args.kill]} rpm) killed after {before} paid")
    print(f"rate while all live: {before / first * 60:.0f} rpm = {before / first / ceiling:.1%} of {sum(rpms)} rpm"
          f" (per endpoint: {', '.join(f'{p / first * 60:.0f}/{r}' for p, r in zip(paid_at_kill, rpms))})")
    print(f"rate after the kill: {after / second * 60:.0f} rpm = {after / second / left:.1%} of "
          f"{sum(rpms) - rpms[args.kill]} rpm")
    for i, (st, r) in enumerate(zip(stats, rpms)):
        print(f"  endpoint {i} ({r} rpm): paid {st['paid']}, 429s {st['rate_limited']}, "
              f"duplicates {st['duplicate_paid']}{' (killed)' if i == args.kill else ''}")
    lost = sum(1 for j in js if not j.ok)
    paid = sum(st["paid"] for st in stats)
    print(f"lost {lost}; paid {paid} for {args.pairs} pairs: paid twice {max(0, paid - args.pairs)}; "
          f"counted by the session {llm.usage.calls} calls; drained: "
          + ", ".join(c.where() for c in llm.callers if c.drained))


if __name__ == "__main__":
    main()
