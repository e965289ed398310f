"""CI gates shared by the commands that have them.

``--fail-under METRIC=VALUE`` (``evaluate``, ``compare``, ``rag``) and ``--fail-if-worse
BASELINE`` (``evaluate``, ``compare``). Every command parses and reports gates here, so the
syntax, the messages and the exit status (1, reserved for a failed gate) are the same.
``--junit FILE`` writes every gate checked as one JUnit test case (a failure with the same line
as stderr's when it fails), the report CI systems (GitLab, Jenkins, Azure, GitHub through a
test-report action) show per check.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..render import format_p

__all__ = ["parse_gate", "below", "worse_than", "report_failures", "GATE_FAILED", "Check",
           "JUnitReport", "add_junit_option"]

#: One gate checked: its name (``run bm25: ndcg@10 >= 0.3``) and its failure line, or ``None``
#: when it passed.
Check = tuple[str, "str | None"]

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


def worse_than(report: Any, baseline: str, digits: int = 4) -> list[Check]:
    """One check per (run, metric) of a :class:`~ragjudge.report.CompareReport`: it fails where
    the run is significantly worse than ``baseline`` (Holm-adjusted p <= alpha and a negative
    delta), or could not be tested against it (a gate never passes on a missing value). Numbers
    have the table's ``digits`` (a p-value too small for them reads ``< 0.0001``, as in the
    table)."""
    out: list[Check] = []
    alpha = report.meta.get("alpha", 0.05)
    for metric in report.metrics:
        for run in report.runs:
            if run == baseline:
                continue
            c = report.comparison(run, metric, vs=baseline)
            failure = None
            if c.significant is None:
                failure = (f"run {run} could not be tested against {baseline} on {metric}: "
                           f"{c.note or 'no p-value'}")
            elif c.significant and c.delta is not None and c.delta < 0:
                failure = (
                    f"run {run} is worse than {baseline} on {metric}: delta = "
                    f"{c.delta:.{digits}f} (d_z = {_fmt(c.effect_size)}, {c.losses} of {c.n} "
                    f"queries worse), p_holm {_p(format_p(c.p_adjusted, digits))} <= {alpha:g}"
                )
            out.append((f"run {run} not worse than {baseline} on {metric}", failure))
    return out


def _p(text: str) -> str:
    return text if text.startswith("<") else f"= {text}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report_failures(option: str, checks: list[Check], junit: JUnitReport | None = None) -> int:
    """Print one stderr line per failed check, prefixed by the option's name, and record every
    check in ``junit`` when given; the exit status."""
    failed = [msg for _, msg in checks if msg is not None]
    for msg in failed:
        print(f"ragjudge: {option.lstrip('-')}: {msg}", file=sys.stderr)
    if junit is not None:
        junit.add(option, checks)
    return GATE_FAILED if failed else 0


def _junit_path(text: str) -> str:
    """``--junit``'s FILE, checked when the command line is read: the report is written last,
    after the work (and any paid call), so a folder or a missing folder is refused first."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text}: is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} does not exist")
    return text


def add_junit_option(parser: Any) -> None:
    """``--junit FILE`` on a command that has gates."""
    parser.add_argument("--junit", metavar="FILE", type=_junit_path,
                        help="also write the gates as a JUnit XML report (one test case per gate "
                             "checked, a failure per failed gate) for CI systems")


class JUnitReport:
    """Every gate a command checked, written as one JUnit ``<testsuite>``.

    A test case per check (class name ``ragjudge.<command>.<option>``), a ``<failure>`` with
    the stderr line where it failed, and an ``<error>`` test case for a run that could not be
    gated at all (most LLM requests failed). Written with the standard library's XML writer,
    so any text (quotes, ``<``, non-ASCII metric or run names) is escaped correctly.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        self.cases: list[tuple[str, str, str | None, str]] = []  # (class, name, message, kind)

    def add(self, option: str, checks: list[Check]) -> None:
        cls = f"ragjudge.{self.command}.{option.lstrip('-').replace('-', '_')}"
        self.cases.extend((cls, name, msg, "failure") for name, msg in checks)

    def error(self, name: str, message: str) -> None:
        self.cases.append((f"ragjudge.{self.command}", name, message, "error"))

    def write(self, path: str | Path) -> None:
        failures = sum(1 for *_, msg, kind in self.cases if msg is not None and kind == "failure")
        errors = sum(1 for *_, kind in self.cases if kind == "error")
        suite = ET.Element("testsuite", name=f"ragjudge {self.command}", tests=str(len(self.cases)),
                           failures=str(failures), errors=str(errors), skipped="0")
        for cls, name, msg, kind in self.cases:
            case = ET.SubElement(suite, "testcase", classname=cls, name=name)
            if msg is not None:
                ET.SubElement(case, kind, message=msg, type=f"gate {kind}").text = msg
        root = ET.Element("testsuites", name="ragjudge", tests=suite.get("tests", "0"),
                          failures=str(failures), errors=str(errors))
        root.append(suite)
        ET.indent(root)
        try:
            Path(path).write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
        except OSError as exc:
            raise InputError(f"cannot write the JUnit report ({exc.strerror or exc})", source=str(path)) from None
