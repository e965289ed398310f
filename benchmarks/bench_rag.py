"""Benchmark ``ragjudge rag`` against the loopback simulator (and RAGAS when it is installed).

Setting: simulator at 300 ms latency and 600 requests/minute, 200 generated samples
with 5 contexts each, metrics context_precision + context_recall + faithfulness, ``ragjudge
rag`` with its DEFAULT settings (only --model/--base-url/--no-cache given), once without faults
and once with 10% 5xx + 5% malformed replies. Reported: wall time, requests and tokens per
sample (from the simulator's counters), and failed samples (any metric undetermined).

    PYTHONPATH=. python benchmarks/bench_rag.py [--samples 200] [--faults both|none|only]
        [--ragas-python PATH/TO/python]   # a separate environment with ragas==0.4.3

With ``--ragas-python`` (or when ``ragas`` imports in this interpreter) RAGAS runs side by
side on the same samples and simulator settings: LLMContextPrecisionWithReference +
LLMContextRecall + Faithfulness, 3 workers (as the project tuned it), through LangChain's
ChatOpenAI pointed at the simulator. RAGAS is never a dependency of ragjudge; install it in
its own environment (it pins an older openai).

RAGAS 0.4.3 reference figures on the same simulator (measured side by side by the project on
2026-11-25, 3 workers): no faults 175.7 s, 8 requests and 10,658 tokens per sample; with faults
209.6 s, 8.72 requests and 10,516 tokens per sample, 35/200 samples NaN. They are printed when
RAGAS is not installed here.

Targets (printed as yes/NO): at most 3 requests and at most 1/5 of RAGAS's tokens per sample,
at most half its wall time, no sample undetermined.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

RAGAS_REF = {
    "none": {"wall_s": 175.7, "requests_per_sample": 8.0, "tokens_per_sample": 10658.0, "failed": 0},
    "faults": {"wall_s": 209.6, "requests_per_sample": 8.72, "tokens_per_sample": 10516.0, "failed": 35},
}

_TOPICS = ["solar panels", "the Danube", "sourdough bread", "TCP congestion control", "the Treaty of Utrecht",
           "honey bees", "lithium batteries", "the Apollo program", "tidal energy", "Roman aqueducts",
           "vaccines", "the Python GIL", "coral reefs", "jazz harmony", "glaciers", "the printing press"]
_WORDS = ("system process energy water river history design network protocol cell structure "
          "material temperature pressure population century region method result study evidence "
          "model function layer surface growth signal capacity efficiency source cycle").split()


def _sentence(rng: random.Random, topic: str, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    words.insert(rng.randint(0, len(words)), topic)
    return " ".join(words).capitalize() + "."


def make_samples(n: int, contexts: int = 5, seed: int = 0) -> list[dict]:
    """Deterministic synthetic samples: ~12-word questions, ~60-word contexts, ~25-word
    references, ~40-word responses (RAGAS field names)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choice(_TOPICS)
        ctx = [" ".join(_sentence(rng, topic, rng.randint(10, 14)) for _ in range(5)) for _ in range(contexts)]
        out.append({
            "id": f"s{i:04d}",
            "user_input": f"What does the {rng.choice(_WORDS)} of {topic} depend on, and why ({i})?",
            "retrieved_contexts": ctx,
            "reference": " ".join(_sentence(rng, topic, rng.randint(8, 11)) for _ in range(2)),
            "response": " ".join(_sentence(rng, topic, rng.randint(9, 12)) for _ in range(3)),
        })
    return out


def _sim(p_5xx: float, p_malformed: float):  # noqa: ANN202
    from ragjudge.testing.simulator import SimConfig, SimulatorThread

    cfg = SimConfig(latency=0.3, rpm=600, p_5xx=p_5xx, p_malformed=p_malformed, max_lifetime=900.0, seed=1)
    return SimulatorThread(cfg)


def _span(stats: dict) -> float:
    """First admitted request to the last reply (latency 0.3 s), as the simulator saw it."""
    return round(stats["last_admit"] - stats["first_admit"] + 0.3, 1)


METRICS = ("context_precision", "context_recall", "faithfulness")


