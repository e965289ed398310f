"""Matching retrieved chunks to gold documents: by id, exact text, normalised text, or chunk.

Modes (``match=`` in a metric spec, ``--match`` on the CLI):

* ``id``         -- retrieved ids against gold ids (``reference_context_ids`` / ``expected_output``);
* ``text``       -- a chunk's text equals a gold text exactly;
* ``normalized`` -- equal after Unicode NFKC, case folding and whitespace collapsing;
* ``chunk``      -- a chunk matches the gold document it was cut from: its canonical form is a
  substring of the gold document's canonical form, where canonical also strips ``Date: ...``
  lines and ``user:`` / ``assistant:`` speaker prefixes, in plain or JSON-escaped text (chat
  logs are often chunked after being serialised);
* ``auto``       -- ``id`` when the sample has retrieved ids and gold ids, else ``normalized``.

Set semantics over unique contents: identical gold texts are one gold document, and a gold
document found twice in a ranking counts once (the repeat stays in place as a non-relevant
entry, so later ranks do not move). :func:`document_recall` reproduces the single-hit and
multi-hit recall of Haystack's ``DocumentRecallEvaluator`` on lists of contents.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from ..errors import InputError, MetricError
from ..lists import check_ranking
from .options import MATCH_MODES
from .samples import Sample

__all__ = [
    "MATCH_MODES",
    "normalize_text",
    "canonical_text",
    "match_chunks",
    "gold_and_ranking",
    "document_recall",
    "resolve_mode",
]


_WS = re.compile(r"\s+")
_DATE_LINE = re.compile(r"^[ \t]*date:[^\n]*$", re.IGNORECASE | re.MULTILINE)
# A speaker prefix at the start of a line or right after a quote ('"user: hi"' in a JSON list).
_SPEAKER = re.compile(r'(^|(?<=["\n]))[ \t]*(user|assistant)[ \t]*:[ \t]*', re.IGNORECASE | re.MULTILINE)
_JSON_ESCAPE = re.compile(r'\\(["\\/nrt])')
_UNESCAPE = {"n": "\n", "r": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/"}


def normalize_text(text: str) -> str:
    """NFKC, case-folded, whitespace runs collapsed to one space, ends stripped."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def canonical_text(text: str) -> str:
    """The form compared by ``chunk`` matching: JSON escapes undone, ``Date:`` lines and
    ``user:``/``assistant:`` prefixes removed, then :func:`normalize_text`."""
    if "\\" in text:
        text = _JSON_ESCAPE.sub(lambda m: _UNESCAPE[m.group(1)], text)
    text = _DATE_LINE.sub(" ", text)
    text = _SPEAKER.sub(" ", text)
    return normalize_text(text)


def _key(text: str, mode: str) -> str:
    if mode == "text":
        return text
    if mode == "normalized":
        return normalize_text(text)
    return canonical_text(text)


def _gold_keys(gold: Sequence[str], mode: str) -> dict[str, int]:
    """Key -> index of the first gold text with that key (identical contents count once)."""
    keys: dict[str, int] = {}
    for i, g in enumerate(gold):
        keys.setdefault(_key(g, mode), i)
    return keys


def match_chunks(chunks: Sequence[str], gold: Sequence[str], mode: str) -> list[int | None]:
    """For each chunk, the index of the first unique gold text it matches (or ``None``).

    Gold texts with the same key share the index of their first occurrence, so identical gold
    contents count once. ``mode`` is ``text``, ``normalized`` or ``chunk``.
    """
    if mode not in ("text", "normalized", "chunk"):
        raise MetricError(f"content matching mode must be text, normalized or chunk, got {mode!r}")
    keys = _gold_keys(gold, mode)
    out: list[int | None] = []
    if mode != "chunk":
        for c in chunks:
            out.append(keys.get(_key(c, mode)))
        return out
    unique = list(keys.items())
    for c in chunks:
        ck = _key(c, mode)
        hit = None
        if ck:
            for gk, gi in unique:
                if ck in gk:
                    hit = gi
                    break
        out.append(hit)
    return out


