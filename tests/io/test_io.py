"""Readers and writers: TREC / BEIR / JSON / queries / corpus, errors, fast path == exact path."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragjudge import io
from ragjudge.io import streams, trec
from ragjudge.data import Qrels, Run
from ragjudge.errors import InputError

CONFORMANCE = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "trec_eval"


def conformance(name: str) -> Path:
    path = CONFORMANCE / name
    if not path.exists():
        pytest.skip(f"trec_eval conformance data not found at {CONFORMANCE}")
    return path


QRELS = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 2\n"
RUN = "q1 Q0 d1 1 2.5 sys\nq1 Q0 d2 2 1.25 sys\nq2 Q0 d3 1 0.1 sys\n"


def err(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as ei:
        fn(*args, **kwargs)
    return ei.value


# ----------------------------------------------------------------------------- TREC basics
def test_parse_trec_qrels_and_run():
    qrels = io.parse_qrels(QRELS)
    assert qrels.to_dict() == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    run = io.parse_run(RUN)
    assert run.ranked("q1") == [("d1", 2.5), ("d2", 1.25)]
    assert run.get("q2") == {"d3": 0.1}


def test_trec_layout_variants_parse_identically():
    base = io.parse_run(RUN)
    variants = [
        RUN.replace("\n", "\r\n"),  # CRLF
        RUN.replace(" ", "\t"),  # tabs
        RUN.replace(" ", "  \t "),  # runs of mixed whitespace
        RUN.rstrip("\n"),  # no final newline
        RUN.replace("sys\n", "sys extra free text # here\n"),  # text after column 6
        "\n\n# header comment\n" + RUN.replace("q2", "\n  # indented comment\nq2", 1),
        "\ufeff" + RUN,  # UTF-8 byte order mark
        "   " + RUN.replace("\nq", "\n  q"),  # leading whitespace
        RUN.replace(" 1 ", " 99 ").replace(" 2 ", " 1 "),  # rank column ignored
    ]
    for text in variants:
        assert io.parse_run(text) == base, repr(text)


def test_comments_and_hash_in_ids():
    text = "# comment\nq1 0 doc#1 1\n#q1 0 skipped 1\nq1 0 doc_2#13_x 2\n"
    assert io.parse_qrels(text).to_dict() == {"q1": {"doc#1": 1, "doc_2#13_x": 2}}


def test_conformance_files_parse(tmp_path):
    qrels = io.read_qrels(conformance("qrels.test"))
    assert (qrels.num_queries, len(qrels)) == (3, 3681)
    with_comments = io.read_qrels(conformance("qrels.test.with-comments"))
    assert len(with_comments) == len(qrels)
    assert with_comments.get("301")["CR#93E-1860"] == 0
    run = io.read_run(conformance("results.comment.test"))
    assert run.name == "results.comment" and len(run) == 30100
    assert any("#" in d for d, _ in run.ranked(run.query_ids[0]))
    # Fast path and exact path agree on the real files.
    for name, kind in [("results.test", "run"), ("qrels.comments.123", "qrels"),
                       ("results.comment.test", "run"), ("qrels.comment.test", "qrels")]:
        data = conformance(name).read_bytes()
        fast = trec.scan_trec(streams.blocks_from_bytes(data, trec.BLOCK), kind, name)
        exact = trec.parse_trec_exact(data, kind, name)
        assert_same_columns(fast, exact)
    # Round trip through our writer keeps every float bit-exact.
    out = tmp_path / "r.trec"
    io.write_run(run, out)
    assert io.read_run(out) == run


def test_line_numbers_count_comments_and_blank_lines():
    text = "# c\n\nq1 0 d1 1\n# c2\nq1 0 d2 1\n\nq1 0 d1 0\n"
    e = err(io.parse_qrels, text, source="qrels.txt")
    assert (e.source, e.line, e.field) == ("qrels.txt", 7, "docid")
    assert "first seen at line 3" in str(e)
    assert io.parse_qrels(text, dedup="first").get("q1") == {"d1": 1, "d2": 1}


def test_duplicate_in_run_names_line():
    text = RUN + "# later\nq1 Q0 d1 7 0.3 sys\n"
    e = err(io.parse_run, text, source="run.txt")
    assert (e.source, e.line, e.field) == ("run.txt", 5, "docid")
    assert io.parse_run(text, dedup="first").get("q1") == {"d1": 2.5, "d2": 1.25}


@pytest.mark.parametrize(
    ("text", "line", "field", "needle"),
    [
        ("q1 0 d1 1\nq1 0 d2\n", 2, "columns", "got 3"),
        ("q1 0 d1 1\n\nq1 0 d2 1 extra\n", 3, "columns", "got 5"),
        ("# x\nq1 0 d1 1.0\n", 2, "grade", "'1.0'"),
        ("q1 0 d1 high\n", 1, "grade", "'high'"),
        ("q1 0 d1 99999999999999999999\n", 1, "grade", "out of range"),
    ],
)
def test_qrels_errors(text, line, field, needle):
    e = err(io.parse_qrels, text, source="q.txt")
    assert (e.source, e.line, e.field) == ("q.txt", line, field)
    assert needle in str(e)


@pytest.mark.parametrize(
    ("text", "line", "field", "needle"),
    [
        ("q1 Q0 d1 1 2.0\n", 1, "columns", "got 5"),
        ("q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 abc s\n", 2, "score", "'abc'"),
        ("#\nq1 Q0 d1 1 nan s\n", 2, "score", "finite"),
        ("q1 Q0 d1 1 -inf s\n", 1, "score", "finite"),
        ("q1 Q0 d1 1 1e999 s\n", 1, "score", "finite"),
        ("q1 Q0 d1 1 1,5 s\n", 1, "score", "'1,5'"),
    ],
)
def test_run_errors(text, line, field, needle):
    e = err(io.parse_run, text, source="r.txt")
    assert (e.source, e.line, e.field) == ("r.txt", line, field)
    assert needle in str(e)
    assert str(e).startswith(f"r.txt:{line}: {field}: ")


def test_invalid_bytes_name_line():
    e = err(io.parse_run, b"q1 Q0 d1 1 1 s\nq1 Q0 d\xff 1 1 s\n", source="r")
    assert e.line == 2 and "UTF-8" in str(e)
    e = err(io.parse_run, b"q1 Q0 d1 1 1 s\nq1 Q0 d\x00 1 1 s\n", source="r")
    assert e.line == 2 and "NUL" in str(e)


def test_empty_and_missing_files(tmp_path):
    for text in ["", "\n\n", "# only a comment\n"]:
        e = err(io.parse_run, text, source="r")
        assert "empty" in str(e) and e.source == "r"
        assert "empty" in str(err(io.parse_qrels, text))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "empty" in str(err(io.read_qrels, empty))
    assert "empty" in str(err(io.read_run, empty))
    e = err(io.read_run, tmp_path / "nope.txt")
    assert e.source == str(tmp_path / "nope.txt") and "not found" in str(e)
    assert "directory" in str(err(io.read_qrels, tmp_path))
    assert "not found" in str(err(io.read_queries, tmp_path / "nope.jsonl"))


def test_block_boundaries_keep_line_numbers(monkeypatch):
    monkeypatch.setattr(trec, "BLOCK", 37)  # many tiny blocks: lines straddle every boundary
    lines = []
    for i in range(200):
        if i % 7 == 0:
            lines.append("# comment")
        if i % 11 == 0:
            lines.append("")
        lines.append(f"q{i % 5} Q0 doc{i} {i} {i / 7!r} tag")
    text = "\n".join(lines) + "\n"
    run = io.parse_run(text)
    monkeypatch.setattr(trec, "BLOCK", 1 << 22)
    assert run == io.parse_run(text)
    monkeypatch.setattr(trec, "BLOCK", 37)
    for workers in (1, 3):  # the thread-pool path gives the same result, in file order
        monkeypatch.setenv("RAGJUDGE_THREADS", str(workers))
        assert io.parse_run(text) == run
    monkeypatch.setattr(trec, "BLOCK", 37)
    bad = text + "q0 Q0 doc5 1 1.0 tag\n"
    e = err(io.parse_run, bad)
    assert e.line == len(lines) + 1
    e = err(io.parse_run, text.replace("doc150 150 ", "doc150 150 oops", 1))
    assert e.field == "score" and "oops" in str(e)
    e = err(io.parse_run, text.replace("doc150 150", "doc150 150 x", 1).replace(" tag\n", "\n"))
    assert e.field == "columns" and e.line == 3


# ----------------------------------------------------------------------------- fast == exact
def assert_same_columns(a, b) -> None:
    qa, da, va, la = a
    qb, db, vb, lb = b
    assert qa.tolist() == qb.tolist()
    assert da.tolist() == db.tolist()
    assert va.dtype == vb.dtype and va.tobytes() == vb.tobytes()
    la = np.arange(1, len(qa) + 1) if la is None else la
    lb = np.arange(1, len(qb) + 1) if lb is None else lb
    assert la.tolist() == lb.tolist()


token = st.text(alphabet=st.sampled_from(list("ab9#.-_é\x1c")), min_size=1, max_size=6)
space = st.sampled_from([" ", "\t", "  ", " \t", "\x0b", "\x0c"])
number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["1e5", "-0", ".5", "5.", "1_0", "x", "+", "0x1", "Infinity", "--1"]),
)


@st.composite
def trec_text(draw, kind: str) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        roll = draw(st.integers(0, 9))
        if roll == 0:
            lines.append(draw(st.sampled_from(["", "   ", "\t"])))
            continue
        if roll == 1:
            lines.append("#" + draw(token))
            continue
        ncols = draw(st.sampled_from([4, 4, 4, 3, 5] if kind == "qrels" else [6, 6, 6, 7, 5]))
        cols = [draw(token) for _ in range(ncols)]
        vcol = 3 if kind == "qrels" else 4
        if vcol < ncols:
            cols[vcol] = draw(number)
        seps = [draw(space) for _ in range(ncols - 1)]
        line = draw(st.sampled_from(["", " "])) + "".join(
            c + s for c, s in zip(cols, seps + [""])
        )
        lines.append(line + draw(st.sampled_from(["", "\r", " "])))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


def outcome(fn):
    try:
        return ("ok", fn())
    except InputError as exc:
        return ("error", str(exc))


@pytest.mark.slow  # hypothesis, 300 examples
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fast_path_equals_exact_path(data):
    kind = data.draw(st.sampled_from(["qrels", "run"]))
    text = data.draw(trec_text(kind)).encode("utf-8")
    block = data.draw(st.sampled_from([16, 64, 1 << 20]))
    fast = outcome(lambda: trec.scan_trec(streams.blocks_from_bytes(text, block), kind, "f"))
    exact = outcome(lambda: trec.scan_trec(streams.blocks_from_bytes(text, block), kind, "f",
                                            exact=True))
    assert fast[0] == exact[0], (fast, exact)
    if fast[0] == "ok":
        assert_same_columns(fast[1], exact[1])
    else:
        assert fast[1] == exact[1]


def test_fast_path_is_taken_on_regular_input():
    block = b"q1 Q0 d1 1 2.5 s\n# c\n\nq1 Q0 d2 2 1 s\r\n"
    assert trec._scan_block(block, "run") is not None
    # A line longer than 6 columns goes to the exact path, which reads it and warns.
    assert trec._scan_block(b"q1 Q0 d1 1 2.5 s x\n", "run") is None
    assert trec._scan_block(b"q 0 d 1\n", "qrels") is not None
    assert trec._scan_block(b"q 0 d 1.5\n", "qrels") is None
    uniform = trec._scan_block(b"q Q0 d 1 2 s\r\nq\tQ0 e 2 1 s\n", "run")
    assert uniform is not None and uniform[3] is None and uniform[4] == 2
    assert uniform[1].tolist() == [b"d", b"e"] and uniform[2].tolist() == [2.0, 1.0]
    # 6 tokens on each line, but one line is a comment: the general path must skip it.
    mixed = trec._scan_block(b"# a b c d e\nq Q0 d 1 2 s\n", "run")
    assert mixed is not None and mixed[3].tolist() == [1]


# ----------------------------------------------------------------------------- round trips
safe_id = st.text(alphabet=st.sampled_from(list("abcXYZ019-_.:#é") + ["\u4e2d"]),
                  min_size=1, max_size=12).filter(lambda s: not s.startswith("#"))
finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(safe_id, st.dictionaries(safe_id, finite, min_size=1, max_size=6),
                       min_size=1, max_size=5))
def test_run_round_trips_exact(data):
    run = Run.from_dict(data)
    for fmt in ("trec", "json"):
        back = io.parse_run(io.format_run(run, fmt), format=fmt)
        assert back == run
        assert [math.copysign(1, x) for x in back.arrays[3]] == [
            math.copysign(1, x) for x in run.arrays[3]]
    assert io.parse_run(io.format_run(run, "json"), format="auto") == run


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(safe_id, st.dictionaries(safe_id, st.integers(-5, 2**40), min_size=1,
                                                max_size=6), min_size=1, max_size=5))
def test_qrels_round_trips_exact(data):
    qrels = Qrels.from_dict(data)
    for fmt in ("trec", "beir", "json"):
        text = io.format_qrels(qrels, fmt)
        assert io.parse_qrels(text, format=fmt) == qrels
        assert io.parse_qrels(text, format="auto") == qrels


def test_file_round_trips_and_gzip(tmp_path):
    qrels = io.parse_qrels(QRELS)
    run = io.parse_run(RUN)
    for name, fmt in [("q.txt", "trec"), ("q.tsv", "beir"), ("q.json", "json"),
                      ("q.txt.gz", "trec"), ("q.tsv.gz", "beir")]:
        path = tmp_path / name
        io.write_qrels(qrels, path)
        assert io.read_qrels(path) == qrels, name
        assert io.read_qrels(path, format=fmt) == qrels, name
    for name in ["run.bm25.trec", "run.json", "run.trec.gz", "run.json.gz"]:
        path = tmp_path / name
        io.write_run(run, path)
        back = io.read_run(path)
        assert back == run, name
    assert io.read_run(tmp_path / "run.trec.gz").name == "run"
    assert io.read_run(tmp_path / "run.bm25.trec").name == "run.bm25"
    assert io.read_run(tmp_path / "run.json", name="mine").name == "mine"
    with gzip.open(tmp_path / "run.trec.gz", "rb") as f:
        assert f.read().startswith(b"q1 Q0 d1 1 2.5 run\n")
    # gzip detected by magic bytes even without the extension
    (tmp_path / "plain_name").write_bytes(gzip.compress(RUN.encode()))
    assert io.read_run(tmp_path / "plain_name") == run


def test_format_run_layout():
    run = io.parse_run(RUN, name="bm25")
    assert io.format_run(run).splitlines()[0] == "q1 Q0 d1 1 2.5 bm25"
    assert io.format_run(run, tag="x").splitlines()[2] == "q2 Q0 d3 1 0.1 x"
    assert io.format_qrels(io.parse_qrels(QRELS), "beir").startswith(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\n")


def test_writers_reject_unrepresentable_ids():
    run = Run.from_dict({"q 1": {"d": 1.0}})
    assert err(io.format_run, run).field == "query id"
    qrels = Qrels.from_dict({"#q": {"d": 1}})
    assert err(io.format_qrels, qrels).field == "query id"
    assert io.parse_qrels(io.format_qrels(qrels, "json"), format="json") == qrels
    hashed = Qrels.from_dict({"q": {"#d": 1}})  # '#' only matters at the start of a line
    assert io.parse_qrels(io.format_qrels(hashed)) == hashed
    assert err(io.format_qrels, Qrels.from_dict({"q": {"a\tb": 1}}), "beir").field == "doc id"
    assert err(io.format_qrels, Qrels.from_dict({"q": {"a ": 1}}), "beir").field == "doc id"
    spaced = Qrels.from_dict({"q": {"a b": 1}})
    assert io.parse_qrels(io.format_qrels(spaced, "beir"), format="beir") == spaced
    assert err(io.format_qrels, spaced, "trec").field == "doc id"
    assert err(io.format_run, run, "csv").field == "format"
    assert err(io.format_qrels, qrels, "csv").field == "format"


def test_write_error_creates_no_file(tmp_path):
    run = Run.from_dict({"q 1": {"d": 1.0}})
    path = tmp_path / "out.trec"
    assert err(io.write_run, run, path).field == "query id"
    assert not path.exists()
    # A missing folder is created; a file in the way of the folder is an error.
    (tmp_path / "a_file").write_text("")
    e = err(io.write_run, io.parse_run(RUN), tmp_path / "a_file" / "x.trec")
    assert "cannot write" in str(e)


# ----------------------------------------------------------------------------- BEIR / JSON
def test_beir_qrels_header_detection_and_errors():
    with_header = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n"
    qrels = io.parse_qrels(with_header, format="beir")
    assert qrels.to_dict() == {"q1": {"d1": 1, "d2": 0}}
    assert io.parse_qrels(with_header.split("\n", 1)[1], format="beir") == qrels
    assert io.parse_qrels(with_header, format="auto") == qrels
    assert io.parse_qrels(with_header.replace("\n", "\r\n"), format="beir") == qrels
    e = err(io.parse_qrels, with_header + "q2\td9\n", format="beir", source="b.tsv")
    assert (e.line, e.field) == (4, "columns")
    e = err(io.parse_qrels, with_header + "q2\td9\tx\n", format="beir", source="b.tsv")
    assert (e.line, e.field) == (4, "score")
    e = err(io.parse_qrels, with_header + "q1\td1\t2\n", format="beir", source="b.tsv")
    assert (e.line, e.field) == (4, "docid") and "first seen at line 2" in str(e)
    e = err(io.parse_qrels, "query-id\tcorpus-id\tscore\n", format="beir")
    assert "empty" in str(e)
    e = err(io.parse_qrels, "q1\t\t1\n", format="beir")
    assert e.field == "corpus-id"


def test_json_errors():
    e = err(io.parse_qrels, '{"q1": {"d1": 1},\n "q2": {"d2": }}', format="json", source="q.json")
    assert (e.source, e.line, e.field) == ("q.json", 2, "json")
    e = err(io.parse_qrels, "[1, 2]", format="json")
    assert e.field == "json" and "list" in str(e)
    e = err(io.parse_qrels, '{"q1": 3}', format="json")
    assert e.field == "grade" and "'q1'" in str(e)
    assert err(io.parse_qrels, '{"q1": {"d": 1.5}}', format="json").field == "grade"
    assert err(io.parse_run, '{"q1": {"d": "high"}}', format="json").field == "score"
    assert "empty" in str(err(io.parse_run, "{}", format="json"))
    assert "empty" in str(err(io.parse_run, "  ", format="json"))
    assert err(io.parse_qrels, QRELS, format="xml").field == "format"


def test_json_scores_exact():
    data = {"q": {"a": 0.1 + 0.2, "b": 2.0**-1074, "c": 1.7976931348623157e308}}
    run = io.parse_run(json.dumps(data), format="json")
    assert run.to_dict() == data
    assert json.loads(io.format_run(run, "json")) == data


# ----------------------------------------------------------------------------- queries / corpus
def test_queries_and_corpus_jsonl_and_tsv(tmp_path):
    jsonl = ('{"_id": "q1", "text": "what is bm25", "metadata": {}}\n\n'
             '{"_id": 2, "text": "second"}\n')
    assert io.parse_queries(jsonl) == {"q1": "what is bm25", "2": "second"}
    corpus = ('{"_id": "d1", "title": "BM25", "text": "a ranking function"}\n'
              '{"_id": "d2", "title": "", "text": "no title"}\n')
    assert io.parse_corpus(corpus) == {"d1": "BM25\na ranking function", "d2": "no title"}
    tsv = "q1\twhat is bm25\r\nq2\ttabs\tkept in text\n"
    assert io.parse_queries(tsv) == {"q1": "what is bm25", "q2": "tabs\tkept in text"}
    (tmp_path / "queries.jsonl.gz").write_bytes(gzip.compress(jsonl.encode()))
    assert io.read_queries(tmp_path / "queries.jsonl.gz") == io.parse_queries(jsonl)
    (tmp_path / "collection.tsv").write_text("7\tpassage seven\n")
    assert io.read_corpus(tmp_path / "collection.tsv") == {"7": "passage seven"}


@pytest.mark.parametrize(
    ("text", "line", "field", "needle"),
    [
        ('{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": }\n', 2, "json", "invalid JSON"),
        ('{"_id": "q1", "text": "a"}\n{"text": "b"}\n', 2, "_id", "missing"),
        ('{"_id": "q1"}\n', 1, "text", "missing"),
        ('{"_id": "q1", "text": 3}\n', 1, "text", "string"),
        ('{"_id": "q1", "text": "a"}\n\n{"_id": "q1", "text": "b"}\n', 3, "_id", "line 1"),
        ('["q1", "a"]\n', 1, "json", "object"),
        ("q1\ta\nq2 no tab\n", 2, "columns", "tab"),
        ("q1\ta\nq1\tb\n", 2, "id", "duplicate"),
    ],
)
def test_queries_errors(text, line, field, needle):
    e = err(io.parse_queries, text, source="queries")
    assert (e.source, e.line, e.field) == ("queries", line, field)
    assert needle in str(e)


def test_queries_empty_file(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text("\n")
    e = err(io.read_queries, path)
    assert e.source == str(path) and "empty" in str(e)
    assert "empty" in str(err(io.parse_corpus, ""))


def test_corrupt_gzip_and_binary_files(tmp_path):
    bad = tmp_path / "run.trec.gz"
    bad.write_bytes(gzip.compress(RUN.encode())[:-12])  # truncated stream
    e = err(io.read_run, bad)
    assert e.source == str(bad) and "cannot read" in str(e)
    (tmp_path / "empty.gz").write_bytes(gzip.compress(b""))
    assert "empty" in str(err(io.read_qrels, tmp_path / "empty.gz", format="trec"))
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    e = err(io.read_run, binary)
    assert e.source == str(binary) and e.line == 1


@pytest.mark.parametrize("segment", [1, 2, 3, 64])
def test_segments_keep_order_widths_and_line_numbers(monkeypatch, segment):
    """Columns joined into segments during a read: ids that widen from block to block, comment
    lines between them, and a duplicate named by its line, as the exact parser has them."""
    monkeypatch.setattr(trec, "BLOCK", 64)
    monkeypatch.setattr(trec, "SEGMENT_BLOCKS", segment)
    lines = []
    for i in range(300):
        if i % 13 == 0:
            lines.append("# c")
        lines.append(f"q{i * 37} Q0 d{'x' * (i % 40)}{i} 1 {i / 3!r} t")
    data = ("\n".join(lines) + "\n").encode()
    fast = trec.scan_trec(streams.blocks_from_bytes(data, trec.BLOCK), "run", "r")
    assert_same_columns(fast, trec.parse_trec_exact(data, "run", "r"))
    e = err(io.parse_run, data + b"q37 Q0 dx1 1 0.5 t\n", source="r")
    assert (e.line, e.field) == (len(lines) + 1, "docid") and f"line {lines.index('q37 Q0 dx1 1 0.3333333333333333 t') + 1}" in str(e)
