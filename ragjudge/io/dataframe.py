"""pandas DataFrames in the long shape (one row per judgment or retrieved document).

Column names are recognised from the peers' conventions when not given: ir_measures
(``query_id``, ``doc_id``, ``relevance`` / ``score``), ranx (``q_id``, ``doc_id``, ``score``)
and TREC-style (``qid``, ``docid``, ``grade`` / ``rel`` / ``score``). pandas is never imported
here: a DataFrame comes from the caller.
"""

from __future__ import annotations

from typing import Any

from ..data import Dedup, Qrels, Run
from ..errors import InputError

__all__ = ["is_dataframe", "qrels_from_dataframe", "run_from_dataframe"]

_QIDS = ("query_id", "q_id", "qid")
_DOCIDS = ("doc_id", "docid", "doc_no", "docno")
_GRADES = ("relevance", "grade", "rel", "label", "score")
_SCORES = ("score",)


def is_dataframe(obj: Any) -> bool:
    """A pandas DataFrame (checked without importing pandas)."""
    return type(obj).__name__ == "DataFrame" and type(obj).__module__.startswith("pandas")


def _pick(df: Any, given: str | None, candidates: tuple[str, ...], what: str, source: str | None) -> str:
    if given is not None:
        return given
    columns = [str(c) for c in df.columns]
    for c in candidates:
        if c in columns:
            return c
    raise InputError(
        f"no {what} column (looked for {', '.join(candidates)}); columns are {columns}",
        source=source, field=what,
    )


def _names(
    df: Any, cols: tuple[str | None, str | None, str | None], values: tuple[str, ...],
    what: str, source: str | None,
) -> dict[str, str]:
    qid, docid, value = cols
    return {
        "qid_col": _pick(df, qid, _QIDS, "query id", source),
        "docid_col": _pick(df, docid, _DOCIDS, "doc id", source),
        f"{what}_col": _pick(df, value, values, what, source),
    }


def qrels_from_dataframe(
    df: Any,
    *,
    qid_col: str | None = None,
    docid_col: str | None = None,
    grade_col: str | None = None,
    source: str | None = "DataFrame",
    dedup: Dedup = "error",
) -> Qrels:
    """Qrels from a long DataFrame; columns default to the first recognised names."""
    names = _names(df, (qid_col, docid_col, grade_col), _GRADES, "grade", source)
    return Qrels.from_dataframe(df, **names, source=source, dedup=dedup)


def run_from_dataframe(
    df: Any,
    *,
    qid_col: str | None = None,
    docid_col: str | None = None,
    score_col: str | None = None,
    name: str = "run",
    source: str | None = "DataFrame",
    dedup: Dedup = "error",
) -> Run:
    """A run from a long DataFrame (any row order); columns default to the recognised names."""
    names = _names(df, (qid_col, docid_col, score_col), _SCORES, "score", source)
    return Run.from_dataframe(df, **names, name=name, source=source, dedup=dedup)
