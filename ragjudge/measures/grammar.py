"""The spec grammar, the :class:`Measure` value and the registry of ranking measures.

Grammar: ``name[(param=value,...)][@k]``, e.g. ``ndcg@10``, ``map(rel=2)``,
``rbp(p=0.8,gain=graded)@20``, ``ndcg(gain=exp,ideal=retrieved)@5``. A comma-separated item
without ``=`` continues the previous parameter's value, so list-valued parameters read naturally:
``ndcg(gains=0:0,1:1,2:3,3:7)@10``.

:func:`parse_spec` splits any spec into ``(name, {param: str}, k)`` (also used for RAG metric
names); :func:`parse_measure` validates a ranking-measure spec against the registry and returns a
:class:`Measure`, a frozen value whose ``str()`` is the canonical spec and parses back to an equal
value. Parameters left at their default are dropped from the canonical form (``ndcg(gain=linear)@10``
is ``ndcg@10``), except those marked ``always_show`` (``p`` of the RBP measures, whose default
differs between toolkits). A :class:`Measure` already made travels as it is:
:func:`canonical_measure` checks one built by hand without turning it back into text.

A measure is registered with one :class:`MeasureSpec` by its family module (``sets``, ``ranks``,
``graded``, ``judged``, ``counts``), which holds the spec, the per-query reference kernel and the
vectorised batch reduction side by side. Nothing outside the family module names a measure.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union

from ..errors import MetricError

if TYPE_CHECKING:  # the batch view is only a type here; it imports numpy
    import numpy as np

    from .layout import Layout

__all__ = [
    "Measure",
    "MeasureSpec",
    "Param",
    "ParamValue",
    "Ranked",
    "parse_measure",
    "canonical_measure",
    "parse_spec",
    "format_spec",
    "split_metric_list",
    "known_measures",
    "register",
    "register_spelling",
    "spec_of",
    "registry",
    "int_at_least",
    "probability",
    "choice",
    "positive_number",
    "non_negative_number",
    "unit_number",
]

ParamValue = Union[int, float, str]
#: One query's ranking as the reference kernels see it: the grade of each retrieved document in
#: rank order, ``None`` where the document has no qrels entry.
Ranked = Sequence["int | None"]


# ----------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class Param:
    """One parameter of a measure: default, converter from text (raises ValueError with the
    description of the allowed values) and whether the canonical spec always shows it."""

    default: ParamValue | None
    convert: Callable[[str], ParamValue]
    allowed: str  # human description of the allowed values, used in error messages
    always_show: bool = False


def int_at_least(lo: int, hi: int | None = None) -> Callable[[str], ParamValue]:
    """Converter to an integer in ``[lo, hi]``; digits only (trec_eval reads no ``1_000``)."""
    want = f"an integer >= {lo}" if hi is None else f"an integer between {lo} and {hi}"

    def conv(text: str) -> ParamValue:
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text):
            raise ValueError(want)
        v = int(text)
        if v < lo or (hi is not None and v > hi):
            raise ValueError(want)
        return v

    return conv


_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _float(text: str, want: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise ValueError(want)
    return float(text)


def probability(text: str) -> ParamValue:
    """Converter to a number strictly between 0 and 1."""
    want = "a number strictly between 0 and 1"
    v = _float(text, want)
    if not 0.0 < v < 1.0:
        raise ValueError(want)
    return v


def positive_number(text: str) -> ParamValue:
    """Converter to a finite number > 0 (kept as a float)."""
    want = "a number > 0"
    v = _float(text, want)
    if not 0.0 < v < float("inf"):
        raise ValueError(want)
    return v


def non_negative_number(text: str) -> ParamValue:
    """Converter to a finite number >= 0 (kept as a float)."""
    want = "a number >= 0"
    v = _float(text, want)
    if not 0.0 <= v < float("inf"):
        raise ValueError(want)
    return v


def unit_number(text: str) -> ParamValue:
    """Converter to a number in [0, 1] (kept as a float)."""
    want = "a number between 0 and 1"
    v = _float(text, want)
    if not 0.0 <= v <= 1.0:
        raise ValueError(want)
    return v


def choice(*options: str) -> Callable[[str], ParamValue]:
    """Converter to one of ``options`` (case-insensitive)."""

    def conv(text: str) -> ParamValue:
        v = text.strip().lower()
        if v not in options:
            raise ValueError("one of " + ", ".join(options))
        return v

    return conv


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
        spec = spec_of(self).params.get(key)
        if spec is None:
            raise KeyError(f"measure {self.name!r} has no parameter {key!r}")
        return spec.default

    def __str__(self) -> str:
        return format_spec(self.name, self.params, self.k)


# ----------------------------------------------------------------------------- registry
#: How per-query values become the run's value: the mean, the sum (trec_eval's counts) or the
#: geometric mean (trec_eval's gm_* measures, values floored at 1e-5).
Aggregate = Literal["mean", "sum", "gmean"]
#: How deep a measure reads the ranking: its cutoff (the whole ranking without one), nothing
#: (it reads only the qrels), or the top R (R = the query's number of qrels entries).
Depth = Literal["cutoff", "none", "num_rel"]


@dataclass(frozen=True)
class MeasureSpec:
    """Everything the parser, the engine and the report need to know about one measure.

    * ``reference``: the readable per-query kernel function (its docstring is the measure's
      formula and source, shown by ``describe``);
    * ``kernel(m, ranked, judged, qrels_max_grade) -> float``: ``reference`` called with ``m``'s
      parameters;
    * ``batch(layout, m) -> float64 array``: the vectorised value of every query at once;
    * ``check(values, given, spec)``: cross-parameter checks on the typed values (may drop
      values that do not apply), raising :class:`MetricError`;
    * ``cut_names``: trec_eval names that carry the cutoff (``P`` for ``P_10``);
    * ``unit``: every value lies in [0, 1] (false for counts and unnormalised gains; may depend
      on the parameters);
    * ``examples``: specs the property tests compare kernel and batch on;
    * ``pool_free``: the value needs only the run's own ranked documents' grades (may depend on
      the parameters): label-free values of such a measure do not move with the pool.
    """

    name: str
    params: Mapping[str, Param]
    cutoff: bool
    reference: Callable[..., float]
    kernel: Callable[[Measure, Ranked, Sequence[int], int], float]
    batch: Callable[[Layout, Measure], np.ndarray]
    aliases: tuple[str, ...] = ()
    aggregate: Aggregate = "mean"
    depth: Depth = "cutoff"
    check: Callable[[dict[str, ParamValue], set[str], str], None] | None = None
    cut_names: tuple[str, ...] = ()
    unit: bool | Callable[[Measure], bool] = True
    examples: tuple[str, ...] = field(default=())
    #: the value needs only the grades of the run's own ranked documents (no ideal ranking, no
    #: R): with labels judged on demand it is the same whichever other runs shared the pool
    pool_free: bool | Callable[[Measure], bool] = False

    @property
    def doc(self) -> str:
        """The reference kernel's docstring: formula and source."""
        return inspect.cleandoc(self.reference.__doc__ or "")

    def is_pool_free(self, m: Measure) -> bool:
        """Whether ``m`` depends only on the run's own judged documents (see ``pool_free``)."""
        return self.pool_free(m) if callable(self.pool_free) else self.pool_free

    def in_unit_interval(self, m: Measure) -> bool:
        """Whether every value of ``m`` lies in [0, 1]."""
        return self.unit(m) if callable(self.unit) else self.unit


