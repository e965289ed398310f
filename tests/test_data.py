"""Qrels / Run: canonical order, duplicates, accessors, dict/list/DataFrame round trips."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragjudge.data import Qrels, Run
from ragjudge.errors import InputError


# ----------------------------------------------------------------------------- references
def ref_run_order(rows: list[tuple[str, str, float]]) -> dict[str, list[tuple[str, float]]]:
    """trec_eval's order by a plain Python sort: qid bytes asc, score desc, docid bytes desc."""
    out: dict[str, list[tuple[str, float]]] = {}
    for q, d, s in sorted(rows, key=lambda r: (r[0].encode(), -r[2], _neg_bytes(r[1]))):
        out.setdefault(q, []).append((d, s))
    return out


class _neg_bytes:  # noqa: N801 -- a sort key wrapper: reverses byte order
    def __init__(self, s: str) -> None:
        self.b = s.encode()

    def __lt__(self, other: _neg_bytes) -> bool:
        return self.b > other.b

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _neg_bytes) and self.b == other.b


def run_as_lists(run: Run) -> dict[str, list[tuple[str, float]]]:
    return {q: run.ranked(q) for q in run.query_ids}


# Ids mix ASCII, UTF-8 multi-byte characters and long pieces (ids longer than 8 bytes take
# more than one integer word in the sort keys).
ids = st.lists(
    st.sampled_from(list("ab0zé#_-.") + ["\u4e2d", "x" * 9]), min_size=1, max_size=4
).map("".join)
scores = st.sampled_from([0.0, -0.0, 1.0, 1.5, -2.25, 1e-300, 3.0, 1 / 3])


# ----------------------------------------------------------------------------- Run order
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["q1", "q10", "q2", "é", "a" * 12]), ids, scores),
                max_size=40), st.randoms())
def test_run_order_matches_reference(rows, rnd):
    seen = set()
    uniq = []
    for q, d, s in rows:
        if (q, d) not in seen:
            seen.add((q, d))
            uniq.append((q, d, s))
    rnd.shuffle(uniq)
    run = Run.from_arrays([r[0] for r in uniq], [r[1] for r in uniq], [r[2] for r in uniq])
    assert run_as_lists(run) == ref_run_order(uniq)
    # Also when the input already comes grouped and in rank order (the fast path).
    ordered = [(q, d, s) for q, lst in ref_run_order(uniq).items() for d, s in lst]
    run2 = Run.from_arrays([r[0] for r in ordered], [r[1] for r in ordered], [r[2] for r in ordered])
    assert run2 == run


def test_run_ties_broken_by_docid_descending():
    run = Run.from_arrays(["a"] * 5 + ["b"] * 3, ["d1", "d3", "d2", "d5", "d4", "x", "z", "y"],
                          [1, 1, 1, 0.5, 0.5, 2, 2, 2])
    assert [d for d, _ in run.ranked("a")] == ["d3", "d2", "d1", "d5", "d4"]
    assert [d for d, _ in run.ranked("b")] == ["z", "y", "x"]


def test_run_qids_sorted_bytewise_and_grouped_when_interleaved():
    run = Run.from_arrays(["2", "10", "2", "10", "1"], ["a", "b", "c", "d", "e"], [1, 2, 3, 4, 5])
    assert run.query_ids == ["1", "10", "2"]
    qids, offsets, docids, scores = run.arrays
    assert offsets.tolist() == [0, 1, 3, 5]
    assert docids.tolist() == [b"e", b"d", b"b", b"c", b"a"]
    assert scores.tolist() == [5, 4, 2, 3, 1]


def test_run_negative_zero_keeps_its_document():
    run = Run.from_arrays(["q", "q", "q"], ["a", "c", "b"], [0.0, -0.0, 0.0])
    pairs = run.ranked("q")
    assert [d for d, _ in pairs] == ["c", "b", "a"]
    assert math.copysign(1, dict(pairs)["c"]) == -1 and math.copysign(1, dict(pairs)["a"]) == 1


def test_run_large_random_matches_reference():
    rnd = random.Random(7)
    rows = []
    for qi in range(60):
        docs = rnd.sample(range(10_000), 50)
        for d in docs:
            rows.append((f"q{qi}", f"doc-{d}", float(rnd.randint(0, 9))))  # many ties
    rnd.shuffle(rows)
    run = Run.from_arrays(*zip(*rows))
    assert run_as_lists(run) == ref_run_order(rows)


