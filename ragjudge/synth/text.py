"""Language-neutral text helpers of the synthetic-query generator (pure functions).

One tokenizer for everything here (sampling, duplicate checks, copy detection, the round-trip
retriever), so "a word" means the same thing in every filter: lower-cased Unicode word runs,
and each CJK / kana / hangul character on its own (those scripts do not separate words with
spaces, so a whole sentence would otherwise be one "word").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

__all__ = ["tokens", "normalize", "shingles", "jaccard", "longest_common_span", "boilerplate_reason"]

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\W_]+")

# Phrases that mark navigation, legal or error text rather than content worth asking about.
_BOILERPLATE = re.compile(
    r"all rights reserved|cookies? (policy|settings|consent)|(accept|we use) (all )?cookies"
    r"|privacy policy|terms of (use|service)|click here|sign in|log in|subscribe|javascript"
    r"|page not found|error 404|404 not found|skip to (main )?content|\bmenu\b|copyright|©",
    re.IGNORECASE,
)


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (NFKC-normalised; CJK characters one by one)."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


def normalize(text: str) -> str:
    """The form in which two queries or passages count as exact duplicates."""
    return " ".join(tokens(text))


def shingles(toks: Sequence[str], n: int = 3) -> set[tuple[str, ...]]:
    """Word n-grams (the whole sequence when shorter than ``n``)."""
    if len(toks) < n:
        return {tuple(toks)} if toks else set()
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def jaccard(a: set, b: set) -> float:  # type: ignore[type-arg]
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def longest_common_span(query: Sequence[str], passage: Sequence[str]) -> int:
    """Length in tokens of the longest run of consecutive query tokens found consecutively in
    the passage (dynamic programming, O(len(query) * len(passage)))."""
    if not query or not passage:
        return 0
    best = 0
    prev = [0] * (len(passage) + 1)
    for q in query:
        cur = [0] * (len(passage) + 1)
        for j, p in enumerate(passage, 1):
            if q == p:
                cur[j] = prev[j - 1] + 1
                if cur[j] > best:
                    best = cur[j]
        prev = cur
    return best


def boilerplate_reason(text: str, toks: Sequence[str]) -> str | None:
    """Why a passage is not worth asking about (navigation, legal, tables of numbers...), or
    ``None``. Deliberately conservative: a content passage that mentions "cookie" once is kept."""
    if not toks:
        return "no words"
    alpha = sum(1 for t in toks if not t.isdigit()) / len(toks)
    if alpha < 0.5:
        return f"mostly numbers ({1 - alpha:.0%} numeric tokens)"
    if len(toks) >= 20 and len(set(toks)) / len(toks) < 0.3:
        return f"repetitive ({len(set(toks))} distinct of {len(toks)} words)"
    hits = len(_BOILERPLATE.findall(text))
    if hits >= 2 or (hits and len(toks) < 20):
        return "boilerplate phrases (navigation/legal/error text)"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 5 and sum(len(ln.split()) <= 3 for ln in lines) / len(lines) > 0.6:
        return "menu-like (mostly very short lines)"
    return None
