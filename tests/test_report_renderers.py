"""Every report type renders everywhere: HTML (notebooks), text, DataFrame, JSON, LaTeX."""

from __future__ import annotations

import json
from typing import Any

import pytest

pd = pytest.importorskip("pandas")

from ragjudge import Qrels, Run, compare, evaluate  # noqa: E402
from ragjudge.trust.agreement import ranking_agreement  # noqa: E402
from ragjudge.judges import JudgeResult, qrels_from_judgments  # noqa: E402
from ragjudge.judges.relevance import Judgment  # noqa: E402
from ragjudge.rag.report import RagReport, Score, undetermined  # noqa: E402

QRELS = Qrels.from_dict({f"q{i}": {"d1": 2, "d2": 0} for i in range(5)})
A = Run.from_dict({f"q{i}": {"d1": 2.0, "d2": 1.0} for i in range(5)}, name="run_a")
B = Run.from_dict({f"q{i}": {"d2": 2.0, "d1": 1.0} for i in range(5)}, name="run_b")


def _judge_result() -> JudgeResult:
    records = [
        {"qid": "q0", "docid": "d1", "grade": 3, "model": "m", "prompt_id": "relevance",
         "usage": {"calls": 1, "prompt_tokens": 50, "completion_tokens": 5}, "latency": 0.1},
        {"qid": "q0", "docid": "d2", "grade": 0, "model": "m", "cached": True},
        {"qid": "q1", "docid": "d1", "grade": None, "error": "no label in reply",
         "failure": "unparsable", "model": "m"},
    ]
    judgments = [Judgment.from_dict(r) for r in records]
    return JudgeResult(qrels_from_judgments(judgments, "llm"), judgments)


def _reports() -> dict[str, Any]:
    rag = RagReport(["faithfulness", "recall@5"], ["s1", "s2"], {
        "faithfulness": [Score(1.0), undetermined("no answer")],
        "recall@5": [Score(0.5), Score(1.0)],
    })
    llm = Qrels.from_dict({f"q{i}": {"d1": 2, "d2": 1 if i < 2 else 0} for i in range(5)})
    reports = {
        "Report": evaluate(QRELS, A, ["ndcg@10", "mrr"]),
        "CompareReport": compare(QRELS, [A, B], ["ndcg@10", "mrr"], n_resamples=100),
        "RagReport": rag,
        "AgreementReport": ranking_agreement(QRELS, llm, {"run_a": A, "run_b": B}, ["mrr"]),
        "JudgeResult": _judge_result(),
    }
    try:  # branch trust (PPI); absent from checkouts made before it was merged
        from ragjudge import ppi_evaluate
    except ImportError:
        pass
    else:
        runs = {"run_a": A, "run_b": B}
        reports["PPIReport"] = ppi_evaluate(llm, runs, ["mrr"], QRELS.filter(["q0", "q1", "q2"]))
    return reports




REPORTS = _reports()


def _latex_ok(report: Any) -> None:
    tex = report.to_latex()
    assert "\\toprule" in tex and "\\bottomrule" in tex and "\\midrule" in tex


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_every_report_renders_everywhere(name: str) -> None:
    report = REPORTS[name]
    methods = ("_repr_html_", "to_dataframe", "to_dict", "to_latex")
    missing = [m for m in methods if not hasattr(report, m)]
    assert not missing
    html = report._repr_html_()
    assert html.lstrip().startswith("<table") and "</table>" in html
    text, rep = str(report), repr(report)
    assert "\n" in text and len(text) < 20_000
    assert "object at 0x" not in rep and type(report).__name__ in rep or "Report" in rep
    df = report.to_dataframe()
    assert isinstance(df, pd.DataFrame) and len(df) > 0
    data = report.to_dict()
    json.dumps(data, allow_nan=False)  # plain, JSON-ready values (no NaN)
    _latex_ok(report)


def test_rendered_content_is_the_report() -> None:
    rag = REPORTS["RagReport"]
    assert "faithfulness undetermined: no answer (1)" in str(rag)
    assert "no answer (1)" in rag._repr_html_()
    assert "faithfulness" in rag.to_latex()
    judged = REPORTS["JudgeResult"]
    rep = repr(judged)
    assert rep.startswith("<JudgeResult 2/3 judged, 1 failed, 1 from cache")
    assert "failed: unparsable" in str(judged) and "grade 3" in str(judged)
    df = judged.to_dataframe()
    assert df["grade"].tolist()[:2] == [3, 0] and pd.isna(df["grade"].iloc[2])
    assert judged.to_dict()["summary"]["failure_reasons"] == {"unparsable": 1}
    assert "grade 0" in judged.to_latex()
    assert "\\textbf" in REPORTS["CompareReport"].to_latex()


def test_judge_result_repr_is_short_with_many_judgments() -> None:
    judged = _judge_result()
    many = JudgeResult(judged.qrels, judged.judgments * 2000)
    assert len(repr(many)) < 2000  # never one line per judgment (the dataclass default)
