"""The round-trip retriever: BM25 over the whole corpus (``bm25s``, sparse and vectorised).

Promptagator's round-trip filter keeps a generated query only if a retriever finds its own
source passage. ``bm25s`` was chosen over ``rank_bm25`` by measurement (README, design
notes; ``benchmarks/bench_synth.py --bm25``): it scores a query against a sparse index instead
of looping over every document in Python.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from .text import tokens

__all__ = ["LexicalIndex"]


class LexicalIndex:
    """BM25 (Lucene variant, k1=1.5, b=0.75) over ``{docid: text}`` with :func:`tokens`."""

    def __init__(self, docs: Mapping[str, str], *, k1: float = 1.5, b: float = 0.75) -> None:
        with warnings.catch_warnings():  # bm25s imports tqdm.auto, which warns in a notebook
            warnings.filterwarnings("ignore", message="IProgress not found")  # without ipywidgets
            import bm25s

        self.ids: list[str] = list(docs)
        self.pos = {d: i for i, d in enumerate(self.ids)}
        corpus = [tokens(docs[d]) or [""] for d in self.ids]
        self._bm25 = bm25s.BM25(k1=k1, b=b)
        if self.ids:
            self._bm25.index(corpus, show_progress=False)

    def scores(self, query: str | Sequence[str]) -> np.ndarray:
        toks = tokens(query) if isinstance(query, str) else list(query)
        if not self.ids or not toks:
            return np.zeros(len(self.ids))
        return np.asarray(self._bm25.get_scores(toks), dtype=np.float64)

    def rank_of(self, query: str, docids: Sequence[str]) -> list[int | None]:
        """1-based rank of each docid for ``query`` (ties count against it: every document
        scoring at least as high is ahead); ``None`` when it scores 0 (not retrieved)."""
        s = self.scores(query)
        out: list[int | None] = []
        for d in docids:
            i = self.pos.get(d)
            if i is None or s[i] <= 0:
                out.append(None)
            else:
                out.append(int(np.count_nonzero(s >= s[i])))
        return out

    def top(self, query: str | Sequence[str], k: int) -> list[tuple[str, float]]:
        """The ``k`` best documents with a positive score, best first (ties by id)."""
        s = self.scores(query)
        if not len(s):
            return []
        k = min(k, len(s))
        idx = np.argpartition(-s, k - 1)[:k]
        ranked = sorted(((float(s[i]), self.ids[i]) for i in idx if s[i] > 0), key=lambda x: (-x[0], x[1]))
        return [(d, v) for v, d in ranked]