_REGISTRY: dict[str, MeasureSpec] = {}
# Translators of other toolkits' metric spellings (see .peers): text -> ragjudge specs or None.
_SPELLINGS: list[Callable[[str], "list[str] | None"]] = []
_ALIASES: dict[str, str] = {}
_CUT_NAMES: dict[str, str] = {}


def register(spec: MeasureSpec) -> MeasureSpec:
    """Add a measure to the registry (called once per measure by its family module)."""
    for n in (spec.name, *spec.aliases):
        if n in _REGISTRY or n in _ALIASES:
            raise ValueError(f"measure name {n!r} registered twice")
    _REGISTRY[spec.name] = spec
    for a in spec.aliases:
        _ALIASES[a] = spec.name
    for c in spec.cut_names:
        _CUT_NAMES[c] = spec.name
    return spec


def register_spelling(translate: Callable[[str], list[str] | None]) -> None:
    """Add a translator of foreign metric spellings (text -> ragjudge specs, or None)."""
    _SPELLINGS.append(translate)


def _foreign(text: str) -> list[str] | None:
    for translate in _SPELLINGS:
        out = translate(text)
        if out is not None:
            return out
    return None


def registry() -> dict[str, MeasureSpec]:
    """``{canonical name: MeasureSpec}`` of every registered measure (a copy)."""
    return dict(_REGISTRY)


def spec_of(measure: Measure | str) -> MeasureSpec:
    """The :class:`MeasureSpec` of a measure (or of a canonical name)."""
    name = measure if isinstance(measure, str) else measure.name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise MetricError(f"unknown metric {name!r}") from None


def known_measures() -> list[str]:
    """Canonical names of every ranking measure (aliases such as ``p`` / ``success`` also parse)."""
    return sorted(_REGISTRY)


