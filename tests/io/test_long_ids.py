"""One long document id must not widen whole columns, and must behave exactly like any id."""

from __future__ import annotations

import numpy as np
import pytest

from ragjudge import io
from ragjudge.data import Qrels, Run
from ragjudge.evaluate import evaluate
from ragjudge.ids import KEY_WIDTH, LONG_ID, decode_column, full_id, long_key

LONG = "L" * 5000
LONG2 = "L" * 4999 + "M"  # same first 4999 bytes: the stored keys share their prefix too


def test_long_id_does_not_widen_columns():
    text = "".join(f"q1 Q0 d{i} {i} {1000 - i} t\n" for i in range(2000)) + f"q1 Q0 {LONG} 1 -5000.5 t\n"
    run = io.parse_run(text)
    docids = run.arrays[2]
    assert docids.dtype.itemsize == KEY_WIDTH  # the short ids are 5 bytes; the key is the widest
    assert run.ranked("q1")[-1] == (LONG, -5000.5)
    assert io.parse_run(io.format_run(run)) == run  # writes the full id, reads the same key
    assert LONG in io.format_run(run) and LONG in io.format_run(run, "json")
    # the same id from a dict, a list or a DataFrame gets the same key
    assert Run.from_dict({"q1": {LONG: 1.0}}).arrays[2][0] == docids[-1]
    assert full_id(long_key(LONG.encode())) == LONG.encode()


def test_long_ids_join_and_break_ties_exactly():
    qrels = Qrels.from_dict({"q": {LONG: 2, LONG2: 0, "a": 1}})
    # LONG2 > LONG in strcmp order: on a tied score trec_eval ranks LONG2 first.
    run = Run.from_dict({"q": {LONG: 1.0, LONG2: 1.0, "a": 0.5}})
    assert [d for d, _ in run.ranked("q")] == [LONG2, LONG, "a"]
    short = Run.from_dict({"q": {"y": 1.0, "x": 1.0, "a": 0.5}})
    short_qrels = Qrels.from_dict({"q": {"x": 2, "y": 0, "a": 1}})
    want = evaluate(short_qrels, short, "map,ndcg@10,mrr").mean
    assert evaluate(qrels, run, "map,ndcg@10,mrr").mean == want
    assert qrels.get("q") == {LONG: 2, LONG2: 0, "a": 1}
    with pytest.raises(Exception, match="duplicate"):
        Run.from_arrays(["q", "q"], [LONG, LONG], [1.0, 2.0])


def test_long_ids_in_files_and_frames(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 {LONG} 1 2.0 t\nq1 Q0 d 2 1.0 t\n")
    run = io.read_run(path)
    assert run.arrays[2].dtype.itemsize <= LONG_ID and run.ranked("q1")[0][0] == LONG
    col = decode_column(run.arrays[2])
    assert list(col) == [LONG, "d"]
    bad = Run.from_dict({"q": {LONG + " x": 1.0}})
    with pytest.raises(Exception, match="cannot be written as TREC"):
        io.format_run(bad)
    assert np.array_equal(io.parse_run(io.format_run(run, "json"), format="json").arrays[2], run.arrays[2])
