"""The parse of a TREC run file: ragjudge's reader (``read_run``: numpy columns in rank order,
trec_eval's number rules, errors naming file, line and field) against the columnar readers of
the ecosystem (pyarrow's CSV reader; polars when installed) reading the same file into columns,
and against the read of the raw bytes (the floor). ``read_run`` scans blocks with the compiled
tokenizer when it is built, and a row shows the numpy scan an install without a C compiler
uses.

The peers only read columns: no rank-order sort, no duplicate check, no validation; the point
is what a columnar reader would save inside ragjudge's parse. Usage:
``python benchmarks/bench_parse.py [--queries 20000] [--docs 100] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def write_run(path: Path, n_queries: int, n_docs: int, seed: int = 42) -> None:
    rng = np.random.default_rng(seed)
    with path.open("w") as f:
        for q in range(n_queries):
            scores = np.sort(rng.random(n_docs))[::-1]
            docs = rng.permutation(n_docs * 3)[:n_docs] + q * n_docs * 3  # distinct within a query
            f.write("".join(f"q{q} Q0 doc{d} {r + 1} {s:.6f} bench\n"
                            for r, (d, s) in enumerate(zip(docs, scores))))


def timed(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import ragjudge

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.trec"
        write_run(path, args.queries, args.docs)
        lines = args.queries * args.docs
        contenders = {
            "raw bytes (read only)": lambda: path.read_bytes(),
            "ragjudge.read_run": lambda: ragjudge.read_run(path),
        }
        from ragjudge.io import trec

        if trec._native_scan is not None:  # what an install without a C compiler reads with
            def numpy_scan() -> object:
                compiled, trec._native_scan = trec._native_scan, None
                try:
                    return ragjudge.read_run(path)
                finally:
                    trec._native_scan = compiled

            contenders["ragjudge.read_run, numpy scan"] = numpy_scan
        else:
            print("(the compiled tokenizer is not built: ragjudge.read_run is the numpy scan)")
        try:
            import pyarrow as pa
            from pyarrow import csv

            opts = csv.ReadOptions(column_names=["qid", "q0", "docid", "rank", "score", "tag"])
            parse = csv.ParseOptions(delimiter=" ")
            conv = csv.ConvertOptions(column_types={"qid": pa.string(), "docid": pa.string(),
                                                    "score": pa.float64()},
                                      include_columns=["qid", "docid", "score"])
            contenders["pyarrow.csv.read_csv (columns)"] = lambda: csv.read_csv(
                path, read_options=opts, parse_options=parse, convert_options=conv)
        except ImportError:
            pass
        try:
            import polars as pl

            contenders["polars.read_csv (columns)"] = lambda: pl.read_csv(
                path, separator=" ", has_header=False, columns=[0, 2, 4])
        except ImportError:
            pass
        times: dict[str, list[float]] = {k: [] for k in contenders}
        for _ in range(args.repeats):  # interleaved
            for name, fn in contenders.items():
                times[name].append(timed(fn))
        base = statistics.median(times["ragjudge.read_run"])
        print(f"{lines:,} lines, {path.stat().st_size / 1e6:.0f} MB; medians of {args.repeats}")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"{name:<34} {m:7.3f} s  {m / base:5.2f} of ragjudge's parse")


if __name__ == "__main__":
    main()
