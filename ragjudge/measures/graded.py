"""Graded measures: ndcg, dcg, err, rbp.

Each measure is one unit: its reference kernel (formula + source), its batch reduction over a
:class:`~ragjudge.measures.layout.Layout`, and its registration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import MetricError
from .common import P, REL
from .grammar import (
    Measure, MeasureSpec, Param, ParamValue, Ranked, choice, int_at_least, register,
)
from .layout import Layout, is_rel, safe_div, seg_exclusive_cumprod, top, within_group_pos

__all__ = ["ndcg", "dcg", "err", "rbp"]


# ----------------------------------------------------------------------------- ndcg
#: 2^g - 1 overflows a float above this grade.
MAX_EXP_GRADE = 1023


def _gain_map(text: str) -> ParamValue:
    """``level:gain,...`` (levels integers >= 0, gains finite numbers) -> canonical text."""
    want = "level:gain pairs such as 0:0,1:1,2:3,3:7 (levels integers >= 0)"
    pairs: dict[int, float] = {}
    for item in text.split(","):
        lvl, colon, gain = item.partition(":")
        if not colon:
            raise ValueError(want)
        level = int_at_least(0)(lvl)
        try:
            value = float(gain) if "_" not in gain else float("nan")
        except ValueError:
            raise ValueError(want) from None
        if not math.isfinite(value) or level in pairs:
            raise ValueError(want)
        pairs[int(level)] = value
    return ",".join(f"{lv}:{_num(v)}" for lv, v in sorted(pairs.items()))


def _num(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def _parse_gains(text: str | None) -> dict[int, float] | None:
    if text is None:
        return None
    return {int(lv): float(g) for lv, g in (item.split(":") for item in text.split(","))}


def _gain(g: int | None, kind: str, gains: dict[int, float] | None = None) -> float:
    if gains is not None:  # trec_eval ndcg.lvl=gain: unlisted levels gain their own value
        return 0.0 if g is None or g < 0 else gains.get(g, float(g))
    if g is None or g <= 0:
        return 0.0
    if kind == "linear":
        return float(g)
    if g > MAX_EXP_GRADE:
        raise MetricError(f"gain=exp met grade {g}: 2^{g} - 1 overflows a float (grades up to "
                          f"{MAX_EXP_GRADE}); use gain=linear or gains=level:gain,...")
    return float(2**g - 1)


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
    gains: dict[int, float] | None = None,
    top_grade: int = 3,
) -> float:
    """nDCG@k = DCG@k / IDCG@k, 0 when IDCG = 0 (Jarvelin & Kekalainen, ACM TOIS 20(4), 2002).

    DCG@k = sum_{r<=k} gain(g_r) / log2(r + 1); gain(g) = g (``linear``, trec_eval ``ndcg`` /
    ``ndcg_cut_k``) or 2^g - 1 (``exp``, Burges et al. 2005); negative grades and unjudged
    documents gain 0. ``gains`` maps levels to gains (trec_eval ``-m ndcg.1=3,2=9``: unlisted
    levels gain their own value; gains may be 0 or negative). ``discount="jarvelin"``: 1 at
    rank 1, log2(r) after (the original paper). IDCG@k is the DCG@k of the ideal ranking: the
    positive gains of all qrels entries sorted descending (``ideal="all"``, trec_eval), of the
    retrieved top k (``ideal="retrieved"``), or k documents all of the scale's highest grade
    ``top_grade`` (``ideal="max"``, needs a cutoff): the best DCG@k any ranking could have, so
    the value depends on the run's own top k alone and not on which other documents were
    judged -- the pool-independent normalisation for labels judged on demand.
    """
    tk = top(ranked, k)
    got = [_gain(g, gain, gains) for g in tk]
    dcg = _dcg(got, discount)
    if ideal == "max":
        if k is None:
            raise MetricError("ndcg(ideal=max) needs a cutoff (@k)")
        idcg = _dcg([_gain(top_grade, gain, gains)] * k, discount)
        return dcg / idcg if idcg > 0 else 0.0
    pool = [_gain(g, gain, gains) for g in judged] if ideal == "all" else got
    best = sorted((x for x in pool if x > 0), reverse=True)
    idcg = _dcg(top(best, k), discount)
    return dcg / idcg if idcg > 0 else 0.0


def _gain_batch(L: Layout, lab: np.ndarray, m: Measure) -> np.ndarray:
    g = lab.astype(np.float64)
    gains = _parse_gains(m.get("gains"))
    if gains is not None:
        out = g.copy()
        for level, value in gains.items():
            out[lab == level] = value
        return out
    if m.get("gain") == "exp":
        if L.qrels_max_grade > MAX_EXP_GRADE:
            raise MetricError(
                f"{m} met grade {L.qrels_max_grade}: 2^{L.qrels_max_grade} - 1 overflows a float "
                f"(grades up to {MAX_EXP_GRADE}); use gain=linear or gains=level:gain,...")
        g = np.exp2(g) - 1.0
    return g


def _discount_batch(pos: np.ndarray, kind: str) -> np.ndarray:
    if kind == "jarvelin":
        d = np.log2(pos.astype(np.float64) + 1.0)
        d[pos == 0] = 1.0  # rank 1 is not discounted
        return d
    return np.log2(pos.astype(np.float64) + 2.0)


def _gaining(L: Layout, m: Measure, lab: np.ndarray) -> np.ndarray:
    """Rows of ``lab`` (ranked grades, or qrels grades) that may gain: grade > 0, or >= 0 with
    a gains map (it may give level 0 a gain)."""
    return lab >= 0 if m.get("gains") is not None else lab > 0


def _dcg_batch_parts(L: Layout, m: Measure) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(DCG@k per target, gain and target of each gaining ranked row within the cutoff)."""
    rows = L.in_cut(np.flatnonzero(L.jud & _gaining(L, m, L.lab)), m.k)
    g = L.grp[rows]
    gains = _gain_batch(L, L.lab[rows], m)
    return L.seg_sum(gains / _discount_batch(L.pos[rows], m.get("discount")), g), gains, g


