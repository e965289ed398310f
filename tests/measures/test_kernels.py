"""Hand-computed values of every per-query kernel."""

from __future__ import annotations

import math

import pytest

from ragjudge.errors import MetricError
from ragjudge.measures import parse_measure, reference_value
from ragjudge.measures.counts import num_rel, num_rel_ret, num_ret
from ragjudge.measures.graded import err, ndcg, rbp
from ragjudge.measures.judged import judged, rbp_residual
from ragjudge.measures.ranks import average_precision, bpref, mrr
from ragjudge.measures.sets import f1, hit, precision, recall, recall_all, rprec

# Ranked grades (None = no qrels entry) and the query's qrels grades. With rel = 1:
# relevant at ranks 1, 4, 6; R = 4 (grades 1, 2, 1, 3); judged non-relevant N = 1 (grade 0);
# the -1 entry is "in the pool but not judged".
RANKED = [1, None, 0, 2, None, 1]
JUDGED = [1, 0, 2, 1, 3, -1]


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-12)


def test_counts():
    assert num_ret(RANKED) == 6 and num_ret(RANKED, 4) == 4 and num_ret([], 4) == 0
    assert num_rel(JUDGED) == 4 and num_rel(JUDGED, 2) == 2 and num_rel([-1, 0]) == 0
    assert num_rel_ret(RANKED) == 3 and num_rel_ret(RANKED, 4) == 2
    assert num_rel_ret(RANKED, rel=2) == 1


def test_hit_precision_recall_f1():
    assert hit(RANKED, 1) == 1.0 and hit([None, 0, -1], 3) == 0.0
    assert hit([0, 0, 1], 2) == 0.0 and hit([0, 0, 1], 3) == 1.0
    assert precision(RANKED, 5) == approx(2 / 5)
    assert precision(RANKED, 10) == approx(3 / 10)  # missing ranks count as non-relevant
    assert precision(RANKED) == approx(3 / 6)  # set precision
    assert precision([], None) == 0.0
    assert recall(RANKED, JUDGED, 5) == approx(2 / 4)
    assert recall(RANKED, [0, 0], 5) == 0.0
    assert f1(RANKED, JUDGED, 5) == approx(2 * 0.4 * 0.5 / 0.9)
    assert f1([0], JUDGED, 1) == 0.0


def test_recall_all():
    assert recall_all(RANKED, JUDGED, 6) == 0.0  # grade-3 document never retrieved
    assert recall_all([2, 0, 1], [1, 2, 0], 3) == 1.0
    assert recall_all([2, 0, 1], [1, 2, 0], 2) == 0.0
    assert recall_all([0], [0], 1) == 0.0  # no relevant document: 0, like recall


def test_rprec_mrr_ap():
    assert rprec(RANKED, JUDGED) == approx(2 / 4)
    assert rprec(RANKED, [0]) == 0.0
    assert mrr(RANKED) == 1.0
    assert mrr([0, None, 2]) == approx(1 / 3)
    assert mrr([0, None, 2], 2) == 0.0
    assert average_precision(RANKED, JUDGED) == approx((1 / 1 + 2 / 4 + 3 / 6) / 4)
    # map@k still divides by all R relevant documents (trec_eval map_cut)
    assert average_precision(RANKED, JUDGED, 4) == approx((1 / 1 + 2 / 4) / 4)
    assert average_precision(RANKED, [0]) == 0.0
    assert average_precision(RANKED, JUDGED, rel=2) == approx((1 / 4) / 2)


def test_ndcg_trec_eval_style():
    dcg = 1 / math.log2(2) + 2 / math.log2(5) + 1 / math.log2(7)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4) + 1 / math.log2(5)
    assert ndcg(RANKED, JUDGED) == approx(dcg / idcg)
    dcg3 = 1.0
    idcg3 = 3 + 2 / math.log2(3) + 1 / 2
    assert ndcg(RANKED, JUDGED, 3) == approx(dcg3 / idcg3)
    assert ndcg([0, None], [0, -1]) == 0.0  # no positive grade: ideal DCG 0 -> 0


def test_ndcg_variants():
    # exp gain: 2^g - 1
    assert ndcg([2], [2, 3], gain="exp") == approx(3 / (7 + 3 / math.log2(3)))
    # ideal from the retrieved labels, Jarvelin discount (none at rank 1, log2(r) after)
    want = (0 + 2 / 1 + 1 / math.log2(3)) / (2 / 1 + 1 / 1)
    assert ndcg([0, 2, 1], [3, 2, 1], 3, ideal="retrieved", discount="jarvelin") == approx(want)
    assert ndcg([1, None, 0], [3], 3, ideal="retrieved") == 1.0


