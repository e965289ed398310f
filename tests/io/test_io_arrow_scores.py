"""Score tokens of large runs go through Arrow's parser: the same bits as numpy's, the same
errors, and nothing changes when pyarrow is missing."""

from __future__ import annotations

import numpy as np
import pytest

from ragjudge.errors import InputError
from ragjudge.io import parse_run, trec

TOKENS = ["1", "0", "-0", "0.5", "-2.25", "1e3", "1E-3", "+4.5", "007.10", "1.7976931348623157e308",
          "4.9e-324", "2.2250738585072014e-308", "123456789012345678901234567890", ".5", "5.",
          "0.1000000000000000055511151231257827", "3.14159265358979323846264338327950288"]


def _run_text(tokens: list[str]) -> str:
    return "".join(f"q{i % 7} Q0 d{i} {i} {t} tag\n" for i, t in enumerate(tokens * 40))


@pytest.mark.parametrize("after", [0, 10**12])
def test_arrow_and_numpy_give_the_same_bits(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    pytest.importorskip("pyarrow")
    text = _run_text(TOKENS)
    monkeypatch.setattr(trec, "ARROW_AFTER_LINES", 10**12)
    want = parse_run(text)
    monkeypatch.setattr(trec, "ARROW_AFTER_LINES", after)
    got = parse_run(text)
    for q in want.query_ids:
        a, b = want.ranked(q), got.ranked(q)
        assert [d for d, _ in a] == [d for d, _ in b]
        assert np.array_equal(np.array([s for _, s in a]).view(np.int64), np.array([s for _, s in b]).view(np.int64))


@pytest.mark.parametrize("token, message", [("0x1p3", None), ("1e", "score"), ("inf", "score"), ("1-2", "score")])
def test_odd_tokens_take_the_exact_path(monkeypatch: pytest.MonkeyPatch, token: str, message: str | None) -> None:
    text = _run_text(["1.5"]) + f"q0 Q0 odd 1 {token} tag\n"
    monkeypatch.setattr(trec, "ARROW_AFTER_LINES", 10**12)
    try:
        want: object = parse_run(text).get("q0")["odd"]
    except InputError as exc:
        want = str(exc)
    monkeypatch.setattr(trec, "ARROW_AFTER_LINES", 0)
    try:
        got: object = parse_run(text).get("q0")["odd"]
    except InputError as exc:
        got = str(exc)
    assert got == want
    if message:
        assert isinstance(got, str) and message in got


def test_without_pyarrow_the_numpy_path_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_arrow(name: str, *a: object, **k: object) -> object:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_arrow)
    monkeypatch.setattr(trec, "ARROW_AFTER_LINES", 0)
    run = parse_run(_run_text(TOKENS))
    assert run.get("q0")["d0"] == 1.0


def _one_token(token: bytes) -> float | None:
    buf = np.frombuffer(token + b"\x00" * 24, dtype=np.uint8)
    words, _ = trec._gather_words(buf, np.array([0]), np.array([len(token)]))
    got = trec._arrow_floats(words, np.array([len(token)]))
    return None if got is None else float(got[0])


def _python(token: bytes) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def test_arrow_accepts_no_token_python_refuses() -> None:
    """Every token of up to 3 bytes over the fast path's alphabet, and seeded longer ones:
    Arrow reads a token only when Python's ``float`` (the exact path) reads it, to the same
    bits; a token Arrow refuses goes to numpy, so refusing more is harmless."""
    pytest.importorskip("pyarrow")
    import itertools
    import random

    alphabet = b"0123456789.+-eE"
    tokens = [bytes(t) for n in (1, 2, 3) for t in itertools.product(alphabet, repeat=n)]
    rng = random.Random(7)
    tokens += [bytes(rng.choice(alphabet) for _ in range(rng.randint(4, 24))) for _ in range(1500)]
    tokens += [b"1" * 13, b"-0.123456789012", b"123456789012.5e-3", b"9" * 400]
    accepted = 0
    for token in tokens:
        got = _one_token(token)
        if got is not None:
            accepted += 1
            want = _python(token)
            assert want is not None, token
            assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64), token
    assert accepted > 1000  # the check reached the parser, not only the refusals


def test_views_match_numpy_on_long_and_short_tokens() -> None:
    """Tokens on both sides of the 12-byte inline limit of a string view, in one array."""
    pytest.importorskip("pyarrow")
    toks = [b"1.5", b"0.123456789", b"0.1234567890", b"13.862943611198906", b"-2.5e-7",
            b"123456789012", b"1234567890123", b"7", b"0.30000000000000004441"] * 50
    lens = np.array([len(t) for t in toks])
    starts = np.cumsum([0] + [len(t) + 1 for t in toks[:-1]])
    buf = np.frombuffer(b" ".join(toks) + b"\x00" * 32, dtype=np.uint8)
    words, width = trec._gather_words(buf, starts, lens)
    got = trec._arrow_floats(words, lens)
    assert got is not None
    want = np.array([float(t) for t in toks])
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


def test_arrow_scores_do_not_import_pandas() -> None:
    """pyarrow's Array.to_numpy imports pandas on first use (~0.3 s, ~45 MB): the reader reads
    Arrow's values buffer itself, so a large read loads no pandas."""
    pytest.importorskip("pyarrow")
    import subprocess
    import sys

    code = ("import sys; from ragjudge.io import trec, parse_run; trec.ARROW_AFTER_LINES = 0; "
            "run = parse_run(''.join(f'q Q0 d{i} {i} {i / 7!r} t\\n' for i in range(100))); "
            "assert run.get('q')['d7'] == 1.0; print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
