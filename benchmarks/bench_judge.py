"""Benchmark ragjudge's LLM judge (default settings) against the loopback simulator.

Scenarios (each against a fresh simulator process on 127.0.0.1):

1. **ceiling** -- a server allowing ``--rpm`` requests per minute (sliding 60 s window, with
   ``x-ratelimit-*`` headers) and ``--latency`` seconds per reply; N pairs, enough for about a
   minute. Reports the achieved request rate against the ceiling, 429s, failures, duplicate
   paid calls and tokens per judgment.
2. **quantized** -- the same limit enforced per 1 s window (``rpm/60`` per second, the way
   providers quantize limits): the strict variant of 1.
3. **faults** -- 10% 5xx and 5% malformed JSON content (no rate limit), once per simulator seed
   (``--fault-seeds``): judgments lost must be 0.
4. **repeat** -- scenario 1's job again on its cache (run right after 1): requests sent must be 0.
5. optional (``--no-headers``): the limit enforced per 1 s window by a server that sends no
   ``x-ratelimit-*`` headers, so the runner must learn it from 429s alone; then the same with 5%
   of requests refused at random besides (429s that are not the limit).
6. optional (``--burners N``): scenario 1 on a busy machine, side by side: runs without and
   with ``N`` CPU-burning neighbour processes (busy loops, ended with each run) alternate
   ``--repeats`` times; prints each run's rate against the ceiling, the most requests the
   server saw in flight, and the runner's adaptive limit. ``--only-busy`` runs just this one.
   ``--processing-header`` makes the simulator state its own time (``openai-processing-ms``).

Usage::

    python benchmarks/bench_judge.py                 # all scenarios, ~3 minutes
    python benchmarks/bench_judge.py --pairs 300 --json out.json --skip-quantized
    python benchmarks/bench_judge.py --only-busy --burners 20 --repeats 3 --pairs 400

Targets: >= 95% of the ceiling with default settings and almost no 429s; 0 lost with
faults; 0 duplicate paid calls; a repeated run makes 0 calls.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
try:
    import ragjudge  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))

from ragjudge.judges import LLMRelevanceJudge  # noqa: E402
from ragjudge.llm import LLM  # noqa: E402

_TOPICS = [
    "solar panels",
    "sourdough bread",
    "tax returns",
    "river otters",
    "jazz harmony",
    "volcanoes",
    "vaccines",
    "chess openings",
    "tidal energy",
    "medieval castles",
    "coral reefs",
    "compilers",
]


def make_pairs(n: int, salt: str) -> list[tuple[str, str, str, str]]:
    """N distinct (qid, docid, query, passage) with passages of a realistic length (~150 words)."""
    out = []
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        other = _TOPICS[(i * 7 + 3) % len(_TOPICS)]
        query = f"how does {topic} work ({salt} {i // 10})"
        passage = " ".join(
            f"Paragraph {i}.{k}: notes on {topic if k % 2 else other}, covering history, practice and "
            f"common questions people ask about it, with examples and a short summary at the end."
            for k in range(6)
        )
        out.append((f"q{i // 10}", f"d{i}", query, passage))
    return out


class SimProcess:
    """benchmarks/simulator.py in its own process (so it does not share the client's CPU loop)."""

    def __init__(self, *args: str, lifetime: float = 900.0) -> None:
        cmd = [
            sys.executable,
            str(HERE / "simulator.py"),
            "--port",
            "0",
            "--max-lifetime",
            str(lifetime),
            *args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip() if self.proc.stdout else ""
        if not line.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise RuntimeError(
                f"simulator did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.base_url = line

    def stats(self, wait: float = 60.0) -> dict[str, Any]:
        """The simulator's counters (retried for up to ``wait`` s: it may be in an outage)."""
        root = self.base_url.rsplit("/v1", 1)[0]
        deadline = time.monotonic() + wait
        while True:
            try:
                with urllib.request.urlopen(root + "/_sim/stats", timeout=10) as r:
                    return json.load(r)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Burners:
    """``n`` CPU-burning neighbour processes (busy loops) for the life of the block: the
    machine gets busy the way a shared CI runner or a laptop compiling something does."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Burners:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(0.5 if self.n else 0.0)  # let the scheduler see them before the run starts
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 1)
    except OSError:
        return None


def runner_row(llm: LLM) -> dict[str, Any]:
    """What the runner's adaptive concurrency ended at (one endpoint: the bench's)."""
    runner = getattr(llm, "runner", None)
    limiter = getattr(runner, "limiter", None)
    if runner is None or limiter is None:
        return {}
    out: dict[str, Any] = {"limit_end": runner.concurrency_limit, "limit_cuts": limiter.cuts,
                           "pace_missed_s": round(runner.pace_missed, 1)}
    lag = getattr(runner, "loop_lag", None)
    if lag is not None:
        out["loop_lag_ms"] = round(lag * 1000.0, 1)
    return out


def busy_scenario(args: argparse.Namespace, tmp: str) -> list[dict[str, Any]]:
    """Scenario 1, alternately on a quiet and a busy machine (``--burners`` neighbours)."""
    rows: list[dict[str, Any]] = []
    limits = ["--rpm", str(int(args.rpm)), "--latency", str(args.latency), "--jitter", "0.2", "--window", "60"]
    if args.processing_header:
        limits.append("--processing-header")
    for rep in range(args.repeats):
        for n in (0, args.burners):
            salt = f"busy{rep}-{n}"
            # The simulator starts before the burners: only the run itself meets the busy machine.
            with SimProcess(*limits) as sim, Burners(n):
                settings = {} if args.concurrency is None else {"concurrency": args.concurrency}
                js, llm, wall = run_judge(sim.base_url, Path(tmp) / f"{salt}.sqlite", make_pairs(args.pairs, salt),
                                          **settings)
                load = load_average()
                row = summarize(f"ceiling, {n} burners (run {rep + 1})", js, llm, wall, sim.stats(), args.rpm)
            row.update(burners=n, load1=load, **runner_row(llm))
            rows.append(row)
            print(json.dumps(row), flush=True)
    for n in (0, args.burners):
        got = [r["rate_vs_ceiling_pct"] for r in rows if r["burners"] == n and r["rate_vs_ceiling_pct"] is not None]
        if got:
            print(f"busy scenario: {n} burners: rate vs ceiling {min(got)}-{max(got)}% over {len(got)} runs",
                  flush=True)
    return rows


def run_judge(
    base_url: str, cache: Path, pairs: list[tuple[str, str, str, str]], **settings: Any
) -> tuple[list[Any], LLM, float]:
    # default settings unless a scenario's experiment overrides one
    llm = LLM("sim-model", base_url=base_url, api_key="sk-bench-not-a-key", cache=cache, **settings)
    judge = LLMRelevanceJudge(llm=llm, progress=False)
    start = time.monotonic()
    judgments = judge.judge_many_sync(pairs)
    return judgments, llm, time.monotonic() - start


def summarize(
    name: str, judgments: list[Any], llm: LLM, wall: float, stats: dict[str, Any], rpm: float | None
) -> dict[str, Any]:
    n = len(judgments)
    failed = [j for j in judgments if j.grade is None]
    span = stats.get("admit_span_s") or 0.0
    admitted = stats.get("admitted", 0)
    rate = (admitted - 1) / span * 60.0 if span > 0 and admitted > 1 else None
    row = {
        "scenario": name,
        "pairs": n,
        "wall_s": round(wall, 2),
        "judgments_per_min": round(n / wall * 60.0, 1) if wall > 0 else None,
        "requests": stats.get("requests", 0),
        "paid_calls": stats.get("paid", 0),
        "server_rate_rpm": None if rate is None else round(rate, 1),
        "rate_vs_ceiling_pct": None if rate is None or not rpm else round(100.0 * rate / rpm, 1),
        "throughput_vs_ceiling_pct": None
        if not rpm or wall <= 0
        else round(100.0 * (n / wall * 60.0) / rpm, 1),
        "http_429": stats.get("rate_limited", 0),
        "failed_judgments": len(failed),
        "failure_reasons": sorted({j.error for j in failed})[:5],
        "missing_records": n - len({(j.qid, j.docid) for j in judgments}),
        "duplicate_paid_calls": stats.get("duplicate_paid", 0),
        "tokens_per_judgment": round(
            (stats.get("prompt_tokens", 0) + stats.get("completion_tokens", 0)) / n, 1
        )
        if n
        else 0,
        "client_retries": llm.stats.retries,
        "client_repairs": llm.stats.repaired,
        "faults_injected": {k: stats.get(k, 0) for k in ("errors_5xx", "malformed", "hangs", "truncated")},
        "max_inflight": stats.get("max_inflight", 0),
    }
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pairs", type=int, default=600, help="pairs per rate scenario (default 600: ~1 min at 600 rpm)"
    )
    ap.add_argument("--fault-pairs", type=int, default=600)
    ap.add_argument("--rpm", type=float, default=600)
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument("--skip-quantized", action="store_true")
    ap.add_argument("--no-headers", action="store_true",
                    help="extra scenario: the server sends no x-ratelimit-* headers (limits learned from 429s)")
    ap.add_argument("--fault-seeds", default="1,2,3", help="one fault scenario per simulator seed")
    ap.add_argument("--burners", type=int, default=0,
                    help="busy-machine scenario: this many CPU-burning neighbours (0: skip it)")
    ap.add_argument("--repeats", type=int, default=3, help="busy scenario: interleaved quiet/busy pairs")
    ap.add_argument("--only-busy", action="store_true", help="run only the busy-machine scenario")
    ap.add_argument("--concurrency", type=int, help="busy scenario: the LLM's concurrency (default: the library's)")
    ap.add_argument("--processing-header", action="store_true",
                    help="busy scenario: the simulator states its own time (openai-processing-ms)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.burners > 0:
            rows.extend(busy_scenario(args, tmp))
        if args.only_busy:
            return finish(rows, args)
        cache = Path(tmp) / "bench.sqlite"
        pairs = make_pairs(args.pairs, "ceiling")
        limits = ["--rpm", str(int(args.rpm)), "--latency", str(args.latency), "--jitter", "0.2"]
        with SimProcess(*limits, "--window", "60") as sim:
            js, llm, wall = run_judge(sim.base_url, cache, pairs)
            rows.append(summarize("ceiling (60 s window)", js, llm, wall, sim.stats(), args.rpm))
            print(json.dumps(rows[-1]), flush=True)
            # 4. the same job again, same cache: nothing may be sent
            before_stats = sim.stats()
            js2, llm2, wall2 = run_judge(sim.base_url, cache, pairs)
            after = sim.stats()
            delta = {
                k: after[k] - before_stats[k]
                for k in (
                    "requests",
                    "paid",
                    "rate_limited",
                    "duplicate_paid",
                    "prompt_tokens",
                    "completion_tokens",
                    "admitted",
                )
            }
            rep = summarize("repeat (cache)", js2, llm2, wall2, {**after, **delta, "admit_span_s": 0.0}, None)
            rep["cached"] = sum(1 for j in js2 if j.cached)
            rows.append(rep)
            print(json.dumps(rows[-1]), flush=True)

        if args.no_headers:
            # 1 s window: with a 60 s window a client that bursts its first minute is not caught
            with SimProcess(*limits, "--window", "1", "--no-ratelimit-headers") as sim:
                js, llm, wall = run_judge(sim.base_url, Path(tmp) / "h.sqlite", make_pairs(args.pairs, "noheaders"))
                rows.append(summarize(f"{int(args.rpm)} rpm per 1 s window, no x-ratelimit headers", js, llm, wall, sim.stats(), args.rpm))
                print(json.dumps(rows[-1]), flush=True)
            # the same, and 5% of requests refused at random besides (an overloaded upstream):
            # 429s the pacer must not read as the limit
            with SimProcess(*limits, "--window", "1", "--no-ratelimit-headers", "--p-429", "0.05") as sim:
                js, llm, wall = run_judge(sim.base_url, Path(tmp) / "h5.sqlite", make_pairs(args.pairs, "noheaders5"))
                rows.append(summarize(f"{int(args.rpm)} rpm per 1 s window, no headers, 5% 429s at random",
                                      js, llm, wall, sim.stats(), args.rpm))
                print(json.dumps(rows[-1]), flush=True)

        if not args.skip_quantized:
            with SimProcess(*limits, "--window", "1") as sim:
                js, llm, wall = run_judge(
                    sim.base_url, Path(tmp) / "q.sqlite", make_pairs(args.pairs, "quantized")
                )
                rows.append(summarize("quantized (1 s window)", js, llm, wall, sim.stats(), args.rpm))
                print(json.dumps(rows[-1]), flush=True)

        for seed in [int(x) for x in args.fault_seeds.split(",") if x.strip()]:
            with SimProcess(
                "--latency",
                str(args.latency),
                "--jitter",
                "0.2",
                "--p-5xx",
                "0.1",
                "--p-malformed",
                "0.05",
                "--seed",
                str(seed),
            ) as sim:
                js, llm, wall = run_judge(
                    sim.base_url, Path(tmp) / f"f{seed}.sqlite", make_pairs(args.fault_pairs, f"faults{seed}")
                )
                rows.append(
                    summarize(
                        f"faults (10% 5xx, 5% malformed; seed {seed})", js, llm, wall, sim.stats(), None
                    )
                )
                print(json.dumps(rows[-1]), flush=True)

    return finish(rows, args)


def finish(rows: list[dict[str, Any]], args: argparse.Namespace) -> int:
    print()
    cols = [
        "scenario",
        "pairs",
        "wall_s",
        "rate_vs_ceiling_pct",
        "throughput_vs_ceiling_pct",
        "http_429",
        "failed_judgments",
        "duplicate_paid_calls",
        "requests",
        "tokens_per_judgment",
        "max_inflight",
    ]
    if any("burners" in r for r in rows):
        cols += ["burners", "load1", "limit_end", "limit_cuts", "loop_lag_ms", "pace_missed_s"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c)) for c in cols))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
