"""Objects of peer libraries: ranx ``Qrels``/``Run`` and ir_measures iterables of
namedtuples (``Qrel(query_id, doc_id, relevance, iteration)``, ``ScoredDoc(query_id, doc_id,
score)``). Neither library is imported: the objects come from the caller."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..data import Dedup, Qrels, Run
from ..errors import InputError

__all__ = ["ranx_kind", "qrels_from_ranx", "run_from_ranx", "qrels_from_records", "run_from_records"]


def ranx_kind(obj: Any) -> str | None:
    """``"Qrels"`` or ``"Run"`` for a ranx object, else None."""
    cls = type(obj)
    if cls.__module__.split(".")[0] == "ranx" and cls.__name__ in ("Qrels", "Run"):
        return cls.__name__
    return None


def qrels_from_ranx(obj: Any) -> Qrels:
    """Qrels from a ``ranx.Qrels``."""
    if ranx_kind(obj) != "Qrels":
        raise InputError(f"expected a ranx Qrels, got a ranx {type(obj).__name__}", field="qrels")
    return Qrels.from_dict(obj.to_dict(), source=getattr(obj, "name", None) or "ranx.Qrels")


def run_from_ranx(obj: Any, *, name: str | None = None) -> Run:
    """A run from a ``ranx.Run``; ``name`` defaults to the ranx run's name."""
    if ranx_kind(obj) != "Run":
        raise InputError(f"expected a ranx Run, got a ranx {type(obj).__name__}", field="run")
    return Run.from_dict(obj.to_dict(), name=name or getattr(obj, "name", None) or "run",
                         source="ranx.Run")


def _columns(
    records: Iterable[Any], value: str, what: str
) -> tuple[list[str], list[str], list[Any]]:
    qs: list[str] = []
    ds: list[str] = []
    vs: list[Any] = []
    for i, rec in enumerate(records, start=1):
        try:
            if hasattr(rec, "query_id"):
                q, d, v = rec.query_id, rec.doc_id, getattr(rec, value)
            else:
                q, d, v = rec[0], rec[1], rec[2]
        except (AttributeError, IndexError, KeyError, TypeError):
            raise InputError(
                f"{what} record {i} is not a (query_id, doc_id, {value}) tuple: {rec!r}",
                field=what,
            ) from None
        qs.append(str(q))
        ds.append(str(d))
        vs.append(v)
    return qs, ds, vs


def qrels_from_records(records: Iterable[Any], *, dedup: Dedup = "error") -> Qrels:
    """Qrels from ir_measures ``Qrel`` namedtuples (or ``(qid, docid, grade)`` tuples)."""
    qs, ds, gs = _columns(records, "relevance", "qrels")
    try:
        grades = np.array(gs)
    except (TypeError, ValueError):
        raise InputError("grades must be integers", field="relevance") from None
    if grades.dtype == object:
        raise InputError("grades must be integers", field="relevance")
    return Qrels.from_arrays(qs, ds, grades, source="records", dedup=dedup)


def run_from_records(records: Iterable[Any], *, name: str = "run", dedup: Dedup = "error") -> Run:
    """A run from ir_measures ``ScoredDoc`` namedtuples (or ``(qid, docid, score)`` tuples)."""
    qs, ds, ss = _columns(records, "score", "run")
    return Run.from_arrays(qs, ds, ss, name=name, source="records", dedup=dedup)
