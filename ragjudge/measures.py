"""Metric specs: the one place where metric names are parsed.

Grammar: ``name[(param=value,...)][@k]``, e.g. ``ndcg@10``, ``map(rel=2)``,
``rbp(p=0.8,gain=graded)@20``, ``ndcg(gain=exp,ideal=retrieved)@5``.

:func:`parse_spec` splits any spec into ``(name, {param: str}, k)`` (also used for RAG metric
names); :func:`parse_measure` validates a ranking-measure spec and returns a :class:`Measure`,
a frozen value whose ``str()`` is the canonical spec and parses back to an equal value.
Parameters left at their default are dropped from the canonical form (``ndcg(gain=linear)@10``
is ``ndcg@10``), except ``p`` of the RBP measures, which is always shown because its default
differs between toolkits.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .errors import MetricError

__all__ = [
    "Measure",
    "parse_measure",
    "parse_spec",
    "format_spec",
    "split_metric_list",
    "known_measures",
    "ParamValue",
]

ParamValue = Union[int, float, str]


# ----------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class _Param:
    default: ParamValue | None
    convert: Callable[[str], ParamValue]
    allowed: str  # human description of the allowed values, used in error messages
    always_show: bool = False


def _int_at_least(lo: int) -> Callable[[str], ParamValue]:
    def conv(text: str) -> ParamValue:
        try:
            v = int(text)
        except ValueError:
            raise ValueError(f"an integer >= {lo}") from None
        if v < lo:
            raise ValueError(f"an integer >= {lo}")
        return v

    return conv


def _prob(text: str) -> ParamValue:
    try:
        v = float(text)
    except ValueError:
        raise ValueError("a number strictly between 0 and 1") from None
    if not 0.0 < v < 1.0:
        raise ValueError("a number strictly between 0 and 1")
    return v


def _choice(*options: str) -> Callable[[str], ParamValue]:
    def conv(text: str) -> ParamValue:
        v = text.strip().lower()
        if v not in options:
            raise ValueError("one of " + ", ".join(options))
        return v

    return conv


_REL = _Param(1, _int_at_least(1), "an integer >= 1 (relevance threshold)")
_P = _Param(0.8, _prob, "a number strictly between 0 and 1 (persistence)", always_show=True)

# name -> (parameters, whether @k is allowed)
_MEASURES: dict[str, tuple[dict[str, _Param], bool]] = {
    "hit": ({"rel": _REL}, True),
    "recall": ({"rel": _REL}, True),
    "recall_all": ({"rel": _REL}, True),
    "precision": ({"rel": _REL}, True),
    "f1": ({"rel": _REL}, True),
    "rprec": ({"rel": _REL}, False),
    "mrr": ({"rel": _REL}, True),
    "map": ({"rel": _REL}, True),
    "ndcg": (
        {
            "gain": _Param("linear", _choice("linear", "exp"), "linear or exp"),
            "ideal": _Param("all", _choice("all", "retrieved"), "all or retrieved"),
            "discount": _Param("log2", _choice("log2", "jarvelin"), "log2 or jarvelin"),
        },
        True,
    ),
    "err": ({"max_grade": _Param(4, _int_at_least(1), "an integer >= 1")}, True),
    "rbp": (
        {
            "p": _P,
            "gain": _Param("binary", _choice("binary", "graded"), "binary or graded"),
            "max_grade": _Param(None, _int_at_least(1), "an integer >= 1 (only with gain=graded)"),
            "rel": _REL,
        },
        True,
    ),
    "rbp_residual": ({"p": _P}, True),
    "bpref": ({"rel": _REL}, False),
    "judged": ({}, True),
    "num_ret": ({}, True),
    "num_rel": ({"rel": _REL}, False),
    "num_rel_ret": ({"rel": _REL}, True),
}

_ALIASES = {
    "success": "hit",
    "p": "precision",
    "recip_rank": "mrr",
    "rbp_resid": "rbp_residual",
    "r-prec": "rprec",
    "r_prec": "rprec",
}

# trec_eval spellings with the cutoff in the name: P_10, recall_100, ndcg_cut_10, ...
_TREC_CUT = re.compile(r"^(p|recall|ndcg_cut|map_cut|success)_(\d+)$")
_TREC_CUT_NAMES = {"p": "precision", "recall": "recall", "ndcg_cut": "ndcg", "map_cut": "map",
                   "success": "hit"}


def known_measures() -> list[str]:
    """Canonical names of every ranking measure (aliases such as ``p`` / ``success`` also parse)."""
    return sorted(_MEASURES)


# ----------------------------------------------------------------------------- Measure
@dataclass(frozen=True)
class Measure:
    """One ranking measure: canonical ``name``, non-default ``params`` and cutoff ``k``.

    ``params`` is a tuple of ``(key, value)`` pairs sorted by key with typed values (int, float
    or str). ``str(m)`` is the canonical spec; ``parse_measure(str(m)) == m``.
    """

    name: str
    params: tuple[tuple[str, ParamValue], ...] = ()
    k: int | None = None

    def get(self, key: str) -> Any:
        """Value of parameter ``key``, with the measure's default when it is not set."""
        for pk, pv in self.params:
            if pk == key:
                return pv
        spec = _MEASURES[self.name][0].get(key)
        if spec is None:
            raise KeyError(f"measure {self.name!r} has no parameter {key!r}")
        return spec.default

    def __str__(self) -> str:
        return format_spec(self.name, self.params, self.k)


