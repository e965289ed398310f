"""Prediction-powered estimates: formulas pinned by hand, the API, the CLI and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragjudge.data import Qrels, Run
from ragjudge.errors import InputError
from ragjudge.trust.ppi import (  # noqa: I001
    ppi_means,
    parse_scores,
    plan_labels,
    ppi_evaluate,
    ppi_mean,
    ppi_samples,
    t_quantile,
)


def test_t_quantile_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 4, 19, 99, 1e6):
        assert t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-9)


def _pilot(n_all: int = 200, n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    truth = rng.beta(2, 3, n_all)
    llm = np.clip(0.6 * truth + 0.3 + rng.normal(0, 0.08, n_all), 0, 1)  # biased, correlated
    idx = rng.choice(n_all, n, replace=False)
    return truth, llm, idx


def _plus_four(r: np.ndarray, y: np.ndarray, f: np.ndarray, ddof: int = 1) -> float:
    """The residual variance with two pseudo-residuals of weight 2, one spread away."""
    c2 = max(np.var(y, ddof=1), np.var(f, ddof=1))
    return float((((r - r.mean()) ** 2).sum() + 4 * c2) / (len(r) - ddof + 4))


def test_classic_ppi_is_the_rectified_llm_mean() -> None:
    truth, llm, idx = _pilot()
    y, f = truth[idx], llm[idx]
    est = ppi_mean(y, f, llm, method="ppi")
    assert est.lam == 1.0
    assert est.mean == pytest.approx(llm.mean() + (y - f).mean(), abs=1e-12)
    n, big_n = len(y), len(llm)
    se = np.sqrt((1 - n / big_n) * _plus_four(y - f, y, f) / n)
    assert est.ci_high - est.mean == pytest.approx(t_quantile(0.95, n - 1) * se, abs=1e-12)
    assert est.n_human == 40 and est.n_llm == 200


def test_ppi_plus_plus_lambda_and_never_wider_than_human_only() -> None:
    truth, llm, idx = _pilot()
    y, f = truth[idx], llm[idx]
    est = ppi_mean(y, f, llm)
    assert est.lam == pytest.approx(np.cov(y, f)[0, 1] / np.var(f, ddof=1), abs=1e-12)
    assert est.mean == pytest.approx(est.lam * llm.mean() + (y - est.lam * f).mean(), abs=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(200):  # any data at all, even an anti-correlated judge
        y = rng.random(30)
        f = rng.random(30) * rng.choice([-1, 1]) + rng.random() * y
        for pop in ("finite", "infinite"):
            e = ppi_mean(y, f, np.concatenate([f, rng.random(100)]), population=pop)
            assert e.width <= e.human_only.ci_high - e.human_only.ci_low + 1e-12


def test_the_population_estimand_adds_the_queries_own_variance() -> None:
    # The labelled queries are among the N: theta - mu = (mean_N(Y) - mu) + (theta - mean_N(Y)),
    # uncorrelated, so Var = (1 - n/N) s^2(Y - lambda f) / n + s^2(Y) / N, and lambda* is the
    # collection's (the added term does not depend on lambda).
    truth, llm, idx = _pilot()
    y, f = truth[idx], llm[idx]
    n, big_n = len(y), len(llm)
    e = ppi_mean(y, f, llm, population="infinite", method="ppi")
    se = np.sqrt((1 - n / big_n) * _plus_four(y - f, y, f) / n + _plus_four(y, y, f) / big_n)
    assert e.ci_high - e.mean == pytest.approx(t_quantile(0.95, n - 1) * se, abs=1e-12)
    assert e.estimand == "population" and e.to_dict()["estimand"] == "population"
    lam = ppi_mean(y, f, llm, population="infinite").lam
    assert lam == pytest.approx(np.cov(y, f)[0, 1] / np.var(f, ddof=1))


def test_perfect_agreement_on_few_labels_never_gives_a_point() -> None:
    rng = np.random.default_rng(0)
    llm = (rng.random(200) < 0.48).astype(float)
    y = llm[:10].copy()  # the LLM agrees with every one of the 10 human labels
    for pop in ("finite", "infinite"):
        e = ppi_mean(y, y, llm, population=pop)
        assert e.width > 0.05 and e.binary
        assert e.ci_low <= e.mean <= e.ci_high


@pytest.mark.parametrize("population", ["finite", "infinite"])
@pytest.mark.parametrize("err", [0.0, 0.05])
def test_both_estimands_cover_their_truth_by_simulation(population: str, err: float) -> None:
    """Fixed-seed studies: N = 200 queries drawn from a population with mean 0.48, a judge
    flipping ``err`` of the labels, n = 30 human labels; the interval covers its own estimand
    (the collection's mean, or 0.48) about 95% of the time."""
    studies, big_n, n, p = 1500, 200, 30, 0.48
    rng = np.random.default_rng(42)
    Y = (rng.random((studies, big_n)) < p).astype(float)
    F = np.where(rng.random((studies, big_n)) < err, 1.0 - Y, Y)
    idx = np.argsort(rng.random((studies, big_n)), axis=1)[:, :n]
    y, f = np.take_along_axis(Y, idx, 1), np.take_along_axis(F, idx, 1)
    r = ppi_means(y, f, F.mean(1), F.var(1, ddof=1), big_n, population=population)
    truth = Y.mean(1) if population == "finite" else np.full(studies, p)
    coverage = np.mean((r["ci_low"] <= truth) & (truth <= r["ci_high"]))
    assert 0.93 <= coverage <= 1.0
    assert (r["ci_high"] - r["ci_low"] > 0).all()


def test_all_queries_human_labelled_gives_the_human_mean_exactly() -> None:
    truth, llm, _ = _pilot(50, 50)
    e = ppi_mean(truth, llm, llm)
    assert e.mean == pytest.approx(truth.mean()) and e.width == pytest.approx(0.0, abs=1e-12)


def test_bad_input_is_one_line() -> None:
    with pytest.raises(InputError, match="at least 2"):
        ppi_mean([0.5], [0.4], [0.4, 0.3])
    with pytest.raises(InputError, match="no query in common"):
        ppi_evaluate(Qrels.from_dict({"q1": {"a": 1}}), [Run.from_dict({"q1": {"a": 1.0}})], ["ndcg@10"],
                     Qrels.from_dict({"q2": {"a": 1}}))
    with pytest.raises(InputError):
        ppi_mean([0.5, float("nan")], [0.4, 0.2], [0.4, 0.3])


def test_plan_labels_hits_the_target_width_in_simulation() -> None:
    rng = np.random.default_rng(4)
    big_n = 2000
    truth = rng.beta(2, 3, big_n)
    llm = np.clip(0.7 * truth + 0.2 + rng.normal(0, 0.1, big_n), 0, 1)
    pilot = rng.choice(big_n, 60, replace=False)
    plan = plan_labels(truth[pilot], llm[pilot], big_n, 0.06)
    assert plan["n_ppi"] < plan["n_human_only"]
    widths = []
    for _ in range(200):
        idx = rng.choice(big_n, plan["n_ppi"], replace=False)
        widths.append(ppi_mean(truth[idx], llm[idx], llm).width)
    assert np.mean(widths) == pytest.approx(0.06, rel=0.15)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _files(tmp_path):
    rng = np.random.default_rng(0)
    human, llm, run_a, run_b = [], [], [], []
    for q in range(30):
        for d in range(10):
            g = int(rng.integers(0, 4))
            llm.append(f"q{q} 0 d{d} {min(3, g + int(rng.integers(0, 2)))}")
            if q < 12:
                human.append(f"q{q} 0 d{d} {g}")
            run_a.append(f"q{q} Q0 d{d} {d + 1} {10 - d} a")
            run_b.append(f"q{q} Q0 d{9 - d} {d + 1} {10 - d} b")
    return (_write(tmp_path, "llm.qrels", "\n".join(llm)), _write(tmp_path, "human.qrels", "\n".join(human)),
            _write(tmp_path, "a.run", "\n".join(run_a)), _write(tmp_path, "b.run", "\n".join(run_b)))


def test_cli_evaluate_ppi_json_keeps_llm_mean_and_adds_ppi(tmp_path, capsys) -> None:
    from ragjudge.cli import main

    llm, human, a, b = _files(tmp_path)
    assert main(["evaluate", llm, a, b, "-m", "ndcg@10", "--human", human, "--ppi", "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["run"] for d in data] == ["a", "b"]
    assert main(["evaluate", llm, a, "-m", "ndcg@10", "-f", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert data[0]["mean"]["ndcg@10"] == pytest.approx(plain["mean"]["ndcg@10"])
    block = data[0]["ppi"]["ndcg@10"]
    assert {"mean", "ci_low", "ci_high", "n_human", "n_llm", "lambda"} <= set(block)
    assert block["n_human"] == 12 and block["n_llm"] == 30
    assert block["ci_low"] <= block["mean"] <= block["ci_high"]
    assert "ppi_delta" in data[1] and "ppi_delta" not in data[0]
    assert main(["evaluate", llm, a, "-m", "ndcg@10", "--human", human, "--ppi-classic"]) == 0
    out = capsys.readouterr().out
    assert "PPI" in out and "human labels on 12" in out


def test_cli_plan_labels_and_errors(tmp_path, capsys) -> None:
    from ragjudge.cli import main

    llm, human, a, _ = _files(tmp_path)
    assert main(["plan-labels", llm, a, "--human", human, "--width", "0.1", "-f", "json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans[0]["n_pilot"] == 12 and plans[0]["n_ppi"] >= 2
    assert main(["evaluate", llm, a, "--ppi"]) == 2
    assert "--human" in capsys.readouterr().err
    one = _write(tmp_path, "one.qrels", "q1 0 d1 1\n")
    assert main(["evaluate", llm, a, "--human", one, "--ppi"]) == 2
    err = capsys.readouterr().err
    assert "at least 2" in err and err.count("\n") == 1
    assert main(["evaluate", llm, a, "--human", human, "--ppi", "--scale", "0-2"]) == 2
    err = capsys.readouterr().err
    assert "outside the scale 0-2" in err and err.count("\n") == 1
    other = _write(tmp_path, "other.qrels", "zz 0 d1 1\nyy 0 d1 1\n")
    assert main(["evaluate", llm, a, "--human", other, "--ppi"]) == 2
    assert "no query in common" in capsys.readouterr().err


def test_rag_samples_ppi_from_scores_files(tmp_path, capsys) -> None:
    rng = np.random.default_rng(2)
    truth = rng.random(80)
    llm = np.clip(truth + 0.2 + rng.normal(0, 0.05, 80), 0, 1)
    rag_json = {"aggregates": [], "samples": [
        {"sample": f"s{i}", "scores": {"faithfulness": {"value": float(v)}}} for i, v in enumerate(llm)]}
    rag_json["samples"][3]["scores"]["faithfulness"] = {"value": None, "reason": "no answer"}
    llm_path = _write(tmp_path, "llm.json", json.dumps(rag_json))
    human_csv = "id,faithfulness\n" + "\n".join(f"s{i},{truth[i]}" for i in range(10, 40))
    human_path = _write(tmp_path, "human.csv", human_csv)
    est = ppi_samples(parse_scores(open(llm_path).read()), parse_scores(human_csv))
    e = est["faithfulness"]
    assert e.n_human == 30 and e.n_llm == 79
    assert e.ci_low <= truth.mean() <= e.ci_high
    assert not e.llm_only.ci_low <= truth.mean() <= e.llm_only.ci_high  # biased judge
    jsonl = "\n".join(json.dumps({"sample": f"s{i}", "faithfulness": truth[i]}) for i in range(10, 40))
    assert parse_scores(jsonl) == parse_scores(human_csv)
    from ragjudge.cli import main

    assert main(["ppi-samples", llm_path, "--human", human_path, "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ppi"]["faithfulness"]["mean"] == pytest.approx(e.mean)
    bad = _write(tmp_path, "bad.csv", "id,faithfulness\ns1,high\n")
    assert main(["ppi-samples", llm_path, "--human", bad]) == 2
    assert "bad.csv:2: faithfulness" in capsys.readouterr().err


def test_ppi_evaluate_report_views(tmp_path) -> None:
    from ragjudge.io import read_qrels, read_run

    llm, human, a, b = _files(tmp_path)
    rep = ppi_evaluate(read_qrels(llm), [read_run(a), read_run(b)], ["ndcg@10", "p@5"],
                       read_qrels(human), baseline="b")
    assert set(rep.differences) == {"a"} and rep.baseline == "b"
    e = rep.estimates["a"]["p@5"]
    assert e.human_only.ci_high - e.human_only.ci_low >= e.width
    df = rep.to_dataframe()
    assert len(df) == 2 * 2 + 2  # runs x metrics + differences x metrics
    assert "<table" in rep._repr_html_() and "PPI++" in str(rep)
    data = json.loads(rep.to_json())
    assert data["runs"][0]["meta"]["ppi"]["n_human"] == 12
    with pytest.raises(InputError, match="baseline"):
        ppi_evaluate(read_qrels(llm), [read_run(a)], ["ndcg@10"], read_qrels(human), baseline="zz")


def test_ppi_samples_takes_a_rag_report() -> None:
    from pathlib import Path

    from ragjudge import evaluate_samples_sync

    samples = Path(__file__).resolve().parents[2] / "examples" / "rag_samples.jsonl"
    rep = evaluate_samples_sync(str(samples), ["ndcg@5"])  # deterministic: no LLM involved
    values = rep.values("ndcg@5")
    # "human" scores of 15 samples that are 0.1 below the automatic ones
    human = {sid: {"ndcg@5": v - 0.1} for sid, v in list(zip(rep.sample_ids, values))[:15]}
    e = ppi_samples(rep, human)["ndcg@5"]
    assert e.n_human == 15 and e.n_llm == len(values)
    assert e.mean == pytest.approx(np.mean(values) - 0.1)  # an exact offset is corrected exactly


def test_the_cli_states_and_chooses_the_estimand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main
    from ragjudge.io import read_qrels, write_qrels

    ex = Path(__file__).resolve().parents[2] / "examples"
    h = read_qrels(ex / "qrels.txt")
    write_qrels(h.filter(sorted(h.query_ids)[:20]), tmp_path / "human.qrels", format="trec")
    run = str(ex / "runs" / "bm25_raw.run")
    base = ["evaluate", str(ex / "qrels.txt"), run, "-m", "ndcg@10", "--human", str(tmp_path / "human.qrels"), "--ppi"]
    assert main([*base, "--estimand", "population", "-f", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ppi"]["ndcg@10"]["estimand"] == "population" and out["meta"]["ppi"]["estimand"] == "population"
    assert main(base) == 0
    assert "estimand: collection" in capsys.readouterr().out
    assert main([*base, "--estimand", "population", "--population", "finite"]) == 2
    assert "disagree" in capsys.readouterr().err


def test_ppi_samples_says_a_rag_report_lacks_per_sample_scores() -> None:
    report = json.dumps({"aggregates": [{"metric": "hit@1", "mean": 0.7}], "meta": {}}, indent=2)
    with pytest.raises(InputError) as info:
        parse_scores(report, "r.json")
    assert "without per-sample scores" in str(info.value) and "-q" in str(info.value)


@pytest.mark.slow
def test_exactness_leftovers_from_trec_eval_and_ir_measures() -> None:
    import ir_measures

    from ragjudge import evaluate

    q = {"q": {"d": 1, "e": 1, "x": 0}}
    r = {"q": {"d": 1.0, "x": 0.5, "z": 0.2}}
    got = evaluate(q, r, [ir_measures.NumRelRet, "NumRelRet", "set_F.0", "set_P"]).mean
    assert list(got.values()) == [1.0, 1.0, pytest.approx(1 / 3), pytest.approx(1 / 3)]


# ----------------------------------------------------------------------------- score files, oddities
@pytest.mark.parametrize("text, where", [
    ('{"id": "a", "hit": 1}\n{"id": "b", "hit": NaN}\n', ":2: hit: not a finite number: nan"),  # was dropped silently
    ('{"id": "a", "hit": 1}\n{"id": "b", "hit": Infinity}\n', ":2: hit: not a finite number: inf"),
    ('{"id": "a", "hit": 1}\n{"id": "a", "hit": 0}\n', ":2: id: 'a' is given twice, with other values"),  # last won
    ('{"id": "a", "hit": 1}\n[1, 2]\n', ":2: expected a JSON object, got list"),
    ("id,hit,mrr\na,1,1\nb,0\n", ":3: columns: expected 3 columns (id, hit, mrr), got 2"),  # "no item in common"
])
def test_a_score_file_that_would_lose_or_move_a_label_is_one_line(text: str, where: str) -> None:
    from ragjudge.trust.ppi import parse_scores

    with pytest.raises(InputError) as info:
        parse_scores(text, source="s")
    assert str(info.value).startswith(f"s{where}")
    # The same line twice counts once; null and an empty CSV field are undetermined.
    assert parse_scores('{"id": "a", "hit": 1}\n{"id": "a", "hit": 1}\n{"id": "b", "hit": null}\n', "s") == \
        {"a": {"hit": 1.0}, "b": {"hit": None}}
    assert parse_scores("id,hit\na,\n", "s") == {"a": {"hit": None}}


def test_human_scores_on_another_scale_are_said() -> None:
    from ragjudge.trust.ppi import ppi_samples

    llm = {f"s{i}": {"hit": float(i % 2)} for i in range(40)}
    human = {f"s{i}": {"hit": float(i % 2)} for i in range(12)}
    human["s3"]["hit"] = 7.0  # a typo, or a 1-5 scale
    with pytest.warns(UserWarning, match=r"hit: the LLM scores lie in \[0, 1\] but a human score is 7"):
        ppi_samples(llm, human)
