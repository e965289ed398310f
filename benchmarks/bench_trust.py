"""Coverage and width of PPI intervals by seeded simulation.

Each simulated study is a collection of N queries whose per-query value is known under true
labels and under a simulated LLM judge; humans label a simple random sample of n queries. For
each design and n the script prints how often each 95% interval covers the true mean (the
metric under true labels on all N queries) and the intervals' mean width:

* human only  -- the n human values alone (the same small-sample rules as PPI);
* PPI / PPI++ -- :func:`ragjudge.trust.ppi.ppi_means` (PPI++ fits lambda from 30 labels on).

Designs (``ragjudge.trust.simulate``):

* nDCG@10 with judges drawn through confusion matrices: ``lenient``, ``strict``, ``noisy``,
  ``near-perfect`` (right 95% of the time, else one grade off) and ``difficulty`` (near-perfect
  on easy queries, noisy on hard ones: errors correlated with difficulty);
* a binary metric (hit@k) with a mean near its upper bound (0.95): a near-perfect judge
  flipping 2% of the values, a noisy one flipping 10%, and one whose errors fall on the hard
  queries (``difficulty``); and a binary metric with a mean of 0.5 for comparison.

A second table covers both estimands with perfect and near-perfect agreement on few labels.
The values come from a simulator: they check the estimator, not any judge's quality.

Run:  python benchmarks/bench_trust.py [--studies 2000] [--queries 400] [--seed 0]
Kept: python benchmarks/record.py bench_trust.py   (shown in docs/concepts/estimands.md)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ragjudge.trust.ppi import ppi_means
from ragjudge.trust.simulate import simulate_binary_studies, simulate_studies


def _designs(studies: int, big_n: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    out = []
    for judge in ("lenient", "strict", "noisy", "near-perfect"):
        out.append((f"ndcg {judge}", *simulate_studies(studies, big_n, judge, seed=seed)))
    out.append(("ndcg difficulty", *simulate_studies(studies, big_n, "near-perfect", seed=seed,
                                                     hard_judge="noisy")))
    for name, mean, err, corr in (("hit~0.95 near-perfect", 0.95, 0.02, False),
                                  ("hit~0.95 noisy", 0.95, 0.10, False),
                                  ("hit~0.9 difficulty", 0.9, 0.05, True),
                                  ("hit~0.5 noisy", 0.5, 0.10, False)):
        out.append((name, *simulate_binary_studies(studies, big_n, mean, err, seed=seed,
                                                   correlated=corr)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=400, help="N, LLM-labelled queries per study")
    ap.add_argument("--labelled", default="8,15,30,60", help="n values, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ns = [int(x) for x in args.labelled.split(",")]
    print(f"{args.studies} simulated studies per row, N = {args.queries} queries, estimand "
          "collection, 95% intervals; coverage (mean width); clipped = share of PPI++ intervals "
          "cut to the metric's range")
    head = (f"{'design':22} {'n':>3} | {'human only':>15} | {'PPI':>15} | {'PPI++':>15} | "
            f"{'lambda':>6} | {'clipped':>7}")
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    for name, human, llm in _designs(args.studies, args.queries, args.seed):
        truth = human.mean(axis=1)
        for n in ns:
            rng = np.random.default_rng(args.seed + n)
            idx = np.argsort(rng.random(human.shape), axis=1)[:, :n]
            y, f = np.take_along_axis(human, idx, 1), np.take_along_axis(llm, idx, 1)
            cells = {m: ppi_means(y, f, llm.mean(axis=1), llm.var(axis=1, ddof=1), args.queries,
                                  method=m, bounds=(0.0, 1.0))  # type: ignore[arg-type]
                     for m in ("ppi", "ppi++")}

            def cell(r: dict, lo: str, hi: str) -> str:
                cov = np.mean((r[lo] <= truth) & (truth <= r[hi]))
                return f"{cov:6.3f} ({np.mean(r[hi] - r[lo]):.4f})"

            pp = cells["ppi++"]
            print(f"{name:22} {n:>3} | {cell(pp, 'human_low', 'human_high')} | "
                  f"{cell(cells['ppi'], 'ci_low', 'ci_high')} | {cell(pp, 'ci_low', 'ci_high')} | "
                  f"{np.mean(pp['lambda']):6.3f} | {np.mean(pp['clipped']):7.3f}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    agreement_rows(args.studies, args.seed)


def agreement_rows(studies: int, seed: int, big_n: int = 200, p: float = 0.48) -> None:
    """Perfect and near-perfect agreement with few labels, both estimands: a collection of
    ``big_n`` binary per-query values drawn from a population with mean ``p``, a judge that
    flips ``err`` of them, ``n`` human labels. Coverage of each estimand's own truth (the
    collection's mean; ``p``) and mean width of the PPI++ interval."""
    print(f"\nagreement: {studies} studies per cell, N = {big_n}, binary values, population mean {p}; "
          "PPI++ coverage / mean width")
    print(f"{'err':>5} {'estimand':10} " + " ".join(f"{'n=' + str(n):>14}" for n in (5, 10, 20, 50)))
    for err in (0.0, 0.02, 0.05):
        for population, name in (("finite", "collection"), ("infinite", "population")):
            cells = []
            for n in (5, 10, 20, 50):
                rng = np.random.default_rng(seed + 1000 * n + int(1000 * err))
                Y = (rng.random((studies, big_n)) < p).astype(float)
                F = np.where(rng.random((studies, big_n)) < err, 1.0 - Y, Y)
                idx = np.argsort(rng.random((studies, big_n)), axis=1)[:, :n]
                y, f = np.take_along_axis(Y, idx, 1), np.take_along_axis(F, idx, 1)
                r = ppi_means(y, f, F.mean(1), F.var(1, ddof=1), big_n, population=population,  # type: ignore[arg-type]
                              bounds=(0.0, 1.0))
                truth = Y.mean(1) if population == "finite" else np.full(studies, p)
                cov = np.mean((r["ci_low"] <= truth) & (truth <= r["ci_high"]))
                cells.append(f"{cov:.3f}/{np.mean(r['ci_high'] - r['ci_low']):.3f}")
            print(f"{err:5.2f} {name:10} " + " ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