def resolve_mode(sample: Sample, mode: str) -> str:
    """``auto`` -> ``id`` when the sample has gold ids (unless only content matching can work:
    retrieved chunks without ids but gold texts given), else ``normalized``."""
    if mode not in MATCH_MODES:
        raise MetricError(f"unknown match mode {mode!r} (expected one of {', '.join(MATCH_MODES)})")
    if mode != "auto":
        return mode
    if sample.relevant is not None:
        if sample.context_ids is None and sample.reference_contexts is not None:
            return "normalized"
        return "id"
    return "normalized"


def gold_and_ranking(
    sample: Sample, mode: str = "auto"
) -> tuple[dict[str, int], list[str]] | str:
    """The sample's gold ``{docid: gain}`` and ranked docids, ready for the ranking core.

    Returns a reason string instead when the sample lacks what ``mode`` needs. For content
    modes the gold docids are ``g<i>`` (i = index of the first unique gold text) and an
    unmatched chunk is ``r<rank>``; a gold document matched again later becomes a
    non-relevant ``dup<rank>`` so it counts once and ranks below it stay put.
    """
    if mode == "auto" and sample.relevant is None and sample.reference_contexts is None:
        return "no gold (relevant ids in expected_output / reference_context_ids, or reference_contexts)"
    mode = resolve_mode(sample, mode)
    if mode == "id":
        if sample.relevant is None:
            return "no gold ids (reference_context_ids / expected_output)"
        ids = sample.context_ids
        if ids is None:
            return "no retrieved ids" if sample.contexts is None else "some retrieved chunks have no id"
        # A repeated id counts once without moving later ranks (one rule with evaluate_lists).
        return dict(sample.relevant), check_ranking(ids, "retrieved")
    if sample.reference_contexts is None:
        return "no gold texts (reference_contexts)"
    texts = sample.context_texts
    if texts is None:
        return "no retrieved texts" if sample.contexts is None else "some retrieved chunks have no text"
    matched = match_chunks(texts, sample.reference_contexts, mode)
    gold = {f"g{i}": 1 for i in sorted(_gold_keys(sample.reference_contexts, mode).values())}
    ranking = []
    found: set[int] = set()
    for rank, gi in enumerate(matched, start=1):
        if gi is None:
            ranking.append(f"\x00r{rank}")
        elif gi in found:
            ranking.append(f"\x00dup{rank}")
        else:
            found.add(gi)
            ranking.append(f"g{gi}")
    return gold, ranking


def document_recall(
    ground_truth: Sequence[Sequence[str]],
    retrieved: Sequence[Sequence[str]],
    *,
    mode: str = "multi_hit",
    match: str = "text",
) -> list[float | None]:
    """Recall over unique contents, per example, as Haystack's DocumentRecallEvaluator defines it.

    ``single_hit``: 1 if any unique gold content is retrieved, else 0.
    ``multi_hit``: (unique gold contents retrieved) / (unique gold contents).
    No cutoff: the whole retrieved list counts. An example with no gold content is ``None``
    (undetermined), not 0. ``match`` is ``text`` (Haystack's own), ``normalized`` or ``chunk``.
    """
    if mode not in ("single_hit", "multi_hit"):
        raise MetricError(f"recall mode must be single_hit or multi_hit, got {mode!r}")
    if match not in ("text", "normalized", "chunk"):
        raise MetricError(f"content matching mode must be text, normalized or chunk, got {match!r}")
    if len(ground_truth) != len(retrieved):
        raise InputError(
            f"{len(ground_truth)} ground-truth lists but {len(retrieved)} retrieved lists",
            field="retrieved",
        )
    out: list[float | None] = []
    for gold, got in zip(ground_truth, retrieved):
        unique_gold = set(_gold_keys(list(gold), match).values())
        if not unique_gold:
            out.append(None)
            continue
        found = {i for i in match_chunks(list(got), list(gold), match) if i is not None}
        if mode == "single_hit":
            out.append(1.0 if found else 0.0)
        else:
            out.append(len(found) / len(unique_gold))
    return out

