"""Rank fusion: combine several runs into one, vectorised like the ranking core.

Methods (``method=``), each run ``i`` contributing with weight ``w_i`` (default 1):

* ``rrf`` -- reciprocal rank fusion, ``sum_i w_i / (k + rank_i(d))`` with ``k = 60``
  (Cormack, Clarke and Buettcher, SIGIR 2009). Ranks are trec_eval ranks (score descending,
  ties by document id descending), so fusing is exact and deterministic on ties.
* ``combsum`` / ``wsum`` -- ``sum_i w_i * norm_i(d)`` (Fox and Shaw, TREC-2 1994); ``wsum`` is
  the name ranx uses for the weighted form, the computation is the same.
* ``combmnz`` -- ``combsum * |{i : d retrieved by run i}|`` (Fox and Shaw 1994).

A document a run did not retrieve contributes 0. Normalisations (``norm=``, per query and run;
default ``minmax`` for the score-based methods, none for ``rrf``) follow ranx's definitions:

* ``minmax`` -- ``(s - min) / max(max - min, 1e-9)``;
* ``zmuv`` -- ``(s - mean) / max(std, 1e-9)`` (population standard deviation);
* ``rank`` -- ``1 - (rank - 1) / n`` with ``n`` the number of documents the run retrieved;
* ``none`` -- raw scores.

:func:`tune_weights` grid-searches the weights on one qrels split (report the tuned fusion on
another split, never on the one it was tuned on).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .data import Run
from .errors import InputError
from .evaluate import evaluate
from .measures import parse_measure

__all__ = ["fuse", "tune_weights", "FusionTuning", "FUSION_METHODS", "NORMALIZATIONS"]

FusionMethod = Literal["rrf", "combsum", "combmnz", "wsum"]
Normalization = Literal["minmax", "zmuv", "rank", "none"]
FUSION_METHODS: tuple[str, ...] = ("rrf", "combsum", "combmnz", "wsum")
NORMALIZATIONS: tuple[str, ...] = ("minmax", "zmuv", "rank", "none")

_EPS = 1e-9  # ranx's floor for a zero range / deviation, so constant scores stay finite


def _check_options(method: str, norm: str | None, rrf_k: float) -> str:
    if method not in FUSION_METHODS:
        raise InputError(f"unknown fusion method {method!r}; choose one of {', '.join(FUSION_METHODS)}")
    if norm is None:
        norm = "none" if method == "rrf" else "minmax"
    if norm not in NORMALIZATIONS:
        raise InputError(f"unknown normalization {norm!r}; choose one of {', '.join(NORMALIZATIONS)}")
    if not (isinstance(rrf_k, (int, float)) and np.isfinite(rrf_k) and rrf_k >= 0):
        raise InputError(f"rrf_k must be a finite number >= 0, got {rrf_k!r}")
    return norm


def _check_weights(weights: Sequence[float] | None, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(list(weights), dtype=np.float64)
    if len(w) != n:
        raise InputError(f"{len(w)} weights given for {n} runs; give one weight per run")
    if not np.isfinite(w).all() or (w < 0).any():
        raise InputError(f"weights must be finite numbers >= 0, got {list(weights)!r}")
    return w


def _row_columns(run: Run, depth: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: query id, doc id, score, 1-based rank, and the query's row count (top ``depth``)."""
    qids, offsets, docids, scores = run.arrays
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    # rank of each row within its query (rows are stored in trec_eval rank order)
    rank = np.arange(len(docids), dtype=np.int64) - np.repeat(starts, lengths) + 1
    q = np.repeat(qids, lengths)
    if depth is not None:
        keep = rank <= depth
        q, docids, scores, rank = q[keep], docids[keep], scores[keep], rank[keep]
    return q, docids, scores.astype(np.float64, copy=False), rank


def _normalize(q_codes: np.ndarray, scores: np.ndarray, rank: np.ndarray, norm: str, nq: int) -> np.ndarray:
    if norm == "none":
        return scores
    counts = np.bincount(q_codes, minlength=nq)
    if norm == "rank":
        return 1.0 - (rank - 1) / counts[q_codes]
    if norm == "minmax":
        lo = np.full(nq, np.inf)
        hi = np.full(nq, -np.inf)
        np.minimum.at(lo, q_codes, scores)
        np.maximum.at(hi, q_codes, scores)
        return (scores - lo[q_codes]) / np.maximum(hi - lo, _EPS)[q_codes]
    # zmuv: population mean and standard deviation per query
    safe = np.maximum(counts, 1)
    mean = np.bincount(q_codes, weights=scores, minlength=nq) / safe
    dev = scores - mean[q_codes]
    std = np.sqrt(np.bincount(q_codes, weights=dev * dev, minlength=nq) / safe)
    return dev / np.maximum(std, _EPS)[q_codes]


