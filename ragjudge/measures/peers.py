"""Metric names of the peers -- trec_eval ``-m``, ir_measures, ranx -- translated to ragjudge specs.

Each spelling maps to exactly the definition the peer computes, or fails with a
:class:`MetricError` that says why ragjudge cannot compute it:

* trec_eval: ``P_10`` (already an alias), the ``-m`` dot syntax ``P.5,10``, ``ndcg_cut.10,20``,
  ``ndcg.1=3,2=9`` (gain map), ``set_F.0.5``, ``iprec_at_recall.0.1,0.5``, ``unj.5``, and
  ``all_trec`` (every trec_eval measure ragjudge has, at trec_eval's default cutoffs);
* ir_measures (case-sensitive, as ir_measures spells them): ``AP``, ``AP(rel=2)``, ``RR@10``,
  ``R@100``, ``P(rel=2)@10``, ``nDCG(dcg='exp-log2')@10``, ``NumRet``, ``SetP``, ``IPrec@0.5``,
  ``RBP`` (raw-grade RBP), ...; ir_measures measure objects are read through ``str()``;
* ranx: ``hit_rate@5``, ``hits@5``, ``ndcg_burges@10``, ``dcg@10``, ``dcg_burges@10``,
  ``r-precision``, ``rbp.80`` (raw-grade RBP, p = 0.80), and the ``-lN`` relevance-level suffix
  (``map-l2``, ``ndcg@10-l2``: ranx drops qrels below N, so their gain is 0).

:func:`translate` returns the ragjudge spec(s) of a peer spelling, or None for anything else.
"""

from __future__ import annotations

import re

from ..errors import MetricError
from .grammar import register_spelling

__all__ = ["translate", "ALL_TREC"]

# ----------------------------------------------------------------------------- trec_eval
_CUTS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
#: trec_eval ``-m all_trec`` restricted to the measures ragjudge computes with trec_eval's exact
#: semantics (not: rbp and rbp_resid, whose trec_eval values differ, see the README; set_map,
#: Rprec_mult, utility, G, binG, Rndcg, ndcg_rel, relative_P, num_nonrel_judged_ret, relstring).
ALL_TREC: tuple[str, ...] = (
    "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref", "recip_rank",
    *(f"iprec_at_recall_{x / 10:.2f}" for x in range(11)),
    *(f"P_{k}" for k in _CUTS), *(f"recall_{k}" for k in _CUTS), "infAP", "11pt_avg",
    "ndcg", *(f"ndcg_cut_{k}" for k in _CUTS), *(f"map_cut_{k}" for k in _CUTS),
    "set_P", "set_recall", "set_F", "success_1", "success_5", "success_10",
    "unj_5", "unj_10", "unj_20",
)

_TREC_PLAIN = {"set_p": "precision", "set_recall": "recall"}
_TREC_CUT_LIST = {"p": "P", "recall": "recall", "ndcg_cut": "ndcg_cut", "map_cut": "map_cut",
                  "success": "success", "unj": "unj"}
_DOT = re.compile(r"^([A-Za-z0-9_]+)\.(.+)$")
_IPREC_NAME = re.compile(r"^iprec_at_recall_([0-9.]+)$", re.I)


def _trec(text: str) -> list[str] | None:
    if text.lower() == "all_trec":
        return list(ALL_TREC)
    m = _IPREC_NAME.match(text)
    if m:
        return [f"iprec_at_recall(recall={m.group(1)})"]
    if text.lower() in _TREC_PLAIN:
        return [_TREC_PLAIN[text.lower()]]
    m = _DOT.match(text)
    if m is None or "(" in text:
        return None
    name, params = m.group(1), m.group(2)
    low = name.lower()
    items = [p.strip() for p in params.split(",") if p.strip()]
    if low in _TREC_CUT_LIST:
        if not all(p.isdigit() for p in items):
            raise MetricError(f"trec_eval cutoffs in {text!r} must be positive integers")
        return [f"{_TREC_CUT_LIST[low]}_{p}" for p in items]
    if low == "iprec_at_recall":
        return [f"iprec_at_recall(recall={p})" for p in items]
    if low in ("ndcg", "dcg"):
        pairs = []
        for p in items:
            level, eq, gain = p.partition("=")
            if not eq:
                raise MetricError(f"trec_eval gains in {text!r} must be level=gain pairs")
            pairs.append(f"{level}:{gain}")
        return [f"{low}(gains={','.join(pairs)})"]
    if low == "set_f":
        if len(items) != 1:
            raise MetricError(f"{text!r}: give one set_F parameter (trec_eval set_F.beta)")
        return [f"set_f(beta={items[0]})"]
    if low in ("11pt_avg", "rprec_mult", "utility", "relstring", "rbp_resid"):
        raise MetricError(f"{text!r}: ragjudge does not take trec_eval parameters for {name}")
    return None


# ----------------------------------------------------------------------------- ir_measures
_IRM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*(?:@\s*([0-9.]+))?$", re.S)
# ir_measures name -> ragjudge name, the parameters it accepts, whether it takes a cutoff
_IRM_NAMES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "AP": ("map", ("rel",), True),
    "RR": ("mrr", ("rel",), True),
    "R": ("recall", ("rel",), True),
    "P": ("precision", ("rel",), True),
    "nDCG": ("ndcg", ("dcg", "gains"), True),
    "NumRet": ("num_ret", ("rel",), False),
    "NumRel": ("num_rel", ("rel",), False),
    "NumRelRet": ("num_rel_ret", ("rel",), False),
    "SetP": ("precision", ("rel",), False),
    "SetR": ("recall", ("rel",), False),
    "SetF": ("set_f", ("rel", "beta"), False),
    "Rprec": ("rprec", ("rel",), False),
    "Bpref": ("bpref", ("rel",), False),
    "infAP": ("infap", ("rel",), False),
    "Success": ("hit", ("rel",), True),
    "Judged": ("judged", (), True),
    "ERR": ("err", (), True),
    "RBP": ("rbp", ("rel", "p"), True),
    "IPrec": ("iprec_at_recall", ("rel",), True),
}


