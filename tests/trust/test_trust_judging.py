"""Judging on demand, judge panels and soft labels, with the LLM mocked at the HTTP layer."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import respx
from _llm_fakes import BASE, SECRET, URL, grade_reply, ok, passage_of

from ragjudge.cli import main
from ragjudge.data import Qrels, Run
from ragjudge.evaluate import evaluate
from ragjudge.io import read_qrels
from ragjudge.llm import Provenance
from ragjudge.judges import Judgment, LLMRelevanceJudge, evaluate_with_judge, evaluate_with_judge_sync
from ragjudge.llm.cost import Usage
from ragjudge.trust.panel import combine_grades, combine_qrels, judge_panel_sync
from ragjudge.trust.soft import soft_evaluate

QUERIES = {"q1": "capital of france", "q2": "boiling point of water"}
CORPUS = {"d1": "Paris is the capital of France.", "d2": "France is in Europe.",
          "d3": "Water boils at 100 C.", "d4": "Bananas are yellow."}
TRUE = {"Paris": 3, "France": 1, "Water": 3, "Bananas": 0}
RUN = Run.from_dict({"q1": {"d1": 3.0, "d2": 2.0, "d4": 1.0}, "q2": {"d3": 2.0, "d4": 1.0}}, name="bm25")


def by_model(request: Any) -> respx.MockResponse:
    """``lenient-model`` grades one above the truth (capped at 3); every other model truthfully."""
    body = json.loads(request.content)
    g = TRUE[passage_of(body).split()[0]]
    if body["model"] == "lenient-model":
        g = min(3, g + 1)
    return ok(grade_reply(g))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("RAGJUDGE_MODEL", raising=False)
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": k, "text": v}) for k, v in QUERIES.items()) + "\n")
    (tmp_path / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": k, "title": "", "text": v}) for k, v in CORPUS.items()) + "\n")
    (tmp_path / "bm25.run").write_text("q1 Q0 d1 1 3.0 bm25\nq1 Q0 d2 2 2.0 bm25\nq1 Q0 d4 3 1.0 bm25\n"
                                       "q2 Q0 d3 1 2.0 bm25\nq2 Q0 d4 2 1.0 bm25\n")
    (tmp_path / "human.qrels").write_text("q1 0 d1 2\nq2 0 d3 3\n")
    return tmp_path


def judge(env: Path, model: str = "judge-model") -> LLMRelevanceJudge:
    return LLMRelevanceJudge(model, base_url=BASE, api_key_env="JUDGE_KEY",
                             cache=str(env / "cache.sqlite"), progress=False)


# ----------------------------------------------------------------------------- on demand
def test_evaluate_with_judge_fills_exactly_the_holes(httpx2_mock: respx.Router, env: Path) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=by_model)
    human = read_qrels(env / "human.qrels")
    rep = evaluate_with_judge_sync(judge(env), RUN, ["ndcg@3", "judged@3"], qrels=human,
                                   queries=QUERIES, corpus=CORPUS)
    assert route.call_count == 3  # d2, d4 for q1 and d4 for q2: the unjudged top-3 pairs
    info = rep.meta["judging"]
    assert info["depth"] == 3 and info["llm_labels"] == 3 and info["human_labels"] == 2
    assert info["judged_before"]["bm25"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert info["judged_after"]["bm25"] == 1.0 and rep.mean["judged@3"] == 1.0
    # the human grade of d1 (2) wins over what the LLM would say (3)
    expected = evaluate(Qrels.from_dict({"q1": {"d1": 2, "d2": 1, "d4": 0}, "q2": {"d3": 3, "d4": 0}}),
                        RUN, ["ndcg@3"])
    assert rep.mean["ndcg@3"] == pytest.approx(expected.mean["ndcg@3"])
    # label-free, and a second time from the cache at no cost
    free = evaluate_with_judge_sync(judge(env), RUN, "ndcg@3", queries=QUERIES, corpus=CORPUS)
    assert free.meta["judging"]["human_labels"] == 0 and free.meta["judging"]["llm_labels"] == 5
    assert route.call_count == 5
    evaluate_with_judge_sync(judge(env), RUN, "ndcg@3", queries=QUERIES, corpus=CORPUS)
    assert route.call_count == 5


def test_evaluate_with_judge_judges_several_runs_once_and_keeps_evaluate_options(
        httpx2_mock: respx.Router, env: Path) -> None:
    """The async entry point: several runs share one pool (each distinct pair judged once),
    one report each in order; evaluate()'s options (max_depth here) apply after judging; the
    session stays open for its owner."""
    route = httpx2_mock.post(URL).mock(side_effect=by_model)
    dense = Run.from_dict({"q1": {"d2": 2.0, "d1": 1.0}, "q2": {"d4": 1.0}}, name="dense")

    async def go() -> Any:
        j = judge(env)
        try:
            return await evaluate_with_judge(j, [RUN, dense], ["judged@2"], queries=QUERIES,
                                             corpus=CORPUS, judge_depth=2, max_depth=1)
        finally:
            await j.llm.aclose()

    reports = asyncio.run(go())
    assert [r.run for r in reports] == ["bm25", "dense"]
    assert route.call_count == 4  # q1: d1, d2; q2: d3, d4 -- dense's pairs are among them
    assert reports[0].meta["judging"]["pool_runs"] == ["bm25", "dense"]
    labels = Qrels.from_dict({"q1": {"d1": 3, "d2": 1}, "q2": {"d3": 3, "d4": 0}})
    for r, run in zip(reports, (RUN, dense)):
        assert r.mean == evaluate(labels, run, ["judged@2"], max_depth=1).mean
    by_name = evaluate_with_judge_sync(judge(env), {"bm25": RUN, "dense": dense}, "p@1",
                                       queries=QUERIES, corpus=CORPUS)
    assert [r.run for r in by_name] == ["bm25", "dense"] and route.call_count == 4  # cached


def test_cli_evaluate_judge_dry_run_label_free_and_qrels(httpx2_mock: respx.Router, env: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=by_model)
    llm = ["--judge", "judge-model", "--queries", str(env / "queries.jsonl"), "--corpus",
           str(env / "corpus.jsonl"), "--base-url", BASE, "--api-key-env", "JUDGE_KEY",
           "--cache", str(env / "cache.sqlite"), "--no-progress"]
    run = str(env / "bm25.run")
    assert main(["evaluate", str(env / "human.qrels"), run, "-m", "ndcg@3", *llm, "--dry-run"]) == 0
    assert "3 requests" in capsys.readouterr().out and route.call_count == 0
    assert main(["evaluate", run, "-m", "ndcg@3", *llm, "-f", "json",
                 "--judgments", str(env / "j.jsonl")]) == 0  # QRELS omitted: label-free
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert data["meta"]["judging"]["llm_labels"] == 5 and route.call_count == 5
    assert "judged@3 0.0000 -> 1.0000" in cap.err and SECRET not in cap.out + cap.err
    assert len((env / "j.jsonl").read_text().splitlines()) == 5
    assert main(["evaluate", "none", run, "-m", "ndcg@3", *llm]) == 0
    cap = capsys.readouterr()
    assert "5 LLM labels" in cap.out and route.call_count == 5  # cached
    # the judged coverage is said once (stderr), not again under the table
    both = cap.out + cap.err
    assert both.count("judged@3 0.0000 -> 1.0000") == 1 and "queries" in cap.out
    assert main(["evaluate", run, "-m", "ndcg@3", "--judge", "judge-model"]) == 2
    assert "--queries" in capsys.readouterr().err


def test_cli_evaluate_judge_exits_3_when_most_judgments_fail(httpx2_mock: respx.Router, env: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    httpx2_mock.post(URL).mock(return_value=ok(grade_reply(7)))  # off the scale: unparsable
    rc = main(["evaluate", str(env / "human.qrels"), str(env / "bm25.run"), "-m", "ndcg@3",
               "--judge", "judge-model", "--queries", str(env / "queries.jsonl"), "--corpus",
               str(env / "corpus.jsonl"), "--base-url", BASE, "--api-key-env", "JUDGE_KEY",
               "--no-cache", "--no-progress"])
    assert rc == 3
    assert "most judgments failed" in capsys.readouterr().err


# ----------------------------------------------------------------------------- panels
def test_combination_rules() -> None:
    assert combine_grades([1, 2], "majority") == 1  # tie -> lowest tied grade
    assert combine_grades([3, 2, 3], "majority") == 3
    assert combine_grades([1, 2], "mean") == 2  # 1.5 rounds half up
    assert combine_grades([1, 1, 2, 1], "mean") == 1  # 1.25
    a = Qrels.from_dict({"q": {"x": 1, "y": 3}})
    b = Qrels.from_dict({"q": {"x": 2}})
    assert combine_qrels({"a": a, "b": b}, "mean").to_dict() == {"q": {"x": 2, "y": 3}}


def test_panel_keeps_models_apart_and_reports_agreement(httpx2_mock: respx.Router, env: Path) -> None:
    route = httpx2_mock.post(URL).mock(side_effect=by_model)
    judges = [judge(env, "judge-model"), judge(env, "lenient-model")]
    panel = judge_panel_sync(judges, QUERIES, CORPUS, RUN, 3, rule="majority")
    assert route.call_count == 10  # 5 pairs x 2 models, one shared cache file
    assert panel.per_judge["judge-model"].to_dict() == {"q1": {"d1": 3, "d2": 1, "d4": 0},
                                                        "q2": {"d3": 3, "d4": 0}}
    assert panel.per_judge["lenient-model"].to_dict()["q1"] == {"d1": 3, "d2": 2, "d4": 1}
    assert panel.qrels.to_dict() == panel.per_judge["judge-model"].to_dict()  # ties go low
    rep = panel.pairwise["judge-model vs lenient-model"]
    assert rep.common_pairs == 5 and rep.leniency == pytest.approx(3 / 5)
    assert panel.alpha is not None and "Krippendorff" in str(panel)
    again = judge_panel_sync([judge(env, "judge-model"), judge(env, "lenient-model")],
                             QUERIES, CORPUS, RUN, 3, rule="mean", human=Qrels.from_dict({"q1": {"d1": 0}}))
    assert route.call_count == 10  # every answer cached, per model
    assert again.qrels.get("q1") == {"d1": 0, "d2": 2, "d4": 1}  # human wins; mean half up


def test_cli_judge_panel(httpx2_mock: respx.Router, env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    httpx2_mock.post(URL).mock(side_effect=by_model)
    out = env / "panel.qrels"
    assert main(["judge", "--queries", str(env / "queries.jsonl"), "--corpus", str(env / "corpus.jsonl"),
                 "--run", str(env / "bm25.run"), "--depth", "3", "--model", "judge-model",
                 "--model", "lenient-model", "--combine", "mean", "--base-url", BASE,
                 "--api-key-env", "JUDGE_KEY", "--cache", str(env / "c.sqlite"), "--no-progress",
                 "-o", str(out), "--judgments", str(env / "pj.jsonl")]) == 0
    cap = capsys.readouterr()
    assert "judge-model vs lenient-model" in cap.out
    assert read_qrels(out).get("q1") == {"d1": 3, "d2": 2, "d4": 1}
    models = {json.loads(x)["model"] for x in (env / "pj.jsonl").read_text().splitlines()}
    assert len(models) == 2


# ----------------------------------------------------------------------------- soft labels
def _judgment(q: str, d: str, probs: dict[int, float] | None, grade: int | None = None) -> Judgment:
    g = grade if grade is not None else max(probs, key=probs.get)  # type: ignore[arg-type]
    return Judgment.record(q, d, g, probs, None, Provenance("m", "relevance", "1", "sha"), Usage(), 0.0, None)


def test_soft_is_the_expectation_of_the_metric_not_the_metric_of_expected_grades() -> None:
    run = Run.from_dict({"q": {"a": 2.0, "b": 1.0}}, name="r")
    js = [_judgment("q", "a", {0: 0.5, 3: 0.5}), _judgment("q", "b", None, grade=0)]
    rep = soft_evaluate(js, run, ["p@1", "ndcg@2"])
    assert rep.mean["p@1"] == pytest.approx(0.5)  # f(E[g]) = P@1 of grade 1.5 would be 1
    assert rep.mean["ndcg@2"] == pytest.approx(0.5)  # 0 when a is 0 (no relevant doc), 1 when 3
    assert rep.meta["soft"]["exact_queries"] == 1


def test_soft_exact_matches_brute_force_and_monte_carlo_converges() -> None:
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(10)]
    run = Run.from_dict({"q": {d: float(10 - i) for i, d in enumerate(docs)}}, name="r")
    dists = {"q": {d: {0: float(p), int(rng.integers(1, 4)): float(1 - p)}
                   for d, p in zip(docs, rng.random(10))}}
    exact = soft_evaluate(dists, run, ["ndcg@5", "map"], samples=1024)
    assert exact.meta["soft"]["exact_queries"] == 1
    brute = {"ndcg@5": 0.0, "map": 0.0}
    for combo in itertools.product(*[sorted(dists["q"][d].items()) for d in docs]):
        w = float(np.prod([p for _, p in combo]))
        r = evaluate(Qrels.from_dict({"q": {d: g for d, (g, _) in zip(docs, combo)}}), run, list(brute))
        for m in brute:
            brute[m] += w * r.mean[m]
    for m in brute:
        assert exact.mean[m] == pytest.approx(brute[m], abs=1e-12)
    mc = soft_evaluate(dists, run, ["ndcg@5"], samples=1000, seed=3)
    assert mc.meta["soft"]["monte_carlo_queries"] == 1
    se = mc.meta["soft"]["mc_se"]["ndcg@5"]["q"]
    assert abs(mc.mean["ndcg@5"] - brute["ndcg@5"]) < 4 * se
    assert soft_evaluate(dists, run, ["ndcg@5"], samples=1000, seed=3).mean == mc.mean


def test_soft_scores_worlds_in_chunks_with_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    import ragjudge.trust.soft as soft

    rng = np.random.default_rng(1)
    dists = {f"q{i}": {f"d{j}": {0: 0.5, int(rng.integers(1, 4)): 0.5} for j in range(6)}
             for i in range(7)}
    run = Run.from_dict({q: {f"d{j}": float(-j) for j in range(8)} for q in dists}, name="r")
    whole = soft_evaluate(dists, run, "ndcg@5,map", samples=40, seed=2)
    monkeypatch.setattr(soft, "_CHUNK_ROWS", 50)
    parts = soft_evaluate(dists, run, "ndcg@5,map", samples=40, seed=2)
    assert parts.per_query == whole.per_query and whole.metrics == ["ndcg@5", "map"]
    assert whole.meta["soft"]["monte_carlo_queries"] == 7


def test_soft_with_hard_labels_equals_plain_evaluation_and_cli(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    js = [_judgment("q1", "d1", None, 3), _judgment("q1", "d2", {1: 0.6, 2: 0.4}),
          _judgment("q2", "d3", {3: 1.0}), _judgment("q2", "d4", None, 0)]
    hard = Qrels.from_dict({"q1": {"d1": 3, "d2": 1}, "q2": {"d3": 3, "d4": 0}})
    assert soft_evaluate([_judgment("q1", "d1", None, 3), _judgment("q1", "d2", None, 1),
                          _judgment("q2", "d3", None, 3), _judgment("q2", "d4", None, 0)],
                         RUN, ["ndcg@3"]).mean == evaluate(hard, RUN, ["ndcg@3"]).mean
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(json.dumps(j.to_dict()) for j in js) + "\n")
    (tmp_path / "r.run").write_text("q1 Q0 d1 1 3 r\nq1 Q0 d2 2 2 r\nq2 Q0 d4 1 2 r\nq2 Q0 d3 2 1 r\n")
    (tmp_path / "h.qrels").write_text("q1 0 d2 0\n")
    assert main(["evaluate", "none", str(tmp_path / "r.run"), "-m", "p(rel=2)@2", "--soft", str(path),
                 "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["per_query"]["q1"]["p(rel=2)@2"] == pytest.approx((1 + 0.4) / 2)
    assert main(["evaluate", str(tmp_path / "h.qrels"), str(tmp_path / "r.run"), "-m", "p(rel=2)@2",
                 "--soft", str(path), "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["per_query"]["q1"]["p(rel=2)@2"] == pytest.approx(0.5)  # the human 0 wins
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["evaluate", "none", str(tmp_path / "r.run"), "--soft", str(tmp_path / "bad.jsonl")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_cli_judge_panel_with_a_failing_model_exits_1(httpx2_mock: respx.Router, env: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def effect(request: Any) -> respx.MockResponse:
        if json.loads(request.content)["model"] == "broken-model":
            return ok(grade_reply(7))  # off the scale: every judgment of this model fails
        return by_model(request)

    httpx2_mock.post(URL).mock(side_effect=effect)
    out = env / "panel.qrels"
    rc = main(["judge", "--queries", str(env / "queries.jsonl"), "--corpus", str(env / "corpus.jsonl"),
               "--run", str(env / "bm25.run"), "--depth", "3", "--model", "judge-model",
               "--model", "broken-model", "--base-url", BASE, "--api-key-env", "JUDGE_KEY",
               "--no-cache", "--no-progress", "-o", str(out)])
    assert rc == 3
    assert "broken-model" in capsys.readouterr().err
    assert read_qrels(out).get("q1") == {"d1": 3, "d2": 1, "d4": 0}  # the working judge's labels


def test_cli_evaluate_judge_cut_short_by_the_budget_exits_4(httpx2_mock: respx.Router, env: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    prices = env / "prices.json"
    prices.write_text(json.dumps({"judge-model": {"input": 1.0, "output": 1.0}}))
    rc = main(["evaluate", str(env / "human.qrels"), str(env / "bm25.run"), "-m", "ndcg@3",
               "--judge", "judge-model", "--queries", str(env / "queries.jsonl"), "--corpus",
               str(env / "corpus.jsonl"), "--base-url", BASE, "--api-key-env", "JUDGE_KEY",
               "--no-cache", "--no-progress", "--prices", str(prices), "--max-cost", "0.000001"])
    assert rc == 4
    assert "stopped by --max-cost 1e-06: 3 of 3 pairs not judged" in capsys.readouterr().err


def test_cli_evaluate_judge_says_each_warning_once(httpx2_mock: respx.Router, env: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Each evaluation inside the flow (judged@k before and after, the scores) printed its own
    # warnings: four tie lines with two different counts for one run.
    httpx2_mock.post(URL).mock(side_effect=by_model)
    tied = env / "tied.run"
    tied.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 2.0 t\nq1 Q0 d4 3 1.0 t\nq2 Q0 d3 1 2.0 t\nq2 Q0 d4 2 1.0 t\n")
    assert main(["evaluate", str(env / "human.qrels"), str(tied), "-m", "ndcg@3", "--judge", "judge-model",
                 "--queries", str(env / "queries.jsonl"), "--corpus", str(env / "corpus.jsonl"),
                 "--base-url", BASE, "--api-key-env", "JUDGE_KEY", "--no-cache", "--no-progress",
                 "-f", "json"]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("tied scores") == 1, cap.err
    assert any("tied scores" in w for w in json.loads(cap.out)["meta"]["warnings"])