def test_run_duplicate_error_names_lines():
    with pytest.raises(InputError) as ei:
        Run.from_arrays(["a", "b", "a"], ["x", "y", "x"], [1, 2, 3], source="run.txt",
                        line_numbers=np.array([4, 7, 9]))
    err = ei.value
    assert (err.source, err.line, err.field) == ("run.txt", 9, "docid")
    assert "first seen at line 4" in str(err) and "'x'" in str(err)


def test_run_duplicate_first_keeps_first_row():
    run = Run.from_arrays(["a", "a", "b", "a"], ["x", "y", "z", "x"], [1, 2, 3, 9], dedup="first")
    assert run.get("a") == {"y": 2.0, "x": 1.0}
    assert len(run) == 3


def test_run_bad_scores_and_lengths():
    with pytest.raises(InputError) as ei:
        Run.from_arrays(["a", "a"], ["x", "y"], [1.0, float("nan")], source="s",
                        line_numbers=np.array([3, 5]))
    assert (ei.value.line, ei.value.field) == (5, "score")
    with pytest.raises(InputError, match="column lengths differ"):
        Run.from_arrays(["a"], ["x", "y"], [1.0, 2.0])
    with pytest.raises(InputError, match="dedup"):
        Run.from_arrays(["a"], ["x"], [1.0], dedup="last")  # type: ignore[arg-type]


def test_from_arrays_does_not_freeze_or_share_caller_arrays():
    q = np.array([b"a", b"a"])
    d = np.array([b"y", b"x"])
    s = np.array([2.0, 1.0])
    run = Run.from_arrays(q, d, s)
    assert q.flags.writeable and d.flags.writeable and s.flags.writeable
    s[0] = -5.0
    assert run.get("a")["y"] == 2.0
    g = np.array([1, 2])
    qrels = Qrels.from_arrays(q, np.array([b"a", b"b"]), g)
    g[0] = 9
    assert qrels.get("a") == {"a": 1, "b": 2} and g.flags.writeable


def test_run_arrays_read_only():
    run = Run.from_lists([["a", "b"]])
    for arr in run.arrays:
        assert not arr.flags.writeable


# ----------------------------------------------------------------------------- Qrels
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["q1", "q10", "q2", "é"]), ids,
                          st.integers(-1, 4)), max_size=40), st.randoms())
def test_qrels_canonical_and_first_wins(rows, rnd):
    rnd.shuffle(rows)
    qrels = Qrels.from_arrays([r[0] for r in rows], [r[1] for r in rows],
                              [r[2] for r in rows], dedup="first")
    expect: dict[str, dict[str, int]] = {}
    for q, d, g in rows:
        expect.setdefault(q, {}).setdefault(d, g)
    assert qrels.to_dict() == expect
    qids, offsets, docids, _ = qrels.arrays
    assert qids.tolist() == sorted(q.encode() for q in expect)
    for i in range(len(qids)):
        chunk = docids[offsets[i]:offsets[i + 1]].tolist()
        assert chunk == sorted(chunk)
    assert Qrels.from_dict(expect) == qrels


def test_qrels_duplicate_error_and_grades():
    with pytest.raises(InputError) as ei:
        Qrels.from_arrays(["a", "b", "a"], ["x", "y", "x"], [1, 2, 3], source="q.txt")
    assert (ei.value.source, ei.value.line, ei.value.field) == ("q.txt", 3, "docid")
    with pytest.raises(InputError) as ei:
        Qrels.from_arrays(["a", "a"], ["x", "y"], [1.0, 1.5], line_numbers=np.array([2, 8]))
    assert (ei.value.line, ei.value.field) == (8, "grade")
    assert Qrels.from_arrays(["a"], ["x"], [2.0]).get("a") == {"x": 2}
    with pytest.raises(InputError, match="grade"):
        Qrels.from_dict({"a": {"x": "2"}})  # type: ignore[dict-item]


def test_qrels_sorted_input_fast_path_equals_shuffled():
    rnd = random.Random(3)
    rows = [(f"{q}", f"d{d:05d}", rnd.randint(0, 3)) for q in range(30, 0, -1)
            for d in sorted(rnd.sample(range(99999), 20))]
    a = Qrels.from_arrays(*zip(*rows))
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert Qrels.from_arrays(*zip(*shuffled)) == a
    assert a.query_ids == sorted(a.query_ids)


