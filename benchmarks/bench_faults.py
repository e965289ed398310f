"""Fault benchmark of the LLM judge: what survives odd replies, outages, hidden
reasoning, shared limits and a single-slot server, with default settings.

Every scenario runs ``LLMRelevanceJudge`` against a fresh ``benchmarks/simulator.py`` process on
127.0.0.1 and prints one JSON row, then a table:

* ``lost``         -- pairs with no judgment at all (the run crashed or stopped);
* ``undetermined`` -- judgments without a grade (a failure recorded with its reason), not
  counting pairs skipped because the cost cap was reached (``skipped_cap``);
* ``dup_paid``     -- identical requests the server billed more than once;
* ``spend`` / ``cap`` -- what the *server* billed (its own token counts, hidden reasoning
  included, at the benchmark's prices) against ``--max-cost``; ``over_cap_pct`` > 0 is a bug.

Scenarios:

1. ``odd fields``: 10% non-numeric logprobs, 10% string/missing usage, 5% empty choices, 5%
   grades out of scale or as strings.
2. ``outage refuse`` / ``outage 503`` / ``outage 429``: after 60 answers (a third of the pairs
   if fewer) the server refuses
   connections (its listener closes), answers 503, or answers only 429 for ``--outage`` s.
3. ``hidden reasoning``: 5,000 reasoning tokens billed per reply (a reasoning model, run with
   ``max_tokens=8000`` as it needs), cap at half the dry-run estimate of the whole job.
4. ``shared limit``: two client *processes* with different pairs on one 600 rpm limit
   (per 1 s window).
5. ``shared cache``: two client processes, the same pairs, one cache file, at the same time.
6. ``single slot``: a server processing one request at a time (llama.cpp ``--parallel 1``),
   time-scaled: 0.2 s per answer and a 3 s timeout stand for 4 s and the default 60 s.
7. ``slow bodies``: 10% of the replies send their headers and then one byte per second (a
   3 s timeout): every attempt must end at its deadline, be counted as billed (worst case)
   and be retried.
8. ``billed rejects``: 10% of the 200 replies have empty choices and 5% unusable content
   (both billed), plus 10% 5xx, with a cap at half the dry-run estimate: ``reported`` (the
   client's cost) must be at least ``spend`` (the server's bill) and the bill within the cap.
9. ``far retry-after``: 5% spurious 429s asking to wait an hour: those pairs fail at once
   with the reason (beyond ``--patience``), the run does not wait.
10. ``cache damaged`` / ``cache full``: half the pairs judged, then the cache file truncated
    (salvaged into a fresh one), or a cache that cannot grow (SQLite's "database or disk is
    full"): the run finishes with every judgment; ``dup_paid`` counts the answers lost.
11. ``malformed mix``: 10% 5xx, 5% unusable content, 5% empty choices and 5% bodies that are
    not clean JSON but state their usage (all but the 5xx billed), without and with a cap at
    half the dry-run estimate: no pair undetermined without a cap, ``reported`` equal to
    ``spend`` and the bill within the cap.

12. ``--matrix``: the project's fault matrix (``tests/_faultmatrix.py``, its stdlib fault server
    ``tests/_faultserver.py``): every LLM command (``judge``, ``evaluate --judge``, ``rag``,
    ``synth``, a ``serve`` job) against every fault mode (5xx, 429 with and without Retry-After,
    a stall after the headers, a reset mid-body, a gzip header on a plain body, malformed JSON,
    empty choices, another model's name, usage of 1e400 / -500 / "many" tokens, an endpoint
    failing every call, 429s + 5xx + stalls at once, a mix under a cap at half the clean
    spend), with one endpoint (the faults at the rates of the mode) and with three (the first faulty, two clean), with the
    SQLite and (``--stores sqlite,postgres``) the PostgreSQL cache (``postgres restart``: its
    server stopped for 2 s mid-run, then the command run again; ``postgres away at exit``: for
    6 s, past the run's end), for each provider the fault
    server speaks (``--providers openai,anthropic``: the OpenAI chat API and Anthropic's
    Messages API), and with ``--replicas`` the replicas scenario (``serve`` replicas on one
    PostgreSQL job store, the one running a capped job killed with SIGKILL). One table: lost,
    undetermined, paid twice, reported vs true spend, spend vs cap, and the broken invariants.

Usage::

    python benchmarks/bench_faults.py                     # all scenarios, ~3 minutes
    python benchmarks/bench_faults.py --matrix --commands judge,rag --modes gzip,reset
    python benchmarks/bench_faults.py --only outage --pairs 100 --json out.json

Rerun after merging other branches: the script only uses the public API (``LLM``,
``LLMRelevanceJudge``) and the simulator's counters, so its figures track the merged code.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import ragjudge  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))

from bench_judge import SimProcess, make_pairs

from ragjudge.judges import LLMRelevanceJudge
from ragjudge.llm import LLM, Cache

MODEL = "sim-model"
PRICES = {MODEL: {"input": 1.0, "output": 4.0}}  # USD per 1M tokens (the benchmark's own)


def price_file(tmp: Path) -> Path:
    p = tmp / "prices.json"
    p.write_text(json.dumps(PRICES), encoding="utf-8")
    return p


def billed(stats: dict[str, Any]) -> float:
    """USD the simulator billed, from its own token counts (hidden reasoning included)."""
    return (stats.get("prompt_tokens", 0) * PRICES[MODEL]["input"]
            + stats.get("completion_tokens", 0) * PRICES[MODEL]["output"]) / 1e6


def half_estimate(items: list[Any], prices: Path, **kw: Any) -> float:
    """Half the dry-run cost of judging ``items`` (the benchmark's cost caps)."""
    est = LLM(MODEL, base_url="http://127.0.0.1:9/v1", api_key="x", cache=False, prices=str(prices),
              check_key=False, **kw)
    dry = est.estimate(LLMRelevanceJudge(llm=est, progress=False).prompt,
                       [{"query": q, "passage": p} for _, _, q, p in items])
    return round(0.5 * float(dry.cost or 0.0), 6)


def judge_pairs(base_url: str, cache: Path | Cache, pairs: list[Any], *, prices: Path,
                max_cost: float | None = None, **kw: Any) -> dict[str, Any]:
    """Run the judge with default settings (plus ``kw``); never raises: a crash is data."""
    start = time.monotonic()
    out: dict[str, Any] = {"pairs": len(pairs)}
    try:
        llm = LLM(MODEL, base_url=base_url, api_key="sk-bench-not-a-key", cache=cache,
                  prices=str(prices), max_cost=max_cost, **kw)
        judge = LLMRelevanceJudge(llm=llm, progress=False)
        judgments = judge.judge_many_sync(pairs)
    except Exception as exc:  # the run stopped: every pair without a judgment is lost
        out.update(lost=len(pairs), undetermined=0, skipped_cap=0,
                   aborted=f"{type(exc).__name__}: {str(exc)[:200]}", client_cost=None)
        out["wall_s"] = round(time.monotonic() - start, 2)
        return out
    failed = [j for j in judgments if j.grade is None]
    skipped = [j for j in failed if "max cost" in str(j.error) or "budget" in str(j.error)]
    reasons: dict[str, int] = {}
    for j in failed:
        if j not in skipped:
            key = str(j.error)[:70]
            reasons[key] = reasons.get(key, 0) + 1
    out.update(
        lost=len(pairs) - len(judgments),
        undetermined=len(failed) - len(skipped),
        skipped_cap=len(skipped),
        reasons=dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:3]),
        client_cost=llm.cost,
        retries=llm.stats.retries,
        max_latency_s=round(max((j.latency for j in judgments), default=0.0), 3),
        wall_s=round(time.monotonic() - start, 2),
    )
    return out


