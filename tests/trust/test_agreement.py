"""Agreement statistics pinned on hand-computed examples and against scipy / krippendorff."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragjudge.trust.agreement import cohen_kappa, kendall_tau_b, label_agreement, ranking_agreement
from ragjudge.data import Qrels, Run
from ragjudge.errors import InputError
from ragjudge.trust import (
    krippendorff_alpha_ordinal,
    rank_biased_overlap,
    spearman_rho,
    tau_ap,
)


def test_cohen_kappa_hand_example() -> None:
    # p_o = 35/50 = 0.7; p_e = (25*30 + 25*20) / 50^2 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4
    assert cohen_kappa(np.array([[20, 5], [10, 15]])) == pytest.approx(0.4, abs=1e-12)


def test_weighted_kappa_hand_example() -> None:
    c = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]])
    # marginals rows (2,1,1), cols (1,1,2), n=4; quadratic weights (i-j)^2:
    # sum(w * E) = (18 + 3 + 5) / 16 = 1.625 and sum(w * O) = 4 / 4 = 1
    assert cohen_kappa(c, weights="quadratic") == pytest.approx(1 - 1 / 1.625, abs=1e-12)


def _weighted_kappa_reference(a: np.ndarray, b: np.ndarray, power: int) -> float:
    """Cohen (1968) straight from the definition, per item: 1 - mean(d(a_i,b_i)) / mean over
    all (i, j) of d(a_i, b_j), d = |x - y|^power."""
    obs = np.mean(np.abs(a - b) ** power)
    exp = np.mean(np.abs(a[:, None] - b[None, :]) ** power)
    return 1 - obs / exp


def test_weighted_kappas_match_the_definition() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        a = rng.integers(0, 4, 40)
        b = np.clip(a + rng.integers(-1, 2, 40), 0, 3)
        conf = np.zeros((4, 4))
        np.add.at(conf, (a, b), 1)
        for w, power in (("linear", 1), ("quadratic", 2)):
            assert cohen_kappa(conf, weights=w) == pytest.approx(
                _weighted_kappa_reference(a, b, power), abs=1e-12)
        unweighted = 1 - np.mean(a != b) / np.mean(a[:, None] != b[None, :])
        assert cohen_kappa(conf) == pytest.approx(unweighted, abs=1e-12)


def test_kappa_undetermined_is_none_not_nan() -> None:
    assert cohen_kappa(np.zeros((2, 2))) is None
    assert cohen_kappa(np.array([[5, 0], [0, 0]])) is None


def test_krippendorff_alpha_matches_the_krippendorff_package() -> None:
    kd = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        a = rng.integers(0, 4, n)
        b = np.clip(a + rng.integers(-2, 3, n), 0, 3)
        conf = np.zeros((4, 4))
        np.add.at(conf, (a, b), 1)
        ref = kd.alpha(reliability_data=np.vstack([a, b]).astype(float), level_of_measurement="ordinal")
        ours = krippendorff_alpha_ordinal(conf)
        assert ours == pytest.approx(ref, abs=1e-9)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:An input array is constant")
def test_rank_correlations_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(2, 9))
        x = rng.integers(0, 4, n).astype(float).tolist()
        y = rng.integers(0, 4, n).astype(float).tolist()
        for ours, ref in ((kendall_tau_b(x, y), stats.kendalltau(x, y).statistic),
                          (spearman_rho(x, y), stats.spearmanr(x, y).statistic)):
            if ours is None:
                assert np.isnan(ref)
            else:
                assert ours == pytest.approx(ref, abs=1e-12)


def test_tau_ap_hand_examples_weight_the_top() -> None:
    ref = [4.0, 3.0, 2.0, 1.0]  # A > B > C > D
    # swap at the top: B A C D -> C(2)=0, C(3)=2, C(4)=3: 2/3 * (0 + 1 + 1) - 1 = 1/3
    assert tau_ap(ref, [3.0, 4.0, 2.0, 1.0]) == pytest.approx(1 / 3)
    # swap at the bottom: A B D C -> 1 + 1 + 2/3: 2/3 * 8/3 - 1 = 7/9
    assert tau_ap(ref, [4.0, 3.0, 1.0, 2.0]) == pytest.approx(7 / 9)
    # Kendall's tau cannot tell the two apart
    assert kendall_tau_b(ref, [3.0, 4.0, 2.0, 1.0]) == kendall_tau_b(ref, [4.0, 3.0, 1.0, 2.0])
    assert tau_ap(ref, ref) == 1.0 and tau_ap(ref, ref[::-1]) == -1.0


def test_rbo_matches_its_definition() -> None:
    p = 0.9
    assert rank_biased_overlap([3, 2, 1], [3, 2, 1], p) == pytest.approx(1.0)
    x, y = [5.0, 4.0, 3.0, 2.0, 1.0], [4.0, 5.0, 1.0, 3.0, 2.0]
    ra, rb = list(np.argsort(-np.array(x))), list(np.argsort(-np.array(y)))
    k = len(x)
    overlap = [len(set(ra[:d]) & set(rb[:d])) for d in range(1, k + 1)]
    ref = overlap[-1] / k * p**k + (1 - p) / p * sum(overlap[d - 1] / d * p**d for d in range(1, k + 1))
    assert rank_biased_overlap(x, y, p) == pytest.approx(ref, abs=1e-12)


def test_label_agreement_counts_binary_leniency_and_row_percent() -> None:
    human = Qrels.from_dict({"q1": {"a": 3, "b": 0, "c": 1, "x": -1}, "q2": {"d": 2}})
    llm = Qrels.from_dict({"q1": {"a": 2, "b": 0, "c": 1, "y": 3}, "q2": {"d": 2}})
    rep = label_agreement(human, llm, rel=2)
    assert rep.common_pairs == 4 and rep.common_queries == 2
    assert rep.reference_only == 1 and rep.candidate_only == 1
    assert rep.exact_agreement == pytest.approx(3 / 4)
    # binary at rel=2: human relevant {a, d}, llm relevant {a, d} -> perfect
    assert rep.binary_precision == 1.0 and rep.binary_recall == 1.0
    assert rep.binary_kappa == pytest.approx(1.0)
    assert sum(map(sum, rep.confusion)) == 4
    assert rep.labels == (0, 1, 2, 3)
    assert rep.leniency == pytest.approx((2 + 0 + 1 + 2 - 3 - 0 - 1 - 2) / 4)
    assert rep.leniency_by_grade[3].value == pytest.approx(-1.0)
    assert rep.row_percent[3][2].value == pytest.approx(100.0)
    assert "undetermined" not in str(rep)


def test_intervals_are_seeded_and_bracket_the_point_value() -> None:
    rng = np.random.default_rng(0)
    true = {f"q{i}": {f"d{j}": int(rng.integers(0, 4)) for j in range(8)} for i in range(30)}
    noisy = {q: {d: int(np.clip(g + rng.integers(-1, 2), 0, 3)) for d, g in docs.items()}
             for q, docs in true.items()}
    h, c = Qrels.from_dict(true), Qrels.from_dict(noisy)
    a = label_agreement(h, c, seed=1, n_resamples=300)
    b = label_agreement(h, c, seed=1, n_resamples=300)
    assert a.to_dict() == b.to_dict()
    for name, iv in a.stats.items():
        assert iv.ci_low <= iv.value <= iv.ci_high, name
    assert label_agreement(h, c, seed=2, n_resamples=300).stats["cohen_kappa"] != a.stats["cohen_kappa"]


def test_no_common_query_or_grade_outside_scale_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no query in common"):
        label_agreement(Qrels.from_dict({"q1": {"a": 1}}), Qrels.from_dict({"q2": {"a": 1}}))
    with pytest.raises(InputError, match="outside the scale 0-3"):
        label_agreement(Qrels.from_dict({"q": {"a": 4}}), Qrels.from_dict({"q": {"a": 1}}), scale=(0, 3))


def test_label_agreement_without_common_pairs_reports_reason() -> None:
    rep = label_agreement(Qrels.from_dict({"q": {"a": 1}}), Qrels.from_dict({"q": {"b": 1}}))
    assert rep.common_pairs == 0
    assert rep.cohen_kappa is None and rep.exact_agreement is None
    assert any("share no" in n for n in rep.notes)
    json.loads(rep.to_json())  # no NaN anywhere


def _collection(n_q: int = 40, seed: int = 0) -> tuple[Qrels, dict[str, Run]]:
    """Three runs of clearly different quality over ``n_q`` queries."""
    rng = np.random.default_rng(seed)
    qrels = {f"q{i:02d}": {f"d{j}": int(g) for j, g in enumerate(rng.integers(0, 4, 20))}
             for i in range(n_q)}
    runs = {}
    for name, noise in (("good", 0.5), ("mid", 2.0), ("bad", 8.0)):
        runs[name] = Run.from_dict({
            q: {d: float(g) + noise * float(rng.standard_normal()) for d, g in docs.items()}
            for q, docs in qrels.items()}, name=name)
    return Qrels.from_dict(qrels), runs


def test_ranking_agreement_finds_swapped_significant_pairs() -> None:
    human, runs = _collection()
    # The "LLM" labels reverse the grades: the best system under humans becomes the worst.
    reversed_ = Qrels.from_dict({q: {d: 3 - g for d, g in docs.items()}
                                 for q, docs in human.to_dict().items()})
    rep = ranking_agreement(human, reversed_, runs, ["ndcg@10"], n_resamples=200)
    sw = rep.swaps["ndcg@10"]
    assert sw["significant_pairs"] == 3 and sw["swapped"] == 3
    assert rep.kendall_tau["ndcg@10"] == pytest.approx(-1.0)
    same = ranking_agreement(human, human, runs, ["ndcg@10", "map"], n_resamples=200)
    assert same.swaps["map"]["swapped"] == 0 and same.swaps["map"]["significant_pairs"] == 3
    for stat in ("kendall_tau_b", "tau_ap", "spearman_rho", "rbo"):
        assert same.ranking["ndcg@10"][stat].value == pytest.approx(1.0)
    df = same.to_dataframe()
    assert set(df["level"]) == {"label", "ranking"}
    assert "<table" in same._repr_html_()
    assert "tau-ap" in str(same)


def test_cli_agree_text_json_and_errors(tmp_path, capsys) -> None:
    from ragjudge.cli import main

    human = tmp_path / "human.qrels"
    llm = tmp_path / "llm.qrels"
    human.write_text("q1 0 a 3\nq1 0 b 0\nq2 0 c 1\n")
    llm.write_text("q1 0 a 2\nq1 0 b 0\nq2 0 c 1\nq2 0 d 2\n")
    run_a = tmp_path / "a.run"
    run_b = tmp_path / "b.run"
    run_a.write_text("q1 Q0 a 1 2.0 a\nq1 Q0 b 2 1.0 a\nq2 Q0 c 1 1.0 a\n")
    run_b.write_text("q1 Q0 b 1 2.0 b\nq1 Q0 a 2 1.0 b\nq2 Q0 d 1 1.0 b\n")
    assert main(["agree", str(human), str(llm)]) == 0
    out = capsys.readouterr().out
    assert "3 pairs judged by both" in out and "95% CI" in out
    assert main(["agree", str(human), str(llm), "--run", str(run_a), "--run", str(run_b),
                 "-m", "ndcg@2,map", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["systems"]) == {"a", "b"}
    assert set(data["kendall_tau"]) == {"ndcg@2", "map"}
    assert set(data["stats"]["cohen_kappa"]) == {"value", "ci_low", "ci_high"}
    assert main(["agree", str(human), str(tmp_path / "missing.qrels")]) == 2
    assert "missing.qrels" in capsys.readouterr().err
    other = tmp_path / "other.qrels"
    other.write_text("x9 0 a 1\n")
    assert main(["agree", str(human), str(other)]) == 2
    err = capsys.readouterr().err
    assert "no query in common" in err and err.count("\n") == 1
    assert main(["agree", str(human), str(llm), "--scale", "0-2"]) == 2
    assert "outside the scale" in capsys.readouterr().err
    assert main(["agree", str(human), str(llm), "--rel", "0"]) == 2
    capsys.readouterr()


def test_swaps_with_many_runs_and_either_test() -> None:
    human, runs = _collection(60, seed=3)
    rng = np.random.default_rng(9)
    many = {f"r{i}": Run.from_dict({q: {d: float(g) + noise * float(rng.standard_normal())
                                        for d, g in docs.items()} for q, docs in human.to_dict().items()},
                                   name=f"r{i}")
            for i, noise in enumerate(np.linspace(0.3, 12.0, 16))}
    rep = ranking_agreement(human, human, many, ["ndcg@10"], n_resamples=100)
    # 120 pairs: Holm asks p < 0.05/120 of the best pair, beyond a 10,000-flip randomization test
    assert rep.swaps["ndcg@10"]["significant_pairs"] > 20 and rep.swaps["ndcg@10"]["swapped"] == 0
    rnd = ranking_agreement(human, human, runs, ["ndcg@10"], n_resamples=100, test="randomization")
    assert rnd.swaps["ndcg@10"]["significant_pairs"] == 3 and rnd.settings["test"] == "randomization"
    with pytest.raises(InputError, match="test"):
        ranking_agreement(human, human, runs, ["ndcg@10"], test="wilcoxon")
