"""Per-query reference kernels: one small pure function per measure.

Every kernel takes

* ``ranked`` -- the grades of the retrieved documents in rank order (rank 1 first), ``None``
  for a document that has no qrels entry (trec_eval's "not in pool");
* ``judged`` -- the grades of every qrels entry of the query (any order);

plus the measure's parameters, and returns a float. They follow trec_eval 10.0 where trec_eval
has the measure: a document is relevant when its grade is ``>= rel``; a negative grade means
"in the pool but not judged" (trec_eval's -1): never relevant, not a judged non-relevant
document for bpref, gain 0 for ndcg, unjudged for ``judged`` / ``rbp_residual``; a ratio whose
denominator is 0 is 0.

These are the readable definitions the batch engine (:mod:`ragjudge.engine`) is tested
against; they are not used on the fast path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import MetricError
from .measures import Measure

__all__ = [
    "hit", "recall", "recall_all", "precision", "f1", "rprec", "mrr", "average_precision",
    "ndcg", "err", "rbp", "rbp_residual", "bpref", "judged", "num_ret", "num_rel", "num_rel_ret",
    "evaluate",
]

Ranked = Sequence["int | None"]


def _top(ranked: Ranked, k: int | None) -> Ranked:
    return ranked if k is None else ranked[:k]


def _is_rel(g: int | None, rel: int) -> bool:
    return g is not None and g >= rel


def num_rel(judged: Sequence[int], rel: int = 1) -> float:
    """R = number of qrels entries with grade >= rel (trec_eval ``num_rel``)."""
    return float(sum(1 for g in judged if g >= rel))


def num_ret(ranked: Ranked, k: int | None = None) -> float:
    """Number of retrieved documents, ``min(n, k)`` (trec_eval ``num_ret``)."""
    return float(len(_top(ranked, k)))


def num_rel_ret(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """Relevant documents among the top k (trec_eval ``num_rel_ret``)."""
    return float(sum(1 for g in _top(ranked, k) if _is_rel(g, rel)))


def hit(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """1 if a relevant document is in the top k, else 0 (trec_eval ``success_k``)."""
    return 1.0 if num_rel_ret(ranked, k, rel) > 0 else 0.0


def recall(ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1) -> float:
    """|relevant in top k| / R; 0 when R = 0 (trec_eval ``recall_k``)."""
    r = num_rel(judged, rel)
    return num_rel_ret(ranked, k, rel) / r if r else 0.0


def recall_all(ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1) -> float:
    """1 if every one of the R > 0 relevant documents is in the top k, else 0."""
    r = num_rel(judged, rel)
    return 1.0 if r and num_rel_ret(ranked, k, rel) == r else 0.0


def precision(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """|relevant in top k| / k (trec_eval ``P_k``: missing ranks count as non-relevant).

    Without k: |relevant retrieved| / n (trec_eval ``set_P``), 0 for an empty ranking.
    """
    denom = k if k is not None else len(ranked)
    return num_rel_ret(ranked, k, rel) / denom if denom else 0.0


def f1(ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1) -> float:
    """2PR / (P + R) of precision@k and recall@k; 0 when both are 0 (trec_eval ``set_F``)."""
    p = precision(ranked, k, rel)
    r = recall(ranked, judged, k, rel)
    return 2.0 * p * r / (p + r) if p + r > 0 else 0.0


def rprec(ranked: Ranked, judged: Sequence[int], rel: int = 1) -> float:
    """|relevant in top R| / R; 0 when R = 0 (trec_eval ``Rprec``)."""
    r = int(num_rel(judged, rel))
    return num_rel_ret(ranked, r, rel) / r if r else 0.0


def mrr(ranked: Ranked, k: int | None = None, rel: int = 1) -> float:
    """1 / rank of the first relevant document in the top k, else 0 (trec_eval ``recip_rank``)."""
    for i, g in enumerate(_top(ranked, k)):
        if _is_rel(g, rel):
            return 1.0 / (i + 1)
    return 0.0


def average_precision(
    ranked: Ranked, judged: Sequence[int], k: int | None = None, rel: int = 1
) -> float:
    """AP@k = (1/R) * sum over relevant ranks r <= k of precision@r; 0 when R = 0.

    Divides by all R relevant documents, not by min(R, k): trec_eval ``map`` / ``map_cut_k``.
    """
    r = num_rel(judged, rel)
    if not r:
        return 0.0
    found = 0
    total = 0.0
    for i, g in enumerate(_top(ranked, k)):
        if _is_rel(g, rel):
            found += 1
            total += found / (i + 1)
    return total / r


def _gain(g: int | None, kind: str) -> float:
    if g is None or g <= 0:
        return 0.0
    return float(g) if kind == "linear" else float(2**g - 1)


def _discount(rank: int, kind: str) -> float:
    if kind == "jarvelin":
        return 1.0 if rank == 1 else math.log2(rank)
    return math.log2(rank + 1)


def _dcg(gains: Sequence[float], discount: str) -> float:
    return sum(g / _discount(i + 1, discount) for i, g in enumerate(gains) if g)


def ndcg(
    ranked: Ranked,
    judged: Sequence[int],
    k: int | None = None,
    *,
    gain: str = "linear",
    ideal: str = "all",
    discount: str = "log2",
) -> float:
    """nDCG@k = DCG@k / IDCG@k, 0 when IDCG = 0 (Jarvelin & Kekalainen, ACM TOIS 20(4), 2002).

    DCG@k = sum_{r<=k} gain(g_r) / log2(r + 1); gain(g) = g (``linear``, trec_eval ``ndcg`` /
    ``ndcg_cut_k``) or 2^g - 1 (``exp``, Burges et al. 2005); negative grades and unjudged
    documents gain 0. ``discount="jarvelin"``: 1 at rank 1, log2(r) after (the original
    paper). IDCG@k is the DCG@k of the ideal ranking: all qrels grades sorted descending
    (``ideal="all"``, trec_eval) or the retrieved top-k grades sorted descending
    (``ideal="retrieved"``).
    """
    top = _top(ranked, k)
    dcg = _dcg([_gain(g, gain) for g in top], discount)
    if ideal == "all":
        best = sorted((_gain(g, gain) for g in judged), reverse=True)
    else:
        best = sorted((_gain(g, gain) for g in top), reverse=True)
    idcg = _dcg(_top(best, k), discount)
    return dcg / idcg if idcg > 0 else 0.0


def err(ranked: Ranked, k: int | None = None, max_grade: int = 4) -> float:
    """Expected Reciprocal Rank (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009).

    ERR@k = sum_{r<=k} (1/r) * R_r * prod_{i<r} (1 - R_i), R(g) = (2^g - 1) / 2^max_grade
    (gdeval's convention, max_grade 4); unjudged / non-positive grades have R = 0.
    """
    total = 0.0
    keep_going = 1.0
    for i, g in enumerate(_top(ranked, k)):
        if g is not None and g > max_grade:
            raise MetricError(f"err(max_grade={max_grade}) met grade {g}; raise max_grade")
        r = (2.0**g - 1.0) / 2.0**max_grade if g is not None and g > 0 else 0.0
        total += keep_going * r / (i + 1)
        keep_going *= 1.0 - r
    return total


def rbp(
    ranked: Ranked,
    k: int | None = None,
    *,
    p: float = 0.8,
    gain: str = "binary",
    rel: int = 1,
    max_grade: int | None = None,
) -> float:
    """Rank-Biased Precision (Moffat & Zobel, ACM TOIS 27(1), 2008).

    RBP = (1 - p) * sum_{r<=k} u_r * p^(r-1); u_r = 1 if grade >= rel (``binary``) or
    max(grade, 0) / max_grade (``graded``; max_grade defaults to the qrels' largest grade,
    passed in by the caller). Unjudged documents have u = 0.
    """
    total = 0.0
    for i, g in enumerate(_top(ranked, k)):
        if gain == "binary":
            u = 1.0 if _is_rel(g, rel) else 0.0
        else:
            if max_grade is None:
                raise MetricError("rbp(gain=graded) needs max_grade")
            if g is not None and g > max_grade:
                raise MetricError(f"rbp(max_grade={max_grade}) met grade {g}; raise max_grade")
            u = g / max_grade if g is not None and g > 0 and max_grade > 0 else 0.0
        total += u * p**i
    return (1.0 - p) * total


def rbp_residual(ranked: Ranked, k: int | None = None, *, p: float = 0.8) -> float:
    """RBP residual (Moffat & Zobel 2008): the RBP weight whose relevance is unknown.

    residual = (1 - p) * sum_{r<=n, doc r unjudged} p^(r-1) + p^n, n = min(k, ranking length):
    unjudged ranks plus the tail beyond the ranking. Unjudged = no qrels entry or a negative
    grade (trec_eval's "in the pool but not judged"), as trec_eval ``rbp_resid`` counts them.
    """
    top = _top(ranked, k)
    total = sum(p**i for i, g in enumerate(top) if g is None or g < 0)
    return (1.0 - p) * total + p ** len(top)


def bpref(ranked: Ranked, judged: Sequence[int], rel: int = 1) -> float:
    """bpref (Buckley & Voorhees, SIGIR 2004), as trec_eval computes it.

    bpref = (1/R) * sum over retrieved relevant d of (1 - min(n_d, R) / min(N, R)), n_d =
    judged non-relevant (0 <= grade < rel) documents ranked above d, N = judged non-relevant
    in the qrels; a term is 1 when n_d = 0; unjudged and negative grades are skipped; 0 if R = 0.
    """
    r = int(num_rel(judged, rel))
    if not r:
        return 0.0
    n_nonrel = sum(1 for g in judged if 0 <= g < rel)
    above = 0
    total = 0.0
    for g in ranked:
        if g is None or g < 0:
            continue
        if g < rel:
            above += 1
        elif above:
            total += 1.0 - min(above, r) / min(n_nonrel, r)
        else:
            total += 1.0
    return total / r


def judged(ranked: Ranked, k: int | None = None) -> float:
    """Share of the top min(k, n) documents that are judged; 0 for an empty ranking.

    Judged = a qrels entry with a grade >= 0; a negative grade is trec_eval's "in the pool but
    not judged" (as in trec_eval ``unj_k``, which however divides by k, not min(k, n)).
    """
    top = _top(ranked, k)
    return sum(1 for g in top if g is not None and g >= 0) / len(top) if top else 0.0


def evaluate(
    measure: Measure, ranked: Ranked, judged_grades: Sequence[int], *, qrels_max_grade: int = 0
) -> float:
    """Value of ``measure`` for one query (the slow, obviously-correct reference path).

    ``qrels_max_grade`` is the largest grade of the whole qrels (default scale of
    ``rbp(gain=graded)``).
    """
    k = measure.k
    name = measure.name
    g = measure.get
    if name == "hit":
        return hit(ranked, k, g("rel"))
    if name == "recall":
        return recall(ranked, judged_grades, k, g("rel"))
    if name == "recall_all":
        return recall_all(ranked, judged_grades, k, g("rel"))
    if name == "precision":
        return precision(ranked, k, g("rel"))
    if name == "f1":
        return f1(ranked, judged_grades, k, g("rel"))
    if name == "rprec":
        return rprec(ranked, judged_grades, g("rel"))
    if name == "mrr":
        return mrr(ranked, k, g("rel"))
    if name == "map":
        return average_precision(ranked, judged_grades, k, g("rel"))
    if name == "ndcg":
        return ndcg(ranked, judged_grades, k, gain=g("gain"), ideal=g("ideal"),
                    discount=g("discount"))
    if name == "err":
        return err(ranked, k, g("max_grade"))
    if name == "rbp":
        mg = g("max_grade")
        return rbp(ranked, k, p=g("p"), gain=g("gain"), rel=g("rel") if g("gain") == "binary" else 1,
                   max_grade=mg if mg is not None else qrels_max_grade)
    if name == "rbp_residual":
        return rbp_residual(ranked, k, p=g("p"))
    if name == "bpref":
        return bpref(ranked, judged_grades, g("rel"))
    if name == "judged":
        return judged(ranked, k)
    if name == "num_ret":
        return num_ret(ranked, k)
    if name == "num_rel":
        return num_rel(judged_grades, g("rel"))
    if name == "num_rel_ret":
        return num_rel_ret(ranked, k, g("rel"))
    raise MetricError(f"no kernel for measure {measure}")
