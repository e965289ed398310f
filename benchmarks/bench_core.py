"""Speed and memory of ragjudge's ranking core against pytrec_eval and ranx.

    python benchmarks/bench_core.py                       # 100,000 queries x 100 docs (10M lines)
    python benchmarks/bench_core.py --queries 5000        # a quick run
    python benchmarks/bench_core.py --profile             # also profile ragjudge's whole process

Generates (once; cached in ``--dir``, default ``$TMPDIR/ragjudge-bench``) a TREC run of
``--queries`` x ``--docs`` lines and TREC qrels with 5-15 (mean 10) graded judgments per query
(grades 0-3; about 60% of the judged documents are retrieved, at random ranks). Then every
measurement runs in its own fresh Python process, so wall time includes interpreter start-up and
imports and peak RSS (``wait4`` rusage of that child only) is per tool:

* whole process: read qrels + read run + evaluate ndcg@10, map, mrr, recall@100, p@10 and print
  the means -- ragjudge (``read_qrels``/``read_run``/``evaluate``), pytrec_eval (the usual
  dict-of-dicts parsing loop + ``RelevanceEvaluator``), ranx (``Qrels.from_file``/
  ``Run.from_file``/``evaluate``; its numba JIT cache is warmed by one untimed run first);
* evaluate only: the data already loaded, only ragjudge's ``evaluate`` call vs pytrec_eval's
  ``RelevanceEvaluator.evaluate`` call (the evaluator built beforehand).

It checks that ragjudge's and pytrec_eval's means agree to 1e-9 (and per query), and prints the
ratios against the targets of the project: ragjudge whole <= 0.2 of pytrec_eval whole and <= 1/10
of ranx whole, peak RSS <= 1/3 of pytrec_eval's, evaluate-only <= 1/2 of pytrec_eval's. Peers that are not
installed are skipped. Never run by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# One metric set, spelled in each tool's vocabulary (same order).
RAGJUDGE_METRICS = ["ndcg@10", "map", "mrr", "recall@100", "p@10"]
PYTREC_METRICS = ["ndcg_cut_10", "map", "recip_rank", "recall_100", "P_10"]
RANX_METRICS = ["ndcg@10", "map", "mrr", "recall@100", "precision@10"]

# The project's current targets: the whole process at most 0.2 of pytrec_eval's wall time at
# most 1/3 of its memory (first set at 1/3 and no more memory than pytrec_eval).
TARGETS = {
    "whole vs pytrec_eval": 0.2,
    "whole vs ranx": 1 / 10,
    "peak RSS vs pytrec_eval": 1 / 3,
    "evaluate-only vs pytrec_eval": 1 / 2,
}


# ============================================================================= data generation
def generate(directory: Path, n_queries: int, n_docs: int, seed: int = 42) -> tuple[Path, Path]:
    """Write ``run.trec`` and ``qrels.trec`` for the given size unless already there."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    run_path = directory / f"run_{n_queries}x{n_docs}.trec"
    qrels_path = directory / f"qrels_{n_queries}x{n_docs}.trec"
    if run_path.exists() and qrels_path.exists():
        return qrels_path, run_path
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    extra = 16  # candidate judged-but-not-retrieved documents per query
    width = n_docs + extra
    universe = 5_000_000
    # Distinct document numbers per query: sorted draws plus 0..width-1 cannot collide.
    docs = np.sort(rng.integers(0, universe - width, size=(n_queries, width)), axis=1)
    docs += np.arange(width)
    docs = np.take_along_axis(docs, rng.random((n_queries, width)).argsort(axis=1), axis=1)
    retrieved, unretrieved = docs[:, :n_docs], docs[:, n_docs:]
    scores = -np.sort(-rng.random((n_queries, n_docs)) * 30.0, axis=1)

    n_judged = rng.integers(5, 16, size=n_queries)
    n_in_run = rng.binomial(n_judged, 0.6)
    n_in_run = np.minimum(n_in_run, n_docs)
    grade_values = np.array([0, 1, 2, 3])
    grade_p = [0.35, 0.30, 0.20, 0.15]

    tmp_run = run_path.with_suffix(".tmp")
    tmp_qrels = qrels_path.with_suffix(".tmp")
    with open(tmp_run, "w") as run_f, open(tmp_qrels, "w") as qrels_f:
        for i in range(n_queries):
            qid = str(100_000 + i)
            rd = retrieved[i].tolist()
            sc = scores[i].tolist()
            run_f.write(
                "".join(f"{qid} Q0 d{d} {r} {s:.6f} bench\n" for r, (d, s) in enumerate(zip(rd, sc), 1))
            )
            k, m = int(n_judged[i]), int(n_in_run[i])
            ranks = rng.choice(n_docs, size=m, replace=False)
            judged = [rd[r] for r in ranks.tolist()] + unretrieved[i, : k - m].tolist()
            grades = rng.choice(grade_values, size=k, p=grade_p).tolist()
            qrels_f.write("".join(f"{qid} 0 d{d} {g}\n" for d, g in zip(judged, grades)))
    tmp_run.replace(run_path)
    tmp_qrels.replace(qrels_path)
    print(f"generated {run_path.name} and {qrels_path.name} in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return qrels_path, run_path


# ============================================================================= children
# Each child prints one JSON line: internal phase times and the per-measure means.
def child_ragjudge_whole(qrels_path: str, run_path: str, out: str | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    from ragjudge.evaluate import evaluate
    from ragjudge.io import read_qrels, read_run

    t1 = time.perf_counter()
    qrels = read_qrels(qrels_path)
    t2 = time.perf_counter()
    run = read_run(run_path)
    t3 = time.perf_counter()
    report = evaluate(qrels, run, RAGJUDGE_METRICS)
    means = {m: float(report.mean[m]) for m in RAGJUDGE_METRICS}
    t4 = time.perf_counter()
    return {"import": t1 - t0, "read_qrels": t2 - t1, "read_run": t3 - t2, "evaluate": t4 - t3,
            "means": means}


def child_pytrec_whole(qrels_path: str, run_path: str, out: str | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    import pytrec_eval

    t1 = time.perf_counter()
    # The parsing code found in most pytrec_eval user scripts.
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path) as f:
        for line in f:
            qid, _, docid, rel = line.split()
            qrels.setdefault(qid, {})[docid] = int(rel)
    t2 = time.perf_counter()
    run: dict[str, dict[str, float]] = {}
    with open(run_path) as f:
        for line in f:
            qid, _, docid, _, score, _ = line.split()
            run.setdefault(qid, {})[docid] = float(score)
    t3 = time.perf_counter()
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(PYTREC_METRICS))
    results = evaluator.evaluate(run)
    means = {
        rj: sum(r[pt] for r in results.values()) / len(results)
        for rj, pt in zip(RAGJUDGE_METRICS, PYTREC_METRICS)
    }
    t4 = time.perf_counter()
    return {"import": t1 - t0, "read_qrels": t2 - t1, "read_run": t3 - t2, "evaluate": t4 - t3,
            "means": means}


def child_ranx_whole(qrels_path: str, run_path: str, out: str | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    from ranx import Qrels, Run, evaluate

    t1 = time.perf_counter()
    qrels = Qrels.from_file(qrels_path, kind="trec")
    t2 = time.perf_counter()
    run = Run.from_file(run_path, kind="trec")
    t3 = time.perf_counter()
    res = evaluate(qrels, run, RANX_METRICS)
    means = {rj: float(res[rx]) for rj, rx in zip(RAGJUDGE_METRICS, RANX_METRICS)}
    t4 = time.perf_counter()
    return {"import": t1 - t0, "read_qrels": t2 - t1, "read_run": t3 - t2, "evaluate": t4 - t3,
            "means": means}


def _dump_per_query(out: str | None, qids: list[str], columns: dict[str, list[float]]) -> None:
    # Written after the timed call, for the per-query agreement check.
    if out:
        import numpy as np

        order = sorted(range(len(qids)), key=qids.__getitem__)
        np.savez(out, qids=np.array([qids[i] for i in order]),
                 **{m: np.array([v[i] for i in order]) for m, v in columns.items()})


def child_ragjudge_evalonly(qrels_path: str, run_path: str, out: str | None) -> dict[str, Any]:
    from ragjudge.evaluate import evaluate
    from ragjudge.io import read_qrels, read_run

    qrels = read_qrels(qrels_path)
    run = read_run(run_path)
    t0 = time.perf_counter()
    report = evaluate(qrels, run, RAGJUDGE_METRICS)
    t1 = time.perf_counter()
    pq = report.per_query
    qids = list(pq)
    _dump_per_query(out, qids, {m: [pq[q][m] for q in qids] for m in RAGJUDGE_METRICS})
    return {"evaluate": t1 - t0}


def child_pytrec_evalonly(qrels_path: str, run_path: str, out: str | None) -> dict[str, Any]:
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path) as f:
        for line in f:
            qid, _, docid, rel = line.split()
            qrels.setdefault(qid, {})[docid] = int(rel)
    run: dict[str, dict[str, float]] = {}
    with open(run_path) as f:
        for line in f:
            qid, _, docid, _, score, _ = line.split()
            run.setdefault(qid, {})[docid] = float(score)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(PYTREC_METRICS))
    t0 = time.perf_counter()
    results = evaluator.evaluate(run)
    t1 = time.perf_counter()
    qids = list(results)
    _dump_per_query(
        out, qids, {rj: [results[q][pt] for q in qids] for rj, pt in zip(RAGJUDGE_METRICS, PYTREC_METRICS)}
    )
    return {"evaluate": t1 - t0}


