"""ragjudge.synth: text helpers, passage sampling, filters and accounting on fixed candidates,
style parsing and prompt checks, and the whole pipeline through the real openai client mocked
at the HTTP layer (respx) and, for the pipeline's own logic, through the in-process FakeLLM."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import respx
from _llm_fakes import BASE, SECRET, URL, completion, ok
from _synth_data import TOPICS, FakeModel, fake_session, make_corpus  # noqa: F401

from ragjudge.errors import InputError
from ragjudge.llm import LLM, NullCache, PriceTable
from ragjudge.synth import (
    FILTERS, Candidate, LexicalIndex, PassagePool, accounting, estimate_synth, judge_filter,
    parse_styles, read_examples, synthesize, synthesize_sync, text_filters,
)
from ragjudge.synth.filters import SeenQueries
from ragjudge.synth.text import boilerplate_reason, longest_common_span, normalize, tokens

# ----------------------------------------------------------------------------- text helpers
def test_tokens_are_language_neutral() -> None:
    assert tokens("Straße, CAFÉ! 2024") == ["straße", "café", "2024"]
    assert tokens("東京タワー") == ["東", "京", "タ", "ワ", "ー"]
    assert tokens("Москва — столица") == ["москва", "столица"]
    assert normalize("What is  LAVA?") == normalize("what is lava")


def test_longest_common_span() -> None:
    p = tokens("the quick brown fox jumps over the lazy dog")
    assert longest_common_span(tokens("a quick brown fox jumps"), p) == 4
    assert longest_common_span(tokens("dog lazy"), p) == 1
    assert longest_common_span([], p) == 0


def test_boilerplate_detection() -> None:
    assert boilerplate_reason("Cookie settings. Privacy policy. All rights reserved.",
                              tokens("Cookie settings. Privacy policy. All rights reserved.")) is not None
    nums = "12 34 56 78 90 11 22 33 44 55 66 77 88 total"
    assert "numbers" in (boilerplate_reason(nums, tokens(nums)) or "")
    text = TOPICS["bees"] + " and bakers sometimes add a cookie of wax to the hive frames."
    assert boilerplate_reason(text, tokens(text)) is None


# ----------------------------------------------------------------------------- sampling
def test_pool_skips_short_boilerplate_and_duplicates() -> None:
    corpus = make_corpus(2)
    corpus["short"] = "Too short."
    corpus["legal"] = "Copyright 2024. All rights reserved. Privacy policy and terms of use apply here."
    corpus["dup"] = corpus["coffee-0"].upper()  # same normalised text
    corpus["near"] = corpus["bees-0"] + " Indeed."  # near duplicate
    pool = PassagePool(corpus, seed=1)
    drawn = list(pool.draw())
    r = pool.report
    assert (r.corpus, r.too_short, r.boilerplate, r.duplicates) == (len(corpus), 1, 1, 1)
    assert r.near_duplicates == 1
    assert "short" not in drawn and "legal" not in drawn and "dup" not in drawn
    assert ("bees-0" in drawn) != ("near" in drawn)  # near-duplicates sampled once
    assert len(drawn) == len(corpus) - 4
    assert r.examples["too_short"][0].startswith("short:")


def test_pool_order_is_seeded_and_stratified() -> None:
    corpus = make_corpus(5)
    a = PassagePool(corpus, seed=3).order
    assert a == PassagePool(corpus, seed=3).order
    assert a != PassagePool(corpus, seed=4).order
    # every prefix of 6 covers each id-prefix group about proportionally
    groups = {d.split("-")[0] for d in a[:6]}
    assert len(groups) >= 5
    assert "id prefix" in PassagePool(corpus, seed=3).report.stratified_by


def test_partner_prefers_a_shared_entity() -> None:
    corpus = {
        "a": "Mount Etna on Sicily is the highest active volcano in Europe and erupts often with lava.",
        "b": "Sicily has a warm climate; Etna wine grows on the volcanic soil of its slopes near Catania.",
        "c": "Lava flows from volcanoes in Europe cool into basalt rock that erupts often with gas.",
    }
    pool = PassagePool(corpus, seed=0, min_words=5)
    list(pool.draw())
    found = pool.partner("a", LexicalIndex(corpus))
    assert found is not None and found[0] in {"b", "c"}
    assert "entity" in found[1] or "bm25" in found[1]


def test_a_partner_looked_up_later_is_the_one_found_when_the_anchor_was_drawn() -> None:
    # A two-passage draw is paired once the index is built, after later draws may have skipped
    # more near-duplicates: as_of counts only those skipped when its anchor was drawn.
    corpus = {
        "a": "Mount Etna on Sicily is the highest active volcano in Europe and erupts often with lava.",
        "b": "Sicily has a warm climate; Etna wine grows on the volcanic soil of its slopes near Catania.",
        "b2": "Sicily has a warm climate; Etna wine grows on the volcanic soil of its slopes near Catania. "
              "Many visitors come.",
    }
    pool = PassagePool(corpus, seed=0, min_words=5)
    pool.order = ["a", "b2", "b"]  # b2 drawn first: b is its near-duplicate, skipped later
    drawn = pool.draw()
    assert next(drawn) == "a"
    as_of = pool.rejections
    index = LexicalIndex(corpus)
    before = pool.partner("a", index)
    assert before is not None
    assert list(drawn) == ["b2"] and pool.rejections == as_of + 1  # b skipped now
    partner = pool.partner("a", index, as_of=as_of)
    assert partner == before  # b still counts: it was not skipped when a was drawn
    later = pool.partner("a", index)
    assert later is not None and later[0] == "b2"


# ----------------------------------------------------------------------------- filters
def cand(cid: str, query: str, sources: list[str], style: str = "question") -> Candidate:
    return Candidate(id=cid, style=style, sources=sources, query=query, reference="ref",
                     generation={"model": "m"})


def test_filters_and_accounting_on_fixed_candidates() -> None:
    corpus = make_corpus(3)
    index = LexicalIndex(corpus)
    pool = PassagePool(corpus, seed=0)
    cands = [
        cand("c1", "why does sourdough rise without yeast from a packet", ["bread-0"]),
        cand("c2", "why does sourdough rise without yeast from a packet?", ["bread-1"]),  # exact dup
        cand("c3", "honey bees gather nectar from flowers and store it as honey", ["bees-0"]),  # copy
        cand("c4", "stock market crash of 1929", ["heart-0"]),  # not retrieved
        cand("c5", "why does sourdough bread rise without packet yeast", ["bread-2"]),  # near dup of c1
        cand("c6", "where are most bicycles per person", ["bikes-1"]),
        Candidate(id="c7", style="question", sources=["coffee-0"]),
    ]
    cands[6].drop("generation", "unparsable reply after 2 repairs: no JSON object in the reply")
    text_filters(cands, pool.tokens_of, index, copy_span=7, roundtrip_k=20, near_duplicate=0.6)
    by = {c.id: c for c in cands}
    assert by["c1"].pending and by["c6"].pending
    assert by["c2"].dropped_by == "duplicate" and "c1" in (by["c2"].reason or "")
    assert by["c3"].dropped_by == "copy" and by["c3"].scores["copy_span"] >= 7
    assert by["c4"].dropped_by == "roundtrip" and "not retrieved" in (by["c4"].reason or "")
    assert by["c5"].dropped_by == "duplicate" and "nearly" in (by["c5"].reason or "")
    assert by["c1"].scores["roundtrip_ranks"]["bread-0"] <= 20

    judge_filter(by["c1"], 3, {0: 0.05, 1: 0.05, 2: 0.1, 3: 0.8}, None, min_confidence=0.8)
    judge_filter(by["c6"], 1, None, None)
    assert by["c1"].kept and by["c1"].scores["confidence"] == pytest.approx(0.9)
    assert by["c6"].dropped_by == "answerability" and by["c6"].reason == "judge grade 1 < 2"

    lines = {f.name: f for f in accounting(cands)}
    assert list(lines) == list(FILTERS)
    assert sum(f.dropped for f in lines.values()) == 6
    assert lines["duplicate"].dropped == 2 and lines["copy"].dropped == 1
    assert lines["generation"].examples[0].startswith("c7: unparsable")
    assert lines["pairing"].seen == len(cands)


def test_siblings_drop_only_exact_repeats_of_each_other() -> None:
    corpus = make_corpus(3)
    pool = PassagePool(corpus, seed=0)
    a1 = cand("d1-1", "why does sourdough rise without yeast from a packet", ["bread-0"])
    a2 = cand("d1-2", "why does sourdough bread rise without packet yeast", ["bread-0"])  # near: kept
    a3 = cand("d1-3", "Why does sourdough rise without yeast from a packet?", ["bread-0"])  # exact
    b1 = cand("d2-1", "why does sourdough bread rise without any packet yeast", ["bread-1"])  # near d1
    for c in (a1, a2, a3):
        c.draw = "d1"
    b1.draw = "d2"
    text_filters([a1, a2, a3, b1], pool.tokens_of, None, near_duplicate=0.6)
    assert a1.pending and a2.pending
    assert a3.dropped_by == "duplicate" and "same query as d1-1" in (a3.reason or "")
    assert b1.dropped_by == "duplicate" and "nearly" in (b1.reason or "")


def test_text_filters_are_idempotent_across_rounds() -> None:
    corpus = make_corpus(2)
    index = LexicalIndex(corpus)
    pool = PassagePool(corpus, seed=0)
    first = [cand("c1", "how does a volcano erupt lava", ["volcano-0"])]
    text_filters(first, pool.tokens_of, index)
    second = first + [cand("c2", "How does a volcano erupt lava?", ["volcano-1"])]
    text_filters(second, pool.tokens_of, index)  # round two: c1 is not re-checked, c2 is its dup
    assert first[0].pending and second[1].dropped_by == "duplicate"


def test_filtering_draw_by_draw_with_seen_queries_is_one_call_over_all() -> None:
    # The pipeline filters each draw alone, keeping the survivors in SeenQueries: the same
    # drops, with the same reasons, as one call over every candidate in draw order.
    corpus = make_corpus(3)
    pool = PassagePool(corpus, seed=0)

    def draws() -> list[list[Candidate]]:
        a = [cand("d1-1", "why does sourdough rise without yeast from a packet", ["bread-0"]),
             cand("d1-2", "why does sourdough bread rise without packet yeast", ["bread-0"])]
        b = [cand("d2-1", "Why does sourdough rise without yeast from a packet?", ["bread-1"]),
             cand("d2-2", "why does sourdough bread rise without any packet yeast", ["bread-1"]),
             cand("d2-3", "what temperature suits a sourdough starter", ["bread-1"])]
        for group, name in ((a, "d1"), (b, "d2")):
            for c in group:
                c.draw = name
        return [a, b]

    whole = draws()
    text_filters([c for d in whole for c in d], pool.tokens_of, None, near_duplicate=0.6)
    seen = SeenQueries()
    by_draw = draws()
    for d in by_draw:
        text_filters(d, pool.tokens_of, None, near_duplicate=0.6, seen=seen)
    outcome = [[(c.id, c.status, c.reason) for c in d] for d in whole]
    assert [[(c.id, c.status, c.reason) for c in d] for d in by_draw] == outcome
    assert [c.dropped_by for c in whole[1]] == ["duplicate", "duplicate", None]


def test_confidence_filter() -> None:
    c = cand("c1", "q", ["d"])
    judge_filter(c, 2, {0: 0.3, 1: 0.3, 2: 0.2, 3: 0.2}, None, min_confidence=0.5)
    assert c.dropped_by == "confidence" and "0.40" in (c.reason or "")
    c2 = cand("c2", "q", ["d"])
    judge_filter(c2, 2, None, None, min_confidence=0.5)  # no logprobs: the filter cannot apply
    assert c2.kept and c2.scores["confidence"] is None
    c3 = cand("c3", "q", ["d"])
    judge_filter(c3, None, None, "not judged: max cost reached", budget=True)
    assert c3.dropped_by == "budget"


# ----------------------------------------------------------------------------- inputs
def test_parse_styles() -> None:
    assert parse_styles(None) == {"question": 0.6, "keyword": 0.3, "multi": 0.1}
    assert parse_styles("question=0.5, keyword=0.5") == {"question": 0.5, "keyword": 0.5}
    assert parse_styles("question=1,multi=0") == {"question": 1.0}
    assert parse_styles("mine=1", known=["mine"]) == {"mine": 1.0}
    for bad, msg in [("question=0.5,keyword=0.3", "sum to 0.8, not 1"), ("poem=1", "unknown style 'poem'"),
                     ("question", "not STYLE=WEIGHT"), ("question=x", "not a number"),
                     ("question=1.5,keyword=-0.5", ">= 0"), ("question=0.5,question=0.5", "twice"),
                     ("", "no style")]:
        with pytest.raises(InputError, match=re.escape(msg)):
            parse_styles(bad)


def test_read_examples(tmp_path: Path) -> None:
    txt = tmp_path / "ex.txt"
    txt.write_text("best hiking boots\n\nhow to fix a flat tire\n")
    assert read_examples(txt) == ["best hiking boots", "how to fix a flat tire"]
    js = tmp_path / "ex.jsonl"
    js.write_text('{"_id": "1", "text": "cheap flights"}\n')
    assert read_examples(js) == ["cheap flights"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(InputError, match="no example queries"):
        read_examples(empty)


PROMPT_NO_PASSAGE = """---
{"id": "mine", "version": "1", "variables": ["examples"],
 "output_schema": {"type": "object", "properties": {"query": {"type": "string"},
   "answer": {"type": "string"}}, "required": ["query", "answer"], "additionalProperties": false}}