def run_once(path: Path, n: int, *, p_5xx: float, p_malformed: float,
             metrics: tuple[str, ...] = METRICS, extra: tuple[str, ...] = ()) -> dict:
    with _sim(p_5xx, p_malformed) as sim:
        env = dict(os.environ, OPENAI_API_KEY="sim-key", PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "ragjudge", "rag", str(path),
               *(a for m in metrics for a in ("-m", m)), *extra,
               "--model", "sim-model", "--base-url", sim.base_url, "--no-cache",
               "--format", "json", "-q", "--no-progress"]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        stats = sim.stats()
    if proc.returncode != 0:
        raise SystemExit(f"ragjudge rag failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    failed = sum(
        1 for s in report["samples"] if any(v["value"] is None for v in s["scores"].values())
    )
    reasons: dict[str, int] = {}
    for s in report["samples"]:
        for v in s["scores"].values():
            if v["value"] is None:
                reasons[v["reason"]] = reasons.get(v["reason"], 0) + 1
    tokens = stats["prompt_tokens"] + stats["completion_tokens"]
    return {
        "wall_s": round(wall, 1),
        "span_s": _span(stats),
        "requests": stats["requests"],
        "requests_per_sample": round(stats["requests"] / n, 2),
        "paid_per_sample": round(stats["paid"] / n, 2),
        "tokens_per_sample": round(tokens / n),
        "rate_limited_429": stats["rate_limited"],
        "errors_5xx": stats["errors_5xx"],
        "malformed": stats["malformed"],
        "failed_samples": failed,
        "undetermined_reasons": reasons,
        "means": {a["metric"]: a["mean"] for a in report["aggregates"]},
        "stderr": proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else [],
    }


def ragas_worker(path: str, base_url: str, workers: int) -> None:
    """Runs INSIDE the RAGAS environment: evaluate the samples, print one JSON line."""
    import math
    import warnings

    warnings.filterwarnings("ignore")
    from langchain_openai import ChatOpenAI
    from ragas import EvaluationDataset, evaluate
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import Faithfulness, LLMContextPrecisionWithReference, LLMContextRecall
    from ragas.run_config import RunConfig

    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    data = EvaluationDataset.from_list([
        {k: r[k] for k in ("user_input", "retrieved_contexts", "reference", "response")} for r in rows
    ])
    llm = LangchainLLMWrapper(ChatOpenAI(model="sim-model", base_url=base_url, api_key="sim-key",
                                         temperature=0))
    t0 = time.monotonic()
    res = evaluate(data, metrics=[LLMContextPrecisionWithReference(), LLMContextRecall(), Faithfulness()],
                   llm=llm, run_config=RunConfig(max_workers=workers), show_progress=False)
    wall = time.monotonic() - t0
    df = res.to_pandas()
    cols = [c for c in df.columns if c not in ("user_input", "retrieved_contexts", "reference", "response")]
    nan_rows = int(sum(1 for _, row in df[cols].iterrows()
                       if any(isinstance(v, float) and math.isnan(v) for v in row)))
    means = {c: float(df[c].mean()) for c in cols}
    print(json.dumps({"eval_s": round(wall, 1), "nan_samples": nan_rows, "means": means}))


def run_ragas(python: str, path: Path, n: int, *, p_5xx: float, p_malformed: float, workers: int = 3) -> dict:
    with _sim(p_5xx, p_malformed) as sim:
        t0 = time.monotonic()
        proc = subprocess.run([python, str(Path(__file__).resolve()), "--ragas-worker", str(path),
                               sim.base_url, str(workers)], capture_output=True, text=True)
        wall = time.monotonic() - t0
        stats = sim.stats()
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1500:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    tokens = stats["prompt_tokens"] + stats["completion_tokens"]
    return {
        "wall_s": round(wall, 1),
        "span_s": _span(stats),
        "eval_s": out["eval_s"],
        "requests": stats["requests"],
        "requests_per_sample": round(stats["requests"] / n, 2),
        "tokens_per_sample": round(tokens / n),
        "failed_samples": out["nan_samples"],
        "means": out["means"],
    }


