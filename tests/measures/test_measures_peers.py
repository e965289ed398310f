"""Peer metric names (trec_eval -m, ir_measures, ranx) mean exactly the peer's definition.

Each spelling is translated (one table below) and, where the peer is installed, its values are
compared with the peer's own on the same data.
"""

from __future__ import annotations

import random

import pytest

from ragjudge import evaluate
from ragjudge.errors import MetricError
from ragjudge.measures import parse_measure, split_metric_list
from ragjudge.measures.peers import ALL_TREC

TRANSLATIONS = [
    # ir_measures
    ("AP", "map"), ("AP(rel=2)", "map(rel=2)"), ("AP@10", "map@10"), ("RR", "mrr"),
    ("RR@10", "mrr@10"), ("R@100", "recall@100"), ("P(rel=2)@10", "precision(rel=2)@10"),
    ("nDCG(dcg='exp-log2')@10", "ndcg(gain=exp)@10"), ("nDCG@10", "ndcg@10"),
    ("nDCG(gains={0:0,1:1,2:3})@5", "ndcg(gains=0:0,1:1,2:3)@5"),
    ("NumRet", "num_ret"), ("NumRel", "num_rel"), ("NumRelRet", "num_rel_ret"),
    ("SetP", "precision"), ("SetR", "recall"), ("SetF(beta=0.5)", "set_f(beta=0.5)"),
    ("IPrec@0.5", "iprec_at_recall(recall=0.5,rounding=trec9)"), ("Rprec", "rprec"),
    ("Bpref", "bpref"),
    ("infAP", "infap"), ("Success@10", "hit@10"), ("Judged@10", "judged@10"), ("ERR@20", "err@20"),
    ("RBP", "rbp(gain=raw,p=0.8)"), ("RBP(rel=2)", "rbp(p=0.8,rel=2)"),
    ("RBP(p=0.9)@10", "rbp(gain=raw,p=0.9)@10"),
    # ranx
    ("hit_rate@5", "hit@5"), ("hits@5", "num_rel_ret@5"), ("ndcg_burges@10", "ndcg(gain=exp)@10"),
    ("map-l2", "map(rel=2)"), ("ndcg@10-l2", "ndcg(gains=1:0)@10"), ("r-precision", "rprec"),
    ("rbp.80", "rbp(gain=raw,p=0.8)"), ("dcg@10", "dcg@10"), ("dcg_burges@10", "dcg(gain=exp)@10"),
    ("precision@5-l3", "precision(rel=3)@5"), ("mrr-l2", "mrr(rel=2)"),
    # trec_eval
    ("P.5", "precision@5"), ("ndcg_cut.10", "ndcg@10"), ("ndcg.1=3,2=9", "ndcg(gains=1:3,2:9)"),
    ("set_F.0.5", "set_f(beta=0.5)"), ("set_P", "precision"), ("set_recall", "recall"),
    ("iprec_at_recall_0.50", "iprec_at_recall(recall=0.5)"), ("unj.5", "unj@5"),
    ("success.1", "hit@1"), ("infAP", "infap"),
]


@pytest.mark.parametrize(("peer", "ours"), TRANSLATIONS)
def test_peer_spelling(peer, ours):
    assert str(parse_measure(peer)) == ours


def test_lists_in_peer_syntax():
    assert split_metric_list("P.5,10 ndcg_cut.10,20") == ["P_5", "P_10", "ndcg_cut_10", "ndcg_cut_20"]
    assert split_metric_list("AP nDCG@10 P(rel=2)@5") == ["AP", "nDCG@10", "P(rel=2)@5"]
    assert split_metric_list("ndcg.1=3,2=9,4=4.5, map") == ["ndcg.1=3,2=9,4=4.5", "map"]
    assert split_metric_list("ndcg @ 10, map") == ["ndcg@10", "map"]
    specs = split_metric_list("all_trec")
    assert specs == list(ALL_TREC) and len({parse_measure(s) for s in specs}) == len(specs)


