"""Conformance with trec_eval 10.0 on its own public test files.

Each ``out.*`` file is trec_eval's stdout for a known command (see the README beside the data);
every measure ragjudge implements is compared per query and for ``all`` (the mean, or the sum
for the ``num_*`` counts) at 5e-5, since the outputs carry 4 decimals. A second test checks the
same files against pytrec_eval-terrier at 1e-9 when it is installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ragjudge.data import Qrels, Run
from ragjudge.engine import compute
from ragjudge.io import read_qrels, read_run
from ragjudge.measures import aggregate, parse_measure, spec_of

from _pytrec import pytrec_eval_isolated

try:  # a cross-check only: pytrec_eval is not a dependency of ragjudge
    import pytrec_eval
except ImportError:  # pragma: no cover - depends on the environment
    pytrec_eval = None

TOL = 5e-5

_CUT = re.compile(r"^(P|recall|map_cut|ndcg_cut|success|unj)_(\d+)$")
_CUT_NAME = {"P": "p", "recall": "recall", "map_cut": "map", "ndcg_cut": "ndcg", "success": "hit",
             "unj": "unj"}
_IPREC = re.compile(r"^iprec_at_recall_([01]\.\d+)$")
_PLAIN = {
    "map": "map",
    "Rprec": "rprec",
    "recip_rank": "mrr",
    "ndcg": "ndcg",
    "bpref": "bpref",
    "num_ret": "num_ret",
    "num_rel": "num_rel",
    "num_rel_ret": "num_rel_ret",
    "set_P": "precision",
    "set_recall": "recall",
    "set_F": "set_f",
    "infAP": "infap",
    "gm_map": "gm_map",
    "11pt_avg": "11pt_avg",
    "ndcg_1=3,2=9,4=4.5": "ndcg(gains=1:3,2:9,4:4.5)",
}

# (expected output, qrels, run, --rel, -M depth, binary qrels (trec_eval rbp comparable))
CASES = [
    ("out.test", "qrels.test", "results.test", None, None, True),
    ("out.test", "qrels.test.with-comments", "results.test", None, None, True),
    ("out.test.a", "qrels.test", "results.test", None, None, True),
    ("out.test.aq", "qrels.test", "results.test", None, None, True),
    ("out.test.aqc", "qrels.test", "results.trunc", None, None, True),
    ("out.test.aqcM", "qrels.test", "results.trunc", None, 100, True),
    ("out.test.aql", "qrels.rel_level", "results.test", 2, None, False),
    ("out.comment.test", "qrels.comment.test", "results.comment.test", None, None, False),
    ("out.test.meas_params", "qrels.test", "results.test", None, None, True),
]


def trec_name_to_spec(name: str, binary_qrels: bool) -> str | None:
    """ragjudge spec of a trec_eval output name, or None when ragjudge has no equivalent."""
    m = _CUT.match(name)
    if m:
        return f"{_CUT_NAME[m.group(1)]}@{m.group(2)}"
    m = _IPREC.match(name)
    if m:
        return f"iprec_at_recall(recall={m.group(1)})"
    if name == "rbp" and binary_qrels:
        # trec_eval's rbp uses p = 0.9 and, for graded qrels, rescales gains with min/max
        # values it never initialises; with 0/1 qrels it is plain binary RBP.
        return "rbp(p=0.9)"
    return _PLAIN.get(name)


def read_expected(path: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        name, qid, value = (part.strip() for part in line.split("\t"))
        if name == "runid" or name.startswith("relstring"):
            continue  # text-valued rows
        out.setdefault(name, {})[qid] = float(value)
    return out


def load(conformance_dir: Path, qrels_name: str, run_name: str, depth: int | None) -> tuple[Qrels, Run]:
    qrels = read_qrels(conformance_dir / qrels_name)
    run = read_run(conformance_dir / run_name)
    if depth is not None:
        run = run.top(depth)  # trec_eval -M: the top documents after sorting by score
    return qrels, run


@pytest.mark.parametrize(("out", "qrels_name", "run_name", "rel", "depth", "binary"), CASES)
def test_matches_trec_eval(conformance_dir, out, qrels_name, run_name, rel, depth, binary):
    qrels, run = load(conformance_dir, qrels_name, run_name, depth)
    expected = read_expected(conformance_dir / out)
    specs = {n: trec_name_to_spec(n, binary) for n in expected}
    specs = {n: s for n, s in specs.items() if s is not None}
    assert len(specs) >= 9 or out in ("out.test.meas_params",)
    measures = {n: parse_measure(s, rel=rel) for n, s in specs.items()}
    values = compute(qrels, run, list(measures.values()))
    qids = qrels.query_ids
    if "num_q" in expected:
        assert expected["num_q"]["all"] == len(qids)
    compared = 0
    mismatches = []
    for name, m in measures.items():
        v = values[m]
        for qid, want in expected[name].items():
            if qid == "all":
                got = aggregate(spec_of(m).aggregate, v)
            else:
                got = float(v[qids.index(qid)])
            compared += 1
            if abs(got - want) > TOL:
                mismatches.append(f"{name} ({m}) q={qid}: trec_eval {want} ragjudge {got}")
    assert not mismatches, "\n".join(mismatches[:20])
    assert compared >= len(measures)


@pytest.mark.parametrize("run_name", ["results.test", "results.trunc"])
def test_rbp_residual_matches_trec_eval_where_defined(conformance_dir, run_name):
    # trec_eval's rbp_resid (p = 0.9) is the Moffat-Zobel residual when the ranking has an
    # unjudged document and 0 otherwise; ragjudge always reports the residual, so compare the
    # queries where trec_eval defines it.
    out = "out.test.aq" if run_name == "results.test" else "out.test.aqc"
    for out_name, qrels_name in ((out, "qrels.test"), ("out.test.aql", "qrels.rel_level")):
        if out_name == "out.test.aql" and run_name != "results.test":
            continue
        qrels, run = load(conformance_dir, qrels_name, run_name, None)
        expected = read_expected(conformance_dir / out_name)["rbp_resid"]
        m = parse_measure("rbp_residual(p=0.9)")
        v = compute(qrels, run, [m])[m]
        qids = qrels.query_ids
        checked = 0
        for qid, want in expected.items():
            if qid != "all" and want != 0.0:
                assert abs(v[qids.index(qid)] - want) <= TOL, (out_name, qid)
                checked += 1
        assert checked >= 1


# ----------------------------------------------------------------------------- pytrec_eval
_PYTREC = {
    "map": "map",
    "rprec": "Rprec",
    "mrr": "recip_rank",
    "ndcg": "ndcg",
    "bpref": "bpref",
    "num_ret": "num_ret",
    "num_rel": "num_rel",
    "num_rel_ret": "num_rel_ret",
}
_CUTOFFS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_PYTREC_CUT = {"map": "map_cut", "p": "P", "recall": "recall", "ndcg": "ndcg_cut"}


def pytrec_pairs() -> list[tuple[str, str]]:
    """(ragjudge spec, pytrec_eval key) for every measure both have."""
    pairs = [(s, k) for s, k in _PYTREC.items()]
    for spec, key in _PYTREC_CUT.items():
        pairs += [(f"{spec}@{c}", f"{key}_{c}") for c in _CUTOFFS]
    pairs += [(f"hit@{c}", f"success_{c}") for c in (1, 5, 10)]
    return pairs


def pytrec_compare(qrels: Qrels, run: Run, rel: int | None, tol: float) -> int:
    pairs = pytrec_pairs()
    ref = pytrec_eval_isolated(
        qrels.to_dict(),
        run.to_dict(),
        {"map", "map_cut", "P", "recall", "Rprec", "recip_rank", "ndcg", "ndcg_cut", "bpref",
         "success", "num_ret", "num_rel", "num_rel_ret"},
        rel=rel,
    )
    measures = {spec: parse_measure(spec, rel=rel) for spec, _ in pairs}
    values = compute(qrels, run, list(measures.values()))
    index = {q: i for i, q in enumerate(qrels.query_ids)}
    compared = 0
    for spec, key in pairs:
        v = values[measures[spec]]
        for qid, scores in ref.items():  # pytrec_eval scores queries in both inputs only
            got = float(v[index[qid]])
            assert abs(got - scores[key]) <= tol, (spec, key, qid, got, scores[key])
            compared += 1
    return compared


@pytest.mark.slow  # peer cross-check (pytrec_eval in a subprocess)
@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval(-terrier) is not installed")
@pytest.mark.parametrize(
    ("qrels_name", "run_name", "rel"),
    [
        ("qrels.test", "results.test", None),
        ("qrels.test", "results.trunc", None),
        ("qrels.rel_level", "results.test", 2),
        ("qrels.rel_level", "results.test", None),
        ("qrels.comment.test", "results.comment.test", None),
    ],
)
def test_matches_pytrec_eval_exactly(conformance_dir, qrels_name, run_name, rel):
    qrels, run = load(conformance_dir, qrels_name, run_name, None)
    assert pytrec_compare(qrels, run, rel, 1e-9) > 50


def test_missing_query_gets_empty_ranking_value(conformance_dir):
    # trec_eval -c: a qrels query with no ranking counts, with its empty-ranking values.
    qrels, run = load(conformance_dir, "qrels.test", "results.trunc", None)
    present = set(run.query_ids)
    missing = [q for q in qrels.query_ids if q not in present]
    assert missing, "results.trunc is expected to leave a query out"
    ms = [parse_measure(s) for s in ("map", "ndcg", "num_rel", "num_ret", "rbp_residual")]
    values = compute(qrels, run, ms)
    i = qrels.query_ids.index(missing[0])
    assert values[ms[0]][i] == 0.0 and values[ms[1]][i] == 0.0 and values[ms[3]][i] == 0.0
    assert values[ms[2]][i] == len([g for g in qrels.get(missing[0]).values() if g >= 1])
    assert values[ms[4]][i] == 1.0  # nothing retrieved: all RBP weight is residual
    assert np.all(np.isfinite(values[ms[0]]))


def test_trec_eval_measures_beyond_the_core_are_compared(conformance_dir):
    # The cases above compare these against trec_eval; make sure they stay mapped.
    expected = read_expected(conformance_dir / "out.test.aq")
    for name in ("infAP", "gm_map", "unj_5", "iprec_at_recall_0.50", "11pt_avg", "set_F"):
        assert name in expected and trec_name_to_spec(name, True) is not None, name
    params = read_expected(conformance_dir / "out.test.meas_params")
    assert trec_name_to_spec("ndcg_1=3,2=9,4=4.5", True) in (None, "ndcg(gains=1:3,2:9,4:4.5)")
    assert "ndcg_1=3,2=9,4=4.5" in params


def test_max_depth_option_is_trec_eval_M(conformance_dir):
    # trec_eval -c -M100 through evaluate(depth=100), not a pre-truncated run
    from ragjudge import evaluate

    qrels = read_qrels(conformance_dir / "qrels.test")
    expected = read_expected(conformance_dir / "out.test.aqcM")
    names = ["map", "P_100", "num_ret", "ndcg", "bpref", "recall_1000"]
    rep = evaluate(qrels, conformance_dir / "results.trunc", [trec_name_to_spec(n, True) for n in names],
                   max_depth=100)
    for n in names:
        for qid, want in expected[n].items():
            key = trec_name_to_spec(n, True)
            got = rep.mean[key] if qid == "all" else rep.per_query[qid][key]
            assert abs(got - want) <= TOL, (n, qid, got, want)
    assert rep.meta["max_depth"] == 100


@pytest.mark.slow  # peer cross-check (pytrec_eval in a subprocess)
@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval(-terrier) is not installed")
@pytest.mark.parametrize(("qrels_name", "rel"), [("qrels.rel_level", None), ("qrels.rel_level", 2),
                                                 ("qrels.test", None)])
def test_judged_only_matches_pytrec_eval_J(conformance_dir, qrels_name, rel):
    # trec_eval -J (judged documents only); pytrec_eval's judged_docs_only_flag is the same code
    qrels, run = load(conformance_dir, qrels_name, "results.test", None)
    pairs = [("map", "map"), ("ndcg@10", "ndcg_cut_10"), ("p@5", "P_5"), ("mrr", "recip_rank"),
             ("bpref", "bpref"), ("num_ret", "num_ret"), ("rprec", "Rprec"), ("recall@100", "recall_100")]
    ref = pytrec_eval_isolated(qrels.to_dict(), run.to_dict(),
                               {"map", "ndcg_cut", "P", "recip_rank", "bpref", "num_ret", "Rprec",
                                "recall"}, rel=rel, judged_only=True)
    measures = {spec: parse_measure(spec, rel=rel) for spec, _ in pairs}
    values = compute(qrels, run, list(measures.values()), judged_only=True)
    plain = compute(qrels, run, [measures["num_ret"]])
    index = {q: i for i, q in enumerate(qrels.query_ids)}
    for spec, key in pairs:
        for qid, scores in ref.items():
            got = float(values[measures[spec]][index[qid]])
            assert abs(got - scores[key]) <= 1e-9, (spec, qid, got, scores[key])
    assert values[measures["num_ret"]].sum() < plain[measures["num_ret"]].sum()


@pytest.mark.slow  # peer cross-check (pytrec_eval in a subprocess)
@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval(-terrier) is not installed")
def test_new_trec_measures_match_pytrec_eval_on_random_collections():
    # ties (few distinct scores), negative labels, empty and one-document rankings; pytrec_eval
    # embeds trec_eval 9, hence rounding=trec9 for the recall levels
    import random

    from ragjudge import evaluate

    specs = {"infAP": "infap", "set_F": "set_f", "11pt_avg": "11pt_avg(rounding=trec9)",
             "map": "gm_map"}
    for x in range(11):
        specs[f"iprec_at_recall_{x / 10:.2f}"] = f"iprec_at_recall(recall={x / 10},rounding=trec9)"
    compared = 0
    for seed in range(12):
        rnd = random.Random(seed)
        qrels, run = {}, {}
        for q in range(8):
            docs = [f"d{i}" for i in range(25)]
            qrels[f"q{q}"] = {d: rnd.choice([-1, 0, 0, 1, 1, 2, 3])
                              for d in rnd.sample(docs, rnd.randint(1, 15))}
            run[f"q{q}"] = {d: float(rnd.randint(0, 8)) for d in rnd.sample(docs, rnd.randint(1, 20))}
        ref = pytrec_eval_isolated(qrels, run, {"infAP", "set_F", "iprec_at_recall", "11pt_avg", "map"})
        rep = evaluate(qrels, run, list(specs.values()), skip_missing=True)
        for key, spec in specs.items():
            for qid, vals in ref.items():
                assert abs(vals[key] - rep.per_query[qid][spec]) <= 1e-9, (seed, qid, key)
                compared += 1
    assert compared > 1000
