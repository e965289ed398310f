"""trec_eval measures beyond the core set, and the overflow edges.

Agreement with trec_eval's own outputs is in test_conformance_trec_eval.py; these are
hand-computed values and the failure modes.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from ragjudge import evaluate
from ragjudge.errors import MetricError
from ragjudge.measures import parse_measure, reference_value
from ragjudge.measures.graded import err, ndcg


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-12)


def value(spec: str, ranked: list, judged: list) -> float:
    return reference_value(parse_measure(spec), ranked, judged)


def test_judged_counts_negative_labels_unj_does_not():
    ranked = [1, -2, None, 0]  # -2: a junk label, assessed
    assert value("judged@4", ranked, [1, -2, 0]) == approx(3 / 4)
    assert value("unj@4", ranked, [1, -2, 0]) == approx(2 / 4)  # trec_eval: -2 is unjudged
    assert value("unj@10", ranked, [1, -2, 0]) == approx(2 / 10)  # divides by k
    assert value("judged@10", ranked, [1, -2, 0]) == approx(3 / 4)  # divides by min(k, n)
    rep = evaluate({"q": {"a": 1, "b": -2}}, {"q": {"a": 2.0, "b": 1.0, "c": 0.5}},
                   ["judged@3", "unj@5"])
    assert rep.mean == {"judged@3": approx(2 / 3), "unj@5": approx(2 / 5)}


def test_set_f_is_trec_evals_weighting():
    ranked, judged = [1, 0, 1, None], [1, 1, 1, 0]
    p, r = 2 / 4, 2 / 3
    assert value("set_f", ranked, judged) == approx(2 * p * r / (p + r))
    assert value("set_f", ranked, judged) == approx(value("f1", ranked, judged))
    assert value("set_f(beta=2)", ranked, judged) == approx(3 * p * r / (2 * p + r))
    assert value("set_f(beta=0.5)", [0, None], [1]) == 0.0
    # trec_eval accepts set_F.0: (0 + 1) P R / (0 P + R) = P
    assert value("set_f(beta=0)", ranked, judged) == approx(p)
    with pytest.raises(MetricError):
        parse_measure("set_f(beta=-1)")


def test_infap_by_hand():
    # ranks: rel, unpooled, nonrel, pooled-unjudged (-1), rel; R = 3
    ranked, judged = [1, None, 0, -1, 1], [1, 1, 1, 0, -1]
    e = 1e-5
    second = 1 / 5 + (4 / 5) * ((1 + 1 + 1) / 4) * ((1 + e) / (1 + 1 + 2 * e))
    assert value("infap", ranked, judged) == approx((1 + second) / 3)
    # complete judgments and no unpooled documents: infAP is AP up to the epsilon
    assert value("infap", [1, 0, 1], [1, 0, 1]) == pytest.approx(
        value("map", [1, 0, 1], [1, 0, 1]), abs=1e-5)


def test_interpolated_precision_by_hand():
    # relevant at ranks 2 and 3 of 4, R = 4: precisions 1/2, 2/3 at the relevant ranks
    ranked, judged = [0, 1, 1, 0], [1, 1, 1, 1, 0]
    assert value("iprec_at_recall(recall=0)", ranked, judged) == approx(2 / 3)
    assert value("iprec_at_recall(recall=0.25)", ranked, judged) == approx(2 / 3)  # c = 1
    assert value("iprec_at_recall(recall=0.5)", ranked, judged) == approx(2 / 3)  # c = 2
    assert value("iprec_at_recall(recall=0.75)", ranked, judged) == 0.0  # 3 > 2 retrieved
    levels = [value(f"iprec(recall={x / 10})", ranked, judged) for x in range(11)]
    assert value("11pt_avg", ranked, judged) == approx(sum(levels) / 11)
    assert levels == [approx(2 / 3)] * 7 + [0.0] * 4  # round(0.6 * 4) = 2, round(0.7 * 4) = 3
    assert str(parse_measure("iprec(recall=.5)")) == "iprec_at_recall(recall=0.5)"
    with pytest.raises(MetricError):
        parse_measure("iprec_at_recall(recall=1.5)")


def test_gm_map_is_a_geometric_mean_with_trec_evals_floor():
    qrels = {"a": {"x": 1}, "b": {"y": 1}, "c": {"z": 1}}
    run = {"a": {"x": 1.0}, "b": {"n": 2.0, "y": 1.0}, "c": {"n": 1.0}}
    rep = evaluate(qrels, run, ["gm_map", "map"])
    assert rep.per_query["b"]["gm_map"] == approx(0.5)  # per query: AP
    assert rep.mean["gm_map"] == approx(math.exp((math.log(1) + math.log(0.5) + math.log(1e-5)) / 3))
    assert rep.mean["map"] == approx(0.5)


def test_ndcg_gain_map():
    m = parse_measure("ndcg(gains=0:0,1:1,2:3,3:7)@10")
    assert str(m) == "ndcg(gains=0:0,1:1,2:3,3:7)@10"
    ranked, judged = [2, None, 0, 3, 1], [3, 2, 1, 1, 0]
    # 2^g - 1 as an explicit map equals gain=exp
    assert reference_value(m, ranked, judged) == approx(value("ndcg(gain=exp)@10", ranked, judged))
    # unlisted levels keep their own value; level 0 may gain; negative gains lower the DCG
    assert value("dcg(gains=1:5)", [1, 2], [1, 2]) == approx(5 + 2 / math.log2(3))
    assert value("dcg(gains=0:1,2:-1)", [0, 2], [0, 2]) == approx(1 - 1 / math.log2(3))
    assert value("ndcg(gains=0:1,2:-1)", [0, 2], [0, 2]) == approx((1 - 1 / math.log2(3)) / 1)
    with pytest.raises(MetricError, match="replaces gain=exp"):
        parse_measure("ndcg(gains=1:2,gain=exp)")
    with pytest.raises(MetricError):
        parse_measure("ndcg(gains=1:2,1:3)")


def test_no_overflow_paths():
    qrels = {"q": {"a": 1, "b": 2000}}
    run = {"q": {"a": 2.0, "b": 1.0}}
    # err scales before exponentiating: computed, not an OverflowError
    assert evaluate(qrels, run, ["err(max_grade=2000)"]).mean["err(max_grade=2000)"] == approx(0.5)
    assert err([1, 2000], None, 2000) == approx(0.5)
    assert err([3, 1], None, 4) == approx(7 / 16 + (1 - 7 / 16) * (1 / 16) / 2)  # unchanged
    # 2^1024 does not fit a float: a clear error, never "undetermined"
    with pytest.raises(MetricError, match="overflows"):
        evaluate({"q": {"a": 1024}}, run, ["ndcg(gain=exp)"])
    with pytest.raises(MetricError, match="overflows"):
        ndcg([1024], [1024], gain="exp")
    assert evaluate({"q": {"a": 1023}}, run, ["ndcg(gain=exp)"]).mean["ndcg(gain=exp)"] == 1.0
    for spec in ("ndcg@1e20", "ndcg@100000000000000000000", "err(max_grade=10000000)"):
        with pytest.raises(MetricError):
            parse_measure(spec)


@pytest.mark.slow  # subprocess per case
@pytest.mark.parametrize("spec", ["err(max_grade=2000000000)", "ndcg@1e20", "ndcg(gain=exp)"])
def test_cli_exit_2_not_1_on_overflow_edges(tmp_path, spec):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q 0 a 1024\n")
    run = tmp_path / "run.txt"
    run.write_text("q Q0 a 1 1.0 r\n")
    proc = subprocess.run([sys.executable, "-m", "ragjudge", "evaluate", str(qrels), str(run),
                           "-m", spec], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_rbp_raw_gain_and_the_scale_in_meta():
    ranked = [3, None, 1]
    p = 0.8
    assert value("rbp(p=0.8,gain=raw)", ranked, [3, 1]) == approx((1 - p) * (3 + 1 * p**2))
    assert value("rbp(p=0.8,gain=graded,max_grade=3)", ranked, [3, 1]) == approx(
        (1 - p) * (1 + p**2 / 3))
    with pytest.raises(MetricError, match="only applies to gain=binary"):
        parse_measure("rbp(gain=raw,rel=2)")
    with pytest.raises(MetricError, match="needs gain=graded"):
        parse_measure("rbp(gain=raw,max_grade=3)")
    assert str(parse_measure("rbp(gain=raw)", rel=2)) == "rbp(gain=raw,p=0.8)"  # --rel ignored
    rep = evaluate({"q": {"a": 1}, "r": {"b": 3}}, {"q": {"a": 1.0}}, ["rbp(p=0.8,gain=graded)"])
    assert rep.meta["qrels_max_grade"] == 3  # the scale graded RBP used, said in the output
    assert rep.per_query["q"]["rbp(p=0.8,gain=graded)"] == approx(0.2 / 3)


def test_gm_map_in_compare_is_tested_on_logs():
    from ragjudge import compare

    qrels = {f"q{i}": {"a": 1, "b": 1} for i in range(6)}
    good = {f"q{i}": {"a": 2.0, "b": 1.0} for i in range(6)}
    bad = {f"q{i}": {"x": 2.0, "a": 1.0} for i in range(6)}
    res = compare(qrels, {"good": good, "bad": bad}, ["gm_map"], baseline="good", n_resamples=200)
    (c,) = res.comparisons
    gm_good, gm_bad = res.reports["good"].mean["gm_map"], res.reports["bad"].mean["gm_map"]
    assert c.delta == approx(math.log(gm_bad / gm_good)) and c.delta < 0
    assert "log" in c.note and c.p_value is not None
    lo, hi = res.ci["good"]["gm_map"]
    assert lo <= gm_good <= hi
