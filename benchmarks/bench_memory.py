"""Peak memory and wall time of ``ragjudge evaluate`` on large runs, and how memory reacts to
one very long document id.

    python benchmarks/bench_memory.py --queries 2000 --docs 1000               # 2M lines
    python benchmarks/bench_memory.py --queries 2000 --docs 1000 --long-id 1024
    python benchmarks/bench_memory.py --queries 20000 --docs 1000              # 20M lines
    python benchmarks/bench_memory.py --queries 100000 --docs 1000             # 100M lines

Generates (once; cached in ``--dir``, default ``$TMPDIR/ragjudge-bench-mem``) a TREC run of
``--queries`` x ``--docs`` lines (docids ``D<query>_<rank>``-style, ~25 bytes; scores
descending) and qrels with 10 graded judgments per query, 6 of them retrieved. With
``--long-id N`` one retrieved document of the first query (and its judgment) gets an id of N
bytes. Each measurement runs in a fresh Python process: read qrels + read run + evaluate
ndcg@10, map, mrr, recall@100, p@10; the child's peak RSS comes from ``wait4``. The means are
printed so runs with and without the long id can be compared. Never run by the test suite.
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

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["ndcg@10", "map", "mrr", "recall@100", "p@10"]


def generate(directory: Path, n_queries: int, n_docs: int, long_id: int, seed: int = 7) -> tuple[Path, Path]:
    """Write the run and qrels unless already there (vectorized, a block of queries at a time)."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    tag = f"{n_queries}x{n_docs}" + (f"_long{long_id}" if long_id else "")
    run_path = directory / f"run_{tag}.trec"
    qrels_path = directory / f"qrels_{tag}.trec"
    if run_path.exists() and qrels_path.exists():
        return qrels_path, run_path
    rng = np.random.default_rng(seed)
    long_doc = ("L" * long_id) if long_id else None
    block = max(1, 2_000_000 // n_docs)
    with open(run_path.with_suffix(".tmp"), "w") as run, open(qrels_path, "w") as qrels:
        for q0 in range(0, n_queries, block):
            q1 = min(n_queries, q0 + block)
            lines = []
            judged = []
            for q in range(q0, q1):
                docs = [f"D{(q * 7919 + r * 104729) % 50_000_000:08d}x{r}" for r in range(n_docs)]
                if long_doc and q == 0:
                    docs[3] = long_doc
                scores = np.sort(rng.random(n_docs))[::-1]
                lines.append("".join(f"q{q} Q0 {d} {r + 1} {s!r} bench\n"
                                     for r, (d, s) in enumerate(zip(docs, scores.tolist()))))
                hit = rng.choice(n_docs, size=min(6, n_docs), replace=False)
                for j, r in enumerate(hit.tolist()):
                    judged.append(f"q{q} 0 {docs[r]} {j % 4}\n")
                for j in range(4):
                    judged.append(f"q{q} 0 U{q}_{j} {1 + j % 3}\n")
            run.write("".join(lines))
            qrels.write("".join(judged))
    run_path.with_suffix(".tmp").rename(run_path)
    return qrels_path, run_path


CHILD = """
import json, sys, time
t0 = time.perf_counter()
from ragjudge.io import read_qrels, read_run
from ragjudge.evaluate import evaluate
qrels = read_qrels(sys.argv[1])
t1 = time.perf_counter()
run = read_run(sys.argv[2])
t2 = time.perf_counter()
rep = evaluate(qrels, run, sys.argv[3].split(","))
t3 = time.perf_counter()
print(json.dumps({"mean": rep.mean, "read_qrels": t1 - t0, "read_run": t2 - t1, "evaluate": t3 - t2}))
"""


def measure(qrels: Path, run: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(qrels), str(run), ",".join(METRICS)],
                            stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"child failed with status {status}")
    result = json.loads(out)
    result["wall"] = wall
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: KiB
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--long-id", type=int, default=0, metavar="BYTES")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "ragjudge-bench-mem"))
    args = ap.parse_args()
    t = time.perf_counter()
    qrels, run = generate(Path(args.dir), args.queries, args.docs, args.long_id)
    gen = time.perf_counter() - t
    size = run.stat().st_size / 2**20
    print(f"run: {args.queries:,} queries x {args.docs:,} docs = {args.queries * args.docs:,} lines, "
          f"{size:,.0f} MiB (generated in {gen:.0f} s); longest docid: "
          f"{args.long_id or 'normal (~14 bytes)'}")
    r = measure(qrels, run)
    print(f"peak RSS {r['peak_rss_mb']:,.0f} MiB; wall {r['wall']:.1f} s (read qrels "
          f"{r['read_qrels']:.1f} s, read run {r['read_run']:.1f} s, evaluate {r['evaluate']:.1f} s)")
    print("means: " + ", ".join(f"{k}={v:.6f}" for k, v in r["mean"].items()))


if __name__ == "__main__":
    main()