def test_err():
    r1, r3 = 1 / 16, 7 / 16  # (2^g - 1) / 2^4
    assert err(RANKED, 3) == approx(r1)
    assert err(RANKED, 4) == approx(r1 + (1 - r1) * (3 / 16) / 4)
    assert err([3, 1], max_grade=3) == approx(7 / 8 + (1 / 8) * (1 / 8) / 2)
    assert err([3], max_grade=4) == approx(r3)
    with pytest.raises(MetricError):
        err([5], max_grade=4)


def test_rbp():
    p = 0.5
    assert rbp(RANKED, p=p) == approx((1 - p) * (1 + p**3 + p**5))
    assert rbp(RANKED, 4, p=p) == approx((1 - p) * (1 + p**3))
    assert rbp(RANKED, p=p, rel=2) == approx((1 - p) * p**3)
    graded = (1 - p) * (0.5 + 1.0 * p**3 + 0.5 * p**5)
    assert rbp(RANKED, p=p, gain="graded", max_grade=2) == approx(graded)
    with pytest.raises(MetricError):
        rbp([3], p=p, gain="graded", max_grade=2)


def test_rbp_residual():
    p = 0.5
    assert rbp_residual(RANKED, p=p) == approx((1 - p) * (p + p**4) + p**6)
    assert rbp_residual([], p=p) == 1.0
    assert rbp_residual([-1, 1], p=p) == approx((1 - p) * 1 + p**2)  # -1: pooled, unjudged
    assert rbp_residual([1, 0], p=p) + rbp([1, 0], p=p) == approx(0.5 + 0.25)


def test_bpref():
    # rank 1 relevant, nothing above: 1; rank 4: one non-relevant above, min(N, R) = 1: 0;
    # rank 6: 0.  -> 1 / R = 1/4
    assert bpref(RANKED, JUDGED) == approx(1 / 4)
    # with rel = 2: R = 2 (grades 2, 3), N = 3 (grades 1, 0, 1); non-relevant above rank 4 = 2
    assert bpref(RANKED, JUDGED, 2) == approx((1 - 2 / 2) / 2)
    assert bpref([None, -1, 1], [1, 0, -1]) == 1.0  # unjudged and -1 are skipped
    assert bpref([1], [0]) == 0.0


def test_judged():
    assert judged(RANKED, 4) == approx(3 / 4)
    assert judged(RANKED, 10) == approx(4 / 6)  # divides by min(k, n)
    assert judged([-1, 1], 2) == 1.0  # a negative label was assessed: judged
    assert judged([-2, None], 2) == 0.5
    assert judged([], 5) == 0.0


def test_evaluate_dispatches_every_measure():
    for spec in ("hit@3", "recall@5", "recall_all@6", "p@5", "f1@5", "rprec", "mrr", "map@4",
                 "ndcg@3", "err@4", "rbp(p=0.5)", "rbp_residual(p=0.5)", "bpref", "judged@4",
                 "num_ret", "num_rel", "num_rel_ret", "rbp(p=0.5,gain=graded)"):
        value = reference_value(parse_measure(spec), RANKED, JUDGED, qrels_max_grade=2)
        assert value >= 0.0
    assert reference_value(parse_measure("map@4"), RANKED, JUDGED) == average_precision(RANKED, JUDGED, 4)
    graded = reference_value(parse_measure("rbp(p=0.5,gain=graded)"), RANKED, JUDGED, qrels_max_grade=2)
    assert graded == rbp(RANKED, p=0.5, gain="graded", max_grade=2)


def test_dcg_unnormalised():
    from ragjudge import evaluate

    want = 1.0 + 2 / math.log2(5) + 1 / math.log2(7)
    m = parse_measure("dcg")
    assert reference_value(m, RANKED, JUDGED) == approx(want)
    assert reference_value(parse_measure("dcg@3"), RANKED, JUDGED) == approx(1.0)
    assert reference_value(parse_measure("dcg(gain=exp)"), RANKED, JUDGED) == approx(
        1.0 + 3 / math.log2(5) + 1 / math.log2(7))
    assert reference_value(parse_measure("dcg(discount=jarvelin)@4"), RANKED, JUDGED) == approx(2.0)
    assert str(parse_measure("dcg_cut_10")) == "dcg@10"
    with pytest.raises(MetricError):
        parse_measure("dcg(ideal=all)")  # there is no ideal ranking to choose
    # Through the engine: the same value, and nDCG = DCG / IDCG on the same data.
    qrels = {"q": {"a": 1, "b": 0, "c": 2, "d": 3}}
    run = {"q": {"a": 3.0, "x": 2.0, "c": 1.0}}
    rep = evaluate(qrels, run, ["dcg@3", "ndcg@3"])
    idcg = 3 + 2 / math.log2(3) + 1 / 2
    assert rep.mean["dcg@3"] == approx(1 + 2 / 2)
    assert rep.mean["ndcg@3"] == approx((1 + 2 / 2) / idcg)
