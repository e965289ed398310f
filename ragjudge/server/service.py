"""What the endpoints do, without any web framework: inline inputs -> library calls -> the
library's own JSON. The HTTP layer (:mod:`ragjudge.server.app`) only translates."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..data import Qrels, Run
from ..errors import InputError, RagjudgeError
from ..evaluate import compare, evaluate
from ..io import parse_qrels, parse_run
from .models import CompareRequest, EvaluateRequest

__all__ = ["load_qrels", "load_run", "count_pairs", "evaluate_json", "compare_json",
           "TooLarge", "check_pairs"]


class TooLarge(RagjudgeError):
    """A request over one of the server's size limits (HTTP 413; a failed job's reason)."""


@contextmanager
def _named(field: str) -> Iterator[None]:
    """Errors of a shape that does not know its request field get it as their source."""
    try:
        yield
    except InputError as exc:
        if exc.source is not None:
            raise
        raise InputError(exc.message, source=field, line=exc.line, field=exc.field) from None


def _is_lists(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(isinstance(v, list) for v in value.values())


def load_qrels(value: Any, field: str = "qrels", dedup: str = "error") -> Qrels:
    """Qrels from TREC/BEIR/JSON text, ``{qid: {docid: grade}}`` or ``{qid: [docid, ...]}``."""
    with _named(field):
        if isinstance(value, str):
            return parse_qrels(value, source=field, format="auto", dedup=dedup)  # type: ignore[arg-type]
        if _is_lists(value):
            return Qrels.from_lists(list(value.values()), [str(q) for q in value])
        return Qrels.from_dict(value, source=field)


def load_run(value: Any, field: str, name: str, dedup: str = "error") -> Run:
    """A run from TREC/JSON text, ``{qid: {docid: score}}`` or ``{qid: [docid, ...]}``."""
    with _named(field):
        if isinstance(value, str):
            return parse_run(value, source=field, format="auto", name=name, dedup=dedup)  # type: ignore[arg-type]
        if _is_lists(value):
            return Run.from_lists(list(value.values()), [str(q) for q in value], name=name)
        return Run.from_dict(value, name=name, source=field)


def count_pairs(value: Any) -> int:
    """(query, document) entries of an inline qrels or run, before parsing it."""
    if value is None:
        return 0
    if isinstance(value, str):
        return value.count("\n") + 1
    return sum(len(v) for v in value.values())


def check_pairs(n: int, limit: int, what: str = "query-document pairs") -> None:
    if n > limit:
        raise TooLarge(f"request has {n:,} {what}; this server accepts at most {limit:,} "
                       "per request (ragjudge serve --max-pairs)")


def _inputs(req: EvaluateRequest, limit: int) -> tuple[Qrels, dict[str, Run]]:
    check_pairs(count_pairs(req.qrels) + sum(count_pairs(r) for r in req.runs.values()), limit)
    qrels = load_qrels(req.qrels, "qrels", req.dedup)
    runs = {name: load_run(v, f"runs.{name}", name, req.dedup) for name, v in req.runs.items()}
    return qrels, runs


def evaluate_json(req: EvaluateRequest, limit: int) -> str:
    """``ragjudge evaluate --no-stats --format json``: one run -> its report object; several
    runs -> a list of them (built by :meth:`Report.to_json`, never re-implemented)."""
    qrels, runs = _inputs(req, limit)
    parts = [
        evaluate(qrels, run, req.metrics, rel=req.rel, skip_missing=req.skip_missing,
                 name=name).to_json(per_query=req.per_query, indent=None)
        for name, run in runs.items()
    ]
    return parts[0] if len(parts) == 1 else "[" + ",".join(parts) + "]"


def compare_json(req: CompareRequest, limit: int) -> str:
    """``ragjudge compare --format json`` (:meth:`CompareReport.to_json`)."""
    qrels, runs = _inputs(req, limit)
    if req.baseline is not None and req.baseline not in runs:
        raise InputError(f"baseline {req.baseline!r} is not one of the runs: {', '.join(runs)}",
                         field="baseline")
    result = compare(qrels, runs, req.metrics, baseline=req.baseline, test=req.test,
                     n_resamples=req.resamples, seed=req.seed, alpha=req.alpha, rel=req.rel,
                     skip_missing=req.skip_missing, all_pairs=req.all_pairs)
    return result.to_json(per_query=req.per_query, indent=None)
