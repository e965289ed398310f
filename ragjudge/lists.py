"""Ranking measures on parallel lists (one gold list and one ranked list per example).

The one semantics of ranked lists shared by :func:`ragjudge.evaluate.evaluate_lists` and the
RAG samples (:mod:`ragjudge.rag`), so the two cannot disagree:

* a repeated id keeps its rank and counts once: the repeat stays in place as a non-relevant
  entry, so later ids do not move up (``['d1', 'd1', 'd2']`` has ``d2`` at rank 3);
* an example whose gold holds no relevant id (none with grade >= the measure's ``rel``,
  default 1) is undetermined, with that reason -- never a 0;
* a ``None`` gold entry or a ``None`` id is an error, never the string ``"None"``;
* a value never depends on the other examples: a graded measure whose top grade is not given
  (``rbp(gain=graded)`` without ``max_grade``) uses the example's own top gold grade, i.e.
  the value the example would get alone.

Each example is a query of a :class:`~ragjudge.data.Qrels` / :class:`~ragjudge.data.Run` pair
evaluated by :func:`ragjudge.engine.compute`, so values are trec_eval's to the last bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .data import Qrels, Run
from .engine import compute
from .errors import InputError
from .measures import Measure, format_spec, parse_measure

__all__ = ["Gold", "check_gold", "check_ranking", "score_lists", "relevance_threshold"]

#: One example's gold: relevant ids (grade 1 each) or ``{id: grade}``.
Gold = Sequence[Any] | Mapping[Any, Any]

# Placeholder ids for repeats: unique per rank, never a real id (ids cannot hold NUL here).
_REPEAT = "\x00repeat{}"


def _id(value: Any, where: str) -> str:
    if type(value) is str and value and not value.isspace():  # the common case, fast
        return value
    if value is None:
        raise InputError(f"{where} is None (an id must be a string or an integer)", field=where)
    if isinstance(value, bool) or not isinstance(value, (str, int, np.integer)):
        raise InputError(f"{where} must be a string or an integer, got {type(value).__name__} {value!r}",
                         field=where)
    text = str(value)
    if not text.strip():
        raise InputError(f"{where} is an empty id", field=where)
    return text


def check_gold(entry: Gold, where: str = "gold") -> dict[str, int]:
    """``{id: grade}`` of one example's gold; ``InputError`` (one line) on ``None`` or a bad id."""
    if entry is None:
        raise InputError(f"{where} is None (give a list of relevant ids or an {{id: grade}} map)",
                         field=where)
    if isinstance(entry, (str, bytes)):
        raise InputError(f"{where} must be a list of ids, not a string", field=where)
    out: dict[str, int] = {}
    if isinstance(entry, Mapping):
        for key, grade in entry.items():
            doc = _id(key, f"{where} id")
            if isinstance(grade, float) and grade.is_integer():
                grade = int(grade)
            if isinstance(grade, bool) or not isinstance(grade, (int, np.integer)):
                raise InputError(f"{where}[{doc!r}] grade must be an integer, got {grade!r}", field=where)
            out.setdefault(doc, int(grade))
        return out
    for i, key in enumerate(entry):
        out.setdefault(_id(key, f"{where}[{i}]"), 1)
    return out


def check_ranking(entry: Sequence[Any], where: str = "retrieved") -> list[str]:
    """Ranked ids of one example with repeats replaced in place by non-relevant placeholders."""
    if entry is None:
        raise InputError(f"{where} is None (give a list of ranked ids)", field=where)
    if isinstance(entry, (str, bytes)) or isinstance(entry, Mapping):
        raise InputError(f"{where} must be a list of ids, not a {type(entry).__name__}", field=where)
    ids = list(entry)
    # Fast path (C loops) for the common case: non-blank strings.
    if not (set(map(type, ids)) <= {str} and all(map(str.strip, ids))):
        ids = [_id(value, f"{where}[{i}]") for i, value in enumerate(ids)]
    if len(set(ids)) == len(ids):
        return ids
    seen: set[str] = set()
    out: list[str] = []
    for rank, doc in enumerate(ids, start=1):
        out.append(doc if doc not in seen else _REPEAT.format(rank))
        seen.add(doc)
    return out


def relevance_threshold(measure: Measure) -> int:
    """The lowest grade ``measure`` counts as relevant (its ``rel`` parameter, default 1)."""
    try:
        rel = measure.get("rel")
    except KeyError:
        return 1
    return int(rel) if rel is not None else 1


def _own_scale(measure: Measure) -> bool:
    """Whether ``measure`` would take its top grade from the data (graded RBP without
    ``max_grade``): then each example gets its own, never the batch's."""
    try:
        return measure.get("max_grade") is None and measure.get("gain") == "graded"
    except KeyError:
        return False


def _with_max_grade(measure: Measure, top: int) -> Measure:
    params = sorted([*measure.params, ("max_grade", top)])
    return parse_measure(format_spec(measure.name, params, measure.k))


def score_lists(
    gold: Sequence[dict[str, int]],
    rankings: Sequence[list[str]],
    measures: Sequence[Measure],
) -> dict[Measure, list[float | str]]:
    """Per example and measure: the value, or the reason (a ``str``) it is undetermined.

    ``gold`` and ``rankings`` are already checked (:func:`check_gold`, :func:`check_ranking`).
    Measures that score the same examples share one call of the core.
    """
    out: dict[Measure, list[float | str]] = {m: [""] * len(gold) for m in measures}
    tops = [max(g.values(), default=0) for g in gold]
    # (examples scored) -> [(measure as asked, measure as computed)]
    work: dict[tuple[int, ...], list[tuple[Measure, Measure]]] = {}
    for m in measures:
        rel = relevance_threshold(m)
        reason = "no relevant gold document" if rel <= 1 else f"no gold document with grade >= {rel}"
        keep = [i for i, top in enumerate(tops) if top >= rel]
        if len(keep) < len(tops):
            out[m] = [reason] * len(tops)
        if not _own_scale(m):
            work.setdefault(tuple(keep), []).append((m, m))
            continue
        by_top: dict[int, list[int]] = {}
        for i in keep:
            by_top.setdefault(tops[i], []).append(i)
        for top, idx in by_top.items():
            work.setdefault(tuple(idx), []).append((m, _with_max_grade(m, top)))
    for idx, pairs in work.items():
        if not idx:
            continue
        qids = [f"{i:09d}" for i in range(len(idx))]
        qrels = Qrels.from_lists([gold[i] for i in idx], qids)
        run = Run.from_lists([rankings[i] for i in idx], qids, name="lists")
        values = compute(qrels, run, list(dict.fromkeys(f for _, f in pairs)), qids=qids)
        for m, filled in pairs:
            col = values[filled].tolist()
            if len(idx) == len(gold):
                out[m] = col
                continue
            target = out[m]
            for i, v in zip(idx, col):
                target[i] = v
    return out
