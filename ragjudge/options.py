"""Typed options values: one frozen value per application, validated once.

An application's options (``SynthOptions``, ``RagOptions``, ``JudgeOptions``) are a frozen
dataclass whose fields are the library's parameter names. Each field states its default and
its help text once (``option(default, "help")``); the library's keyword defaults, the CLI's
flags and the service's request fields all read them from there. Validation happens when the
value is built, and an error names the parameter (``InputError.field``): the CLI turns it
into a flag (``cli/_inputs.flags_named``), the service reports it as the request field of
the same name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import InputError

__all__ = ["OptionsValue", "option", "positive_int", "non_negative_int", "number_at_least",
           "unit_interval", "one_of"]

T = TypeVar("T", bound="OptionsValue")


def option(default: Any, help: str, *, repr: bool = True, compare: bool = True,  # noqa: A002 -- argparse's word
           **metadata: Any) -> Any:
    """A field of an options value: its default and its help text, stated once (``repr`` /
    ``compare``: as for :func:`dataclasses.field`, e.g. for a secret or an object)."""
    return dataclasses.field(default=default, repr=repr, compare=compare,
                             metadata={"help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class OptionsValue:
    """Base of the options values: building, merging with keywords, and a plain dict."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`InputError` naming the parameter of the first bad field."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The parameter names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of one parameter (what the library's keyword and the CLI flag use)."""
        return _field(cls, name).default

    @classmethod
    def help(cls, name: str) -> str:
        """The help text of one parameter (CLI help and the service's field description)."""
        return str(_field(cls, name).metadata.get("help", ""))

    @classmethod
    def from_mapping(cls: type[T], values: Mapping[str, Any], *, source: str | None = None) -> T:
        """The value of ``{parameter: value}``; unknown names are one error naming them."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise InputError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(cls.names())}",
                             source=source, field=unknown[0])
        return cls(**dict(values))

    @classmethod
    def merge(cls: type[T], options: T | None, **keywords: Any) -> T:
        """``options`` (or the defaults) with the keyword arguments a caller set.

        A keyword left at its default never overrides ``options``; one that is set where
        ``options`` keeps the default fills it in; one that differs from a set value of
        ``options`` is a conflict (the caller said two things), a :class:`TypeError`."""
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
        if options is None:
            return cls(**keywords)
        changes = {}
        for name, value in keywords.items():
            if _same(value, cls.default(name)):
                continue
            current = getattr(options, name)
            if not _same(value, current) and not _same(current, cls.default(name)):
                raise TypeError(f"{name} is given both in options= ({getattr(options, name)!r}) "
                                f"and as a keyword ({value!r}); give it once")
            changes[name] = value
        return dataclasses.replace(options, **changes) if changes else options

    def replace(self: T, **changes: Any) -> T:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """``{parameter: value}``: the library's keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _field(cls: type, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise KeyError(name)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:  # noqa: BLE001 -- arrays and frames compare elementwise: not the same
        return False


# ----------------------------------------------------------------------------- checks
def positive_int(name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` is an int >= 1 (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"must be a positive integer, got {value!r}", field=name)


def non_negative_int(name: str, value: Any) -> None:
    """``value`` is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"must be an integer >= 0, got {value!r}", field=name)


def number_at_least(name: str, value: Any, low: float) -> None:
    """``value`` is a finite number >= ``low``."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < low):
        raise InputError(f"must be a number >= {low:g}, got {value!r}", field=name)


def unit_interval(name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` is a number in [0, 1] (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InputError(f"must be in [0, 1], got {value!r}", field=name)


def one_of(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        shown = ", ".join(str(c) for c in choices)
        raise InputError(f"must be one of {shown}, got {value!r}", field=name)
