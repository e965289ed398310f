"""Which passages to ask about: seeded, stratified, skipping short, boilerplate and duplicate text.

The order is built so that *every prefix* is a stratified sample: passages are grouped into
cells (source/title group x length tercile), each cell is shuffled with the seed, and passage
``j`` of a cell of size ``n`` gets the key ``(j + u) / n`` (``u`` uniform jitter); sorting by
key interleaves the cells in proportion to their size. Taking the first ``m`` passages then
allocates ``m`` across cells proportionally, however large ``m`` turns out to be.

Exact duplicates (same normalised text) are removed over the whole corpus; near-duplicates
(word 3-shingle Jaccard >= ``near_duplicate``) lazily, against the passages already drawn, so
two near-identical passages are never both sampled.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .lexical import LexicalIndex
from .text import boilerplate_reason, jaccard, shingles, tokens

__all__ = ["PassagePool", "SamplingReport"]

_SEP = re.compile(r"[-_:#/.|]")
_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]{2,}")
_EXAMPLES = 3  # example reasons kept per skip category


@dataclass
class SamplingReport:
    """How the corpus was narrowed down to passages worth asking about."""

    corpus: int = 0
    eligible: int = 0
    too_short: int = 0
    boilerplate: int = 0
    duplicates: int = 0
    near_duplicates: int = 0
    drawn: int = 0
    stratified_by: list[str] = field(default_factory=list)
    strata: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, text: str) -> None:
        ex = self.examples.setdefault(kind, [])
        if len(ex) < _EXAMPLES:
            ex.append(text)

    def to_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                for k, v in self.__dict__.items()}


def _title(text: str) -> str | None:
    head, sep, _ = text.partition("\n")
    return head.strip() if sep and 0 < len(head.strip()) <= 200 else None


def _groups(corpus: Mapping[str, str], ids: list[str]) -> tuple[dict[str, str], str | None]:
    """A source group per passage -- the title when titles repeat (a document cut into
    passages), else the id prefix before the first separator -- when it splits the corpus
    into at least 2 groups of 2+ passages on average; else no grouping."""
    n = len(ids)
    if n < 4:
        return {}, None
    titles = {d: _title(corpus[d]) for d in ids}
    distinct = {t for t in titles.values() if t}
    if all(titles.values()) and 2 <= len(distinct) <= n // 2:
        return {d: str(t) for d, t in titles.items()}, "title"
    prefixes = {d: _SEP.split(d, 1)[0] for d in ids}
    if all(_SEP.search(d) for d in ids) and 2 <= len(set(prefixes.values())) <= n // 2:
        return prefixes, "id prefix"
    return {}, None


class PassagePool:
    """Eligible passages of a corpus in a seeded stratified order, drawn without near-duplicates."""

    def __init__(
        self,
        corpus: Mapping[str, str],
        *,
        seed: int = 0,
        min_words: int = 12,
        near_duplicate: float = 0.7,
    ) -> None:
        self.corpus = corpus
        self.near_duplicate = near_duplicate
        self.report = SamplingReport(corpus=len(corpus))
        self._tokens: dict[str, list[str]] = {}
        seen: dict[str, str] = {}
        eligible: list[str] = []
        for d, text in corpus.items():
            toks = tokens(text)
            if len(toks) < min_words:
                self.report.too_short += 1
                self.report.note("too_short", f"{d}: {len(toks)} words < {min_words}")
                continue
            why = boilerplate_reason(text, toks)
            if why:
                self.report.boilerplate += 1
                self.report.note("boilerplate", f"{d}: {why}")
                continue
            key = " ".join(toks)
            if key in seen:
                self.report.duplicates += 1
                self.report.note("duplicates", f"{d}: same text as {seen[key]}")
                continue
            seen[key] = d
            self._tokens[d] = toks
            eligible.append(d)
        self.report.eligible = len(eligible)
        self.order = self._stratified(eligible, seed)
        self._shingles: dict[str, set[tuple[str, ...]]] = {}
        self._postings: dict[tuple[str, ...], list[str]] = {}
        self._drawn_set: set[str] = set()
        self._rejected: dict[str, int] = {}  # near-duplicates skipped -> order found in

    def _stratified(self, ids: list[str], seed: int) -> list[str]:
        rng = random.Random(seed)
        groups, by = _groups(self.corpus, ids)
        if by:
            self.report.stratified_by.append(by)
        bins: dict[str, int] = {}
        if len(ids) >= 6:
            lengths = sorted(len(self._tokens[d]) for d in ids)
            cuts = (lengths[len(lengths) // 3], lengths[2 * len(lengths) // 3])
            bins = {d: (len(self._tokens[d]) > cuts[0]) + (len(self._tokens[d]) > cuts[1]) for d in ids}
            self.report.stratified_by.append("length tercile")
        cells: dict[tuple[str, int], list[str]] = {}
        for d in ids:
            cells.setdefault((groups.get(d, ""), bins.get(d, 0)), []).append(d)
        self.report.strata = len(cells)
        keyed: list[tuple[float, str]] = []
        for cell in sorted(cells):
            members = cells[cell]
            rng.shuffle(members)
            n = len(members)
            keyed.extend(((j + rng.random()) / n, d) for j, d in enumerate(members))
        keyed.sort()
        return [d for _, d in keyed]

    def tokens_of(self, docid: str) -> list[str]:
        toks = self._tokens.get(docid)
        return toks if toks is not None else tokens(self.corpus[docid])

    def _near(self, docid: str) -> str | None:
        """An already drawn passage ``docid`` nearly duplicates, or ``None``."""
        sh = self._shingles.get(docid)
        if sh is None:
            sh = self._shingles[docid] = shingles(self.tokens_of(docid))
        overlap: dict[str, int] = {}
        for s in sh:
            for other in self._postings.get(s, ()):
                overlap[other] = overlap.get(other, 0) + 1
        for other, inter in overlap.items():
            union = len(sh) + len(self._shingles[other]) - inter
            if union and inter / union >= self.near_duplicate:
                return other
        return None

    def _accept(self, docid: str) -> None:
        self._drawn_set.add(docid)
        self.report.drawn += 1
        for s in self._shingles[docid]:
            self._postings.setdefault(s, []).append(docid)

    def draw(self) -> Iterator[str]:
        """Passages in sampling order, each near-duplicate of an earlier one skipped (a second
        call starts again from the top, yielding the passages already drawn)."""
        for d in self.order:
            if d in self._rejected:
                continue
            if d not in self._drawn_set:
                other = self._near(d)
                if other is not None:
                    self._rejected[d] = len(self._rejected)
                    self.report.near_duplicates += 1
                    self.report.note("near_duplicates", f"{d}: near-duplicate of {other}")
                    continue
                self._accept(d)
            yield d

    @property
    def rejections(self) -> int:
        """Near-duplicates skipped so far (``as_of`` of :meth:`partner`)."""
        return len(self._rejected)

    def entities(self, docid: str) -> set[str]:
        return {m.group(0).lower() for m in _ENTITY.finditer(self.corpus[docid])}

    def partner(self, docid: str, index: LexicalIndex, *, candidates: int = 10,
                as_of: int | None = None) -> tuple[str, str] | None:
        """A second passage for a two-passage question: among the anchor's ``candidates``
        nearest BM25 neighbours (eligible, not near-duplicates of it), the first sharing a
        capitalised entity, else the nearest. Returns ``(docid, why)`` or ``None``.

        ``as_of``: the passages skipped as near-duplicates count as they stood when that many
        had been (:attr:`rejections` when the anchor was drawn), so a partner looked up later,
        after more passages were drawn, is the one the draw would have had then."""
        before = self.rejections if as_of is None else as_of
        mine = self.tokens_of(docid)
        anchor_sh = self._shingles.get(docid) or shingles(mine)
        ents = self.entities(docid)
        options: list[tuple[str, float]] = []
        for other, score in index.top(list(dict.fromkeys(mine)), candidates + 1):
            if (other == docid or other not in self._tokens
                    or self._rejected.get(other, before) < before):
                continue
            if jaccard(anchor_sh, shingles(self._tokens[other])) >= self.near_duplicate:
                continue
            options.append((other, score))
        if not options:
            return None
        for rank, (other, _) in enumerate(options, 1):
            shared = sorted(ents & self.entities(other))
            if shared:
                return other, f"shared entity {shared[0]!r} (bm25 neighbour {rank})"
        return options[0][0], "bm25 neighbour 1"