def format_spec(name: str, params: Sequence[tuple[str, Any]], k: int | None) -> str:
    """The spec text ``name[(p=v,...)][@k]`` that :func:`parse_spec` reads back (floats as repr)."""
    text = name
    if params:
        text += "(" + ",".join(f"{key}={repr(v) if isinstance(v, float) else v}" for key, v in params) + ")"
    if k is not None:
        text += f"@{k}"
    return text


# ----------------------------------------------------------------------------- parsing
_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?:\((.*)\))?\s*(?:@\s*(.*?))?\s*$", re.S)


def parse_spec(text: str) -> tuple[str, dict[str, str], int | None]:
    """Split ``name[(param=value,...)][@k]`` into ``(name, {param: value}, k)``.

    The name is lower-cased; parameter values stay strings (the caller types them).
    Raises :class:`MetricError` on a malformed spec, a repeated parameter or a bad cutoff.
    """
    if not isinstance(text, str) or not text.strip():
        raise MetricError(f"empty metric spec {text!r}")
    m = _SPEC.match(text)
    if m is None:
        raise MetricError(
            f"malformed metric spec {text!r}: expected name[(param=value,...)][@k], e.g. ndcg@10"
        )
    name, param_text, k_text = m.group(1).lower(), m.group(2), m.group(3)
    params: dict[str, str] = {}
    if param_text is not None and param_text.strip():
        for item in param_text.split(","):
            key, eq, value = item.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not eq or not key or not value:
                raise MetricError(
                    f"malformed parameter {item.strip()!r} in metric spec {text!r}: "
                    "expected param=value"
                )
            if key in params:
                raise MetricError(f"parameter {key!r} given twice in metric spec {text!r}")
            params[key] = value
    k: int | None = None
    if k_text is not None:
        if not re.fullmatch(r"[+]?\d+", k_text):
            raise MetricError(
                f"cutoff in metric spec {text!r} must be a positive integer, got {k_text!r}"
            )
        k = int(k_text)
        if k <= 0:
            raise MetricError(f"cutoff in metric spec {text!r} must be a positive integer, got {k}")
    return name, params, k


def split_metric_list(value: str) -> list[str]:
    """Split a ``-m`` value such as ``"ndcg@10,rbp(p=0.8,gain=graded),map"`` into specs.

    Commas inside parentheses belong to the parameters. Empty items are dropped.
    """
    out: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise MetricError(f"unbalanced ')' in metric list {value!r}")
        if ch == "," and depth == 0:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise MetricError(f"unbalanced '(' in metric list {value!r}")
    out.append("".join(current).strip())
    return [s for s in out if s]


def _resolve_name(name: str, k: int | None, spec: str) -> tuple[str, int | None]:
    m = _TREC_CUT.match(name)
    if m is not None:
        if k is not None:
            raise MetricError(f"metric spec {spec!r} gives the cutoff twice")
        return _TREC_CUT_NAMES[m.group(1)], int(m.group(2))
    name = _ALIASES.get(name, name)
    if name not in _MEASURES:
        candidates = sorted(set(_MEASURES) | set(_ALIASES))
        close = difflib.get_close_matches(name, candidates, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MetricError(
            f"unknown metric {name!r} in {spec!r}{hint}; known metrics: "
            + ", ".join(known_measures())
        )
    return name, k


def parse_measure(spec: str | Measure, *, rel: int | None = None) -> Measure:
    """Parse and validate a ranking-measure spec into a canonical :class:`Measure`.

    ``rel`` is the default relevance threshold (CLI ``--rel N``) for measures that take a
    ``rel`` parameter and whose spec does not set it. Raises :class:`MetricError`.
    """
    if isinstance(spec, Measure):
        spec = str(spec)
    name, raw, k = parse_spec(spec)
    name, k = _resolve_name(name, k, spec)
    pspecs, allows_k = _MEASURES[name]
    if k is not None and not allows_k:
        raise MetricError(f"metric {name!r} takes no cutoff, got {spec!r}")
    explicit_rel = "rel" in raw
    if rel is not None and "rel" in pspecs and "rel" not in raw:
        if isinstance(rel, bool) or not isinstance(rel, int) or rel < 1:
            raise MetricError(f"relevance threshold must be an integer >= 1, got {rel!r}")
        raw = {**raw, "rel": str(rel)}
    values: dict[str, ParamValue] = {}
    for key, text in raw.items():
        p = pspecs.get(key)
        if p is None:
            allowed = ", ".join(sorted(pspecs)) or "none"
            raise MetricError(
                f"unknown parameter {key!r} for metric {name!r} in {spec!r}; allowed: {allowed}"
            )
        try:
            values[key] = p.convert(text)
        except ValueError as exc:
            raise MetricError(
                f"bad value {text!r} for parameter {key!r} of metric {name!r} in {spec!r}: "
                f"expected {exc}"
            ) from None
    if name == "rbp" and "max_grade" in values and values.get("gain", "binary") != "graded":
        raise MetricError(f"parameter 'max_grade' of 'rbp' needs gain=graded, in {spec!r}")
    if name == "rbp" and values.get("gain") == "graded" and explicit_rel:
        raise MetricError(f"parameter 'rel' of 'rbp' only applies to gain=binary, in {spec!r}")
    if name == "rbp" and values.get("gain") == "graded":
        values.pop("rel", None)  # a CLI-wide --rel does not apply to graded gain
    params = []
    for key in sorted(set(values) | {k2 for k2, p in pspecs.items() if p.always_show}):
        p = pspecs[key]
        v = values.get(key, p.default)
        if v == p.default and not p.always_show:
            continue
        params.append((key, v))
    return Measure(name, tuple(params), k)  # type: ignore[arg-type]
