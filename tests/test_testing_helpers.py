"""ragjudge.testing: the gate assertions users put in their own test suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragjudge import Qrels, Run, evaluate
from ragjudge.testing import assert_metric, assert_not_worse

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QRELS = EXAMPLES / "qrels.txt"
GOOD = EXAMPLES / "runs" / "bm25_stemmed.run"
WEAK = EXAMPLES / "runs" / "term_overlap.run"


def test_assert_metric_passes_and_returns_value() -> None:
    expected = evaluate(QRELS, GOOD, ["ndcg@10"]).mean["ndcg@10"]
    assert assert_metric(QRELS, GOOD, "ndcg@10", at_least=expected - 1e-9) == expected
    assert assert_metric(QRELS, GOOD, "ndcg@10", at_most=1.0) == expected


def test_assert_metric_fails_with_one_line() -> None:
    value = evaluate(QRELS, WEAK, ["map"]).mean["map"]
    with pytest.raises(AssertionError) as info:
        assert_metric(QRELS, WEAK, "map", at_least=value + 0.01)
    msg = str(info.value)
    assert msg == f"map = {value:.4f} is below the required minimum {value + 0.01:g}"
    with pytest.raises(AssertionError, match="above the allowed maximum"):
        assert_metric(QRELS, WEAK, "map", at_most=value - 0.01)


def test_assert_metric_on_a_report_and_bad_bounds() -> None:
    report = evaluate(QRELS, GOOD, ["mrr"])
    assert assert_metric(report, metric="mrr", at_least=0.0) == report.mean["mrr"]
    with pytest.raises(ValueError, match="needs at_least"):
        assert_metric(report, metric="mrr")
    with pytest.raises(ValueError, match="finite"):
        assert_metric(report, metric="mrr", at_least=float("nan"))
    with pytest.raises(KeyError, match="not in the report"):
        assert_metric(report, metric="map", at_least=0.0)


def test_assert_metric_never_passes_on_a_missing_value() -> None:
    class Undetermined:
        def mean(self, metric: str) -> None:
            return None

    with pytest.raises(AssertionError, match="could not be computed"):
        assert_metric(Undetermined(), metric="faithfulness", at_least=0.0)


def test_assert_not_worse() -> None:
    # 30 queries where the candidate loses the only relevant document: significantly worse
    qrels = Qrels.from_dict({f"q{i}": {"d1": 1} for i in range(30)})
    base = Run.from_dict({f"q{i}": {"d1": 2.0, "d2": 1.0} for i in range(30)})
    cand = Run.from_dict({f"q{i}": {"d2": 2.0, "d1": 1.0} for i in range(30)})
    with pytest.raises(AssertionError, match=r"significantly worse than the baseline: mrr -0\.5000"):
        assert_not_worse(qrels, cand, baseline=base, metrics="mrr", n_resamples=2000)
    assert assert_not_worse(qrels, base, baseline=cand, metrics=["mrr"], n_resamples=2000) == {"mrr": 0.5}
    assert assert_not_worse(qrels, base, baseline=base, metrics=["mrr"]) == {"mrr": 0.0}
