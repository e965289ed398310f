"""The options of nugget evaluation, stated once: the library's keyword defaults and the flags
of ``ragjudge nuggets`` read their defaults and help from :class:`NuggetOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..options import OptionsValue, option, positive_int

__all__ = ["NuggetOptions", "resolve"]


@dataclass(frozen=True)
class NuggetOptions(OptionsValue):
    """How nuggets are created, labelled and assigned. Built once, validated once; errors name
    the parameter."""

    grades: int = option(3, "assignment grades: 3 (support, partial_support, not_support) or 2 "
                            "(support, not_support)")
    assign_window: int = option(30, "nuggets assigned per call (each answer's nuggets in "
                                    "ceil(N / window) calls)")
    create_window: int = option(10, "passages read per nugget-creation call")
    max_nuggets: int = option(30, "most nuggets kept per query (creation stops when full)")
    importance_window: int = option(30, "nuggets labelled vital/okay per call")
    min_grade: int = option(2, "passages graded at least this in the qrels feed nugget creation")
    max_passages: int = option(40, "most passages per query used for creation (highest grades first)")

    def validate(self) -> None:
        if self.grades not in (2, 3) or isinstance(self.grades, bool):
            raise InputError(f"must be 2 or 3, got {self.grades!r}", field="grades")
        for name in ("assign_window", "create_window", "max_nuggets", "importance_window",
                     "max_passages"):
            positive_int(name, getattr(self, name))
        if isinstance(self.min_grade, bool) or not isinstance(self.min_grade, int):
            raise InputError(f"must be an integer, got {self.min_grade!r}", field="min_grade")


def resolve(options: NuggetOptions | None, keywords: dict[str, Any]) -> NuggetOptions:
    """``options`` with the keyword options a caller passed (unknown names: one error naming them)."""
    unknown = sorted(set(keywords) - set(NuggetOptions.names()))
    if unknown:
        raise InputError(f"unknown option(s) {', '.join(unknown)}; known: "
                         f"{', '.join(NuggetOptions.names())}", field=unknown[0])
    return NuggetOptions.merge(options, **keywords)
