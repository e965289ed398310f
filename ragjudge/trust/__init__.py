"""Can I trust the judge? Agreement with intervals and prediction-powered estimates.

* :mod:`.agreement` -- label and system-ranking agreement between human and LLM qrels;
* :mod:`.ppi` -- prediction-powered inference (PPI, PPI++) for metric means and differences
  from many LLM labels and a few human ones, and the label budget for a target width;
* :mod:`.simulate` -- LLM labels drawn from true labels through a known confusion matrix.
"""

from __future__ import annotations

from .agreement import (
    AgreementReport,
    Interval,
    cohen_kappa,
    kendall_tau_b,
    krippendorff_alpha_ordinal,
    label_agreement,
    rank_biased_overlap,
    ranking_agreement,
    spearman_rho,
    tau_ap,
)

__all__ = [
    "AgreementReport",
    "Interval",
    "label_agreement",
    "ranking_agreement",
    "cohen_kappa",
    "kendall_tau_b",
    "krippendorff_alpha_ordinal",
    "rank_biased_overlap",
    "spearman_rho",
    "tau_ap",
]