def test_qrels_accessors_merge_filter():
    human = Qrels.from_dict({"q1": {"a": 2, "b": 0}, "q2": {"c": 1}})
    llm = Qrels.from_dict({"q1": {"a": 0, "z": 3}, "q3": {"x": 1}})
    merged = human.merge(llm)
    assert merged.to_dict() == {"q1": {"a": 2, "b": 0, "z": 3}, "q2": {"c": 1}, "q3": {"x": 1}}
    assert merged.filter(["q3", "nope"]).to_dict() == {"q3": {"x": 1}}
    assert merged.max_grade == 3 and len(merged) == 5 and "q2" in merged and "q9" not in merged
    assert list(merged.rows())[:2] == [("q1", "a", 2), ("q1", "b", 0)]
    with pytest.raises(KeyError):
        merged["q9"]
    assert merged.get("q9") == {}


def test_from_lists_and_run_accessors():
    run = Run.from_lists([["d1", "d2", "d1", "d3"], []], qids=["q1", "q2"], name="sys")
    assert run.ranked("q1") == [("d1", 4.0), ("d2", 3.0), ("d3", 1.0)]
    assert run.query_ids == ["q1"] and run.name == "sys"
    assert run.top(2).ranked("q1") == [("d1", 4.0), ("d2", 3.0)]
    assert list(run.rows())[0] == ("q1", "d1", 1, 4.0)
    gold = Qrels.from_lists([["d1", "d1"], {"x": 2}], qids=["q1", "q2"])
    assert gold.to_dict() == {"q1": {"d1": 1}, "q2": {"x": 2}}
    with pytest.raises(InputError):
        Run.from_lists(["abc"])  # type: ignore[list-item]
    with pytest.raises(InputError):
        Run.from_lists([["a"]], qids=["x", "y"])


def test_run_dict_round_trip_exact_floats():
    data = {"q1": {"a": 0.1 + 0.2, "b": 1e-310, "c": -3.0}, "q0": {"z": 5.0}}
    run = Run.from_dict(data)
    assert run.to_dict() == data
    assert list(run.to_dict()["q1"]) == ["a", "b", "c"]  # rank order
    with pytest.raises(InputError, match="finite"):
        Run.from_dict({"q": {"a": float("inf")}})
    with pytest.raises(InputError, match="number"):
        Run.from_dict({"q": {"a": True}})


def test_empty_inputs():
    assert len(Run.from_arrays([], [], [])) == 0
    assert len(Qrels.from_dict({})) == 0
    assert Qrels.from_dict({}).max_grade == 0


# ----------------------------------------------------------------------------- DataFrames
pd = pytest.importorskip("pandas")


def test_dataframe_round_trips():
    qrels = Qrels.from_dict({"q1": {"a": 2, "b": 0}, "q2": {"c": 1}})
    assert Qrels.from_dataframe(qrels.to_dataframe()) == qrels
    run = Run.from_dict({"q1": {"a": 0.5, "b": 1 / 3}, "q2": {"c": 1e-9}})
    df = run.to_dataframe()
    assert list(df.columns) == ["query_id", "doc_id", "score"]
    back = Run.from_dataframe(df.sample(frac=1.0, random_state=1), name="x")
    assert back == run and back.name == "x"


def test_dataframe_custom_columns_and_int_ids():
    df = pd.DataFrame({"qid": [3, 3, 12], "pid": [7, 8, 9], "label": [1, 0, 2]})
    qrels = Qrels.from_dataframe(df, qid_col="qid", docid_col="pid", grade_col="label")
    assert qrels.to_dict() == {"12": {"9": 2}, "3": {"7": 1, "8": 0}}


def test_dataframe_errors_name_column_and_row():
    df = pd.DataFrame({"query_id": ["a", "b"], "doc_id": ["x", "y"], "score": [1.0, None]})
    with pytest.raises(InputError) as ei:
        Run.from_dataframe(df)
    assert (ei.value.field, ei.value.line) == ("score", 2)
    with pytest.raises(InputError) as ei:
        Qrels.from_dataframe(df)
    assert ei.value.field == "relevance" and "not found" in str(ei.value)
    bad = pd.DataFrame({"query_id": ["a"], "doc_id": ["x"], "relevance": [0.5]})
    with pytest.raises(InputError, match="integer"):
        Qrels.from_dataframe(bad)


def test_run_ties_written_docid_ascending_are_reversed():
    # Anserini / Pyserini write ties docid-ascending; trec_eval ranks them docid-descending.
    rows = []
    for q in ["7", "10"]:
        for score, docs in [(3.0, ["a", "b", "c"]), (2.0, ["x"]), (1.0, ["m", "n"])]:
            rows += [(q, d, score) for d in docs]
    run = Run.from_arrays(*zip(*rows))
    assert run_as_lists(run) == ref_run_order(rows)
    assert [d for d, _ in run.ranked("7")] == ["c", "b", "a", "x", "n", "m"]


