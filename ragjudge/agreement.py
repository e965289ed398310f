"""Compatibility module: the agreement statistics now live in :mod:`ragjudge.trust.agreement`."""

from __future__ import annotations

from .trust.agreement import (
    AgreementReport,
    cohen_kappa,
    kendall_tau_b,
    label_agreement,
    ranking_agreement,
)

__all__ = [
    "AgreementReport",
    "label_agreement",
    "ranking_agreement",
    "cohen_kappa",
    "kendall_tau_b",
]
