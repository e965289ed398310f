"""The vectorized engine agrees with the per-query kernels, and keeps its invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragjudge import engine
from ragjudge.data import Qrels, Run
from ragjudge.errors import MetricError
from ragjudge.measures import parse_measure, reference_value, registry, spec_of

from _pytrec import pytrec_eval_isolated

try:  # a cross-check only: pytrec_eval is not a dependency of ragjudge
    import pytrec_eval
except ImportError:  # pragma: no cover - depends on the environment
    pytrec_eval = None

# Every registered measure brings the specs it is checked on: a new measure is covered here
# without editing this file.
SPECS = [ex for spec in registry().values() for ex in spec.examples]
MEASURES = [parse_measure(s) for s in SPECS]
UNIT = {m for m in MEASURES if spec_of(m).in_unit_interval(m)}

QIDS = ["q1", "q10", "q2", "qa", "Q", "z"]
DOCS = [f"d{i}" for i in range(12)] + ["D", "d", "dd"]


@st.composite
def collections(draw):
    """Small qrels + run dicts with ties, negative labels, missing and extra queries."""
    qrels: dict[str, dict[str, int]] = {}
    for q in draw(st.lists(st.sampled_from(QIDS), min_size=1, max_size=5, unique=True)):
        docs = draw(st.lists(st.sampled_from(DOCS), min_size=1, max_size=10, unique=True))
        qrels[q] = {d: draw(st.integers(-1, 4)) for d in docs}
    run: dict[str, dict[str, float]] = {}
    for q in draw(st.lists(st.sampled_from(QIDS), max_size=6, unique=True)):
        docs = draw(st.lists(st.sampled_from(DOCS), max_size=12, unique=True))
        # few distinct scores: plenty of ties, broken by docid descending
        run[q] = {d: float(draw(st.integers(0, 3))) for d in docs}
    return qrels, run


def reference_ranking(scores: dict[str, float]) -> list[str]:
    """trec_eval order, written independently of Run: score desc, then docid desc (ASCII)."""
    return sorted(scores, key=lambda d: (-scores[d], [-b for b in d.encode()] + [1]))


def reference_values(qrels: dict, run: dict, qids: list[str]) -> dict:
    max_grade = max((g for docs in qrels.values() for g in docs.values()), default=0)
    out = {}
    for m in MEASURES:
        vals = []
        for q in qids:
            judged = qrels.get(q, {})
            ranked = [judged.get(d) for d in reference_ranking(run.get(q, {}))]
            vals.append(reference_value(m, ranked, list(judged.values()), qrels_max_grade=max_grade))
        out[m] = np.array(vals)
    return out


def build(qrels: dict, run: dict) -> tuple[Qrels, Run]:
    return Qrels.from_dict(qrels), Run.from_dict(run)


_settings = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(collections())
def test_engine_equals_kernels(data):
    qd, rd = data
    qrels, run = build(qd, rd)
    got = engine.compute(qrels, run, MEASURES)
    want = reference_values(qd, rd, qrels.query_ids)
    for m in MEASURES:
        assert got[m].dtype == np.float64 and got[m].shape == (qrels.num_queries,)
        np.testing.assert_allclose(got[m], want[m], rtol=0, atol=1e-12, err_msg=str(m))


@pytest.mark.slow  # hypothesis, 200 examples x every measure
@_settings
@given(collections())
def test_bounds_and_finiteness(data):
    qrels, run = build(*data)
    got = engine.compute(qrels, run, MEASURES)
    for m, v in got.items():
        assert np.all(np.isfinite(v)), m
        assert np.all(v >= 0.0), m
        if m in UNIT:
            assert np.all(v <= 1.0 + 1e-12), m


@pytest.mark.slow  # hypothesis, 200 examples x every measure
@_settings
@given(collections(), st.randoms(use_true_random=False))
def test_input_line_order_does_not_matter(data, rnd):
    qd, rd = data
    qrels, run = build(qd, rd)
    base = engine.compute(qrels, run, MEASURES)
    qrows = [(q, d, g) for q, docs in qd.items() for d, g in docs.items()]
    rrows = [(q, d, s) for q, docs in rd.items() for d, s in docs.items()]
    rnd.shuffle(qrows)
    rnd.shuffle(rrows)
    qrels2 = Qrels.from_arrays([r[0] for r in qrows], [r[1] for r in qrows], [r[2] for r in qrows])
    run2 = Run.from_arrays([r[0] for r in rrows], [r[1] for r in rrows], [r[2] for r in rrows])
    again = engine.compute(qrels2, run2, MEASURES)
    for m in MEASURES:
        np.testing.assert_array_equal(base[m], again[m], err_msg=str(m))


@pytest.mark.slow  # hypothesis, 200 examples x every measure
@_settings
@given(collections(), st.lists(st.sampled_from(QIDS + ["nope"]), min_size=1, max_size=8))
def test_explicit_qids_select_and_order(data, qids):
    qd, rd = data
    qrels, run = build(qd, rd)
    got = engine.compute(qrels, run, MEASURES, qids=qids)
    want = reference_values(qd, rd, qids)
    for m in MEASURES:
        np.testing.assert_allclose(got[m], want[m], rtol=0, atol=1e-12, err_msg=str(m))


@pytest.mark.slow  # hypothesis, 200 examples x every measure
@_settings
@given(collections())
def test_each_measure_alone_equals_batch(data):
    # The engine only lays out as many ranks as the deepest cutoff needs: a measure computed
    # alone must not change.
    qrels, run = build(*data)
    batch = engine.compute(qrels, run, MEASURES)
    for m in MEASURES:
        alone = engine.compute(qrels, run, [m])[m]
        np.testing.assert_array_equal(alone, batch[m], err_msg=str(m))


def test_missing_query_and_run_only_query():
    qrels = Qrels.from_dict({"a": {"x": 1, "y": 0}, "b": {"z": 2}})
    run = Run.from_dict({"a": {"x": 1.0, "w": 0.5}, "only_in_run": {"z": 3.0}})
    specs = ["map", "ndcg@10", "p@5", "num_ret", "num_rel", "rbp_residual(p=0.5)", "judged@2"]
    got = {str(m): v.tolist() for m, v in engine.compute(qrels, run, specs).items()}
    assert got["map"] == [1.0, 0.0]
    assert got["ndcg@10"] == [1.0, 0.0]
    assert got["precision@5"] == [0.2, 0.0]
    assert got["num_ret"] == [2.0, 0.0]
    assert got["num_rel"] == [1.0, 1.0]
    assert got["rbp_residual(p=0.5)"] == [0.5 * 0.5 + 0.25, 1.0]
    assert got["judged@2"] == [0.5, 0.0]


def test_empty_inputs():
    qrels = Qrels.from_dict({"a": {"x": 1}})
    run = Run.from_dict({})
    got = engine.compute(qrels, run, ["map", "mrr@10", "bpref", "err@5"])
    assert all(v.tolist() == [0.0] for v in got.values())
    none = engine.compute(qrels, run, ["map"], qids=[])
    assert none[parse_measure("map")].shape == (0,)


def test_specs_and_measures_are_interchangeable():
    qrels = Qrels.from_dict({"a": {"x": 1}})
    run = Run.from_dict({"a": {"x": 1.0}})
    got = engine.compute(qrels, run, ["P@1", parse_measure("precision@1")])
    assert list(got) == [parse_measure("p@1")]


def test_hand_built_measures_are_validated():
    from ragjudge.measures import Measure

    qrels = Qrels.from_dict({"a": {"x": 1}})
    run = Run.from_dict({"a": {"x": 1.0}})
    assert engine.compute(qrels, run, [Measure("ndcg", (), 10)])[Measure("ndcg", (), 10)][0] == 1.0
    with pytest.raises(MetricError, match="unknown metric"):
        engine.compute(qrels, run, [Measure("nope")])
    with pytest.raises(MetricError, match="canonical"):
        engine.compute(qrels, run, [Measure("ndcg", (("gain", "linear"),), 10)])


def test_err_grade_above_max_grade_is_an_error():
    qrels = Qrels.from_dict({"a": {"x": 5}})
    run = Run.from_dict({"a": {"x": 1.0}})
    with pytest.raises(MetricError, match="max_grade"):
        engine.compute(qrels, run, ["err@5"])
    assert engine.compute(qrels, run, ["err(max_grade=5)@5"])[parse_measure("err(max_grade=5)@5")][0] > 0


def test_hash_join_retries_on_collisions_and_verifies_bytes(monkeypatch):
    qd = {"a": {"a1": 1, "b1": 2, "c1": 0}, "b": {"a1": 3}}
    rd = {"a": {"a2": 3.0, "b1": 2.0, "a1": 1.0, "c9": 0.5}, "b": {"a1": 1.0, "a3": 2.0}}
    qrels, run = build(qd, rd)
    want = engine.compute(qrels, run, MEASURES)
    from ragjudge import ids

    real = ids.hash_ids

    def weak(ids, width, seed):
        if seed == 0:  # every key collides: the join must move on to another seed
            return np.zeros(len(ids), dtype=np.uint64)
        # the first byte only: "a2" looks like "a1"; the byte check must reject it
        return ids.astype("S1").view(np.uint8).astype(np.uint64) << np.uint64(56)

    monkeypatch.setattr(ids, "hash_ids", weak)
    got = engine.compute(qrels, run, MEASURES)
    monkeypatch.setattr(ids, "hash_ids", real)
    for m in MEASURES:
        np.testing.assert_array_equal(got[m], want[m], err_msg=str(m))
    ref = reference_values(qd, rd, qrels.query_ids)
    for m in MEASURES:
        np.testing.assert_allclose(got[m], ref[m], atol=1e-12, err_msg=str(m))


# ----------------------------------------------------------------------------- pytrec_eval
_PT = {
    "map": "map", "map@5": "map_cut_5", "p@5": "P_5", "p@10": "P_10", "recall@5": "recall_5",
    "rprec": "Rprec", "mrr": "recip_rank", "ndcg": "ndcg", "ndcg@5": "ndcg_cut_5",
    "bpref": "bpref", "hit@5": "success_5", "num_ret": "num_ret", "num_rel": "num_rel",
    "num_rel_ret": "num_rel_ret",
}


@pytest.mark.slow  # peer cross-check (pytrec_eval in a subprocess)
@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval(-terrier) is not installed")
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.data_too_large])
@given(st.lists(collections(), min_size=10, max_size=40), st.sampled_from([None, 2]))
def test_matches_pytrec_eval_on_random_data(batch, rel):
    # Many small collections merged into one (query ids prefixed per collection), evaluated by
    # ONE pytrec_eval evaluator in a fresh process: see tests/_pytrec.py for why.
    qd: dict[str, dict[str, int]] = {}
    rd: dict[str, dict[str, float]] = {}
    for i, (q1, r1) in enumerate(batch):
        qd.update({f"c{i}:{q}": docs for q, docs in q1.items()})
        # pytrec_eval scores only queries present in both inputs, with at least one document.
        # It crashes (SIGSEGV) on a query whose judgments are all negative when Rprec and bpref
        # are both requested, so such queries are left out of the cross-check.
        rd.update({f"c{i}:{q}": docs for q, docs in r1.items()
                   if q in q1 and docs and any(g >= 0 for g in q1[q].values())})
    if not rd:
        return
    qrels, run = build(qd, rd)
    ref = pytrec_eval_isolated(
        qd, rd, {"map", "map_cut", "P", "recall", "Rprec", "recip_rank", "ndcg", "ndcg_cut",
                 "bpref", "success", "num_ret", "num_rel", "num_rel_ret"}, rel=rel)
    ms = {s: parse_measure(s, rel=rel) for s in _PT}
    got = engine.compute(qrels, run, list(ms.values()))
    index = {q: i for i, q in enumerate(qrels.query_ids)}
    assert set(ref) == set(rd)
    for spec, key in _PT.items():
        for q, vals in ref.items():
            assert abs(got[ms[spec]][index[q]] - vals[key]) <= 1e-9, (spec, q)
