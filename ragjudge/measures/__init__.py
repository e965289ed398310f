"""Ranking measures: the spec grammar, the :class:`Measure` value and the measure registry.

Layout of the package:

* :mod:`.grammar` -- spec parsing (``name[(param=value,...)][@k]``), :class:`Measure`,
  :class:`MeasureSpec` and the registry (:func:`register`, :func:`spec_of`);
* :mod:`.layout` -- the per-query and all-queries views a measure is computed on, and the
  segment helpers the batch reductions share;
* one module per family, each measure one unit (spec + reference kernel + batch reduction):
  :mod:`.sets`, :mod:`.ranks`, :mod:`.graded`, :mod:`.judged`, :mod:`.counts`;
* :mod:`.peers` -- trec_eval ``-m``, ir_measures and ranx spellings, each translated to the
  ragjudge spec with the peer's definition.

Importing this package registers every family.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import counts, graded, judged, peers, ranks, sets  # noqa: F401  (registration side effect)
from .grammar import (
    Measure,
    MeasureSpec,
    ParamValue,
    Ranked,
    canonical_measure,
    format_spec,
    known_measures,
    parse_measure,
    parse_spec,
    registry,
    spec_of,
    split_metric_list,
)

__all__ = [
    "Measure",
    "MeasureSpec",
    "ParamValue",
    "parse_measure",
    "canonical_measure",
    "parse_spec",
    "format_spec",
    "split_metric_list",
    "known_measures",
    "registry",
    "spec_of",
    "reference_value",
    "aggregate",
    "MIN_GEO_MEAN",
]

#: trec_eval's floor of a per-query value before the logarithm of a geometric mean (gm_map).
MIN_GEO_MEAN = 1e-5


def aggregate(kind: str, values: np.ndarray) -> float:
    """One run value from determined per-query values: ``"mean"``, ``"sum"`` (trec_eval's
    counts) or ``"gmean"`` (trec_eval's gm_*: exp of the mean log, values floored at 1e-5)."""
    if kind == "sum":
        return float(values.sum())
    if kind == "gmean":
        return float(np.exp(np.log(np.maximum(values, MIN_GEO_MEAN)).mean()))
    return float(values.mean())


def reference_value(
    measure: Measure, ranked: Ranked, judged_grades: Sequence[int], *, qrels_max_grade: int = 0
) -> float:
    """Value of ``measure`` for one query by its reference kernel (the slow, obviously-correct
    path the batch engine is tested against).

    ``ranked``: grades of the retrieved documents in rank order (``None`` = no qrels entry);
    ``judged_grades``: every qrels grade of the query; ``qrels_max_grade``: the largest grade of
    the whole qrels (default scale of ``rbp(gain=graded)``).
    """
    return float(spec_of(measure).kernel(measure, ranked, judged_grades, qrels_max_grade))
