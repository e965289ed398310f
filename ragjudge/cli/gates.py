"""CI gates shared by the commands that have them.

``--fail-under METRIC=VALUE`` (``evaluate``, ``compare``, ``rag``) and ``--fail-if-worse
BASELINE`` (``evaluate``, ``compare``). Every command parses and reports gates here, so the
syntax, the messages and the exit status (1, reserved for a failed gate) are the same.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from ..errors import InputError

__all__ = ["parse_gate", "below", "worse_than", "report_failures", "GATE_FAILED"]

#: Exit status of a command whose gate failed (bad input is 2, mostly failed LLM requests 3).
GATE_FAILED = 1


def parse_gate(text: str, option: str = "--fail-under") -> tuple[str, float]:
    """``METRIC=VALUE`` -> ``(metric, value)``. The value follows the LAST '=': metric specs
    contain '=' too (``rbp(p=0.9)=0.3``). A missing part or a non-finite value is an error."""
    metric, eq, value = text.rpartition("=")
    if not eq or not metric.strip() or not value.strip():
        raise InputError(f"expected METRIC=VALUE, got {text!r}", field=option)
    try:
        threshold = float(value)
    except ValueError:
        raise InputError(f"threshold {value!r} in {text!r} is not a number", field=option) from None
    if not math.isfinite(threshold):
        raise InputError(f"threshold in {text!r} must be finite", field=option)
    return metric.strip(), threshold


def below(label: str, value: float | None, threshold: float,
          missing: str = "could not be computed") -> str | None:
    """The failure line of one ``--fail-under`` check (``None`` when it passes). A value that
    could not be computed fails: a gate never passes on a missing value."""
    if value is None:
        return f"{label} {missing} (threshold {threshold:g})"
    if value < threshold:
        return f"{label} = {value:.4f} < {threshold:g}"
    return None


def worse_than(report: Any, baseline: str, digits: int = 4) -> list[str]:
    """One line per (run, metric) of a :class:`~ragjudge.report.CompareReport` where the run is
    significantly worse than ``baseline`` (Holm-adjusted p <= alpha and a negative delta), or
    could not be tested against it (a gate never passes on a missing value). Numbers have the
    table's ``digits`` (a p-value too small for them reads ``< 0.0001``, as in the table)."""
    from ..render import format_p

    out = []
    alpha = report.meta.get("alpha", 0.05)
    for metric in report.metrics:
        for run in report.runs:
            if run == baseline:
                continue
            c = report.comparison(run, metric, vs=baseline)
            if c.significant is None:
                out.append(f"run {run} could not be tested against {baseline} on {metric}: "
                           f"{c.note or 'no p-value'}")
            elif c.significant and c.delta is not None and c.delta < 0:
                out.append(
                    f"run {run} is worse than {baseline} on {metric}: delta = "
                    f"{c.delta:.{digits}f} (d_z = {_fmt(c.effect_size)}, {c.losses} of {c.n} "
                    f"queries worse), p_holm {_p(format_p(c.p_adjusted, digits))} <= {alpha:g}"
                )
    return out


def _p(text: str) -> str:
    return text if text.startswith("<") else f"= {text}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report_failures(option: str, failures: list[str]) -> int:
    """Print one stderr line per failure, prefixed by the option's name; the exit status."""
    for msg in failures:
        print(f"ragjudge: {option.lstrip('-')}: {msg}", file=sys.stderr)
    return GATE_FAILED if failures else 0
