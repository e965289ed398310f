"""Coverage and width of PPI intervals by seeded simulation (issue 9).

Each simulated study is a collection of N queries whose per-query nDCG@10 is known under true
labels and under a simulated LLM judge (labels drawn through a known confusion matrix,
:mod:`ragjudge.trust.simulate`); humans label a simple random sample of n queries. For each
judge and n the script prints how often each 95% interval covers the true mean (nDCG under
true labels on all N queries) and the intervals' mean width:

* LLM only    -- mean of the LLM values +- t * sd / sqrt(N): ignores the judge's bias;
* human only  -- mean of the n human values (finite-population t interval);
* PPI / PPI++ -- :func:`ragjudge.trust.ppi.ppi_means`.

Run:  python benchmarks/bench_trust.py [--studies 2000] [--queries 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ragjudge.trust.ppi import ppi_means
from ragjudge.trust.simulate import simulate_studies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=400, help="N, LLM-labelled queries per study")
    ap.add_argument("--labelled", default="50,100", help="n values, comma-separated")
    ap.add_argument("--judges", default="lenient,strict,noisy")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ns = [int(x) for x in args.labelled.split(",")]
    print(f"{args.studies} simulated studies per row, N = {args.queries} queries, nDCG@10, "
          "95% intervals; coverage (mean width)")
    head = f"{'judge':8} {'n':>4} {'bias':>7} | {'LLM only':>15} | {'human only':>15} | " \
           f"{'PPI':>15} | {'PPI++':>15} | {'lambda':>6}"
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    for judge in args.judges.split(","):
        human, llm = simulate_studies(args.studies, args.queries, judge, seed=args.seed)
        truth = human.mean(axis=1)
        bias = float(np.mean(llm.mean(axis=1) - truth))
        for n in ns:
            rng = np.random.default_rng(args.seed + n)
            idx = np.argsort(rng.random(human.shape), axis=1)[:, :n]
            y, f = np.take_along_axis(human, idx, 1), np.take_along_axis(llm, idx, 1)
            cells = {}
            for method in ("ppi", "ppi++"):
                r = ppi_means(y, f, llm.mean(axis=1), llm.var(axis=1, ddof=1), args.queries,
                              method=method)  # type: ignore[arg-type]
                cells[method] = r

            def cell(r: dict, lo: str, hi: str) -> str:
                cov = np.mean((r[lo] <= truth) & (truth <= r[hi]))
                return f"{cov:6.3f} ({np.mean(r[hi] - r[lo]):.4f})"

            pp = cells["ppi++"]
            print(f"{judge:8} {n:>4} {bias:+7.3f} | {cell(pp, 'llm_low', 'llm_high')} | "
                  f"{cell(pp, 'human_low', 'human_high')} | {cell(cells['ppi'], 'ci_low', 'ci_high')} | "
                  f"{cell(pp, 'ci_low', 'ci_high')} | {np.mean(pp['lambda']):6.3f}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    agreement_rows(args.studies, args.seed)


def agreement_rows(studies: int, seed: int, big_n: int = 200, p: float = 0.48) -> None:
    """Perfect and near-perfect agreement with few labels, both estimands: a collection of
    ``big_n`` binary per-query values drawn from a population with mean ``p``, a judge that
    flips ``err`` of them, ``n`` human labels. Coverage of each estimand's own truth (the
    collection's mean; ``p``), mean width, and the share of intervals on the variance floor.
    The values come from a simulator: they check the estimator, not any judge's quality."""
    print(f"\nagreement: {studies} studies per cell, N = {big_n}, binary values, population mean {p}; "
          "coverage / mean width / share floored")
    print(f"{'err':>5} {'estimand':10} " + " ".join(f"{'n=' + str(n):>20}" for n in (5, 10, 20, 50)))
    for err in (0.0, 0.02, 0.05):
        for population, name in (("finite", "collection"), ("infinite", "population")):
            cells = []
            for n in (5, 10, 20, 50):
                rng = np.random.default_rng(seed + 1000 * n + int(1000 * err))
                Y = (rng.random((studies, big_n)) < p).astype(float)
                F = np.where(rng.random((studies, big_n)) < err, 1.0 - Y, Y)
                idx = np.argsort(rng.random((studies, big_n)), axis=1)[:, :n]
                y, f = np.take_along_axis(Y, idx, 1), np.take_along_axis(F, idx, 1)
                r = ppi_means(y, f, F.mean(1), F.var(1, ddof=1), big_n, population=population)  # type: ignore[arg-type]
                truth = Y.mean(1) if population == "finite" else np.full(studies, p)
                cov = np.mean((r["ci_low"] <= truth) & (truth <= r["ci_high"]))
                cells.append(f"{cov:.3f}/{np.mean(r['ci_high'] - r['ci_low']):.3f}/{np.mean(r['floored']):.2f}")
            print(f"{err:5.2f} {name:10} " + " ".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main()
