"""The RAG report: aggregates with CI and undetermined counts, renderers, DataFrame, HTML."""

from __future__ import annotations

import json

import pytest

from ragjudge.rag.report import RagReport, Score, undetermined


def report():
    return RagReport(
        ["faithfulness", "hit@5"],
        ["a", "b", "c"],
        {
            "faithfulness": [Score(1.0), undetermined("no claims in the response"), Score(0.5)],
            "hit@5": [Score(1.0), Score(0.0), Score(1.0)],
        },
        definitions={"faithfulness": "supported / claims"},
        usage={"calls": 4},
    )


def test_aggregates_exclude_undetermined():
    r = report()
    s = r.summaries["faithfulness"]
    assert s.mean == 0.75 and s.n == 2 and s.undetermined == 1
    assert s.reasons == {"no claims in the response": 1}
    assert s.ci_low <= s.mean <= s.ci_high
    assert r.mean("hit@5") == pytest.approx(2 / 3)


def test_renderers_never_emit_nan():
    r = report()
    data = json.loads(r.render("json", per_sample=True))
    assert data["samples"][1]["scores"]["faithfulness"] == {"value": None, "reason": "no claims in the response"}
    assert data["aggregates"][0]["definition"] == "supported / claims"
    table = r.render("table", per_sample=True)
    assert "faithfulness: no claims in the response" in table
    csv = r.render("csv")
    assert csv.splitlines()[0] == "metric,mean,ci_low,ci_high,n,undetermined"
    assert "| metric |" in r.render("markdown")
    assert "<table" in r._repr_html_()
    assert "nan" not in table.lower()


def test_to_dataframe():
    pd = pytest.importorskip("pandas")
    df = report().to_dataframe()
    assert list(df.columns) == ["sample", "faithfulness", "faithfulness.reason", "hit@5", "hit@5.reason"]
    assert df["faithfulness"].isna().tolist() == [False, True, False]
    assert df.loc[1, "faithfulness.reason"] == "no claims in the response"
    agg = report().to_dataframe(per_sample=False)
    assert agg.loc[0, "undetermined"] == 1
    assert isinstance(agg, pd.DataFrame)


def test_all_undetermined_has_no_mean():
    r = RagReport(["m"], ["a"], {"m": [undetermined("x")]})
    assert r.summaries["m"].mean is None
    assert json.loads(r.render("json"))["aggregates"][0]["ci"] is None
    assert "m=-" in repr(r)
