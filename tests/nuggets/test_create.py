"""Nugget creation and importance with a fake session."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import EX, oracle

from ragjudge.errors import InputError
from ragjudge.llm.fake import Failure, FakeLLM, MemoryCache
from ragjudge.nuggets import (
    create_nuggets_sync,
    estimate_create,
    label_importance_sync,
    parse_nuggets,
    passages_for,
    read_answers,
)
from ragjudge.nuggets.data import Nugget, NuggetSet

Q, C, QRELS = EX / "topics.jsonl", EX / "passages.jsonl", EX / "qrels.txt"


def test_passages_from_qrels_threshold_and_order() -> None:
    ps = passages_for({"t3": "x"}, qrels=QRELS, corpus=C)
    assert [i for i, _ in ps["t3"]] == ["p7", "p8", "p9"]  # p13 graded 0 is left out
    ps = passages_for({"t3": "x"}, qrels=QRELS, corpus=C, options=None)
    from ragjudge.nuggets import NuggetOptions
    assert [i for i, _ in passages_for({"t3": "x"}, qrels=QRELS, corpus=C,
                                       options=NuggetOptions(min_grade=3))["t3"]] == ["p7"]
    cited = passages_for({"t1": "x"}, corpus=C, answers=read_answers(EX / "runs" / "run_b.jsonl"))
    assert [i for i, _ in cited["t1"]] == ["p1", "p13"]
    with pytest.raises(InputError, match="p1"):
        passages_for({"t1": "x"}, qrels=QRELS, corpus={"p2": "y"})


def test_create_windows_sources_importance_and_provenance() -> None:
    llm = FakeLLM(oracle)
    res = create_nuggets_sync(Q, llm=llm, qrels=QRELS, corpus=C, create_window=2)
    assert [s.qid for s in res.sets] == ["t1", "t2", "t3", "t4"]
    t1 = res.sets[0]
    assert len(t1.nuggets) == 3 and t1.nuggets[2].sources == ("p3",)
    assert [n.importance for n in t1.nuggets] == ["vital", "vital", "okay"]
    # 2 creation windows per query (3 passages, window 2) + 1 importance call each
    ids = [c.prompt_id for c in llm.calls]
    assert ids.count("nugget_create") == 8 and ids.count("nugget_importance") == 4
    second = next(c for c in llm.calls if c.prompt_id == "nugget_create" and "northern" in c.user
                  and "(none yet)" not in c.user)
    assert "1. The northern lights" in second.user  # a later window sees what was found
    assert t1.provenance["create"]["prompt_id"] == "nugget_create"
    assert t1.provenance["importance"]["prompt_sha"] and t1.provenance["passages"] == ["p1", "p2", "p3"]
    assert res.usage["calls"] == 12 and not res.failures


def test_max_nuggets_stops_creation() -> None:
    llm = FakeLLM(oracle)
    res = create_nuggets_sync(Q, llm=llm, qrels=QRELS, corpus=C, create_window=1, max_nuggets=2,
                              importance=False)
    assert all(len(s.nuggets) == 2 for s in res.sets)
    assert [c.prompt_id for c in llm.calls].count("nugget_create") == 8  # the third window is never asked


def test_failures_kept_and_file_round_trip(tmp_path: Any) -> None:
    def reply(prompt: Any, v: Any) -> Any:
        if prompt.id == "nugget_create" and "Vaccines" in v["passages"]:
            return Failure("refusal", "no")
        if prompt.id == "nugget_importance" and "aqueduct" in v["query"]:
            return Failure("unparsable", "garbage")
        return oracle(prompt, v)

    res = create_nuggets_sync(Q, llm=FakeLLM(reply), qrels=QRELS, corpus=C)
    assert "refusal" in res.failures["t2"][0] and "unparsable" in res.failures["t3"][0]
    t3 = next(s for s in res.sets if s.qid == "t3")
    assert all(n.importance is None for n in t3.nuggets)
    out = tmp_path / "n.jsonl"
    res.write(out)
    back = parse_nuggets(out.read_text())
    assert back[0].nuggets == res.sets[0].nuggets and back[0].provenance["create"]["model"] == "fake-model"
    # human or failed sets without importance get it on their own
    fixed = label_importance_sync(back, llm=FakeLLM(oracle))
    assert all(n.importance for s in fixed.sets for n in s.nuggets) and fixed.usage["calls"] == 1


def test_dry_run_and_cache() -> None:
    cache = MemoryCache()
    create_nuggets_sync(Q, llm=FakeLLM(oracle, cache=cache), qrels=QRELS, corpus=C)
    again = FakeLLM(oracle, cache=cache)
    res = create_nuggets_sync(Q, llm=again, qrels=QRELS, corpus=C)
    assert again.calls == [] and res.usage["cache_hits"] == 8
    dry = estimate_create(Q, llm=FakeLLM(oracle), qrels=QRELS, corpus=C)
    assert dry.calls == 8 and dry.prompt_tokens > 0  # 1 creation + 1 importance per query


def test_human_set_untouched() -> None:
    s = NuggetSet("q", "why", (Nugget("a", "vital"),))
    llm = FakeLLM(oracle)
    assert label_importance_sync([s], llm=llm).sets[0] == s and llm.calls == []