---
<!-- role: user -->
Write a query like these: {{examples}}
"""


def offline_llm(**kw: Any) -> LLM:
    return LLM("m", base_url=BASE, api_key=SECRET, cache=NullCache(), **kw)


def test_prompt_checks(tmp_path: Path) -> None:
    bad = tmp_path / "mine.md"
    bad.write_text(PROMPT_NO_PASSAGE)
    corpus = make_corpus(2)
    with pytest.raises(InputError, match=r"lacks the variable\(s\) passage"):
        estimate_synth(corpus, 3, llm=offline_llm(), styles="question=1", prompts={"question": bad})
    no_answer = tmp_path / "noanswer.md"
    no_answer.write_text(PROMPT_NO_PASSAGE.replace('"examples"]', '"examples", "passage"]')
                         .replace(',\n   "answer": {"type": "string"}', "")
                         .replace('["query", "answer"]', '["query"]')
                         .replace("{{examples}}", "{{examples}} {{passage}}"))
    with pytest.raises(InputError, match="string fields 'query' and 'answer'"):
        estimate_synth(corpus, 3, llm=offline_llm(), styles="question=1", prompts={"question": no_answer})
    with pytest.raises(InputError, match="not in the mix"):
        estimate_synth(corpus, 3, llm=offline_llm(), styles="question=1", prompts={"keyword": bad})


def test_bad_arguments() -> None:
    corpus = make_corpus(1)
    for kw, msg in [({"n": 0}, "positive integer"), ({"n": -3}, "positive integer"),
                    ({"n": 2, "oversample": 0.5}, "oversample"), ({"n": 2, "roundtrip_k": 0}, "positive"),
                    ({"n": 2, "min_confidence": 2.0}, r"\[0, 1\]")]:
        n = kw.pop("n")
        with pytest.raises(InputError, match=msg):
            estimate_synth(corpus, n, llm=offline_llm(), **kw)
    with pytest.raises(InputError, match="corpus is empty"):
        estimate_synth({}, 3, llm=offline_llm())


def test_dry_run_counts_candidates_and_sends_nothing() -> None:
    corpus = make_corpus(3)
    with respx.mock(assert_all_called=False) as router:
        route = router.post(URL)
        plan = estimate_synth(corpus, 4, llm=offline_llm(), oversample=2,
                              styles="question=0.5,keyword=0.25,multi=0.25")
    assert not route.called
    assert plan.draws == 8 and plan.candidates == 24  # three candidates per v2 call
    assert {k: v.pairs for k, v in plan.generation.items()} == {"question": 4, "keyword": 2, "multi": 2}
    assert plan.judge.calls == 24 and "at most 8 generation calls" in plan.describe()
    assert "up to 24 candidate queries" in plan.describe()
    v1 = estimate_synth(corpus, 4, llm=offline_llm(), oversample=2, styles="question=1",
                        prompts={"question": "synth_question.v1"})
    assert (v1.draws, v1.candidates, v1.judge.calls) == (8, 8, 8)


# ----------------------------------------------------------------------------- the pipeline, mocked HTTP
def test_synthesize_end_to_end_with_mocked_http(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    corpus = make_corpus(3)
    fake = FakeModel()
    httpx2_mock.post(URL).mock(side_effect=fake)
    result = synthesize_sync(corpus, 6, model="m", base_url=BASE, api_key=SECRET, cache=False,
                             progress=False, oversample=3, min_confidence=0.7,
                             styles="question=0.5,keyword=0.3,multi=0.2")
    assert result.ok and len(result.kept) == 6 and len(result.queries) == 6
    drops = {c.dropped_by for c in result.candidates if c.status == "dropped"}
    assert "generation" in drops  # failures are data: the bicycle passages' broken replies
    for c in result.candidates:
        if c.dropped_by == "confidence":
            assert any(s.startswith("bees") for s in c.sources)
    assert all(c.status in ("kept", "dropped", "unused") for c in result.candidates)
    # qrels: sources at grade 3; samples carry RAGAS names
    for c in result.kept:
        assert result.qrels.get(c.qid) == {s: 3 for s in c.sources}
    s0 = result.samples[0]
    assert set(s0) >= {"user_input", "reference", "reference_context_ids", "reference_contexts"}
    assert s0["reference_contexts"] == [corpus[d] for d in s0["reference_context_ids"]]
    # at most oversample x n generation calls; calls accounted
    gen_requests = sum(1 for name in fake.calls if name.startswith("synth_"))  # + repair turns
    assert result.summary()["generation_calls"] <= min(18, gen_requests)
    assert result.usage.calls == len(fake.calls)
    # one query per draw; a coffee draw's first candidate fails the judge, so its sibling is
    # judged next (no new generation call) and the third is not needed
    draws: dict[str, list[Any]] = {}
    for c in result.candidates:
        draws.setdefault(c.draw, []).append(c)
    assert all(sum(c.kept for c in cs) <= 1 for cs in draws.values())
    coffee = [cs for cs in draws.values() if cs[0].sources[0].startswith("coffee") and len(cs) == 3]
    assert coffee
    for first, second, third in coffee:
        if second.kept:
            assert first.dropped_by == "answerability" and first.scores["grade"] == 1
            assert third.status == "unused" and "from the same call, was kept" in third.reason
    assert any(cs[1].kept for cs in coffee)
    assert {c.generation["prompt_id"] for c in result.candidates if c.generation} <= {
        "synth_question", "synth_keyword", "synth_multi"}
    judge_calls = sum(1 for name in fake.calls if not name.startswith("synth_"))
    assert judge_calls == sum(1 for c in result.candidates if c.judgment is not None)
    # provenance
    gen = result.kept[0].generation
    assert gen["prompt_id"].startswith("synth_") and len(gen["prompt_sha"]) == 64 and gen["model"] == "m"
    assert result.kept[0].judgment["prompt_id"] == "relevance"
    # renderers
    text = str(result)
    assert "6/6 queries kept" in text and "answerability" in text
    assert "<table>" in result._repr_html_()
    d = result.to_dict()
    assert d["summary"]["kept"] == 6 and [f["filter"] for f in d["filters"]] == list(FILTERS)
    json.dumps(d)
    df = result.to_dataframe()
    assert len(df) == len(result.candidates) and (df["status"] == "kept").sum() == 6
    assert "\\toprule" in result.to_latex() and "answerability" in result.to_latex()
    paths = result.write(tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(
        ["queries.jsonl", "qrels.txt", "samples.jsonl", "synth.jsonl", "summary.json"])
    lines = [json.loads(x) for x in (tmp_path / "out" / "synth.jsonl").read_text().splitlines()]
    assert len(lines) == len(result.candidates)
    assert all("synth" in x and x["synth"]["seed"] == 0 for x in lines)
    q = [json.loads(x) for x in (tmp_path / "out" / "queries.jsonl").read_text().splitlines()]
    assert set(q[0]) == {"_id", "text", "style"}


def test_max_cost_stops_spending(httpx2_mock: respx.Router) -> None:
    corpus = make_corpus(3)
    # 2.5 USD per call as billed, below the worst case reserved before each call (a byte
    # per token of prompt and schema + max_tokens: ~4-5 USD for a generation call); 5
    # queries need ~8 calls, the cap allows ~4
    httpx2_mock.post(URL).mock(side_effect=FakeModel(prompt_tokens=2000, completion_tokens=500))
    prices = PriceTable.parse({"m": {"input": 1000.0, "output": 1000.0}})
    llm = LLM("m", base_url=BASE, api_key=SECRET, cache=False, prices=prices, max_cost=12.0)
    result = synthesize_sync(corpus, 5, llm=llm, progress=False)
    assert not result.ok
    assert any(c.dropped_by == "budget" for c in result.candidates)
    assert llm.cost is not None and 0 < llm.cost <= 12.0
    assert "FEWER THAN REQUESTED" in str(result)


def test_async_api_inside_a_running_loop() -> None:
    import asyncio

    async def main() -> Any:
        llm = fake_session()
        async with llm:
            inner = synthesize_sync(make_corpus(2), 2, llm=llm, progress=False, styles="keyword=1")
            outer = await synthesize(make_corpus(2), 2, llm=llm, progress=False, styles="keyword=1")
        return inner, outer

    inner, outer = asyncio.run(main())
    assert inner.queries == outer.queries and len(outer.queries) == 2
    assert math.isfinite(outer.summary()["calls_per_kept_query"])


def test_pool_stratifies_by_repeated_titles() -> None:
    corpus = {}
    for doc in ("Volcano", "Coffee", "Bees"):
        for i in range(4):
            corpus[f"{doc.lower()}{i}"] = f"{doc}\n" + TOPICS[{"Volcano": "volcano", "Coffee": "coffee",
                                                                "Bees": "bees"}[doc]] + f" part {i} of the article."
    pool = PassagePool(corpus, seed=0)
    assert pool.report.stratified_by[0] == "title"
    first = pool.order[:3]
    assert {d.rstrip("0123456789") for d in first} == {"volcano", "coffee", "bees"}


def test_siblings_unusable_items_and_one_query_per_draw(httpx2_mock: respx.Router) -> None:
    """A v2 reply's unusable item is a candidate dropped by `generation` (accounted, not lost);
    a reply with no usable item gets the repair turn; siblings are judged in the model's order
    and the judge stops at the first that passes."""
    calls: list[str] = []

    def reply(request: Any) -> respx.MockResponse:
        body = json.loads(request.content)
        name = body["response_format"]["json_schema"]["name"]
        user = body["messages"][1]["content"]
        calls.append(name)
        if name == "synth_question":
            words = tokens(re.search(r"<passage>\n(.*?)\n</passage", user, re.S).group(1))  # type: ignore[union-attr]
            if len(body["messages"]) == 2 and words[0] == "coffee":  # first try: nothing usable
                return ok(completion(json.dumps({"queries": [{"query": " ", "answer": "x"}]})))
            return ok(completion(json.dumps({"queries": [
                {"query": "", "answer": "no query here"},
                {"query": f"{words[0]} {words[1]} please", "answer": "weak"},  # grade 1
                {"query": f"what about {' '.join(words[:4])}?", "answer": "good"},  # grade 3
            ]})))
        q = re.search(r"<query>\n(.*?)\n</query>", user, re.S).group(1)  # type: ignore[union-attr]
        p = re.search(r"<passage>\n(.*?)\n</passage>", user, re.S).group(1)  # type: ignore[union-attr]
        grade = 3 if len(set(tokens(q)) & set(tokens(p))) >= 3 else 1
        return ok(completion(json.dumps({"reasoning": "overlap", "grade": grade})))

    httpx2_mock.post(URL).mock(side_effect=reply)
    corpus = {k: v for k, v in make_corpus(1).items() if k.split("-")[0] in ("volcano", "coffee", "bees")}
    result = synthesize_sync(corpus, 3, model="m", base_url=BASE, api_key=SECRET, cache=False,
                             progress=False, styles="question=1", roundtrip_k=None, seed=1)
    assert result.ok and len(result.kept) == 3
    assert len(result.candidates) == 9  # three passages, one draw each, three candidates per draw
    for c in result.candidates:
        draw = c.draw
        assert c.id.startswith(f"{draw}-")
        if c.id.endswith("-1"):
            assert c.dropped_by == "generation" and "candidate 1 of the reply is unusable" in c.reason
        elif c.id.endswith("-2"):
            assert c.dropped_by == "answerability" and c.judgment["grade"] == 1  # judged first
        else:
            assert c.kept and c.judgment["grade"] == 3  # then its sibling
    generation = [n for n in calls if n == "synth_question"]
    assert len(generation) == 4  # three draws + the repair turn of the coffee reply
    assert len(calls) - len(generation) == 6  # two judge calls per draw
    assert result.summary()["generation_calls"] == 3


def test_a_revoked_key_leaves_the_queries_made_before_it(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    from ragjudge.errors import LLMError
    from ragjudge.synth import SynthResult

    fake = FakeModel()

    def revoked_after_12(request: Any) -> respx.MockResponse:
        if len(fake.calls) >= 12:
            return respx.MockResponse(401, json={"error": {"message": "Incorrect API key provided"}})
        return fake(request)

    httpx2_mock.post(URL).mock(side_effect=revoked_after_12)
    with pytest.raises(LLMError) as err:
        synthesize_sync(make_corpus(3), 6, model="m", base_url=BASE, api_key=SECRET, cache=False,
                        progress=False, oversample=3, concurrency=1)
    result = err.value.partial
    assert isinstance(result, SynthResult) and 0 < len(result.kept) < 6 and not result.ok
    assert all(c.status != "pending" for c in result.candidates)
    assert any(c.dropped_by == "stopped" and "the run stopped" in (c.reason or "") for c in result.candidates)
    assert len(result.qrels) == len(result.kept)


def test_the_cli_writes_the_queries_made_before_a_revoked_key(httpx2_mock: respx.Router, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from ragjudge.cli import main

    fake = FakeModel()

    def revoked_after_12(request: Any) -> respx.MockResponse:
        if len(fake.calls) >= 12:
            return respx.MockResponse(401, json={"error": {"message": "Incorrect API key provided"}})
        return fake(request)

    httpx2_mock.post(URL).mock(side_effect=revoked_after_12)
    monkeypatch.setenv("SYNTH_TEST_KEY", SECRET)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in make_corpus(3).items()))
    out = tmp_path / "out"
    code = main(["synth", "--corpus", str(corpus), "-n", "6", "--model", "m", "--base-url", BASE,
                 "--api-key-env", "SYNTH_TEST_KEY", "-o", str(out), "--cache", str(tmp_path / "c.sqlite"),
                 "--no-progress", "--oversample", "3", "--concurrency", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "the run stopped; wrote the" in err and "queries made before it" in err and "Traceback" not in err
    kept = [json.loads(x) for x in (out / "queries.jsonl").read_text().splitlines()]
    assert 0 < len(kept) < 6