def format_spec(name: str, params: Sequence[tuple[str, Any]], k: int | None) -> str:
    """The spec text ``name[(p=v,...)][@k]`` that :func:`parse_spec` reads back (floats as repr)."""
    text = name
    if params:
        text += "(" + ",".join(f"{key}={_value_text(v)}" for key, v in params) + ")"
    if k is not None:
        text += f"@{k}"
    return text


def _value_text(value: Any) -> str:
    """A parameter value as a spec writes it (floats as repr, so they read back equal)."""
    return repr(value) if isinstance(value, float) else str(value)


# ----------------------------------------------------------------------------- parsing
#: The largest cutoff a spec may give (ranks are 64-bit integers in the engine).
MAX_CUTOFF = 10**12
_SPEC = re.compile(r"^\s*([A-Za-z0-9_][A-Za-z0-9_.\-]*)\s*(?:\((.*)\))?\s*(?:@\s*(.*?))?\s*$", re.S)


def parse_spec(text: str) -> tuple[str, dict[str, str], int | None]:
    """Split ``name[(param=value,...)][@k]`` into ``(name, {param: value}, k)``.

    The name is lower-cased; parameter values stay strings (the caller types them); an item
    without ``=`` continues the previous value (``gains=0:0,1:1`` is one parameter).
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
        last: str | None = None
        for item in param_text.split(","):
            key, eq, value = item.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not eq and last is not None and key:
                params[last] += "," + item.strip()
                continue
            if not eq or not key or not value:
                raise MetricError(
                    f"malformed parameter {item.strip()!r} in metric spec {text!r}: "
                    "expected param=value"
                )
            if key in params:
                raise MetricError(f"parameter {key!r} given twice in metric spec {text!r}")
            params[key] = value
            last = key
    k: int | None = None
    if k_text is not None:
        if not re.fullmatch(r"[+]?\d+", k_text):
            raise MetricError(
                f"cutoff in metric spec {text!r} must be a positive integer, got {k_text!r}"
            )
        k = int(k_text)
        if k <= 0:
            raise MetricError(f"cutoff in metric spec {text!r} must be a positive integer, got {k}")
        if k > MAX_CUTOFF:  # array arithmetic on ranks is 64-bit
            raise MetricError(f"cutoff in metric spec {text!r} must be at most {MAX_CUTOFF:,}")
    return name, params, k


_DOT_LIST_ITEM = re.compile(r"^[0-9.]+$|^-?[0-9]+=[-+0-9.eE]+$")
_DOT_HEAD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[^()]*$")


def split_metric_list(value: str) -> list[str]:
    """Split a ``-m`` value such as ``"ndcg@10,rbp(p=0.8,gain=graded),map"`` into specs.

    Commas inside parentheses belong to the parameters; whitespace separates too (ir_measures'
    ``"AP nDCG@10"``); the numbers of trec_eval's dot syntax stay together (``P.5,10``) and a
    trec_eval list expands to one spec per measure (``P.5,10`` -> ``P_5``, ``P_10``;
    ``all_trec``). Empty items are dropped.
    """
    value = re.sub(r"\s*@\s*", "@", value)
    value = re.sub(r"\s+\(", "(", value)
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
        if (ch == "," or ch.isspace()) and depth == 0:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise MetricError(f"unbalanced '(' in metric list {value!r}")
    out.append("".join(current).strip())
    items: list[str] = []
    for item in (s for s in out if s):
        if items and _DOT_LIST_ITEM.match(item) and _DOT_HEAD.match(items[-1]):
            items[-1] += "," + item  # P.5,10: the 10 is the second cutoff of P
        else:
            items.append(item)
    specs: list[str] = []
    for item in items:
        many = _foreign(item)
        specs.extend(many if many is not None and (len(many) > 1 or item.lower() == "all_trec")
                     else [item])
    return specs


_TREC_CUT = re.compile(r"^(.+)_(\d+)$")


def _resolve_name(name: str, k: int | None, spec: str) -> tuple[str, int | None]:
    # trec_eval spellings with the cutoff in the name: P_10, recall_100, ndcg_cut_10, ...
    m = _TREC_CUT.match(name)
    if m is not None and m.group(1) in _CUT_NAMES:
        if k is not None:
            raise MetricError(f"metric spec {spec!r} gives the cutoff twice")
        return _CUT_NAMES[m.group(1)], int(m.group(2))
    name = _ALIASES.get(name, name)
    if name not in _REGISTRY:
        raise _unknown(name, spec)
    return name, k


def _unknown(name: str, spec: str) -> MetricError:
    candidates = sorted(set(_REGISTRY) | set(_ALIASES))
    close = difflib.get_close_matches(name, candidates, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return MetricError(
        f"unknown metric {name!r} in {spec!r}{hint}; known metrics: " + ", ".join(known_measures())
    )


def parse_measure(spec: str | Measure, *, rel: int | None = None) -> Measure:
    """Parse and validate a ranking-measure spec into a canonical :class:`Measure`.

    ``rel`` is the default relevance threshold (CLI ``--rel N``) for measures that take a
    ``rel`` parameter and whose spec does not set it. Raises :class:`MetricError`.
    """
    if isinstance(spec, Measure):
        spec = str(spec)
    elif not isinstance(spec, str) and hasattr(spec, "NAME"):
        spec = str(spec)  # an ir_measures measure object: its str() is its spec
    if rel is not None and (isinstance(rel, bool) or not isinstance(rel, int)):
        raise MetricError(f"relevance threshold must be an integer >= 1, got {rel!r}")
    return _parse(spec, rel)


@functools.lru_cache(maxsize=4096)
def _parse(spec: str, rel: int | None) -> Measure:
    # Measures are immutable values, so a spec parses the same way every time: the cache spares
    # parsing the same text again where it is read per item (a RAG metric's measure at each
    # sample's grade scale). Measures already made are never parsed again (canonical_measure).
    foreign = _foreign(spec)
    if foreign is not None:
        if len(foreign) != 1:
            raise MetricError(f"{spec!r} names {len(foreign)} metrics; give it as a metric list "
                              "(-m, or split_metric_list)")
        try:
            return _native(foreign[0], rel)
        except MetricError as exc:
            raise MetricError(f"{spec!r} (read as {foreign[0]!r}): {exc}") from None
    return _native(spec, rel)


def _native(spec: str, rel: int | None) -> Measure:
    name, raw, k = parse_spec(spec)
    name, k = _resolve_name(name, k, spec)
    ms = _REGISTRY[name]
    pspecs = ms.params
    if k is not None and not ms.cutoff:
        raise MetricError(f"metric {name!r} takes no cutoff, got {spec!r}")
    given = set(raw)
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
    return _canonical(ms, values, given, k, spec)


def _canonical(ms: MeasureSpec, values: dict[str, ParamValue], given: set[str], k: int | None,
               spec: str) -> Measure:
    """The measure of typed parameter ``values`` (``given``: those the spec named): the
    measure's cross-parameter check, then defaults dropped (``always_show`` kept), keys sorted."""
    if ms.check is not None:
        ms.check(values, given, spec)
    params = []
    for key in sorted(set(values) | {k2 for k2, p in ms.params.items() if p.always_show}):
        p = ms.params[key]
        v = values.get(key, p.default)
        if v == p.default and not p.always_show:
            continue
        params.append((key, v))
    return Measure(ms.name, tuple(params), k)  # type: ignore[arg-type]


