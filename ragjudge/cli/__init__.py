"""The ``ragjudge`` command line. It only parses arguments and calls the library.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its
parser and sets ``func`` (``args -> int`` exit status). Errors ragjudge raises on purpose
(:class:`ragjudge.errors.RagjudgeError`) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import RagjudgeError

__all__ = ["main", "build_parser"]

# Module names under ragjudge/cli/; a module may register more than one command. Modules that
# are not written yet are skipped, so parallel work can add a subcommand without touching this.
_SUBCOMMANDS = ("evaluate", "judge", "rag", "agree", "trust", "synth", "serve", "fuse", "plot", "retrieve", "ui")


def build_parser() -> argparse.ArgumentParser:
    from importlib import import_module

    parser = argparse.ArgumentParser(
        prog="ragjudge",
        description="Evaluate retrieval and RAG systems with or without human labels.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"ragjudge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _SUBCOMMANDS:
        try:
            module = import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            # A subcommand module not written yet must not break the others.
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        module.register(sub)
    # Kept so that main() can let the subcommand's own parser report a bad option: its usage
    # line is the one that helps, not the top-level "ragjudge [-h] COMMAND ...".
    parser.set_defaults(subparsers=sub.choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = args.subparsers.get(args.command, parser)
        sub.error("unrecognized arguments: " + " ".join(extra))
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
