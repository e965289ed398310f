"""Can I trust the judge? Agreement with intervals, prediction-powered estimates, soft labels,
judge panels. (Judging on demand lives with the judge: :mod:`ragjudge.judges.ondemand`.)

* :mod:`.agreement` -- label and system-ranking agreement between human and LLM qrels, every
  statistic with a seeded bootstrap interval over queries;
* :mod:`.ppi` -- prediction-powered inference (PPI, PPI++) for metric means and differences
  from many LLM labels and a few human ones, and the label budget for a target width;
* :mod:`.soft` -- expected metric values under the judge's per-grade probabilities;
* :mod:`.panel` -- several judges on the same pairs: agreement and a combined label;
* :mod:`.simulate` -- LLM labels drawn from true labels through a known confusion matrix.
"""

from __future__ import annotations

from .agreement import (
    AgreementReport,
    Interval,
    cohen_kappa,
    kendall_tau_b,
    krippendorff_alpha_ordinal,
    krippendorff_alpha_raters,
    label_agreement,
    rank_biased_overlap,
    ranking_agreement,
    spearman_rho,
    tau_ap,
)
from .panel import PanelResult, combine_grades, combine_qrels, judge_panel, judge_panel_sync
from .ppi import (
    PPIEstimate,
    PPIReport,
    plan_evaluation,
    plan_labels,
    ppi_evaluate,
    ppi_mean,
    ppi_samples,
    ppi_scores,
)
from .soft import soft_evaluate

__all__ = [
    # agreement
    "AgreementReport",
    "Interval",
    "label_agreement",
    "ranking_agreement",
    "cohen_kappa",
    "kendall_tau_b",
    "krippendorff_alpha_ordinal",
    "krippendorff_alpha_raters",
    "rank_biased_overlap",
    "spearman_rho",
    "tau_ap",
    # prediction-powered inference
    "PPIEstimate",
    "PPIReport",
    "ppi_mean",
    "ppi_scores",
    "ppi_samples",
    "ppi_evaluate",
    "plan_labels",
    "plan_evaluation",
    # soft labels, panels, judging on demand
    "soft_evaluate",
    "PanelResult",
    "combine_grades",
    "combine_qrels",
    "judge_panel",
    "judge_panel_sync",
]