def _ragas_installed() -> bool:
    try:
        import ragas  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--faults", choices=("both", "none", "only"), default="both")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--ragas-python", metavar="PYTHON",
                    help="python of an environment with ragas==0.4.3, to run RAGAS side by side")
    ap.add_argument("--no-ragas", action="store_true", help="do not run RAGAS even if available")
    ap.add_argument("--variants", action="store_true",
                    help="also run, without faults, --separate-calls (4 requests per sample) and "
                         "faithfulness(steps=1) (2 requests per sample)")
    ap.add_argument("--ragas-worker", nargs=3, metavar=("SAMPLES", "BASE_URL", "WORKERS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ragas_worker:
        ragas_worker(args.ragas_worker[0], args.ragas_worker[1], int(args.ragas_worker[2]))
        return 0
    ragas_python = args.ragas_python or (sys.executable if _ragas_installed() else None)
    if args.no_ragas:
        ragas_python = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in make_samples(args.samples)), encoding="utf-8")
        results: dict = {}
        ragas: dict = {}
        settings = {"none": (0.0, 0.0), "faults": (0.10, 0.05)}
        wanted = {"both": ("none", "faults"), "none": ("none",), "only": ("faults",)}[args.faults]
        for key in wanted:
            results[key] = run_once(path, args.samples, p_5xx=settings[key][0], p_malformed=settings[key][1])
            if ragas_python:
                ragas[key] = run_ragas(ragas_python, path, args.samples,
                                       p_5xx=settings[key][0], p_malformed=settings[key][1])
        variants = {}
        if args.variants:
            variants["--separate-calls"] = run_once(path, args.samples, p_5xx=0.0, p_malformed=0.0,
                                                    extra=("--separate-calls",))
            variants["faithfulness(steps=1)"] = run_once(
                path, args.samples, p_5xx=0.0, p_malformed=0.0,
                metrics=("context_precision", "context_recall", "faithfulness(steps=1)"))
    scale = args.samples / 200
    print(f"{args.samples} samples x 5 contexts; simulator 300 ms latency, 600 rpm; "
          "context_precision + context_recall + faithfulness")
    print(f"{'run':<56}{'wall s':>8}{'span s':>8}{'req/sample':>12}{'tokens/sample':>15}{'failed':>8}")
    for key, label in (("none", "no faults"), ("faults", "10% 5xx + 5% malformed")):
        if key not in results:
            continue
        r = results[key]
        ref = RAGAS_REF[key]
        print(f"{'ragjudge rag (defaults), ' + label:<56}{r['wall_s']:>8}{r['span_s']:>8}"
              f"{r['requests_per_sample']:>12}{r['tokens_per_sample']:>15}{r['failed_samples']:>8}")
        rg = ragas.get(key)
        if rg and "error" not in rg:
            print(f"{'RAGAS 0.4.3 (3 workers, here), ' + label:<56}{rg['wall_s']:>8}{rg['span_s']:>8}"
                  f"{rg['requests_per_sample']:>12}{rg['tokens_per_sample']:>15}{rg['failed_samples']:>8}")
            ref = {"wall_s": rg["wall_s"] / scale, "tokens_per_sample": rg["tokens_per_sample"]}
        elif rg:
            print(f"  RAGAS failed to run: {rg['error'][-300:]}")
        print(f"{'RAGAS 0.4.3, project figures, ' + label:<56}{RAGAS_REF[key]['wall_s'] * scale:>8.0f}"
              f"{'':>8}{RAGAS_REF[key]['requests_per_sample'] or '-':>12}"
              f"{RAGAS_REF[key]['tokens_per_sample']:>15.0f}{RAGAS_REF[key]['failed'] * scale:>8.0f}")
        ok_time = r["wall_s"] <= ref["wall_s"] * scale / 2
        share = r["tokens_per_sample"] / ref["tokens_per_sample"]
        yes = {True: "yes", False: "NO"}
        print(f"{'':<4}targets vs {'RAGAS here' if rg and 'error' not in rg else 'project figures'}: "
              f"wall <= half RAGAS: {yes[ok_time]}; tokens {share:.3f} of RAGAS's, <= 1/5: "
              f"{yes[share <= 0.2]}; requests <= 3: {yes[r['requests_per_sample'] <= 3]} (retries "
              f"included); 0 failed: {yes[r['failed_samples'] == 0]}"
              + (f"; undetermined: {r['undetermined_reasons']}" if r["undetermined_reasons"] else ""))
    ref_tokens = (ragas.get("none") or {}).get("tokens_per_sample") or RAGAS_REF["none"]["tokens_per_sample"]
    for label, r in variants.items():
        print(f"{'ragjudge rag ' + label + ', no faults':<56}{r['wall_s']:>8}{r['span_s']:>8}"
              f"{r['requests_per_sample']:>12}{r['tokens_per_sample']:>15}{r['failed_samples']:>8}"
              f"   ({r['tokens_per_sample'] / ref_tokens:.3f} of RAGAS's tokens)")
    if not ragas_python:
        print("RAGAS side by side: not installed (pass --ragas-python); project figures shown")
    if args.json:
        Path(args.json).write_text(json.dumps({"ragjudge": results, "ragas": ragas, "variants": variants},
                                              indent=2),
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
