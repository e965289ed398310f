"""The compiled block tokenizer gives the numpy scan's columns, block by block, and the readers
give the same data and errors with and without it."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragjudge import io
from ragjudge.errors import InputError
from ragjudge.ids import LONG_ID
from ragjudge.io import streams, trec

from test_io import assert_same_columns, outcome, trec_text

native = pytest.mark.skipif(
    trec._native_scan is None,
    reason="the compiled tokenizer is not built here (installed without a C compiler); "
    "the numpy scan reads the files and the other tests cover it",
)


def numpy_scan(block: bytes, kind: str, arrow: bool, monkeypatch: pytest.MonkeyPatch) -> tuple | None:
    with monkeypatch.context() as m:
        m.setattr(trec, "_native_scan", None)
        return trec._scan_block(block, kind, arrow)


def assert_same_block(a: tuple, b: tuple) -> None:
    """Two _scan_block results: the same columns, dtypes and widths, rows and line count."""
    for x, y in zip(a[:3], b[:3]):
        assert x.dtype == y.dtype and len(x) == len(y)
        assert x.tobytes() == y.tobytes()
    assert (a[3] is None) == (b[3] is None)
    if a[3] is not None:
        assert a[3].tolist() == b[3].tolist()
    assert a[4] == b[4]


def big_int(block: bytes, kind: str) -> bool:
    """Whether a value token has 19 or more digits: the compiled scan leaves those to the
    exact parser (which refuses what does not fit in int64), numpy reads some of them."""
    col = {"qrels": 3, "msmarco": 2}.get(kind)
    if col is None:
        return False
    for line in block.split(b"\n"):
        parts = line.split()
        if len(parts) > col and len(parts[col].lstrip(b"+-")) >= 19:
            return True
    return False


@native
@pytest.mark.slow  # hypothesis, 400 examples
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_compiled_scan_gives_the_numpy_scans_columns(data) -> None:
    kind = data.draw(st.sampled_from(["qrels", "run"]))
    block = data.draw(trec_text(kind)).encode("utf-8")
    if not block.endswith(b"\n"):
        block += b"\n"
    arrow = data.draw(st.booleans())
    with pytest.MonkeyPatch.context() as mp:
        want = numpy_scan(block, kind, arrow, mp)
    got = trec._scan_block(block, kind, arrow)
    if got is None:
        assert want is None or big_int(block, kind), block
    else:
        assert want is not None, block
        assert_same_block(got, want)


def regular_block(rng: random.Random, kind: str, lines: int) -> bytes:
    """Ids of every width from 1 to the long-id limit, scores of every form the fast path
    reads (inline and longer than 12 bytes for Arrow's views), comments, blank lines, tabs
    and CRLF, so tokens end at every offset of an 8-byte word and at the block's last byte."""
    out = []
    for i in range(lines):
        roll = rng.random()
        if roll < 0.03:
            out.append("# a comment\twith\x0bodd spacing")
            continue
        if roll < 0.05:
            out.append(rng.choice(["", "  ", "\t\r"]))
            continue
        q = "q" * rng.randint(1, 20)
        d = "d" + "".join(rng.choice("abcxyz0123456789-_:.#é") for _ in range(rng.randint(0, LONG_ID - 1)))
        while len(d.encode()) > LONG_ID:  # é is two bytes
            d = d[:-1]
        sep = rng.choice([" ", " ", "\t", "  "])
        if kind == "run":
            score = rng.choice([
                f"{rng.uniform(-100, 100):.{rng.randint(0, 17)}f}", f"{rng.uniform(-1, 1):.6e}",
                str(rng.randint(-(10**15), 10**15)), repr(rng.random()), "-0", ".5", "5.",
                "123456789012.5e-3",
            ])
            line = sep.join([q, "Q0", d, str(i), score, "tag"])  # longer lines take the exact path
        elif kind == "qrels":
            grade = rng.choice(["0", "1", "2", "-1", "+3", "007", str(rng.randint(-(10**17), 10**17))])
            line = sep.join([q, "0", d, grade])
        else:
            line = "\t".join([q, d, str(rng.randint(1, 10**9))])
        out.append(rng.choice(["", " "]) + line + rng.choice(["", "", " ", "\r"]))
    return ("\n".join(out) + "\n").encode("utf-8")


@native
@pytest.mark.parametrize("kind", ["run", "qrels", "msmarco"])
@pytest.mark.parametrize("arrow", [False, True])
def test_regular_blocks_take_the_compiled_scan(kind: str, arrow: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"{kind}{arrow}")
    for lines in (1, 2, 7, 300):
        for _ in range(5):
            block = regular_block(rng, kind, lines)
            got = trec._scan_block(block, kind, arrow)
            want = numpy_scan(block, kind, arrow, monkeypatch)
            assert got is not None and want is not None, block
            assert_same_block(got, want)


@native
@pytest.mark.parametrize("block, kind", [
    (b"q Q0 d 1 2 s\x01\n", "run"),  # a control byte
    (b"# c\x02\nq Q0 d 1 2 s\n", "run"),  # ... in a comment
    (b"q Q0 d 1 2 s\x00\n", "run"),
    (b"q Q0 d 1 2\n", "run"),  # too few columns
    (b"q 0 d 1 x\n", "qrels"),  # too many
    (b"q 0 d 1.5\n", "qrels"),
    (b"q 0 d 1234567890123456789\n", "qrels"),  # 19 digits: the exact parser decides
    (b"q 0 d -\n", "qrels"),
    (b"q 0 d 1_0\n", "qrels"),
    (b"q Q0 d 1 1_0 s\n", "run"),
    (b"q Q0 d 1 inf s\n", "run"),
    (b"q Q0 d 1 1e999 s\n", "run"),
    (b"q Q0 d 1 nan s\n", "run"),
    (b"q Q0 d 1 0x1 s\n", "run"),
    (b"q Q0 d 1 . s\n", "run"),
    (b"q Q0 " + b"d" * (LONG_ID + 1) + b" 1 2 s\n", "run"),  # a long id is stored as a key
    (b"q Q0 d 1 2 s", "run"),  # no final newline (blocks always have one)
])
def test_irregular_blocks_go_to_the_exact_parser(block: bytes, kind: str) -> None:
    assert trec._scan_block(block, kind, False) is None
    assert trec._scan_block(block, kind, True) is None


@native
def test_the_widest_short_id_and_the_last_byte_of_a_block() -> None:
    widest = b"d" * LONG_ID
    got = trec._scan_block(b"q Q0 " + widest + b" 1 2.5 s\nq Q0 e 2 1.5 s\n", "run", True)
    assert got is not None and got[1].tolist() == [widest, b"e"] and got[2].tolist() == [2.5, 1.5]
    # The block's last token ends one byte before its end: no word is read past it.
    got = trec._scan_block(b"q 0 abcdefghijklmnopq 3\n", "qrels", False)
    assert got is not None and got[1].tolist() == [b"abcdefghijklmnopq"] and got[2].tolist() == [3]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_readers_give_the_same_data_with_and_without_it(
    compiled: bool, threads: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    if compiled and trec._native_scan is None:
        pytest.skip("the compiled tokenizer is not built here")
    rng = random.Random(11)
    text = b"".join(regular_block(rng, "run", 400) for _ in range(40))
    path = tmp_path / "r.trec"
    path.write_bytes(text)
    monkeypatch.setenv("RAGJUDGE_THREADS", threads)
    monkeypatch.setattr(trec, "BLOCK", 4096)  # many blocks, a pool of workers
    monkeypatch.setattr(trec, "ARROW_AFTER_LINES", 5000)  # past it, scores go through Arrow
    monkeypatch.setattr(trec, "_native_scan", trec._native_scan if compiled else None)
    with streams.opened(path) as inp:
        got = trec.scan_trec(inp.blocks(trec.BLOCK), "run", str(path))
    want = trec.parse_trec_exact(text, "run", str(path))
    assert_same_columns(got, want)
    assert 0 < len(io.read_run(path, dedup="first")) <= len(want[0])  # the whole reader, on this scan


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.slow  # hypothesis, 200 examples
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fast_path_equals_exact_path_either_way(compiled: bool, data) -> None:
    """The readers' outcome (columns or the one-line error) does not depend on the scan."""
    if compiled and trec._native_scan is None:
        pytest.skip("the compiled tokenizer is not built here")
    kind = data.draw(st.sampled_from(["qrels", "run"]))
    text = data.draw(trec_text(kind)).encode("utf-8")
    block = data.draw(st.sampled_from([16, 64, 1 << 20]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trec, "_native_scan", trec._native_scan if compiled else None)
        fast = outcome(lambda: trec.scan_trec(streams.blocks_from_bytes(text, block), kind, "f"))
    exact = outcome(lambda: trec.scan_trec(streams.blocks_from_bytes(text, block), kind, "f", exact=True))
    assert fast[0] == exact[0], (fast, exact)
    if fast[0] == "ok":
        assert_same_columns(fast[1], exact[1])
    else:
        assert fast[1] == exact[1]


def test_an_int64_minimum_grade_is_refused_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """-2**63 fits numpy's int64 but not the exact rules (|grade| <= 2**63 - 1)."""
    for compiled in (True, False):
        if compiled and trec._native_scan is None:
            continue
        monkeypatch.setattr(trec, "_native_scan", trec._native_scan if compiled else None)
        with pytest.raises(InputError, match="out of range"):
            io.parse_qrels("q 0 d -9223372036854775808\n")


def decimal_tokens(rng: random.Random, n: int) -> list[str]:
    """Score tokens as systems write them, and the edges of the one-operation exact read:
    significands around 2**53, exponents around +-22, leading and trailing zeros."""
    specials = ["0", "-0", "+0", "0.0", "-0.0", ".5", "5.", "+.5", "-5.", "1.e5", "007.10",
                "9007199254740992", "9007199254740993", "-9007199254740992.0", "900719925474099.3",
                "1e22", "1e23", "1e-22", "1e-23", "4.9e-324", "1.7976931348623157e308",
                "123456789012345678", "0.000000000000000000000000001", "1" + "0" * 30,
                "1." + "0" * 25, "0" * 40 + "1.5", "1e0000", "1e00022", "1E+3", "2.5E-3",
                ".", "e5", "1e", "1e+", "-", "+", "1-2", "1..2", "1e5.5", "--1", "1e+-2", ".e1"]
    out = list(specials)
    for _ in range(n):
        roll = rng.random()
        x = rng.uniform(-1e4, 1e4) * 10 ** rng.randint(-8, 8)
        if roll < 0.3:
            out.append(f"{x:.{rng.randint(0, 20)}f}")
        elif roll < 0.5:
            out.append(f"{x:.{rng.randint(0, 18)}e}")
        elif roll < 0.6:
            out.append(repr(x))
        elif roll < 0.7:
            out.append(str(rng.randint(-(2**63), 2**63)))
        else:  # digits, a point somewhere, an exponent near the edges
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 21)))
            cut = rng.randint(0, len(digits))
            tok = rng.choice(["", "-", "+"]) + digits[:cut] + rng.choice([".", ""]) + digits[cut:]
            if rng.random() < 0.6:
                tok += rng.choice("eE") + rng.choice(["", "-", "+"]) + str(rng.randint(0, 30))
            out.append(tok)
    return out


@native
def test_scores_read_here_have_the_exact_parsers_bits() -> None:
    """Every score the compiled scan reads itself has the bits of Python's float() (the exact
    path); a token it does not read leaves the block's scores to Arrow or numpy."""
    import struct

    rng = random.Random(5)
    read_here = 0
    tokens = decimal_tokens(rng, 60_000)
    for tok in tokens:
        res = trec._native_scan(f"q Q0 d 1 {tok} s\n".encode(), 6, False, 0, 2, 4, False, LONG_ID, False)
        assert res is not None
        try:
            want: float | None = float(tok)
        except ValueError:
            want = None
        if res[5] == "float64":
            got = np.frombuffer(res[4], dtype=np.float64, count=1)[0]
            assert want is not None, tok
            assert struct.pack("<d", got) == struct.pack("<d", want), (tok, got, want)
            read_here += 1
        else:
            assert res[5] == f"S{len(tok)}", (tok, res[5])
    # Nearly every token a system writes is read here (the rest: long significands, large
    # exponents, malformed ones): the fast read is the one the files take.
    assert read_here > 0.6 * len(tokens)