@pytest.mark.parametrize("peer", ["P.5,10", "rbp.80-l2", "ndcg_burges@10-l2", "nDCG(dcg='log')",
                                  "IPrec", "AP(judged_only=True)", "NumRet@10", "11pt_avg.0.2,0.5"])
def test_untranslatable_peer_spellings_say_why(peer):
    with pytest.raises(MetricError):
        parse_measure(peer)


@pytest.mark.slow  # peer cross-check
def test_ir_measures_objects_and_cli_lists():
    ir_measures = pytest.importorskip("ir_measures")
    assert parse_measure(ir_measures.nDCG @ 10) == parse_measure("ndcg@10")
    assert parse_measure(ir_measures.AP(rel=2)) == parse_measure("map(rel=2)")
    rep = evaluate({"q": {"a": 1, "b": 2}}, {"q": {"a": 2.0, "b": 1.0}},
                   [ir_measures.AP, "P.1,2", "RR"])
    assert set(rep.metrics) == {"AP", "P_1", "P_2", "RR"} and rep.mean["P_2"] == 1.0


def _collection(seed: int, n_q: int = 25) -> tuple[dict, dict]:
    rnd = random.Random(seed)
    qrels, run = {}, {}
    for q in range(n_q):
        docs = [f"d{i}" for i in range(40)]
        qrels[f"q{q}"] = {d: rnd.choice([0, 0, 1, 1, 2, 3]) for d in rnd.sample(docs, 15)}
        qrels[f"q{q}"][docs[0]] = 1  # every query has a relevant document
        scores = rnd.sample(range(1000), 30)  # distinct scores: no tie-breaking differences
        run[f"q{q}"] = {d: float(s) for d, s in zip(rnd.sample(docs, 30), scores)}
    return qrels, run


@pytest.mark.slow  # peer cross-check
def test_ir_measures_values(conformance_dir):
    ir_measures = pytest.importorskip("ir_measures")
    from ragjudge.io import read_qrels, read_run

    qrels = read_qrels(conformance_dir / "qrels.rel_level").to_dict()
    run = read_run(conformance_dir / "results.test").to_dict()
    names = ["AP", "AP(rel=2)", "RR", "RR@10", "R@100", "P(rel=2)@10", "nDCG@10", "nDCG",
             "NumRet", "NumRel", "NumRelRet", "SetP", "IPrec@0.5", "Rprec", "Bpref", "Success@10",
             "infAP", "P@5", "SetF", "Judged@10", "IPrec@0.1", "IPrec@0.3", "IPrec@0.6", "IPrec@0.9"]
    rep = evaluate(qrels, run, names)
    checked = 0
    for name in names:
        want = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.parse_measure(name)],
                                                                     qrels, run)}
        assert want, name
        for qid, value in want.items():
            assert abs(rep.per_query[qid][name] - value) <= 1e-9, (name, qid, value)
            checked += 1
    assert checked >= 3 * len(names)


@pytest.mark.slow  # peer cross-check (ranx compiles with numba)
def test_ranx_values():
    ranx = pytest.importorskip("ranx")
    qrels, run = _collection(7)
    names = ["hit_rate@5", "hits@5", "ndcg_burges@10", "map-l2", "ndcg@10-l2", "r-precision",
             "rbp.80", "dcg@10", "dcg_burges@10", "ndcg@10", "map", "mrr", "precision@5",
             "recall@10", "mrr-l2", "precision@5-l3"]
    rep = evaluate(qrels, run, names)
    rq, rr = ranx.Qrels(qrels), ranx.Run(run)
    ranx.evaluate(rq, rr, names, save_results_in_run=True)
    for name in names:
        for qid, value in rr.scores[name].items():
            assert abs(rep.per_query[qid][name] - value) <= 1e-9, (name, qid, value)