def child_main(argv: list[str]) -> int:
    """``--child URL CACHE SALT N PRICES``: one client process of a shared scenario."""
    url, cache, salt, n, prices = argv
    row = judge_pairs(url, Path(cache), make_pairs(int(n), salt), prices=Path(prices))
    print(json.dumps(row), flush=True)
    return 0


def two_processes(url: str, caches: tuple[Path, Path], salts: tuple[str, str], n: int,
                  prices: Path) -> list[dict[str, Any]]:
    procs = [subprocess.Popen([sys.executable, __file__, "--child", url, str(c), s, str(n), str(prices)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c, s in zip(caches, salts)]
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        lines = [x for x in out.splitlines() if x.startswith("{")]
        rows.append(json.loads(lines[-1]) if lines else
                    {"pairs": n, "lost": n, "undetermined": 0, "aborted": err.strip()[-200:]})
    return rows


def merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in ("pairs", "lost", "undetermined", "skipped_cap"):
        out[k] = sum(int(r.get(k) or 0) for r in rows)
    out["wall_s"] = max(float(r.get("wall_s") or 0.0) for r in rows)
    out["aborted"] = [r["aborted"] for r in rows if r.get("aborted")] or None
    reasons: dict[str, int] = {}
    for r in rows:
        for key, v in (r.get("reasons") or {}).items():
            reasons[key] = reasons.get(key, 0) + v
    out["reasons"] = reasons
    return out


def row(name: str, result: dict[str, Any], stats: dict[str, Any], cap: float | None) -> dict[str, Any]:
    spend = billed(stats)
    reported = result.get("client_cost")
    r = {"scenario": name, **result, "reported": None if reported is None else round(reported, 6),
         "requests": stats.get("requests", 0), "paid": stats.get("paid", 0),
         "dup_paid": stats.get("duplicate_paid", 0), "http_429": stats.get("rate_limited", 0),
         "cancelled": stats.get("cancelled", 0), "max_inflight": stats.get("max_inflight", 0),
         "spend": round(spend, 6), "cap": cap,
         "over_cap_pct": None if cap is None else round(100.0 * (spend - cap) / cap, 1)}
    print(json.dumps(r), flush=True)
    return r


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return child_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--outage", type=float, default=5.0, help="seconds each outage lasts")
    ap.add_argument("--only", default="", help="comma-separated scenario name prefixes")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--matrix", action="store_true", help="run the fault matrix instead of the scenarios")
    ap.add_argument("--commands", default="", help="--matrix: comma-separated commands (default all)")
    ap.add_argument("--modes", default="", help="--matrix: comma-separated modes (default all)")
    ap.add_argument("--endpoints", default="one,several", help="--matrix: one, several or both")
    ap.add_argument("--stores", default="sqlite", help="--matrix: sqlite, postgres, postgres restart (comma-separated)")
    ap.add_argument("--providers", default="openai,anthropic", help="--matrix: openai, anthropic or both")
    ap.add_argument("--replicas", action="store_true",
                    help="--matrix: also the replicas scenario (serve replicas on one PostgreSQL store, one killed)")
    args = ap.parse_args(argv)
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]

    if args.matrix:
        return matrix(args)

    def run(name: str) -> bool:
        return not wanted or any(name.startswith(w) for w in wanted)

    lat = ["--latency", str(args.latency), "--jitter", "0.2"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        prices = price_file(tmp)
        n = args.pairs
        if run("odd fields"):
            with SimProcess(*lat, "--p-odd-logprobs", "0.1", "--p-odd-usage", "0.1",
                            "--p-empty-choices", "0.05", "--p-bad-grade", "0.05", "--seed", "11") as sim:
                res = judge_pairs(sim.base_url, tmp / "odd.sqlite", make_pairs(n, "odd"), prices=prices)
                rows.append(row("odd fields", res, sim.stats(), None))
        for kind in ("refuse", "503", "429"):
            if not run(f"outage {kind}"):
                continue
            with SimProcess(*lat, "--outage-after", str(max(1, min(60, n // 3))), "--outage-seconds", str(args.outage),
                            "--outage-kind", kind) as sim:
                res = judge_pairs(sim.base_url, tmp / f"o{kind}.sqlite", make_pairs(n, f"out{kind}"),
                                  prices=prices)
                rows.append(row(f"outage {kind} {args.outage:g}s", res, sim.stats(), None))
        if run("hidden reasoning"):
            items = make_pairs(n, "reasoning")
            cap = half_estimate(items, prices, max_tokens=8000)
            with SimProcess(*lat, "--reasoning-tokens", "5000") as sim:
                res = judge_pairs(sim.base_url, tmp / "r.sqlite", items, prices=prices, max_cost=cap,
                                  max_tokens=8000)
                rows.append(row("hidden reasoning 5000 tok, cap 50% of estimate", res, sim.stats(), cap))
        if run("shared limit"):
            with SimProcess(*lat, "--rpm", "600", "--window", "1") as sim:
                res = merge(two_processes(sim.base_url, (tmp / "l1.sqlite", tmp / "l2.sqlite"),
                                          ("lim-a", "lim-b"), n, prices))
                rows.append(row("shared limit: 2 processes, 600 rpm / 1 s", res, sim.stats(), None))
        if run("shared cache"):
            with SimProcess(*lat) as sim:
                res = merge(two_processes(sim.base_url, (tmp / "s.sqlite", tmp / "s.sqlite"),
                                          ("same", "same"), n, prices))
                rows.append(row("shared cache: 2 processes, same pairs", res, sim.stats(), None))
        if run("slow bodies"):
            with SimProcess(*lat, "--p-slow-body", "0.1", "--slow-body-pace", "1.0", "--seed", "1") as sim:
                res = judge_pairs(sim.base_url, tmp / "slow.sqlite", make_pairs(n, "slow"), prices=prices,
                                  timeout=3.0)
                rows.append(row("slow bodies 10% (1 byte/s, 3 s timeout)", res, sim.stats(), None))
        if run("billed rejects"):
            items = make_pairs(n, "rejects")
            cap = half_estimate(items, prices)
            with SimProcess(*lat, "--p-empty-choices", "0.1", "--p-malformed", "0.05", "--p-5xx", "0.1",
                            "--seed", "5") as sim:
                res = judge_pairs(sim.base_url, tmp / "rej.sqlite", items, prices=prices, max_cost=cap)
                rows.append(row("billed rejects: 10% empty, 5% malformed, 10% 5xx, cap 50%", res,
                                sim.stats(), cap))
        if run("far retry-after"):
            with SimProcess(*lat, "--p-429", "0.05", "--spurious-retry-after", "3600", "--seed", "3") as sim:
                res = judge_pairs(sim.base_url, tmp / "far.sqlite", make_pairs(n, "far"), prices=prices)
                rows.append(row("far retry-after: 5% 429 asking 1 h", res, sim.stats(), None))
        if run("cache damaged"):
            items = make_pairs(n, "damaged")
            path = tmp / "damaged.sqlite"
            with SimProcess(*lat) as sim:
                judge_pairs(sim.base_url, path, items[: n // 2], prices=prices)
                with sqlite3.connect(path) as db:  # answers from the WAL into the file, then cut it
                    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                path.write_bytes(path.read_bytes()[:4096])  # the header page survives, the rest not
                res = judge_pairs(sim.base_url, path, items, prices=prices)
                rows.append(row("cache damaged (truncated after half the pairs)", res, sim.stats(), None))
        if run("cache full"):

            class FullCache(Cache):
                """A cache file that cannot grow by one page: SQLite's "database or disk is full"."""

                def _connect(self) -> Any:
                    db = super()._connect()
                    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
                    return db

            with SimProcess(*lat) as sim:
                res = judge_pairs(sim.base_url, FullCache(tmp / "full.sqlite"), make_pairs(n, "full"),
                                  prices=prices)
                rows.append(row("cache full (no page to grow)", res, sim.stats(), None))
        if run("malformed mix"):
            items = make_pairs(n, "mix")
            for cap in (None, half_estimate(items, prices)):
                with SimProcess(*lat, "--p-5xx", "0.1", "--p-malformed", "0.05", "--p-empty-choices", "0.05",
                                "--p-billed-garbage", "0.05", "--seed", "13") as sim:
                    res = judge_pairs(sim.base_url, tmp / f"mix{cap}.sqlite", items, prices=prices, max_cost=cap)
                    res["reported"] = res.get("client_cost")
                    rows.append(row("malformed mix: 10% 5xx, 5% unusable, 5% empty, 5% unclean"
                                    + (", cap 50%" if cap else ""), res, sim.stats(), cap))
        if run("single slot"):
            with SimProcess("--latency", "0.2", "--slots", "1") as sim:
                res = judge_pairs(sim.base_url, tmp / "slot.sqlite", make_pairs(40, "slot"), prices=prices,
                                  timeout=3.0)
                rows.append(row("single slot (0.2 s/answer, 3 s timeout)", res, sim.stats(), None))

    print()
    cols = ["scenario", "pairs", "lost", "undetermined", "skipped_cap", "dup_paid", "reported", "spend",
            "cap", "over_cap_pct", "requests", "cancelled", "wall_s"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c)) for c in cols))
    for r in rows:
        if r.get("aborted"):
            print(f"{r['scenario']}: aborted: {r['aborted']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


def matrix(args: argparse.Namespace) -> int:
    """The fault matrix's cells, one JSON row each as they finish, then the table."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from _faultmatrix import (
        COMMANDS,
        ENDPOINTS,
        MODES,
        PROVIDERS,
        STORES,
        run_cell,
        run_replicas,
        table,
    )

    def pick(given: str, known: Any) -> list[str]:
        names = [x.strip() for x in given.split(",") if x.strip()] or list(known)
        unknown = [x for x in names if x not in known]
        if unknown:
            raise SystemExit(f"unknown {unknown}; known: {list(known)}")
        return names

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n, cell in enumerate((c, m, e, s, p) for p in pick(args.providers, PROVIDERS)
                                 for c in pick(args.commands, COMMANDS)
                                 for m in pick(args.modes, MODES) for e in pick(args.endpoints, ENDPOINTS)
                                 for s in pick(args.stores, STORES)):
            row = run_cell(*cell, Path(d) / str(n)).row()
            print(json.dumps(row), flush=True)
            rows.append(row)
        if args.replicas:
            for p in pick(args.providers, PROVIDERS):
                row = run_replicas(p, Path(d) / f"replicas-{p}").row()
                print(json.dumps(row), flush=True)
                rows.append(row)
    print()
    print(table(rows))
    broken = [r for r in rows if r["violations"]]
    print(f"\n{len(rows)} cells, {len(broken)} breaking an invariant")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
