"""``--fail-under METRIC=VALUE`` gates, parsed the same way by every command that has them."""

from __future__ import annotations

import math

from ..errors import InputError

__all__ = ["parse_gate"]


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
