"""All-pairs comparisons, effect sizes, win/tie/loss counts and the --fail-if-worse gate."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from ragjudge.cli import main
from ragjudge.evaluate import compare
from ragjudge.stats import bootstrap_ci, cohens_dz, holm, paired_t_test, win_tie_loss

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUNS = sorted(str(p) for p in (EXAMPLES / "runs").glob("*.run"))


def _holm_reference(p: list[float]) -> list[float]:
    """Holm by its definition: reject H_(i) at level a iff p_(j) <= a / (m - j + 1) for all
    j <= i; the adjusted p is the smallest such a (brute force over the sorted p-values)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    for rank, i in enumerate(order):
        out[i] = min(1.0, max((m - j) * p[order[j]] for j in range(rank + 1)))
    return out


def _random_collection(seed: int, n_q: int = 25, n_runs: int = 4):
    """qrels and ``n_runs`` runs of random quality over ``n_q`` queries."""
    rng = np.random.default_rng(seed)
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(0, 3)) for j in range(12)} for i in range(n_q)}
    for q in qrels:
        qrels[q]["d0"] = 2  # every query has a relevant document
    runs = {}
    for r in range(n_runs):
        runs[f"r{r}"] = {q: {f"d{j}": float(rng.normal() + 0.3 * r * (qrels[q][f"d{j}"] > 0))
                             for j in range(12)} for q in qrels}
    return qrels, runs


# ----------------------------------------------------------------------------- stats vs scipy
@pytest.mark.parametrize("seed", range(5))
def test_effect_size_and_t_match_scipy(seed: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 80))
    a, b = rng.normal(0.5, 0.2, n), rng.normal(0.45, 0.2, n)
    ref = scipy_stats.ttest_rel(a, b)
    dz = cohens_dz(a, b)
    assert dz == pytest.approx(ref.statistic / math.sqrt(n), rel=1e-10)
    d = a - b
    assert dz == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12)
    t, p = paired_t_test(a, b)
    assert t == pytest.approx(ref.statistic, rel=1e-10) and p == pytest.approx(ref.pvalue, rel=1e-8)


def test_effect_size_degenerate_cases() -> None:
    assert cohens_dz([0.5, 0.5], [0.5, 0.5]) == 0.0  # no difference at all: 0, not NaN
    assert cohens_dz([0.6, 0.7], [0.5, 0.6]) is None  # constant non-zero difference: undefined
    assert cohens_dz([0.6], [0.5]) is None  # one pair: no sd


def test_win_tie_loss_counts_float_ties_as_ties() -> None:
    a = [0.1 + 0.2, 0.5, 0.2, 0.9]
    b = [0.3, 0.4, 0.3, 0.9]
    assert win_tie_loss(a, b) == (1, 2, 1)  # 0.1 + 0.2 != 0.3 in binary, still a tie
    assert win_tie_loss(np.array([1.0, -1.0, 0.0])) == (1, 1, 1)


def test_holm_matches_its_definition() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = rng.uniform(0, 0.2, int(rng.integers(1, 9))).tolist()
        assert holm(p) == pytest.approx(_holm_reference(p))


