"""Matching chunks to gold documents and Haystack-style document recall."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragjudge.errors import MetricError
from ragjudge.rag.matching import (
    canonical_text,
    document_recall,
    gold_and_ranking,
    match_chunks,
    normalize_text,
)
from ragjudge.rag.samples import Context, Sample


def test_haystack_single_and_multi_hit():
    gold = [["Paris", "France"]]
    got = [["Paris", "Berlin"]]
    assert document_recall(gold, got, mode="multi_hit") == [0.5]
    assert document_recall(gold, got, mode="single_hit") == [1.0]


def test_document_recall_unique_contents_and_undetermined():
    # Duplicated gold content counts once; a repeated retrieved content counts once.
    assert document_recall([["a", "a", "b"]], [["a", "a"]]) == [0.5]
    assert document_recall([[]], [["a"]]) == [None]
    assert document_recall([["A b"]], [["a  B"]], match="normalized") == [1.0]
    assert document_recall([["A b"]], [["a  B"]], match="text") == [0.0]
    with pytest.raises(MetricError):
        document_recall([["a"]], [["a"]], mode="all")
    with pytest.raises(MetricError):
        document_recall([["a"]], [["a"]], match="id")


def test_normalize_and_canonical():
    assert normalize_text("  Hello\n\tWORLD  ") == "hello world"
    chat = "Date: 2023-05-01\nuser: Where do I park?\nassistant: Behind the shop."
    assert canonical_text(chat) == "where do i park? behind the shop."
    escaped = "Date: 2023-05-01\\nuser: Where do I park?\\nassistant: Behind the shop."
    assert canonical_text(escaped) == canonical_text(chat)


def test_match_modes():
    gold = ["The cat sat.", "A dog ran far away.", "The cat sat."]
    chunks = ["The cat sat.", "the  CAT sat.", "dog ran far", "nothing"]
    assert match_chunks(chunks, gold, "text") == [0, None, None, None]
    assert match_chunks(chunks, gold, "normalized") == [0, 0, None, None]
    assert match_chunks(chunks, gold, "chunk") == [0, 0, 1, None]
    with pytest.raises(MetricError):
        match_chunks(chunks, gold, "fuzzy")


def test_chunk_of_original_chat_log_with_json_escapes():
    original = "Date: 2023-05-01\nuser: I moved to Lisbon last spring.\nassistant: How is it going?"
    chunk = '{"turns": "user: I moved to Lisbon last spring.\\nassistant: How is it going?"}'
    # The chunk's serialisation wrappers ({"turns": "...") are not in the original.
    assert match_chunks([chunk], [original], "chunk") == [None]
    chunk2 = "user: I moved to Lisbon last spring.\\nassistant: How is"
    assert match_chunks([chunk2], [original], "chunk") == [0]


def test_gold_and_ranking_by_id_keeps_ranks_on_duplicates():
    s = Sample(id="s", contexts=(Context("a"), Context("b"), Context("a")), relevant={"a": 1})
    gold, ranking = gold_and_ranking(s)
    assert gold == {"a": 1}
    assert ranking[:2] == ["a", "b"] and ranking[2] != "a" and len(ranking) == 3


def test_gold_and_ranking_by_content():
    s = Sample(
        id="s",
        contexts=(Context(text="x"), Context(text="Paris"), Context(text="paris")),
        reference_contexts=("Paris", "France"),
    )
    gold, ranking = gold_and_ranking(s)  # auto -> normalized (no ids)
    assert gold == {"g0": 1, "g1": 1}
    assert ranking[1] == "g0" and ranking[0] not in gold and ranking[2] not in gold
    assert gold_and_ranking(s, "text")[1][2] not in gold


def test_gold_and_ranking_reasons():
    assert gold_and_ranking(Sample(id="s", contexts=(Context("a"),)), "id").startswith("no gold ids")
    assert gold_and_ranking(Sample(id="s", relevant={"a": 1}), "id") == "no retrieved ids"
    assert "no gold texts" in gold_and_ranking(Sample(id="s", contexts=(Context(text="a"),)), "normalized")
    assert gold_and_ranking(Sample(id="s", contexts=(Context(text="a"),))).startswith("no gold (")
    # auto: gold ids but chunks without ids, and gold texts -> content matching
    s = Sample(id="s", contexts=(Context(text="a"),), relevant={"x": 1}, reference_contexts=("a",))
    assert gold_and_ranking(s) == ({"g0": 1}, ["g0"])
    with pytest.raises(MetricError):
        gold_and_ranking(Sample(id="s"), "fuzzy")


_texts = st.lists(st.text(alphabet="abc AB\n", max_size=6), max_size=5)


@given(_texts, _texts)
def test_single_hit_bounds_multi_hit(gold, got):
    single = document_recall([gold], [got], mode="single_hit")[0]
    multi = document_recall([gold], [got], mode="multi_hit")[0]
    if not gold:
        assert single is None and multi is None
    else:
        assert 0.0 <= multi <= single <= 1.0
        assert (single == 1.0) == (multi > 0.0)


@pytest.mark.slow  # hypothesis, ~2 s
@given(st.text(max_size=40))
def test_normal_forms_are_idempotent(text):
    assert normalize_text(normalize_text(text)) == normalize_text(text)
    # chunk matching: every text matches the document it is
    assert match_chunks([text], [text], "chunk") == [0 if canonical_text(text) else None]
