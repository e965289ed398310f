"""Parameters shared by several families."""

from __future__ import annotations

from .grammar import Param, int_at_least, probability

__all__ = ["REL", "P"]

#: Relevance threshold: a document is relevant when its grade is >= rel.
REL = Param(1, int_at_least(1), "an integer >= 1 (relevance threshold)")
#: RBP persistence; always shown in the canonical spec (toolkits disagree on its default).
P = Param(0.8, probability, "a number strictly between 0 and 1 (persistence)", always_show=True)