def child_ragjudge_profile(qrels_path: str, run_path: str, out: str | None) -> dict[str, Any]:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    res = child_ragjudge_whole(qrels_path, run_path, None)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    res["profile"] = buf.getvalue()
    return res


CHILDREN = {
    "ragjudge-whole": child_ragjudge_whole,
    "pytrec_eval-whole": child_pytrec_whole,
    "ranx-whole": child_ranx_whole,
    "ragjudge-evalonly": child_ragjudge_evalonly,
    "pytrec_eval-evalonly": child_pytrec_evalonly,
    "ragjudge-profile": child_ragjudge_profile,
}


# ============================================================================= parent
def run_child(kind: str, qrels: Path, run: Path, out: Path | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter: wall time, peak RSS (this child only), result."""
    cmd = [sys.executable, __file__, "--child", kind, str(qrels), str(run)]
    if out is not None:
        cmd.append(str(out))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
        # stderr goes to a file so a chatty child cannot block on a full pipe while stdout is
        # read; wait4 (not communicate) reaps the child and returns the rusage of exactly this
        # child (getrusage(RUSAGE_CHILDREN) would give the maximum over all children so far).
        stdout_b = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.stdout:
            proc.stdout.close()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(
                f"{kind} failed (exit {proc.returncode}):\n{err.read().decode(errors='replace')}"
            )
    result = json.loads(stdout_b.decode().strip().splitlines()[-1])
    result["wall"] = wall
    result["peak_rss_mb"] = usage.ru_maxrss / 1024.0  # Linux reports KiB
    result["cpu"] = usage.ru_utime + usage.ru_stime
    return result


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _fmt_s(x: float | None) -> str:
    return f"{'-':>8s}" if x is None else f"{x:8.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=100_000, help="number of queries (100000)")
    ap.add_argument("--docs", type=int, default=100, help="documents per query (100)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "ragjudge-bench",
                    help="where the generated files are cached")
    ap.add_argument("--repeat", type=int, default=1, help="repeat each measurement, keep the fastest")
    ap.add_argument("--skip", action="append", default=[], choices=["pytrec_eval", "ranx"],
                    help="do not run this peer")
    ap.add_argument("--profile", action="store_true", help="profile ragjudge's whole process")
    ap.add_argument("--json", type=Path, help="also write all results to this JSON file")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        kind, qrels_path, run_path, *rest = args.child
        res = CHILDREN[kind](qrels_path, run_path, rest[0] if rest else None)
        print(json.dumps(res))
        return 0

    qrels, run = generate(args.dir, args.queries, args.docs)
    lines = args.queries * args.docs
    print(f"data: {run} ({lines:,} lines, {run.stat().st_size / 1e6:.0f} MB), {qrels} "
          f"({qrels.stat().st_size / 1e6:.0f} MB)")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    peers = {
        "pytrec_eval": "pytrec_eval" not in args.skip and _installed("pytrec_eval"),
        "ranx": "ranx" not in args.skip and _installed("ranx"),
    }
    for name, ok in peers.items():
        if not ok:
            print(f"{name}: not installed or skipped")

    def best(kind: str, out: Path | None = None) -> dict[str, Any]:
        runs = [run_child(kind, qrels, run, out) for _ in range(max(1, args.repeat))]
        res = min(runs, key=lambda r: r["wall"])
        res["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        print(f"  {kind:22s} wall {res['wall']:7.2f} s  peak RSS {res['peak_rss_mb']:7.0f} MB",
              flush=True)
        return res

    results: dict[str, dict[str, Any]] = {}
    print("whole process (start-up + read qrels + read run + evaluate):", flush=True)
    results["ragjudge"] = best("ragjudge-whole")
    if peers["pytrec_eval"]:
        results["pytrec_eval"] = best("pytrec_eval-whole")
    if peers["ranx"]:
        # numba compiles ranx's kernels on first use and caches them on disk; one untimed run on
        # a small file of the same shape fills that cache so the timed run measures ranx, not JIT.
        print("  (ranx: one untimed run on 100 queries first, to fill numba's JIT cache)", flush=True)
        run_child("ranx-whole", *generate(args.dir, 100, args.docs))
        results["ranx"] = best("ranx-whole")

    print("evaluate only (data already loaded):", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        rj_out, pt_out = Path(tmp) / "ragjudge.npz", Path(tmp) / "pytrec.npz"
        results["ragjudge-evalonly"] = best("ragjudge-evalonly", rj_out)
        agreement = None
        if peers["pytrec_eval"]:
            results["pytrec_eval-evalonly"] = best("pytrec_eval-evalonly", pt_out)
            agreement = _agreement(results, rj_out, pt_out)

    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    _print_table(results)
    ratios = _print_ratios(results)
    if agreement is not None:
        print(f"\nagreement ragjudge vs pytrec_eval: max |mean diff| {agreement['max_mean_diff']:.2e}, "
              f"max |per-query diff| {agreement['max_query_diff']:.2e} over "
              f"{agreement['queries']:,} queries -> {'OK' if agreement['ok'] else 'MISMATCH'} (tol 1e-9)")
        if not agreement["ok"]:
            for m, d in agreement["mean_diffs"].items():
                print(f"  {m}: {d:.3e}")
    if "ranx" in results:
        diffs = {m: abs(results["ranx"]["means"][m] - results["ragjudge"]["means"][m])
                 for m in RAGJUDGE_METRICS}
        print("ranx means differ from ragjudge's by " + ", ".join(f"{m} {d:.1e}" for m, d in diffs.items())
              + " (informational: ranx follows its own conventions, which can differ from trec_eval's)")

    if args.profile:
        print("\nprofile of ragjudge's whole process (cProfile, by own time):")
        prof = run_child("ragjudge-profile", qrels, run)
        print(prof["profile"])

    if args.json:
        args.json.write_text(json.dumps({"queries": args.queries, "docs": args.docs,
                                         "results": results, "ratios": ratios,
                                         "agreement": agreement}, indent=2))
    ok = agreement is None or agreement["ok"]
    return 0 if ok else 1


def _agreement(results: dict[str, Any], rj_out: Path, pt_out: Path) -> dict[str, Any]:
    import numpy as np

    a, b = np.load(rj_out), np.load(pt_out)
    same_q = bool(np.array_equal(a["qids"], b["qids"]))
    mean_diffs = {m: abs(float(np.mean(a[m])) - float(np.mean(b[m]))) for m in RAGJUDGE_METRICS}
    # Also the whole-process means (computed independently in the other children).
    for m in RAGJUDGE_METRICS:
        mean_diffs[m] = max(
            mean_diffs[m],
            abs(results["ragjudge"]["means"][m] - results["pytrec_eval"]["means"][m]),
        )
    query_diff = (max(float(np.max(np.abs(a[m] - b[m]))) for m in RAGJUDGE_METRICS)
                  if same_q else float("inf"))
    worst = max(mean_diffs.values())
    return {"ok": same_q and worst <= 1e-9 and query_diff <= 1e-9, "max_mean_diff": worst,
            "max_query_diff": query_diff, "queries": len(a["qids"]), "mean_diffs": mean_diffs}


def _print_table(results: dict[str, dict[str, Any]]) -> None:
    print(f"{'measurement':22s} {'wall s':>8s} {'cpu s':>8s} {'RSS MB':>8s} "
          f"{'import':>8s} {'qrels':>8s} {'run':>8s} {'evaluate':>8s}")
    for name, r in results.items():
        print(f"{name:22s} {r['wall']:8.2f} {r['cpu']:8.2f} {r['peak_rss_mb']:8.0f} "
              f"{_fmt_s(r.get('import'))} {_fmt_s(r.get('read_qrels'))} {_fmt_s(r.get('read_run'))} "
              f"{_fmt_s(r.get('evaluate'))}")
    print("(wall/cpu/RSS: the whole child process; the last four: phases timed inside it)")


def _print_ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rj = results["ragjudge"]
    rows: list[tuple[str, float, float]] = []
    if "pytrec_eval" in results:
        rows.append(("whole vs pytrec_eval", rj["wall"] / results["pytrec_eval"]["wall"],
                     TARGETS["whole vs pytrec_eval"]))
    if "ranx" in results:
        rows.append(("whole vs ranx", rj["wall"] / results["ranx"]["wall"], TARGETS["whole vs ranx"]))
    if "pytrec_eval" in results:
        rows.append(("peak RSS vs pytrec_eval", rj["peak_rss_mb"] / results["pytrec_eval"]["peak_rss_mb"],
                     TARGETS["peak RSS vs pytrec_eval"]))
    if "pytrec_eval-evalonly" in results:
        rows.append(("evaluate-only vs pytrec_eval",
                     results["ragjudge-evalonly"]["evaluate"] / results["pytrec_eval-evalonly"]["evaluate"],
                     TARGETS["evaluate-only vs pytrec_eval"]))
    print("\nratio (ragjudge / peer)          value   target   speed-up  met")
    out: dict[str, Any] = {}
    for name, value, target in rows:
        met = value <= target
        print(f"{name:30s} {value:8.3f} {target:8.3f} {1 / value:9.1f}x  {'yes' if met else 'NO'}")
        out[name] = {"value": value, "target": target, "met": met}
    # On a shared machine wall time includes waiting for a core; CPU time (user + system of the
    # child) is the steadier number, printed for the whole-process comparisons.
    for peer in ("pytrec_eval", "ranx"):
        if peer in results:
            value = rj["cpu"] / results[peer]["cpu"]
            print(f"{'whole CPU time vs ' + peer:30s} {value:8.3f} {'':8s} {1 / value:9.1f}x  (informational)")
            out[f"whole cpu vs {peer}"] = {"value": value}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
