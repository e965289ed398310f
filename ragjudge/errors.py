"""Errors raised by ragjudge.

Every problem with user input is an :class:`InputError` that names where it happened
(file, line, field), so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RagjudgeError", "InputError", "MetricError", "LLMError"]


class RagjudgeError(Exception):
    """Base class of every error ragjudge raises on purpose."""


class InputError(RagjudgeError, ValueError):
    """Bad user input: a malformed file, an empty file, a duplicate entry, a bad value.

    ``str(err)`` reads ``"<source>:<line>: <field>: <message>"`` with the parts that are known.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.source is not None:
            where = str(self.source)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        if self.field is not None:
            where += f"{self.field}: "
        return where + self.message


class MetricError(RagjudgeError, ValueError):
    """An unknown metric name, a bad parameter or a bad cutoff in a metric spec."""


class LLMError(RagjudgeError):
    """A non-retryable failure talking to an LLM endpoint (bad key, unknown model, bad request)."""

    #: what finished before the run stopped (set by the layer that has it: the session's
    #: outcomes, a judge's partial result...), so callers can write it out; ``None``: nothing
    partial: Any = None
