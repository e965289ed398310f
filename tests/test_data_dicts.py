"""``Qrels.from_dict`` / ``Run.from_dict``: the vectorised path gives exactly what the row loop
gives, and every odd input still ends in the row loop's error naming query and document."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from ragjudge import Qrels, Run, evaluate
from ragjudge.errors import InputError
from ragjudge.ids import joined_column, str_column


def _same(a: Run, b: Run) -> None:
    assert a.query_ids == b.query_ids
    assert a.to_dict() == b.to_dict()
    assert [a.ranked(q) for q in a.query_ids] == [b.ranked(q) for q in b.query_ids]  # rank order too


def _slow_run(data: dict) -> Run:
    rows = [(q, d, float(s)) for q, docs in data.items() for d, s in docs.items()]
    return Run.from_arrays([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def test_fast_path_equals_the_row_order_build() -> None:
    rng = random.Random(7)
    run = {f"q{i}": {f"d{rng.randrange(50)}é": rng.choice([1.0, 0.5, float(rng.randrange(3))])
                     for _ in range(30)} for i in range(40)}
    run["q-empty"] = {}
    qrels = {q: {d: rng.randrange(4) for d in list(docs)[:10]} for q, docs in run.items()}
    fast = Run.from_dict(run)
    _same(fast, _slow_run(run))
    assert Qrels.from_dict(qrels).to_dict() == {q: {d: g for d, g in docs.items()} for q, docs in qrels.items() if docs}
    r = evaluate(qrels, run, ["ndcg@10", "map", "P@5"])
    r2 = evaluate(Qrels.from_dict(qrels), _slow_run(run), ["ndcg@10", "map", "P@5"])
    assert r.mean == r2.mean and r.per_query == r2.per_query


@pytest.mark.parametrize("bad, message", [
    ({"q1": {"d1": True}}, "score of query 'q1', document 'd1' must be a number"),
    ({"q1": {"d1": "1.5"}}, "must be a number"),
    ({"q1": {"d1": math.inf}}, "must be finite"),
    ({"q1": {"d1": math.nan}}, "must be finite"),
])
def test_odd_scores_are_named(bad: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Run.from_dict(bad)


@pytest.mark.parametrize("bad, message", [
    ({"q1": {"d1": 1.5}}, "grade of query 'q1', document 'd1' must be an integer"),
    ({"q1": {"d1": True}}, "must be an integer"),
    ({"q1": {"d1": None}}, "must be an integer"),
])
def test_odd_grades_are_named(bad: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Qrels.from_dict(bad)


def test_ids_the_fast_path_cannot_split_take_the_row_loop() -> None:
    run = {"q1": {"a\nb": 1.0, "c": 0.5}, 7: {"d": 1.0}}  # a newline in an id, a non-str qid
    got = Run.from_dict(run)
    assert set(got.query_ids) == {"q1", "7"}
    # non-str document ids are spelled with str(), as they always were
    assert Run.from_dict({"q": {1: 1.0, "a": 0.5}}).to_dict() == {"q": {"1": 1.0, "a": 0.5}}
    assert Qrels.from_dict({"q": {2: 1}}).to_dict() == {"q": {"2": 1}}
    assert got.to_dict()["q1"] == {"a\nb": 1.0, "c": 0.5}
    assert Qrels.from_dict({"q1": {"x": 2.0}}).to_dict() == {"q1": {"x": 2}}  # whole floats pass


@pytest.mark.parametrize("docs_per_query, queries", [(300, 5), (3, 200)])  # per-query sorts; one sort
def test_both_sort_strategies_equal_the_row_order_build(docs_per_query: int, queries: int) -> None:
    rng = random.Random(docs_per_query)
    run = {f"q{rng.randrange(10**6)}ü": {f"d{rng.randrange(10**4)}{rng.choice(['', 'é', 'x' * 40])}":
                                         float(rng.randrange(5)) for _ in range(docs_per_query)}
           for _ in range(queries)}
    _same(Run.from_dict(run), _slow_run(run))


def test_rank_ordered_dicts_keep_their_order_and_break_ties() -> None:
    run = {"b": {"d3": 3.0, "d1": 2.0, "d9": 2.0, "d2": 1.0}, "a": {"x": 1.0}}
    got = Run.from_dict(run)
    _same(got, _slow_run(run))
    assert got.query_ids == ["a", "b"]
    assert [d for d, _ in got.ranked("b")] == ["d3", "d9", "d1", "d2"]  # ties by docid descending


def test_an_unsorted_query_after_sorted_ones_is_still_sorted() -> None:
    run = {"a": {"x": 3.0, "y": 2.0}, "e": {}, "b": {"u": 1.0, "v": 5.0, "w": 5.0}, "c": {"z": 0.0}}
    got = Run.from_dict(run)
    _same(got, _slow_run(run))
    assert [d for d, _ in got.ranked("b")] == ["w", "v", "u"]
    _same(Run.from_dict({"e": {}, **run}), _slow_run(run))  # an empty query first


@pytest.mark.parametrize("seed", range(4))
def test_id_columns_are_numpys_own_at_every_width(seed: int) -> None:
    # the column is filled 8 bytes at a time: widths around multiples of 8, one-word ids, ids
    # past LONG_ID, multi-byte UTF-8 and empty ids must all come out as numpy builds them
    rng = random.Random(seed)
    alphabet = ["a", "Z", "0", "é", "€", "😀", " "]
    for _ in range(300):
        longest = rng.choice([0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 63, 64, 65, 90])
        ids = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(longest + 1)))
               for _ in range(rng.choice([1, 2, 5, 40]))]
        want = np.array([i.encode("utf-8") for i in ids], dtype=bytes)
        got = str_column(ids)
        assert got is not None and got.dtype == want.dtype and got.tolist() == want.tolist(), ids
    many = [f"d{i}" + "é" * (i % 5) for i in range(40_000)]  # rows across the kernel's slices
    assert str_column(many).tolist() == [i.encode("utf-8") for i in many]
    assert joined_column("a\nb\nc", 2) is None  # an id holding a newline: separators miscount
    assert joined_column("", 0).tolist() == [] and joined_column("", 1).tolist() == [b""]


def test_ids_numpy_would_merge_take_the_row_loop() -> None:
    # numpy's S arrays drop trailing NULs: "a" and "a\x00" would become one id, a duplicate
    with pytest.raises(InputError, match="duplicate"):
        Run.from_dict({"q": {"a": 1.0, "a\x00": 0.5}})


@pytest.mark.parametrize("build", [lambda: Run.from_dict({"q": {"d\ud800": 1.0}}),
                                   lambda: Qrels.from_dict({"q\udfff": {"d": 1}}),
                                   lambda: Run.from_arrays(["q"], ["\ud800"], [1.0])])
def test_a_lone_surrogate_is_named_not_a_crash(build) -> None:
    with pytest.raises(InputError, match="not valid Unicode"):
        build()


@pytest.mark.parametrize("accent", ["", "é"])  # Arrow's buffers read directly; through Python
def test_dataframe_id_columns_read_alike_whatever_pandas_keeps_them_in(accent: str) -> None:
    pd = pytest.importorskip("pandas")
    rng = random.Random(3)
    rows = [(f"q{q}", f"d{rng.randrange(10**5)}{accent if q == 3 else ''}", rng.random())
            for q in range(4) for _ in range(200)]
    rows = list({(q, d): (q, d, s) for q, d, s in rows}.values())
    want = _slow_run({q: {d: s for qq, d, s in rows if qq == q} for q in {r[0] for r in rows}})
    for dtype in (object, "string[pyarrow]", "str"):
        df = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"]).astype(
            {"query_id": dtype, "doc_id": dtype})
        _same(Run.from_dataframe(df), want)
    df = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"]).astype({"doc_id": "string[pyarrow]"})
    df.loc[5, "doc_id"] = None
    with pytest.raises(InputError, match="6: doc_id: missing value"):
        Run.from_dataframe(df)