# ----------------------------------------------------------------------------- compare(all_pairs)
@pytest.mark.parametrize("seed", [0, 1])
def test_all_pairs_against_scipy(seed: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    qrels, runs = _random_collection(seed)
    metrics = ["ndcg@10", "map"]
    cr = compare(qrels, runs, metrics, test="t", all_pairs=True, n_resamples=500, seed=4)
    names = list(runs)
    pairs = list(itertools.combinations(names, 2))
    assert len(cr.comparisons) == len(pairs) * len(metrics)
    assert cr.meta["all_pairs"] is True and "every pair" in cr.meta["family"]
    for m in metrics:
        fam = [c for c in cr.comparisons if c.metric == m]
        assert [(c.baseline, c.run) for c in fam] == pairs
        raw = []
        for c in fam:
            x = np.array([cr.reports[c.run].per_query[q][m] for q in cr.reports[c.run].qids])
            y = np.array([cr.reports[c.baseline].per_query[q][m] for q in cr.reports[c.run].qids])
            ref = scipy_stats.ttest_rel(x, y)
            assert c.p_value == pytest.approx(ref.pvalue, rel=1e-8)
            assert c.statistic == pytest.approx(ref.statistic, rel=1e-10)
            assert c.delta == pytest.approx((x - y).mean(), abs=1e-15)
            assert c.effect_size == pytest.approx(ref.statistic / math.sqrt(len(x)), rel=1e-10)
            assert c.delta_ci == pytest.approx(bootstrap_ci(x - y, n_resamples=500, seed=4))
            assert (c.wins, c.ties, c.losses) == win_tie_loss(x, y)
            assert c.wins + c.ties + c.losses == c.n == len(x)
            raw.append(ref.pvalue)
        # Holm over the whole family of pairs (6 tests), not per baseline.
        assert [c.p_adjusted for c in fam] == pytest.approx(_holm_reference(raw), rel=1e-8)
        assert all(c.significant == (c.p_adjusted <= 0.05) for c in fam)


def test_baseline_mode_has_effect_sizes_and_is_unchanged_otherwise() -> None:
    qrels, runs = _random_collection(2, n_runs=3)
    base = compare(qrels, runs, ["map"], n_resamples=300)
    allp = compare(qrels, runs, ["map"], n_resamples=300, all_pairs=True)
    assert len(base.comparisons) == 2 and len(allp.comparisons) == 3
    for c in base.comparisons:
        other = allp.comparison(c.run, "map", vs="r0")
        # Same test, same interval, same d_z; only the Holm family differs.
        assert (other.delta, other.delta_ci, other.p_value, other.effect_size, other.wins) == (
            c.delta, c.delta_ci, c.p_value, c.effect_size, c.wins)
        assert other.p_adjusted >= c.p_adjusted
    assert "family" in base.meta and base.meta["all_pairs"] is False


def test_comparison_either_way_round() -> None:
    qrels, runs = _random_collection(5, n_runs=3)
    cr = compare(qrels, runs, ["map"], n_resamples=200, all_pairs=True)
    c = cr.comparison("r2", "map", vs="r1")
    s = cr.comparison("r1", "map", vs="r2")
    assert (s.run, s.baseline) == ("r1", "r2")
    assert s.delta == -c.delta and s.delta_ci == (-c.delta_ci[1], -c.delta_ci[0])
    assert (s.wins, s.ties, s.losses) == (c.losses, c.ties, c.wins)
    assert s.effect_size == -c.effect_size and s.p_adjusted == c.p_adjusted
    with pytest.raises(KeyError):
        cr.comparison("r1", "map", vs="r1")


def test_all_pairs_renderings() -> None:
    qrels, runs = _random_collection(6, n_runs=3)
    cr = compare(qrels, runs, ["map", "mrr"], n_resamples=200, all_pairs=True)
    headers, rows = cr.table()
    assert headers == ["metric", "run", "vs", "delta", "delta_low", "delta_high", "p", "p_holm",
                       "sig", "d_z", "wins", "ties", "losses"]
    assert len(rows) == 6
    data = json.loads(cr.render("json"))
    assert len(data["comparisons"]) == 6
    assert {"wins", "ties", "losses", "effect_size"} <= set(data["comparisons"][0])
    csv_text = cr.render("csv")
    assert csv_text.splitlines()[0].startswith("metric,run,vs,delta")
    assert len(csv_text.splitlines()) == 7
    for fmt in ("table", "markdown", "html"):
        text = cr.render(fmt)
        assert "ci_low" in text and "d_z" in text  # the means table, then the pairs
    assert "all pairs" in str(cr) and "<table" in cr._repr_html_()
    assert "\\dagger" in cr.to_latex() or "Holm" in cr.to_latex()
    pd = pytest.importorskip("pandas")
    df = cr.to_dataframe()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == headers and len(df) == 6


def test_all_pairs_holm_controls_familywise_error() -> None:
    """Seeded simulation: 4 runs with no true difference, 6 pairs, t test + Holm over all pairs.
    The family-wise error rate stays at about alpha (binomial 99.9% bound on 400 trials)."""
    rng = np.random.default_rng(11)
    trials, alpha, hits = 400, 0.05, 0
    for _ in range(trials):
        scores = rng.normal(0.5, 0.1, (4, 30))
        ps = [paired_t_test(scores[i], scores[j]).p_value
              for i, j in itertools.combinations(range(4), 2)]
        hits += any(p <= alpha for p in holm(ps))
    assert hits / trials <= alpha + 3.1 * math.sqrt(alpha * (1 - alpha) / trials)


# ----------------------------------------------------------------------------- CLI
def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_all_pairs_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "compare", str(EXAMPLES / "qrels.txt"), *RUNS, "-m", "map",
                        "--all-pairs", "--resamples", "300", "-f", "json")
    assert code == 0
    data = json.loads(out)
    assert len(data["comparisons"]) == 3 and data["meta"]["all_pairs"] is True


