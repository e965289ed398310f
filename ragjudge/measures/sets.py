"""Set-based binary measures: hit, recall, recall_all, precision, f1, set_f, rprec.

Each measure is one unit: its reference kernel (formula + source), its batch reduction over a
:class:`~ragjudge.measures.layout.Layout`, and its registration.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .common import REL
from .counts import num_rel, num_rel_ret
from .grammar import Measure, MeasureSpec, Param, Ranked, non_negative_number, register
from .layout import Layout, count_in_cut, safe_div

__all__ = ["hit", "recall", "recall_all", "precision", "f1", "set_f", "rprec"]


def _found(L: Layout, m: Measure) -> tuple[np.ndarray, np.ndarray]:
    """(relevant retrieved within the cutoff, R) per target."""
    rel = int(m.get("rel"))
    rows, g, _ = L.rel_rank(rel)
    return count_in_cut(L, rows, g, m.k), L.num_rel(rel)


# ----------------------------------------------------------------------------- hit
def hit(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """1 if a relevant document is in the top k, else 0 (trec_eval ``success_k``)."""
    return 1.0 if num_rel_ret(ranked, k, rel) > 0 else 0.0


def _hit_batch(L: Layout, m: Measure) -> np.ndarray:
    return (_found(L, m)[0] > 0).astype(np.float64)


register(MeasureSpec(
    "hit", {"rel": REL}, cutoff=True, pool_free=True, aliases=("success",), cut_names=("success",),
    reference=hit,
    kernel=lambda m, ranked, judged, mg: hit(ranked, m.k, m.get("rel")),
    batch=_hit_batch, examples=("hit@1", "hit@3"),
))


# ----------------------------------------------------------------------------- recall
def recall(ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1) -> float:
    """|relevant in top k| / R; 0 when R = 0 (trec_eval ``recall_k``)."""
    r = num_rel(judged, rel)
    return num_rel_ret(ranked, k, rel) / r if r else 0.0


def _recall_batch(L: Layout, m: Measure) -> np.ndarray:
    return safe_div(*_found(L, m))


register(MeasureSpec(
    "recall", {"rel": REL}, cutoff=True, cut_names=("recall",),
    reference=recall,
    kernel=lambda m, ranked, judged, mg: recall(ranked, judged, m.k, m.get("rel")),
    batch=_recall_batch, examples=("recall@2", "recall@5"),
))


# ----------------------------------------------------------------------------- recall_all
def recall_all(ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1) -> float:
    """1 if every one of the R > 0 relevant documents is in the top k, else 0."""
    r = num_rel(judged, rel)
    return 1.0 if r and num_rel_ret(ranked, k, rel) == r else 0.0


def _recall_all_batch(L: Layout, m: Measure) -> np.ndarray:
    found, R = _found(L, m)
    return ((R > 0) & (found == R)).astype(np.float64)


register(MeasureSpec(
    "recall_all", {"rel": REL}, cutoff=True,
    reference=recall_all,
    kernel=lambda m, ranked, judged, mg: recall_all(ranked, judged, m.k, m.get("rel")),
    batch=_recall_all_batch, examples=("recall_all@4",),
))


# ----------------------------------------------------------------------------- precision
def precision(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """|relevant in top k| / k (trec_eval ``P_k``: missing ranks count as non-relevant).

    Without k: |relevant retrieved| / n (trec_eval ``set_P``), 0 for an empty ranking.
    """
    denom = k if k is not None else len(ranked)
    return num_rel_ret(ranked, k, rel) / denom if denom else 0.0


def _precision(L: Layout, found: np.ndarray, k: int | None) -> np.ndarray:
    return found / k if k is not None else safe_div(found, L.nret.astype(np.float64))


def _precision_batch(L: Layout, m: Measure) -> np.ndarray:
    return _precision(L, _found(L, m)[0], m.k)


register(MeasureSpec(
    "precision", {"rel": REL}, cutoff=True, pool_free=True, aliases=("p",), cut_names=("p",),
    reference=precision,
    kernel=lambda m, ranked, judged, mg: precision(ranked, m.k, m.get("rel")),
    batch=_precision_batch, examples=("p@1", "p@3", "precision", "p(rel=2)@2"),
))


# ----------------------------------------------------------------------------- f1
def f1(ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1) -> float:
    """2PR / (P + R) of precision@k and recall@k; 0 when both are 0 (trec_eval ``set_F``)."""
    p = precision(ranked, k, rel)
    r = recall(ranked, judged, k, rel)
    return 2.0 * p * r / (p + r) if p + r > 0 else 0.0


def _f1_batch(L: Layout, m: Measure) -> np.ndarray:
    found, R = _found(L, m)
    prec = _precision(L, found, m.k)
    rec = safe_div(found, R)
    return safe_div(2.0 * prec * rec, prec + rec)


register(MeasureSpec(
    "f1", {"rel": REL}, cutoff=True,
    reference=f1,
    kernel=lambda m, ranked, judged, mg: f1(ranked, judged, m.k, m.get("rel")),
    batch=_f1_batch, examples=("f1@3", "f1"),
))


# ----------------------------------------------------------------------------- set_f
def set_f(ranked: Ranked, judged: Sequence[int], beta: float = 1.0, rel: int = 1) -> float:
    """trec_eval ``set_F.beta``: (beta + 1) * P * R / (beta * P + R) over the whole ranking.

    P = |relevant retrieved| / n, R = |relevant retrieved| / R; 0 when nothing relevant is
    retrieved. ``beta`` is trec_eval's (and ir_measures' ``SetF(beta=)``) parameter, the weight
    of R relative to P: van Rijsbergen's F_b is ``set_f(beta=b*b)``. ``set_f`` = ``f1``.
    """
    found = num_rel_ret(ranked, None, rel)
    if not found:
        return 0.0
    p = found / len(ranked)
    r = found / num_rel(judged, rel)
    return (beta + 1.0) * p * r / (beta * p + r)


def _set_f_batch(L: Layout, m: Measure) -> np.ndarray:
    beta = float(m.get("beta"))
    found, R = _found(L, m)
    out = np.zeros(L.nt, dtype=np.float64)
    ok = found > 0
    p = found[ok] / L.nret[ok].astype(np.float64)
    r = found[ok] / R[ok]
    out[ok] = (beta + 1.0) * p * r / (beta * p + r)
    return out


register(MeasureSpec(
    # beta = 0 is trec_eval's set_F.0: the F measure reduces to precision
    "set_f", {"beta": Param(1.0, non_negative_number, "a number >= 0"), "rel": REL}, cutoff=False,
    reference=set_f,
    kernel=lambda m, ranked, judged, mg: set_f(ranked, judged, m.get("beta"), m.get("rel")),
    batch=_set_f_batch, examples=("set_f", "set_f(beta=0.5)", "set_f(beta=2,rel=2)", "set_f(beta=0)"),
))


# ----------------------------------------------------------------------------- rprec
def rprec(ranked: Ranked, judged: Sequence[int], rel: int = 1) -> float:
    """|relevant in top R| / R; 0 when R = 0 (trec_eval ``Rprec``)."""
    r = int(num_rel(judged, rel))
    return num_rel_ret(ranked, r, rel) / r if r else 0.0


def _rprec_batch(L: Layout, m: Measure) -> np.ndarray:
    rel = int(m.get("rel"))
    R = L.num_rel(rel)
    rows, g, _ = L.rel_rank(rel)
    keep = L.pos[rows] < R[g]
    return safe_div(L.seg_count(g[keep]), R)


register(MeasureSpec(
    "rprec", {"rel": REL}, cutoff=False, aliases=("r-prec", "r_prec"), depth="num_rel",
    reference=rprec,
    kernel=lambda m, ranked, judged, mg: rprec(ranked, judged, m.get("rel")),
    batch=_rprec_batch, examples=("rprec", "rprec(rel=2)"),
))