def canonical_measure(measure: Measure) -> Measure:
    """The canonical form of a :class:`Measure` value: ``measure`` itself when it is canonical
    (what :func:`parse_measure` returns), else its canonical equal; a :class:`MetricError` when
    it is no valid measure.

    The value is checked as it is, never turned back into a spec and parsed: its name (or an
    alias) is registered, its cutoff one the measure takes, each parameter a known one whose
    converter accepts the value unchanged, and the measure's cross-parameter check passes; the
    canonical form drops parameters left at their default and sorts the others. A parsed
    measure comes back unchanged, as does one built by hand in canonical form
    (``Measure("ndcg", (), 10)``).
    """
    if not isinstance(measure, Measure):
        raise MetricError(f"a metric must be a spec string or a Measure, got {measure!r}")
    if not isinstance(measure.name, str):
        raise MetricError(f"a measure's name is a string, got {measure!r}")
    name, k = _resolve_name(measure.name.lower(), measure.k, repr(measure))  # aliases, P_10
    ms = _REGISTRY[name]
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= MAX_CUTOFF:
            raise MetricError(f"cutoff of {measure!r} must be a positive integer up to {MAX_CUTOFF:,}")
        if not ms.cutoff:
            raise MetricError(f"metric {ms.name!r} takes no cutoff, got {measure!r}")
    values: dict[str, ParamValue] = {}
    for key, value in measure.params:
        p = ms.params.get(key)
        if p is None:
            allowed = ", ".join(sorted(ms.params)) or "none"
            raise MetricError(
                f"unknown parameter {key!r} for metric {ms.name!r} in {measure!r}; allowed: {allowed}"
            )
        try:
            typed = p.convert(_value_text(value))  # the converters read text: a value's own spelling
        except ValueError as exc:
            typed = exc
        if typed != value:
            raise MetricError(f"bad value {value!r} for parameter {key!r} of metric {ms.name!r} "
                              f"in {measure!r}: expected {p.allowed}")
        values[key] = value
    canonical = _canonical(ms, values, set(values), k, format_spec(name, measure.params, k))
    return measure if canonical == measure else canonical
