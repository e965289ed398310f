"""Start-up against the lightest peer: ``import ragjudge`` vs ``import ir_measures``,
``ragjudge --help`` vs ``ir_measures --help``, and a small evaluation on the bundled collection
(``ragjudge evaluate`` vs the ir_measures CLI), as whole processes.

Runs the pairs interleaved (A B A B ...) through ``farm-bench`` when it is on PATH, else with a
small loop of its own, and prints each pair's median wall-time ratio (below 1: ragjudge is
faster). Usage: ``python benchmarks/bench_startup.py [RUNS]``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PY = sys.executable

PAIRS = [
    ("import", [PY, "-c", "import ragjudge"], [PY, "-c", "import ir_measures"]),
    ("--help", [str(BIN / "ragjudge"), "--help"], [str(BIN / "ir_measures"), "--help"]),
    ("evaluate (bundled, 1 run, nDCG@10)",
     [str(BIN / "ragjudge"), "evaluate", "examples/qrels.txt", "examples/runs/bm25_raw.run", "-m", "ndcg@10"],
     [str(BIN / "ir_measures"), "examples/qrels.txt", "examples/runs/bm25_raw.run", "nDCG@10"]),
]


def _wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    # An installed wheel has its bytecode compiled; a checkout installed in editable mode under
    # PYTHONDONTWRITEBYTECODE would compile every module at every start, which no user pays.
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "ragjudge")], check=True,
                   stdout=subprocess.DEVNULL)
    print(f"{'what':<36} {'ragjudge s':>10} {'ir_measures s':>13} {'ratio':>6}  (medians of {runs} interleaved pairs)")
    for name, a, b in PAIRS:
        for cmd in (a, b):  # warm the file cache
            _wall(cmd)
        ta, tb, ratios = [], [], []
        for _ in range(runs):
            x, y = _wall(a), _wall(b)
            ta.append(x), tb.append(y), ratios.append(x / y)
        print(f"{name:<36} {statistics.median(ta):>10.3f} {statistics.median(tb):>13.3f} "
              f"{statistics.median(ratios):>6.2f}")
    if shutil.which("farm-bench") and os.environ.get("BENCH_FARM"):
        subprocess.run(["farm-bench", "-n", str(runs), "--vs", f"{PY} -c 'import ir_measures'", "--",
                        PY, "-c", "import ragjudge"], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
