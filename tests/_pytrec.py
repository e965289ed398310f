"""pytrec_eval, run in a fresh process: a cross-check that cannot hang the test suite.

pytrec_eval-terrier 0.5.x can hang inside ``RelevanceEvaluator.evaluate`` after many
evaluators were built in one process (reproduced with plain dicts, no ragjudge code involved);
one evaluator per fresh process has not hung. So property tests that build many inputs merge
them into one and evaluate them here, once, with a timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

_SCRIPT = r"""
import json, sys
import pytrec_eval
args = json.load(sys.stdin)
kw = {} if args["rel"] is None else {"relevance_level": args["rel"]}
if args.get("judged_only"):
    kw["judged_docs_only_flag"] = True
ev = pytrec_eval.RelevanceEvaluator(args["qrels"], set(args["measures"]), **kw)
json.dump(ev.evaluate(args["run"]), sys.stdout)
"""


def pytrec_eval_isolated(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    measures: set[str],
    rel: int | None = None,
    timeout: float = 120.0,
    judged_only: bool = False,
) -> dict[str, dict[str, Any]]:
    """``RelevanceEvaluator(qrels, measures).evaluate(run)`` in a subprocess."""
    payload = json.dumps({"qrels": qrels, "run": run, "measures": sorted(measures), "rel": rel,
                          "judged_only": judged_only})
    try:
        out = subprocess.run([sys.executable, "-c", _SCRIPT], input=payload, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pytrec_eval did not answer within {timeout:.0f} s (a known hang of the peer)")
    if out.returncode < 0:
        # Killed by a signal: pytrec_eval itself crashed (it segfaults, for instance, on a query
        # whose only judgments are negative when Rprec and bpref are asked together).
        pytest.skip(f"pytrec_eval crashed with signal {-out.returncode} on this input")
    if out.returncode != 0:
        raise AssertionError(f"pytrec_eval failed: {out.stderr[-2000:]}")
    result: dict[str, dict[str, Any]] = json.loads(out.stdout)
    return result
