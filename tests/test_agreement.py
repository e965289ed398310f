"""Agreement statistics pinned on hand-computed examples and against scipy where it has them."""

from __future__ import annotations

import numpy as np
import pytest

from ragjudge.agreement import cohen_kappa, kendall_tau_b, label_agreement
from ragjudge.data import Qrels


def test_cohen_kappa_hand_example() -> None:
    # p_o = 35/50 = 0.7; p_e = (25*30 + 25*20) / 50^2 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4
    assert cohen_kappa(np.array([[20, 5], [10, 15]])) == pytest.approx(0.4, abs=1e-12)


def test_weighted_kappa_hand_example() -> None:
    # 3 labels, one item each on the diagonal plus one (0 -> 2) disagreement.
    c = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]])
    # marginals rows (2,1,1), cols (1,1,2), n=4; quadratic weights (i-j)^2.
    w = np.array([[0, 1, 4], [1, 0, 1], [4, 1, 0]], dtype=float)
    obs = (w * c / 4).sum()
    exp = (w * np.outer([2, 1, 1], [1, 1, 2]) / 16).sum()
    assert cohen_kappa(c, weights="quadratic") == pytest.approx(1 - obs / exp, abs=1e-12)
    # sum(w * E) = (18 + 3 + 5) / 16 = 1.625 and sum(w * O) = 4 / 4 = 1
    assert cohen_kappa(c, weights="quadratic") == pytest.approx(1 - 1 / 1.625, abs=1e-12)


def test_kappa_undetermined_is_none_not_nan() -> None:
    assert cohen_kappa(np.zeros((2, 2))) is None
    assert cohen_kappa(np.array([[5, 0], [0, 0]])) is None


def test_kendall_tau_b_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(2, 9))
        x = rng.integers(0, 4, n).astype(float).tolist()
        y = rng.integers(0, 4, n).astype(float).tolist()
        ours = kendall_tau_b(x, y)
        ref = stats.kendalltau(x, y).statistic
        if ours is None:
            assert np.isnan(ref)
        else:
            assert ours == pytest.approx(ref, abs=1e-12)


def test_label_agreement_counts_and_binary() -> None:
    human = Qrels.from_dict({"q1": {"a": 3, "b": 0, "c": 1, "x": -1}, "q2": {"d": 2}})
    llm = Qrels.from_dict({"q1": {"a": 2, "b": 0, "c": 1, "y": 3}, "q2": {"d": 2}})
    rep = label_agreement(human, llm, rel=2)
    assert rep.common_pairs == 4
    assert rep.reference_only == 1 and rep.candidate_only == 1
    assert rep.exact_agreement == pytest.approx(3 / 4)
    # binary at rel=2: human relevant {a, d}, llm relevant {a, d} -> perfect
    assert rep.binary_precision == 1.0 and rep.binary_recall == 1.0
    assert rep.binary_kappa == pytest.approx(1.0)
    assert sum(map(sum, rep.confusion)) == 4
    assert "undetermined" not in str(rep)


def test_label_agreement_without_common_pairs_reports_reason() -> None:
    rep = label_agreement(Qrels.from_dict({"q": {"a": 1}}), Qrels.from_dict({"q": {"b": 1}}))
    assert rep.common_pairs == 0
    assert rep.cohen_kappa is None and rep.exact_agreement is None
    assert any("share no" in n for n in rep.notes)


def test_cli_agree_text_and_json(tmp_path, capsys) -> None:
    import json

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
    assert "pairs judged by both: 3" in out
    assert main(["agree", str(human), str(llm), "--run", str(run_a), "--run", str(run_b),
                 "-m", "ndcg@2,map", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["systems"]) == {"a", "b"}
    assert set(data["kendall_tau"]) == {"ndcg@2", "map"}
    assert main(["agree", str(human), str(tmp_path / "missing.qrels")]) == 2
    assert "missing.qrels" in capsys.readouterr().err