def _ndcg_batch(L: Layout, m: Measure) -> np.ndarray:
    k, ideal, disc = m.k, m.get("ideal"), m.get("discount")
    dcg, gains, g = _dcg_batch_parts(L, m)
    if ideal == "max":
        assert k is not None  # the check refuses ideal=max without a cutoff
        best = _gain(int(m.get("top")), m.get("gain"), _parse_gains(m.get("gains")))
        idcg = best * float(np.sum(1.0 / _discount_batch(np.arange(k), disc)))
        if idcg <= 0:  # a top grade gaining nothing or less: 0, as the reference kernel says
            return np.zeros_like(dcg)
        return safe_div(dcg, np.full_like(dcg, idcg))
    if ideal == "all":
        sel = np.flatnonzero(_gaining(L, m, L.qlab))
        ig = _gain_batch(L, L.qlab[sel], m)
        igrp = L.qgrp[sel]
    else:
        ig, igrp = gains, g
    pos = ig > 0
    ig, igrp = ig[pos], igrp[pos]
    order = np.lexsort((-ig, igrp))
    ig, igrp = ig[order], igrp[order]
    ipos = within_group_pos(igrp)
    if k is not None:
        keep = ipos < k
        ig, igrp, ipos = ig[keep], igrp[keep], ipos[keep]
    idcg = L.seg_sum(ig / _discount_batch(ipos, disc), igrp)
    return safe_div(dcg, idcg)


def _gains_check(values: dict[str, ParamValue], given: set[str], spec: str) -> None:
    if "gains" in values and values.get("gain", "linear") != "linear":
        raise MetricError(f"a gains map replaces gain=exp; give one of them, in {spec!r}")
    if "top" in given and values.get("ideal") != "max":
        raise MetricError(f"top is the highest grade of ideal=max; give ideal=max too, in {spec!r}")
    if values.get("ideal") == "max" and "@" not in spec and not any(c.isdigit() for c in spec.split(")")[-1]):
        raise MetricError(f"ideal=max needs a cutoff (ndcg(ideal=max)@10), in {spec!r}")


_NDCG_PARAMS = {
    "gain": Param("linear", choice("linear", "exp"), "linear or exp"),
    "ideal": Param("all", choice("all", "retrieved", "max"), "all, retrieved or max"),
    "top": Param(3, int_at_least(1), "the scale's highest grade, an integer >= 1 (ideal=max)"),
    "discount": Param("log2", choice("log2", "jarvelin"), "log2 or jarvelin"),
    "gains": Param(None, _gain_map, "level:gain pairs such as 0:0,1:1,2:3,3:7"),
}