def test_cli_fail_if_worse(capsys: pytest.CaptureFixture[str]) -> None:
    qrels = str(EXAMPLES / "qrels.txt")
    # bm25_stemmed is clearly the best example run: the other two are worse than it.
    code, _, err = _run(capsys, "evaluate", qrels, *RUNS, "-m", "ndcg@10,map",
                        "--resamples", "300", "--fail-if-worse", "bm25_stemmed")
    assert code == 1
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("ragjudge: warning: ")]
    assert len(lines) == 4 and all(ln.startswith("ragjudge: fail-if-worse: run ") for ln in lines)
    assert any("bm25_raw is worse than bm25_stemmed on map" in ln for ln in lines)
    # term_overlap is the worst: nothing is worse than it.
    code, _, err = _run(capsys, "compare", qrels, *RUNS, "-m", "ndcg@10", "--resamples", "300",
                        "--fail-if-worse", "term_overlap")
    assert code == 0 and "fail-if-worse" not in err
    # With --all-pairs the gate uses the all-pairs family.
    code, out, err = _run(capsys, "compare", qrels, *RUNS, "-m", "ndcg@10", "--resamples", "300",
                          "--all-pairs", "--baseline", "term_overlap",
                          "--fail-if-worse", "bm25_stemmed", "-f", "csv")
    assert code == 1 and err.count("fail-if-worse") == 2


@pytest.mark.parametrize("extra,message", [
    (["--fail-if-worse", "nope"], "not one of the runs"),
    (["--fail-if-worse", "bm25_raw", "--baseline", "term_overlap"], "add --all-pairs"),
    (["--fail-if-worse", "bm25_raw", "--no-stats"], "--no-stats"),
])
def test_cli_fail_if_worse_bad_input_is_exit_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, out, err = _run(capsys, "evaluate", str(EXAMPLES / "qrels.txt"), *RUNS, "-m", "map", *extra)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_cli_fail_if_worse_needs_two_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "evaluate", str(EXAMPLES / "qrels.txt"), RUNS[0], "-m", "map",
                        "--fail-if-worse", Path(RUNS[0]).stem)
    assert code == 2 and "at least 2 runs" in err


@pytest.mark.parametrize("argv", [
    [RUNS[0], "--all-pairs"],                      # one run: no pair
    [*RUNS, "--all-pairs", "--no-stats"],          # pairs need the tests
])
def test_cli_all_pairs_bad_input_is_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = _run(capsys, "evaluate", str(EXAMPLES / "qrels.txt"), *argv, "-m", "map")
    assert code == 2 and out == "" and "--all-pairs" in err


def test_fail_if_worse_false_alarms_stay_below_alpha() -> None:
    """Seeded simulation of the gate end to end (compare + worse_than): 3 runs drawn from the
    same distribution, so any failure is a false alarm; the rate stays within alpha."""
    from ragjudge.cli.gates import worse_than

    rng = np.random.default_rng(21)
    trials, alpha, alarms = 150, 0.05, 0
    qrels = {f"q{i}": {f"d{j}": int(j < 3) for j in range(10)} for i in range(30)}
    for _ in range(trials):
        runs = {name: {q: {f"d{j}": float(rng.normal()) for j in range(10)} for q in qrels}
                for name in ("prod", "a", "b")}
        cr = compare(qrels, runs, ["ndcg@10"], baseline="prod", test="t", n_resamples=50)
        alarms += any(msg is not None for _, msg in worse_than(cr, "prod"))
    assert alarms / trials <= alpha + 3.1 * math.sqrt(alpha * (1 - alpha) / trials)


