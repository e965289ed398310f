"""Simulated judges: "LLM" labels drawn from true labels through a known confusion matrix.

Used by the tests and ``benchmarks/bench_trust.py`` to check, by seeded simulation, that the
agreement report recovers a judge's confusion matrix and that PPI intervals cover the truth.
Rows of a confusion matrix are the true grade, columns the judge's grade; each row sums to 1.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..data import Qrels
from ..errors import InputError

__all__ = ["JUDGES", "draw_labels", "simulate_binary_studies", "simulate_qrels", "simulate_studies"]

#: Named judges on the 0-3 scale. ``lenient`` grades up (the bias Clarke & Dietz 2024 report for
#: LLM judges), ``strict`` grades down, ``noisy`` is often off by one either way (which pulls
#: grades toward the middle of the scale).
JUDGES: Mapping[str, np.ndarray] = {
    "perfect": np.eye(4),
    "lenient": np.array([
        [0.60, 0.30, 0.10, 0.00],
        [0.05, 0.45, 0.40, 0.10],
        [0.00, 0.10, 0.50, 0.40],
        [0.00, 0.00, 0.15, 0.85],
    ]),
    "strict": np.array([
        [0.95, 0.05, 0.00, 0.00],
        [0.45, 0.50, 0.05, 0.00],
        [0.10, 0.40, 0.45, 0.05],
        [0.00, 0.10, 0.40, 0.50],
    ]),
    # right 95% of the time, otherwise one grade off
    "near-perfect": np.array([
        [0.95, 0.05, 0.00, 0.00],
        [0.025, 0.95, 0.025, 0.00],
        [0.00, 0.025, 0.95, 0.025],
        [0.00, 0.00, 0.05, 0.95],
    ]),
    "noisy": np.array([
        [0.70, 0.20, 0.10, 0.00],
        [0.20, 0.55, 0.20, 0.05],
        [0.05, 0.20, 0.55, 0.20],
        [0.00, 0.10, 0.20, 0.70],
    ]),
}


def _confusion(judge: str | np.ndarray) -> np.ndarray:
    if isinstance(judge, str):
        if judge not in JUDGES:
            raise ValueError(f"unknown judge {judge!r}; known: {', '.join(JUDGES)}")
        return np.asarray(JUDGES[judge], dtype=np.float64)
    c = np.asarray(judge, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or (c < 0).any() or not np.allclose(c.sum(axis=1), 1):
        raise ValueError("a confusion matrix must be square, non-negative, rows summing to 1")
    return c


def draw_labels(true: np.ndarray, judge: str | np.ndarray, seed: int | None,
                lo: int = 0) -> np.ndarray:
    """Judge grades for an array of true grades (any shape, values ``lo..lo+m-1``): each label
    is drawn independently from the row of the confusion matrix of its true grade."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        # numpy refuses it deep inside with a bare ValueError (a traceback on the command line)
        raise InputError(f"must be a non-negative integer, got {seed!r}", field="seed")
    c = _confusion(judge)
    t = np.asarray(true, dtype=np.int64) - lo
    if t.size and (t.min() < 0 or t.max() >= len(c)):
        raise ValueError(f"true grades must be in {lo}..{lo + len(c) - 1}")
    cum = np.cumsum(c, axis=1)
    cum[:, -1] = 1.0  # guard against rounding: every draw lands in some column
    u = np.random.default_rng(seed).random(t.shape)
    return (u[..., None] >= cum[t]).sum(axis=-1) + lo


def simulate_qrels(qrels: Qrels, judge: str | np.ndarray, seed: int | None = 0) -> Qrels:
    """A judge's qrels for the same pairs as ``qrels`` (the truth), grades drawn through the
    confusion matrix (negative grades count as 0)."""
    rows = list(qrels.rows())
    true = np.array([max(g, 0) for _, _, g in rows], dtype=np.int64)
    grades = draw_labels(true, judge, seed)
    return Qrels.from_arrays([q for q, _, _ in rows], [d for _, d, _ in rows], grades,
                             source=f"simulated:{judge if isinstance(judge, str) else 'custom'}")


def simulate_studies(
    n_studies: int,
    n_queries: int,
    judge: str | np.ndarray,
    *,
    depth: int = 10,
    seed: int | None = 0,
    hard_judge: str | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-query nDCG@``depth`` under true and under judge labels for ``n_studies`` simulated
    collections of ``n_queries`` queries: ``(human, llm)``, each ``(n_studies, n_queries)``.

    Each query's ranking has ``depth`` documents whose true grades (0-3) are drawn around a
    per-query difficulty, so queries differ as in real collections; the judge relabels every
    document through its confusion matrix. nDCG uses gains 2^g - 1 and log2 discounts, ideal
    ordering of the same documents (all vectorised; the engine is tested elsewhere).
    ``hard_judge``: errors correlated with difficulty -- a query is hard with probability one
    minus its share of relevant documents, and a hard query's documents are labelled by
    ``hard_judge`` instead of ``judge``.
    """
    rng = np.random.default_rng(seed)
    easy = rng.beta(1.2, 2.0, size=(n_studies, n_queries, 1))  # per-query share of relevant docs
    decay = np.linspace(1.0, 0.4, depth)[None, None, :]  # better documents near the top
    u = rng.random((n_studies, n_queries, depth))
    p = np.clip(easy * decay, 0, 1)
    true = (u < p).astype(np.int64) + (u < p * 0.6) + (u < p * 0.3)
    llm = draw_labels(true, judge, None if seed is None else seed + 1)
    if hard_judge is not None:
        hard = rng.random((n_studies, n_queries, 1)) > easy
        llm = np.where(hard, draw_labels(true, hard_judge, None if seed is None else seed + 2), llm)
    return _ndcg(true), _ndcg(llm)


def simulate_binary_studies(
    n_studies: int,
    n_queries: int,
    mean: float,
    err: float,
    *,
    seed: int | None = 0,
    correlated: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-query binary values (hit@k, success) under true and judge labels: ``(human, llm)``.

    Each query succeeds with probability ``mean`` and the judge flips a value with probability
    ``err``. ``correlated``: both depend on a per-query difficulty d ~ Beta(2, 2) -- success
    with probability ``mean`` (1.3 - 0.6 d) (capped at 1) and a flip with probability 2 ``err``
    d -- so the judge errs on the hard queries, which also fail more often."""
    rng = np.random.default_rng(seed)
    shape = (n_studies, n_queries)
    if correlated:
        d = rng.beta(2.0, 2.0, shape)
        p, e = np.clip(mean * (1.3 - 0.6 * d), 0, 1), 2 * err * d
    else:
        p, e = np.full(shape, mean), np.full(shape, err)
    human = (rng.random(shape) < p).astype(np.float64)
    llm = np.where(rng.random(shape) < e, 1.0 - human, human)
    return human, llm


def _ndcg(grades: np.ndarray) -> np.ndarray:
    disc = 1.0 / np.log2(np.arange(2, grades.shape[-1] + 2))
    gain = 2.0 ** grades - 1.0
    dcg = (gain * disc).sum(axis=-1)
    ideal = (np.sort(gain, axis=-1)[..., ::-1] * disc).sum(axis=-1)
    return np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)