register(MeasureSpec(
    "ndcg", _NDCG_PARAMS, cutoff=True, cut_names=("ndcg_cut",), check=_gains_check,
    pool_free=lambda m: m.get("ideal") in ("max", "retrieved"),
    reference=ndcg,
    kernel=lambda m, ranked, judged, mg: ndcg(
        ranked, judged, m.k, gain=m.get("gain"), ideal=m.get("ideal"), discount=m.get("discount"),
        gains=_parse_gains(m.get("gains")), top_grade=int(m.get("top"))),
    batch=_ndcg_batch,
    examples=("ndcg", "ndcg@3", "ndcg(gain=exp)@4", "ndcg(ideal=retrieved,discount=jarvelin)@3",
              "ndcg(discount=jarvelin)", "ndcg(gains=0:0,1:1,2:3,3:7)@3",
              "ndcg(gains=0:0.5,2:0,4:2.5)", "ndcg(gains=1:2,3:1,4:0,2:2.5,0:0.25)@2",
              "ndcg(ideal=max)@5", "ndcg(ideal=max,top=4,gain=exp)@3",
              "ndcg(ideal=max,top=1,gains=1:-1)@2"),
    # ideal=max is at most 1 only while no grade exceeds ``top``, the scale's highest
    unit=lambda m: m.get("ideal") != "max",
))


# ----------------------------------------------------------------------------- dcg
def dcg(ranked: Ranked, k: int | None = None, *, gain: str = "linear", discount: str = "log2",
        gains: dict[int, float] | None = None) -> float:
    """Unnormalised DCG@k = sum_{r<=k} gain(g_r) / log2(r + 1) (Jarvelin & Kekalainen 2002).

    Gain and discount as :func:`ndcg` (``linear`` = trec_eval ``dcg``; ``exp`` = 2^g - 1, ranx's
    ``dcg_burges``) or a ``gains`` map (trec_eval ``dcg.lvl=gain``); negative grades and
    unjudged documents gain 0.
    """
    return _dcg([_gain(g, gain, gains) for g in top(ranked, k)], discount)


def _dcg_batch(L: Layout, m: Measure) -> np.ndarray:
    return _dcg_batch_parts(L, m)[0]


register(MeasureSpec(
    "dcg", {key: _NDCG_PARAMS[key] for key in ("gain", "discount", "gains")}, cutoff=True, pool_free=True,
    cut_names=("dcg_cut",), unit=False, check=_gains_check,
    reference=dcg,
    kernel=lambda m, ranked, judged, mg: dcg(
        ranked, m.k, gain=m.get("gain"), discount=m.get("discount"),
        gains=_parse_gains(m.get("gains"))),
    batch=_dcg_batch,
    examples=("dcg", "dcg@3", "dcg(gain=exp)@4", "dcg(discount=jarvelin)@2", "dcg(gains=1:3,2:0.5)"),
))


# ----------------------------------------------------------------------------- err
def _err_r(g: int, max_grade: int) -> float:
    if max_grade > MAX_EXP_GRADE:  # the same value, scaled first: 2^max_grade overflows
        return 2.0 ** (g - max_grade) - 2.0 ** -max_grade
    return (2.0**g - 1.0) / 2.0**max_grade


def err(ranked: Ranked, k: int | None = None, max_grade: int = 4) -> float:
    """Expected Reciprocal Rank (Chapelle, Metzler, Zhang & Grinspan, CIKM 2009).

    ERR@k = sum_{r<=k} (1/r) * R_r * prod_{i<r} (1 - R_i), R(g) = (2^g - 1) / 2^max_grade
    (gdeval's convention, max_grade 4); unjudged / non-positive grades have R = 0.
    """
    total = 0.0
    keep_going = 1.0
    for i, g in enumerate(top(ranked, k)):
        if g is not None and g > max_grade:
            raise MetricError(f"err(max_grade={max_grade}) met grade {g}; raise max_grade")
        r = _err_r(g, max_grade) if g is not None and g > 0 else 0.0
        total += keep_going * r / (i + 1)
        keep_going *= 1.0 - r
    return total


def _err_batch(L: Layout, m: Measure) -> np.ndarray:
    k, max_grade = m.k, m.get("max_grade")
    rows = L.in_cut(np.flatnonzero(L.jud & (L.lab > 0)), k)
    lab = L.lab[rows]
    if len(lab) and int(lab.max()) > max_grade:
        raise MetricError(
            f"{m} met grade {int(lab.max())} above max_grade={max_grade}; "
            f"use err(max_grade={int(lab.max())})"
        )
    if max_grade > MAX_EXP_GRADE:  # the same value, scaled first: 2^max_grade overflows
        r = np.exp2((lab - max_grade).astype(np.float64)) - 2.0 ** -max_grade
    else:
        r = (np.exp2(lab.astype(np.float64)) - 1.0) / 2.0**max_grade
    g = L.grp[rows]
    stay = seg_exclusive_cumprod(1.0 - r, g)
    return L.seg_sum(stay * r / (L.pos[rows] + 1.0), g)