def test_duplicate_error_reports_earliest_line_in_file():
    # Sorted by (query, doc), the pair ("a", "z") comes last; in the file it repeats first.
    q = ["a", "a", "a", "a", "a", "a"]
    d = ["z", "z", "b", "c", "b", "b"]
    with pytest.raises(InputError) as ei:
        Run.from_arrays(q, d, [6, 5, 4, 3, 2, 1], source="r")
    assert ei.value.line == 2 and "first seen at line 1" in str(ei.value)
    with pytest.raises(InputError) as ei:
        Qrels.from_arrays(["a"] * 4, ["c", "b", "c", "b"], [1, 1, 1, 1], source="q",
                          line_numbers=np.array([10, 20, 30, 40]))
    assert ei.value.line == 30 and "first seen at line 10" in str(ei.value)


@pytest.mark.parametrize("step", [1, 3, 7, 1 << 20])
def test_runs_reordered_a_step_at_a_time(monkeypatch, step):
    """Files grouped by query but not in query order: whole runs move into order a slice of
    rows at a time (the duplicate screen's hashing sliced alike), the same rows as one gather,
    for runs and qrels, whatever the slice."""
    import numpy as np

    from ragjudge import ids
    from ragjudge.data import Qrels, Run

    rng = np.random.default_rng(3)
    order = rng.permutation(40)
    q, d, s = [], [], []
    for k in order:
        m = int(rng.integers(1, 9))
        q += [f"q{k:02d}"] * m
        d += [f"d{k}-{j}" for j in range(m)]
        s += sorted(rng.random(m).tolist(), reverse=True)
    want_run = {f"q{k:02d}": {} for k in range(40)}
    for qq, dd, ss in zip(q, d, s):
        want_run[qq][dd] = ss
    monkeypatch.setattr(ids, "SLICE_ROWS", step)
    monkeypatch.setenv("RAGJUDGE_THREADS", "3")  # slices gathered on a pool, in any order
    run = Run.from_arrays(q, d, s)
    assert run.to_dict() == want_run
    assert list(run.query_ids) == sorted(want_run)
    grades = [i % 4 for i in range(len(q))]
    qrels = Qrels.from_arrays(q, d, grades)
    assert qrels.to_dict() == {k: {dd: g for qq, dd, g in zip(q, d, grades) if qq == k} for k in sorted(want_run)}
    for k in want_run:
        assert [x for x, _ in run.ranked(k)] == sorted(want_run[k], key=lambda x: -want_run[k][x])


@pytest.mark.parametrize("threads", ["1", "3"])
def test_sliced_kernels_agree_on_threads(monkeypatch, threads):
    """The column kernels (id hashing, the pair hash, the evaluation's join) give the same
    result whether their slices run on this thread or on a pool, and whatever the slice."""
    import numpy as np

    from ragjudge import ids
    from ragjudge.data import Qrels, Run
    from ragjudge.evaluate import evaluate

    rng = np.random.default_rng(5)
    q = [f"q{int(k)}" for k in rng.integers(0, 30, 900)]
    d = [f"doc-{int(k)}" for k in rng.integers(0, 400, 900)]
    pairs = dict.fromkeys(zip(q, d))
    q, d = [a for a, _ in pairs], [b for _, b in pairs]
    s = rng.random(len(q)).tolist()
    grades = rng.integers(0, 4, len(q)).tolist()
    keep = rng.random(len(q)) < 0.3
    measures = ["ndcg@10", "map", "recall@100", "p@5"]
    whole = evaluate(Qrels.from_arrays([x for x, k in zip(q, keep) if k], [x for x, k in zip(d, keep) if k],
                                       [x for x, k in zip(grades, keep) if k]),
                     Run.from_arrays(q, d, s), measures)
    monkeypatch.setenv("RAGJUDGE_THREADS", threads)
    monkeypatch.setattr(ids, "SLICE_ROWS", 7)
    h = ids.hash_ids(np.array([x.encode() for x in d]), 8, 1)
    monkeypatch.setenv("RAGJUDGE_THREADS", "1")
    assert np.array_equal(h, ids.hash_ids(np.array([x.encode() for x in d]), 8, 1))
    monkeypatch.setenv("RAGJUDGE_THREADS", threads)
    sliced = evaluate(Qrels.from_arrays([x for x, k in zip(q, keep) if k], [x for x, k in zip(d, keep) if k],
                                        [x for x, k in zip(grades, keep) if k]),
                      Run.from_arrays(q, d, s), measures)
    assert sliced.to_dict() == whole.to_dict()
