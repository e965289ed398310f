"""Anything a user holds as qrels or a run, made into a :class:`Qrels` / :class:`Run`.

Accepted: our own objects, paths (read with :func:`read_qrels` / :func:`read_run`),
``{qid: {docid: value}}`` dicts (pytrec_eval / ranx shape), pandas DataFrames, ranx
``Qrels`` / ``Run`` objects and ir_measures iterables of ``Qrel`` / ``ScoredDoc`` namedtuples.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..data import Dedup, Qrels, Run
from ..errors import InputError
from .dataframe import is_dataframe, qrels_from_dataframe, run_from_dataframe
from .peers import qrels_from_ranx, qrels_from_records, ranx_kind, run_from_ranx, run_from_records
from .readers import QrelsFormat, RunFormat, read_qrels, read_run

__all__ = ["as_qrels", "as_run"]

_ACCEPTED = (
    "a {} object, a path, a {{qid: {{docid: {}}}}} dict, a pandas DataFrame, a ranx {} or an "
    "iterable of ir_measures {} namedtuples"
)


def _iterable(obj: Any) -> bool:
    return isinstance(obj, Iterable) and not isinstance(obj, (str, bytes, Mapping))


def as_qrels(obj: Any, *, dedup: Dedup = "error", format: QrelsFormat = "auto") -> Qrels:
    """``obj`` as :class:`Qrels` (see the module docstring for what is accepted)."""
    if isinstance(obj, Qrels):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return read_qrels(obj, format=format, dedup=dedup)
    if isinstance(obj, Mapping):
        return Qrels.from_dict(obj)
    if is_dataframe(obj):
        return qrels_from_dataframe(obj, dedup=dedup)
    kind = ranx_kind(obj)
    if kind is not None:
        return qrels_from_ranx(obj)
    if not isinstance(obj, Run) and _iterable(obj):
        return qrels_from_records(obj, dedup=dedup)
    raise InputError(
        "qrels must be " + _ACCEPTED.format("Qrels", "grade", "Qrels", "Qrel")
        + f", got {type(obj).__name__}",
        field="qrels",
    )


def as_run(
    obj: Any, *, dedup: Dedup = "error", name: str | None = None, format: RunFormat = "auto"
) -> Run:
    """``obj`` as a :class:`Run` named ``name`` (default: the file stem, the ranx run's name,
    or ``"run"``)."""
    if isinstance(obj, Run):
        return obj if name is None or name == obj.name else obj.with_name(name)
    if isinstance(obj, (str, os.PathLike)):
        return read_run(obj, name=name, format=format, dedup=dedup)
    if isinstance(obj, Mapping):
        return Run.from_dict(obj, name=name or "run")
    if is_dataframe(obj):
        return run_from_dataframe(obj, name=name or "run", dedup=dedup)
    kind = ranx_kind(obj)
    if kind is not None:
        return run_from_ranx(obj, name=name)
    if not isinstance(obj, Qrels) and _iterable(obj):
        return run_from_records(obj, name=name or "run", dedup=dedup)
    raise InputError(
        "run must be " + _ACCEPTED.format("Run", "score", "Run", "ScoredDoc")
        + f", got {type(obj).__name__}",
        field="run",
    )