register(MeasureSpec(
    "err", {"max_grade": Param(4, int_at_least(1, 10**6), "an integer between 1 and 1000000")}, pool_free=True,
    cutoff=True,
    reference=err,
    kernel=lambda m, ranked, judged, mg: err(ranked, m.k, m.get("max_grade")),
    batch=_err_batch, examples=("err@3", "err(max_grade=4)", "err(max_grade=2000)@5"),
))


# ----------------------------------------------------------------------------- rbp
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

    RBP = (1 - p) * sum_{r<=k} u_r * p^(r-1); u_r = 1 if grade >= rel (``binary``),
    max(grade, 0) / max_grade (``graded``; max_grade defaults to the qrels' largest grade,
    passed in by the caller) or max(grade, 0) (``raw``: ir_measures' graded RBP, which
    multiplies by the grade, so values can exceed 1). Unjudged documents have u = 0.
    """
    total = 0.0
    for i, g in enumerate(top(ranked, k)):
        if gain == "binary":
            u = 1.0 if is_rel(g, rel) else 0.0
        elif gain == "raw":
            u = float(g) if g is not None and g > 0 else 0.0
        else:
            if max_grade is None:
                raise MetricError("rbp(gain=graded) needs max_grade")
            if g is not None and g > max_grade:
                raise MetricError(f"rbp(max_grade={max_grade}) met grade {g}; raise max_grade")
            u = g / max_grade if g is not None and g > 0 and max_grade > 0 else 0.0
        total += u * p**i
    return (1.0 - p) * total


def _rbp_batch(L: Layout, m: Measure) -> np.ndarray:
    k, p = m.k, float(m.get("p"))
    if m.get("gain") == "binary":
        rows = L.rel_rows(int(m.get("rel")))
    else:
        rows = np.flatnonzero(L.jud & (L.lab > 0))
    rows = L.in_cut(rows, k)
    if m.get("gain") == "binary":
        u = np.ones(len(rows))
    elif m.get("gain") == "raw":
        u = L.lab[rows].astype(np.float64)
    else:
        mg = m.get("max_grade")
        mg = L.qrels_max_grade if mg is None else int(mg)
        lab = L.lab[rows]
        if len(lab) and int(lab.max()) > mg:
            raise MetricError(
                f"{m} met grade {int(lab.max())} above max_grade={mg}; raise max_grade"
            )
        u = lab / mg
    w = np.power(p, L.pos[rows].astype(np.float64))
    return (1.0 - p) * L.seg_sum(u * w, L.grp[rows])


def _rbp_check(values: dict[str, ParamValue], given: set[str], spec: str) -> None:
    if "max_grade" in values and values.get("gain", "binary") != "graded":
        raise MetricError(f"parameter 'max_grade' of 'rbp' needs gain=graded, in {spec!r}")
    if values.get("gain", "binary") != "binary" and "rel" in given:
        raise MetricError(f"parameter 'rel' of 'rbp' only applies to gain=binary, in {spec!r}")
    if values.get("gain", "binary") != "binary":
        values.pop("rel", None)  # a CLI-wide --rel does not apply to graded gain


def _rbp_kernel(m: Measure, ranked: Ranked, judged: Sequence[int], qrels_max_grade: int) -> float:
    mg = m.get("max_grade")
    binary = m.get("gain") == "binary"
    return rbp(ranked, m.k, p=m.get("p"), gain=m.get("gain"), rel=m.get("rel") if binary else 1,
               max_grade=mg if mg is not None else qrels_max_grade)


register(MeasureSpec(
    "rbp",
    {
        "p": P,
        "gain": Param("binary", choice("binary", "graded", "raw"), "binary, graded or raw"),
        "max_grade": Param(None, int_at_least(1), "an integer >= 1 (only with gain=graded)"),
        "rel": REL,
    },
    cutoff=True, check=_rbp_check, reference=rbp, kernel=_rbp_kernel, batch=_rbp_batch,
    pool_free=lambda m: m.get("gain") != "graded" or m.get("max_grade") is not None,
    examples=("rbp(p=0.5)", "rbp(p=0.8)@3", "rbp(p=0.7,gain=graded)",
              "rbp(p=0.6,gain=graded,max_grade=5)@2", "rbp(p=0.8,rel=2)", "rbp(p=0.7,gain=raw)@4"),
    unit=lambda m: m.get("gain") != "raw",  # raw multiplies by the grade
))