def _irm_params(text: str | None, spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if not text or not text.strip():
        return out
    for item in re.split(r",(?![^{]*})", text):
        key, eq, value = item.partition("=")
        if not eq:
            raise MetricError(f"malformed parameter {item.strip()!r} in {spec!r}")
        out[key.strip()] = value.strip().strip("'\"")
    return out


def _ir_measures(text: str) -> list[str] | None:
    m = _IRM.match(text)
    if m is None or m.group(1) not in _IRM_NAMES:
        return None
    name, raw, cut = m.group(1), m.group(2), m.group(3)
    ours, allowed, takes_cut = _IRM_NAMES[name]
    params = _irm_params(raw, text)
    if name == "NumRet" and "rel" in params:
        # ir_measures' NumRelRet object prints as NumRet(rel=1): retrieved *relevant* documents
        ours = "num_rel_ret"
    for key in params:
        if key not in allowed:
            raise MetricError(
                f"ir_measures parameter {key!r} of {name} in {text!r} has no ragjudge equivalent"
                + (f"; allowed: {', '.join(allowed)}" if allowed else ""))
    out: list[str] = []
    if name == "nDCG":
        dcg = params.pop("dcg", "log2")
        if dcg == "exp-log2":
            out.append("gain=exp")
        elif dcg != "log2":
            raise MetricError(f"nDCG(dcg={dcg!r}) in {text!r}: ragjudge has dcg='log2' (linear "
                              "gain) and 'exp-log2' (2^g - 1)")
        if "gains" in params:  # ir_measures: gains={0:0,1:1,2:3}
            pairs = re.findall(r"(-?\d+)\s*:\s*([-+0-9.eE]+)", params.pop("gains"))
            out.append("gains=" + ",".join(f"{lv}:{g}" for lv, g in pairs))
    if name == "RBP" and "rel" not in params:
        out.append("gain=raw")  # ir_measures' RBP without rel multiplies by the grade
    out += [f"{k}={v}" for k, v in params.items()]
    spec = ours + (f"({','.join(out)})" if out else "")
    if cut is not None:
        if name == "IPrec":
            # ir_measures computes IPrec with pytrec_eval, i.e. trec_eval 9's recall levels
            return [f"iprec_at_recall(recall={cut},rounding=trec9"
                    + "".join(f",{o}" for o in out) + ")"]
        if not takes_cut:
            raise MetricError(f"{name} takes no cutoff in ir_measures, got {text!r}")
        if not cut.isdigit():
            raise MetricError(f"cutoff in {text!r} must be a positive integer")
        spec += f"@{cut}"
    elif name == "IPrec":
        raise MetricError(f"{text!r}: give the recall level, e.g. IPrec@0.5")
    return [spec]


# ----------------------------------------------------------------------------- ranx
_RANX = re.compile(
    r"^(hits|hit_rate|precision|recall|f1|r-precision|mrr|map|dcg|dcg_burges|ndcg|ndcg_burges"
    r"|rbp)(?:([@.])([0-9]+))?(?:-l([0-9]+))?$")
_RANX_NAMES = {"hits": "num_rel_ret", "hit_rate": "hit", "r-precision": "rprec",
               "dcg_burges": "dcg", "ndcg_burges": "ndcg"}


def _ranx(text: str) -> list[str] | None:
    m = _RANX.match(text)
    if m is None:
        return None
    name, sep, num, level = m.groups()
    if name in ("precision", "recall", "f1", "mrr", "map", "dcg", "ndcg") and level is None and sep != ".":
        return None  # the same spelling and definition in ragjudge
    lvl = int(level) if level is not None else 1
    if lvl < 1:
        raise MetricError(f"{text!r}: ranx relevance level must be >= 1")
    params: list[str] = []
    if name == "rbp":
        if sep != ".":
            return None  # ragjudge's own rbp / rbp@k
        if lvl != 1:
            raise MetricError(f"{text!r}: ranx's RBP with -l{lvl} (raw grades of docs >= {lvl}) "
                              "has no ragjudge equivalent")
        return [f"rbp(p=0.{num},gain=raw)"]
    if sep == ".":
        return None
    if name in ("dcg_burges", "ndcg_burges"):
        if lvl != 1:
            raise MetricError(f"{text!r}: 2^g - 1 gain with grades below {lvl} zeroed has no "
                              "ragjudge equivalent")
        params.append("gain=exp")
    elif name in ("dcg", "ndcg"):
        if lvl > 1:  # ranx drops the qrels below the level: those grades gain 0
            params.append("gains=" + ",".join(f"{g}:0" for g in range(1, lvl)))
    elif lvl > 1:
        params.append(f"rel={lvl}")
    spec = _RANX_NAMES.get(name, name) + (f"({','.join(params)})" if params else "")
    if num is not None:
        if name == "r-precision":
            raise MetricError(f"{text!r}: R-precision takes no cutoff")
        spec += f"@{num}"
    return [spec]


def translate(text: str) -> list[str] | None:
    """ragjudge specs of a peer's metric spelling (several for trec_eval lists such as
    ``P.5,10`` or ``all_trec``), or None if ``text`` is not a peer spelling."""
    text = text.strip()
    for fn in (_trec, _ir_measures, _ranx):
        out = fn(text)
        if out is not None:
            return out
    return None


register_spelling(translate)
