"""The ``ragjudge`` command line. It only parses arguments and calls the library.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its
parser and sets ``func`` (``args -> int`` exit status). Errors ragjudge raises on purpose
(:class:`ragjudge.errors.RagjudgeError`) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence
from importlib import import_module

from .._version import __version__
from ..errors import RagjudgeError

__all__ = ["main", "build_parser"]

# Each command, the module that registers it, and its one-line help. ``ragjudge --help`` and
# the parser of one command read this table, so only the command being run is imported
# (tests/test_startup.py checks that it matches what the modules register).
_COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("evaluate", "score run(s) against qrels (trec_eval-compatible); compare several runs"),
    "compare": ("evaluate", "compare runs: paired tests, Holm correction, bootstrap intervals"),
    "judge": ("judge", "grade pooled run documents with an LLM and write qrels"),
    "rag": ("rag", "RAG metrics on samples (context precision/recall, faithfulness, hit@k...)"),
    "nuggets": ("nuggets", "answer-level evaluation as TREC RAG does it: nuggets, scores, citation support"),
    "agree": ("agree", "label and system-ranking agreement between two qrels, with bootstrap intervals"),
    "plan-labels": ("trust", "how many human-labelled queries a target interval width needs (from a pilot)"),
    "simulate-judge": ("trust", "labels of a simulated judge (known confusion matrix) from true qrels"),
    "ppi-samples": ("trust", "prediction-powered estimates of RAG sample metrics from a human-scored subset"),
    "synth": ("synth", "generate synthetic queries, qrels and RAG samples from a corpus"),
    "serve": ("serve", "run the HTTP evaluation service (FastAPI + uvicorn)"),
    "fuse": ("fuse", "fuse several runs into one (rrf, combsum, combmnz, wsum)"),
    "retrieve": ("retrieve", "make a run: BM25, dense (embeddings) or hybrid retrieval over a corpus"),
    "ui": ("ui", "a local web page: results, per-query differences, judgments, agreement, labelling"),
}
#: The modules under ragjudge/cli/ that register commands.
_SUBCOMMANDS = tuple(dict.fromkeys(module for module, _ in _COMMANDS.values()))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given ``command``, of that one in full and the others
    as names and help only (what ``ragjudge --help`` and an unknown command need)."""
    parser = argparse.ArgumentParser(
        prog="ragjudge",
        description="Evaluate retrieval and RAG systems with or without human labels.",
    )

    parser.add_argument("--version", action="version", version=f"ragjudge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = set(_SUBCOMMANDS) if command is None else {_COMMANDS[command][0]} if command in _COMMANDS else set()
    registered: set[str] = set()
    # In the table's order: a module registers its commands together, where its first one is.
    for name, (module_name, text) in _COMMANDS.items():
        if module_name not in wanted:
            sub.add_parser(name, help=text)
        elif module_name not in registered:
            import_module(f"{__name__}.{module_name}").register(sub)
            registered.add(module_name)
    # Kept so that main() can let the subcommand's own parser report a bad option: its usage
    # line is the one that helps, not the top-level "ragjudge [-h] COMMAND ...".
    parser.set_defaults(subparsers=sub.choices)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command named in ``argv`` (its first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: object = None, line: str | None = None) -> None:
    print(f"ragjudge: warning: {message}", file=sys.stderr)


class _Notices(logging.Handler):
    """The library's run-time notices (an endpoint down, a server renaming a model, a run
    slowed by faults) as ``ragjudge: ...`` lines on the stderr of the moment. Python's
    last-resort handler would print them only while no other library configured logging
    (MLflow, Ray and notebooks do), and bare."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            print(text if text.startswith("ragjudge:") else f"ragjudge: {text}", file=sys.stderr)
        except Exception:  # noqa: BLE001 -- a notice never breaks the run
            self.handleError(record)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(argv) or "")
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = args.subparsers.get(args.command, parser)
        sub.error("unrecognized arguments: " + " ".join(extra))

    # A library warning is one line, like every other message of the command line.
    shown, warnings.showwarning = warnings.showwarning, _one_line_warning
    notices = _Notices(logging.WARNING)
    library = logging.getLogger("ragjudge")
    library.addHandler(notices)
    try:
        return int(args.func(args) or 0)
    except RagjudgeError as exc:
        print(f"ragjudge: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ragjudge: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    finally:
        if "ragjudge.llm.postgres" in sys.modules:  # answers made while a cache's database was away
            sys.modules["ragjudge.llm.postgres"].close_kept()
        warnings.showwarning = shown
        library.removeHandler(notices)
