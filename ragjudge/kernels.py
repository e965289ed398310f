"""Per-query reference kernels, re-exported from their family modules in :mod:`ragjudge.measures`.

Kept so ``from ragjudge import kernels`` keeps working; the kernels live beside their specs and
batch reductions (``ragjudge/measures/<family>.py``).
"""

from __future__ import annotations

from .measures import reference_value as evaluate
from .measures.counts import num_rel, num_rel_ret, num_ret
from .measures.graded import dcg, err, ndcg, rbp
from .measures.judged import judged, rbp_residual, unj
from .measures.ranks import average_precision, bpref, eleven_pt_avg, infap, iprec_at_recall, mrr
from .measures.sets import f1, hit, precision, recall, recall_all, rprec, set_f

__all__ = [
    "hit", "recall", "recall_all", "precision", "f1", "set_f", "rprec", "mrr", "average_precision",
    "infap", "iprec_at_recall", "eleven_pt_avg", "ndcg", "dcg", "err", "rbp", "rbp_residual",
    "bpref", "judged", "unj", "num_ret", "num_rel", "num_rel_ret", "evaluate",
]
