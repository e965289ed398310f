"""Every result type offers the same surface: to_dict, to_json, render(fmt) in every format,
str, _repr_html_ and to_dataframe (the notebook, the CLI and the service rely on it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _synth_data import fake_session, make_corpus

import ragjudge
from ragjudge.data import Qrels
from ragjudge.judges import JudgeResult
from ragjudge.llm import LLM, Usage
from ragjudge.render import FORMATS

EX = Path(__file__).resolve().parents[1] / "examples"


def _results(tmp_path: Path) -> dict[str, Any]:
    qrels = ragjudge.read_qrels(EX / "qrels.txt")
    runs = [ragjudge.read_run(p) for p in sorted((EX / "runs").glob("*.run"))]
    noisy = Qrels.from_dict({q: {d: (g + 1) % 4 for d, g in docs.items()}
                             for q, docs in qrels.to_dict().items()})
    samples = [{"id": f"s{i}", "user_input": "q", "retrieved_contexts": ["a", "b"], "retrieved_context_ids": ["d1", "d2"],
                "reference_context_ids": ["d2"]} for i in range(3)]
    llm = LLM("m", base_url="http://127.0.0.1:9/v1", api_key="k", cache=False)
    return {
        "Report": ragjudge.evaluate(qrels, runs[0], ["ndcg@10", "p@5"]),
        "CompareReport": ragjudge.compare(qrels, runs, ["ndcg@10"], n_resamples=200),
        "RagReport": ragjudge.evaluate_samples_sync(samples, ["hit@2", "mrr"]),
        "AgreementReport": ragjudge.label_agreement(qrels, noisy, n_resamples=50),
        "PPIReport": ragjudge.ppi_evaluate(noisy, runs, ["p@5"], Qrels.from_dict(
            {q: qrels.to_dict()[q] for q in list(qrels.to_dict())[:20]})),
        "PPIEstimate": ragjudge.ppi_mean([1, 0, 1, 1], [1, 0, 0, 1], [1, 0, 0, 1, 1, 1, 0, 1]),
        "JudgeResult": JudgeResult.build([], Usage(), None, "test"),
        "SynthResult": ragjudge.synthesize_sync(make_corpus(2), 2, llm=fake_session(), progress=False,
                                                styles="keyword=1"),
        "DryRun": llm.estimate("relevance.v1", [{"query": "q", "passage": "p"}]),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _results(tmp_path_factory.mktemp("surface"))


NAMES = ["Report", "CompareReport", "RagReport", "AgreementReport", "PPIReport", "PPIEstimate",
         "JudgeResult", "SynthResult", "DryRun"]


@pytest.mark.parametrize("name", NAMES)
def test_every_result_has_the_one_surface(results: dict[str, Any], name: str) -> None:
    r = results[name]
    assert type(r).__name__ == name
    d = r.to_dict()
    assert isinstance(d, dict) and d
    assert set(json.loads(r.to_json())) == set(d)  # the same value, as JSON
    for fmt in FORMATS:
        text = r.render(fmt)
        assert isinstance(text, str) and text.strip(), (name, fmt)
        if fmt == "json":
            json.loads(text)
    assert str(r).strip()
    html = r._repr_html_()
    assert "<" in html and "<script" not in html.lower()
    pytest.importorskip("pandas")
    df = r.to_dataframe()
    assert len(df.columns) >= 1


def test_every_async_entry_point_has_exactly_one_sync_twin() -> None:
    import importlib
    import inspect

    bad = []
    for modname in ("ragjudge", "ragjudge.judges", "ragjudge.rag", "ragjudge.synth", "ragjudge.trust"):
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.iscoroutinefunction(obj) and not callable(getattr(mod, name + "_sync", None)):
                bad.append(f"{modname}.{name} has no {name}_sync")
            if name.endswith("_sync") and not inspect.iscoroutinefunction(getattr(mod, name[:-5], None)):
                bad.append(f"{modname}.{name} has no async {name[:-5]}")
            # The session (LLM) is the plumbing judges and metrics await; the entry points
            # are the applications' functions and the judge's methods.
            if inspect.isclass(obj) and obj.__name__ != "LLM":
                for attr, fn in vars(obj).items():
                    if not attr.startswith("_") and inspect.iscoroutinefunction(fn) \
                            and not callable(getattr(obj, attr + "_sync", None)):
                        bad.append(f"{modname}.{name}.{attr} has no {attr}_sync")
    assert bad == []