def fuse(
    runs: Sequence[Run] | Mapping[str, Run],
    *,
    method: FusionMethod = "rrf",
    norm: Normalization | None = None,
    weights: Sequence[float] | None = None,
    rrf_k: float = 60.0,
    depth: int | None = None,
    name: str | None = None,
) -> Run:
    """Fuse ``runs`` into one :class:`Run` (see the module docstring for the formulas).

    ``depth`` cuts every input run to its top ``depth`` documents per query before fusing.
    ``name`` defaults to ``"<method>(<run names>)"``. Queries retrieved by any run are kept.
    """
    run_list = list(runs.values()) if isinstance(runs, Mapping) else list(runs)
    if len(run_list) < 2:
        raise InputError(f"fusion needs at least two runs, got {len(run_list)}")
    for r in run_list:
        if not isinstance(r, Run):
            raise InputError(f"fuse() takes Run objects (read them with ragjudge.read_run), got {type(r).__name__}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise InputError(f"depth must be an integer >= 1, got {depth!r}")
    norm = _check_options(method, norm, rrf_k)
    w = _check_weights(weights, len(run_list))

    # A run weighted 0 takes no part at all (it must not add to combmnz's count either).
    used = [i for i in range(len(run_list)) if w[i] > 0]
    if not used:
        raise InputError("every fusion weight is 0; give at least one run a positive weight")
    cols = [_row_columns(run_list[i], depth) for i in used]
    w = w[used]
    q_all = np.concatenate([c[0] for c in cols])
    d_all = np.concatenate([c[1] for c in cols])
    uq, q_codes = np.unique(q_all, return_inverse=True)
    ud, d_codes = np.unique(d_all, return_inverse=True)
    q_codes = q_codes.reshape(-1)
    d_codes = d_codes.reshape(-1)

    contrib = np.empty(len(q_all), dtype=np.float64)
    at = 0
    for i, (_, _, s, rank) in enumerate(cols):
        n = len(s)
        qc = q_codes[at:at + n]
        if method == "rrf":
            base = 1.0 / (rrf_k + rank) if norm == "none" else _normalize(qc, s, rank, norm, len(uq))
        else:
            base = _normalize(qc, s, rank, norm, len(uq))
        contrib[at:at + n] = w[i] * base
        at += n

    key = q_codes.astype(np.int64) * np.int64(len(ud)) + d_codes
    ukey, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    fused = np.bincount(inverse, weights=contrib, minlength=len(ukey))
    if method == "combmnz":
        fused = fused * np.bincount(inverse, minlength=len(ukey))
    if not np.isfinite(fused).all():
        raise InputError("fused scores overflowed; normalise the runs (norm=minmax) or lower the weights")
    label = name if name is not None else f"{method}(" + ",".join(r.name for r in run_list) + ")"
    return Run.from_arrays(q_all[first], d_all[first], fused, name=label)


@dataclass(frozen=True)
class FusionTuning:
    """Result of :func:`tune_weights`: the best weights and every combination tried."""

    weights: tuple[float, ...]
    score: float
    metric: str
    method: str
    norm: str
    trials: list[tuple[tuple[float, ...], float]] = field(repr=False)

    def __str__(self) -> str:
        w = ", ".join(f"{x:g}" for x in self.weights)
        return (f"best weights ({w}) for {self.method} (norm={self.norm}): {self.metric} = "
                f"{self.score:.4f} on the tuning qrels ({len(self.trials)} combinations tried)")

    def to_dict(self) -> dict[str, object]:
        return {"weights": list(self.weights), "score": self.score, "metric": self.metric,
                "method": self.method, "norm": self.norm,
                "trials": [{"weights": list(w), "score": s} for w, s in self.trials]}


def _simplex_grid(n: int, step: float) -> list[tuple[float, ...]]:
    units = round(1.0 / step)
    if units < 1 or abs(units * step - 1.0) > 1e-9:
        raise InputError(f"step must divide 1 evenly (e.g. 0.1, 0.05, 0.25), got {step!r}")
    if n > 8 or units > 50:
        raise InputError("too many weight combinations: tune at most 8 runs with a step >= 0.02")
    grid = []
    for cut in itertools.combinations(range(units + n - 1), n - 1):
        parts = np.diff(np.concatenate(([-1], cut, [units + n - 1]))) - 1
        grid.append(tuple(float(p) / units for p in parts))
    return grid


def tune_weights(
    runs: Sequence[Run] | Mapping[str, Run],
    qrels: object,
    metric: str = "ndcg@10",
    *,
    method: FusionMethod = "wsum",
    norm: Normalization | None = None,
    step: float = 0.1,
    rrf_k: float = 60.0,
    depth: int | None = None,
) -> FusionTuning:
    """Grid-search fusion weights (summing to 1, in steps of ``step``) that maximise the mean of
    ``metric`` on ``qrels``. Ties keep the first combination in grid order (deterministic).

    Tune on one split of queries and report the fused run on another: scores on the tuning
    qrels are optimistic by construction.
    """

    run_list = list(runs.values()) if isinstance(runs, Mapping) else list(runs)
    spec = str(parse_measure(metric))
    if not (isinstance(step, (int, float)) and 0 < step <= 1):
        raise InputError(f"step must be a number in (0, 1], got {step!r}")
    resolved = _check_options(method, norm, rrf_k)  # before the grid, not after it
    trials: list[tuple[tuple[float, ...], float]] = []
    best: tuple[tuple[float, ...], float] | None = None
    for w in _simplex_grid(len(run_list), float(step)):
        fused = fuse(run_list, method=method, norm=resolved, weights=w, rrf_k=rrf_k, depth=depth)  # type: ignore[arg-type]
        value = evaluate(qrels, fused, [spec]).mean[spec]  # type: ignore[arg-type]
        score = float(value) if value is not None else float("-inf")
        trials.append((w, score))
        if best is None or score > best[1]:
            best = (w, score)
    assert best is not None
    return FusionTuning(best[0], best[1], spec, method, resolved, trials)
