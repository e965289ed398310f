"""The nuggets request without a server: every nugget option reaches the service with the
library's default and help, the request becomes the library's values (errors name the field
and record), and the dry run prices assignment -- and creation when no nuggets are given --
without a key or a call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server tests need the server extra")

from ragjudge.errors import InputError, LLMError  # noqa: E402
from ragjudge.nuggets import NuggetOptions  # noqa: E402
from ragjudge.server import ServerSettings, service  # noqa: E402
from ragjudge.server.models import NuggetsRequest  # noqa: E402
from ragjudge.server.service import JobPlan, Reply  # noqa: E402

EX = Path(__file__).resolve().parents[2] / "examples" / "nuggets"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _req(**kw: Any) -> NuggetsRequest:
    answers = [r for x in "abc" for r in _records(EX / "runs" / f"run_{x}.jsonl")]
    return NuggetsRequest.model_validate({"answers": answers, **kw})


@pytest.fixture()
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ServerSettings:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("RAGJUDGE_CACHE", raising=False)
    return ServerSettings(model="gpt-4o-mini", no_cache=True, jobs_db=str(tmp_path / "jobs.sqlite"))


def test_every_nugget_option_is_a_request_field_with_the_librarys_default() -> None:
    fields = NuggetsRequest.model_fields
    for name in NuggetOptions.names():
        assert name in fields, name
        assert fields[name].default == NuggetOptions.default(name), name
        assert fields[name].description == NuggetOptions.help(name), name
    opts = service.nuggets_inputs(_req(grades=2, assign_window=3), 10_000).options
    assert opts == NuggetOptions(grades=2, assign_window=3)


def test_inputs_are_the_librarys_values_and_errors_name_the_record() -> None:
    nug = _records(EX / "nuggets.jsonl")
    inputs = service.nuggets_inputs(_req(nuggets=nug, human=_records(EX / "human_assignments.jsonl")), 10_000)
    assert len(inputs.answers) == 12 and {a.run_id for a in inputs.answers} == {"run_a", "run_b", "run_c"}
    assert [s.qid for s in inputs.nuggets] == ["t1", "t2", "t3", "t4"] and len(inputs.human) == 8
    plain = service.nuggets_inputs(NuggetsRequest(answers=[{"query_id": "q1", "answer": "text"}],
                                                  run_id="mine"), 10_000)
    assert plain.answers[0].run_id == "mine" and plain.answers[0].qid == "q1"
    bad = json.loads(json.dumps(nug))
    bad[2]["nuggets"][0]["importance"] = "crucial"
    with pytest.raises(InputError) as e:
        service.nuggets_inputs(_req(nuggets=bad), 10_000)
    assert str(e.value).startswith("nuggets:3: nuggets[0].importance:")
    with pytest.raises(service.TooLarge, match="answer-nugget pairs"):
        service.nuggets_inputs(_req(nuggets=nug), 20)


def test_dry_run_prices_assignment_and_creation_without_a_key(settings: ServerSettings) -> None:
    nug = _records(EX / "nuggets.jsonl")
    out = service.nuggets(_req(nuggets=nug, dry_run=True), settings)
    assert isinstance(out, Reply)
    est = json.loads(out.text)
    assert est["calls"] == 12 and est["prompt_tokens"] > 0 and est["cost"] > 0
    corpus = {r["_id"] if "_id" in r else r["docid"]: r.get("text") or r.get("segment")
              for r in _records(EX / "passages.jsonl")}
    made = json.loads(service.nuggets(_req(corpus=corpus, cite=True, dry_run=True), settings).text)
    assert made["calls"] > est["calls"] and "nuggets per query" in made["assumptions"]
    with pytest.raises(LLMError, match="no API key"):  # a job needs the key (checked before it is accepted)
        service.nuggets(_req(nuggets=nug), settings)


def test_a_job_plan_holds_the_request_and_its_size(settings: ServerSettings,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    plan = service.nuggets(_req(nuggets=_records(EX / "nuggets.jsonl"), settings={"max_cost": 1.0}), settings)
    assert isinstance(plan, JobPlan) and plan.kind == "nuggets" and plan.total == 12
    assert plan.spec == {"model": "gpt-4o-mini", "max_cost": 1.0}
    assert NuggetsRequest.model_validate(plan.request).answers == _req().answers