def test_cli_fail_if_worse_fails_when_a_run_cannot_be_tested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "q.txt").write_text("q1 0 d1 1\n")
    (tmp_path / "a.run").write_text("q1 Q0 d1 1 2.0 a\n")
    (tmp_path / "b.run").write_text("q1 Q0 d2 1 2.0 b\n")
    code, _, err = _run(capsys, "compare", str(tmp_path / "q.txt"), str(tmp_path / "a.run"),
                        str(tmp_path / "b.run"), "-m", "map", "--test", "t", "--fail-if-worse", "a")
    assert code == 1
    assert "run b could not be tested against a on map: the t test needs at least 2" in err


def test_small_p_values_read_alike_in_every_human_format_and_the_gate(
        capsys: pytest.CaptureFixture[str]) -> None:
    qrels = str(EXAMPLES / "qrels.txt")
    base = ["compare", qrels, *RUNS, "-m", "ndcg@10", "--test", "t", "--resamples", "300",
            "--fail-if-worse", "bm25_stemmed"]
    # the t test gives term_overlap vs bm25_stemmed p ~ 1e-13: never "0.0000"
    code, table, err = _run(capsys, *base)
    assert code == 1 and "0.0000" not in table and "< 0.0001" in table
    assert "p_holm < 0.0001 <= 0.05" in err  # the gate line reads like the table
    code, md, _ = _run(capsys, *base, "-f", "markdown")
    assert "| < 0.0001 | < 0.0001 |" in md and "0.0000" not in md
    # markdown and html carry the table's footnote (test, correction, what * means)
    assert md.rstrip().splitlines()[-1].startswith("baseline bm25_stemmed; p_holm = Holm-adjusted")
    assert "\\* = p_holm <= 0.05" in md
    code, page, _ = _run(capsys, *base, "-f", "html")
    assert "&lt; 0.0001" in page and "<p><small>baseline bm25_stemmed; p_holm" in page
    # json and csv keep the numbers
    code, out, _ = _run(capsys, *base, "-f", "csv")
    assert "< 0.0001" not in out
    # a randomization p of 1/10001 is 0.0001 in the table and in the gate line (not 9.999e-05)
    code, table, err = _run(capsys, "compare", qrels, *RUNS, "-m", "ndcg@10",
                            "--fail-if-worse", "bm25_stemmed")
    row = next(ln for ln in table.splitlines() if ln.startswith("term_overlap"))
    assert row.split()[8:10] == ["0.0001", "0.0002"]
    assert "e-05" not in err and "delta = -0.3330" in err and "p_holm = 0.0002 <= 0.05" in err
    code, _, err = _run(capsys, "compare", qrels, *RUNS, "-m", "ndcg@10", "--digits", "2",
                        "--resamples", "300", "--fail-if-worse", "bm25_stemmed")
    assert "delta = -0.33 " in err and "p_holm = 0.01 <= 0.05" in err  # 2/301, as --digits 2


def test_format_p() -> None:
    from ragjudge.render import format_p, render_table

    assert [format_p(x) for x in (None, float("nan"), 0.0, 4.9e-5, 9.999e-05, 0.0312)] == [
        "-", "-", "< 0.0001", "< 0.0001", "0.0001", "0.0312"]
    assert format_p(0.004, 2) == "< 0.01" and format_p(np.float64(0.5), 1) == "0.5"
    text = render_table(["run", "p"], [["a", 1e-9], ["b", 0.5]], "table", p_values=["p"])
    assert text.splitlines()[2:] == ["a    < 0.0001", "b      0.5000"]  # still right-aligned
