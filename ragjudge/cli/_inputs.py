"""Reading the qrels, runs and BEIR folders named on a command line (and writing a command's
text output), the same way in every subcommand: ``--qrels-format`` / ``--run-format`` override the sniffed format, ``-`` (or
``/dev/stdin``) is standard input, named pipes and ``<(zcat run.gz)`` work, and
``--beir DIR --split NAME`` reads a BEIR dataset folder."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..data import Dedup, Qrels, Run
from ..errors import InputError
from ..io import QRELS_FORMATS, RUN_FORMATS, BeirDataset, read_beir, read_qrels, read_run
from ..io.streams import STDIN

__all__ = [
    "add_format_options",
    "add_beir_options",
    "check_inputs",
    "read_qrels_arg",
    "read_run_arg",
    "beir_from_args",
    "write_output",
    "flag_of",
    "flags_named",
    "add_option",
    "options_from_args",
]

# Library parameters whose flag is not the parameter's own spelling.
_FLAG_OF = {"prompts": "--prompt", "judge_pool": "--judge-pool", "embedding_model": "--embedding-model",
            "default_k": "-k"}


def flag_of(field: str) -> str:
    """The command-line flag of a library parameter (``roundtrip_k`` -> ``--roundtrip-k``,
    ``n`` -> ``-n``): the library names its parameters, the CLI speaks in flags."""
    if field in _FLAG_OF:
        return _FLAG_OF[field]
    return "-" + field if len(field) == 1 else "--" + field.replace("_", "-")


class flags_named:  # noqa: N801 (used as a context manager: ``with flags_named(...):``)
    """Within the block, an :class:`InputError` naming one of ``params`` (library parameter
    names) names its flag instead. Errors about files, lines and fields of data pass as they are."""

    def __init__(self, *params: str) -> None:
        self.params = frozenset(params)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if isinstance(exc, InputError) and exc.field in self.params:
            exc.field = flag_of(exc.field)
        return False


def add_option(group: Any, options: Any, name: str, *flags: str, default_note: bool = True,
               **kwargs: Any) -> Any:
    """One flag of an options value's field (``options``: e.g. ``SynthOptions``): its default
    and help come from the field, where they are stated once; ``flags`` default to the
    field's own flag (:func:`flag_of`)."""
    default = kwargs.pop("default", options.default(name))
    text = kwargs.pop("help", options.help(name))
    if default_note and default is not None and kwargs.get("action") not in ("store_true", "append"):
        text += f" (default {default})"
    return group.add_argument(*(flags or (flag_of(name),)), dest=name, default=default,
                              help=text, **kwargs)


def options_from_args(options: Any, args: argparse.Namespace, **values: Any) -> Any:
    """The options value (``options``: its class) of a parsed command line: every field the
    command has a flag for, then ``values`` (fields the command converts itself). An error
    names the field's flag."""
    names = options.names()
    given = {n: getattr(args, n) for n in names if hasattr(args, n)}
    given.update(values)
    with flags_named(*names):
        return options(**given)


def write_output(text: str, output: str | None) -> None:
    """``text`` to the file ``output`` (a one-line error if it cannot be written) or stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        with open(output, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise InputError(f"cannot write output ({exc.strerror or exc})", source=output) from None


def check_writable(paths: list[str | None]) -> None:
    """Each output path can be written (its folder is created when missing): a one-line
    error before any paid call, instead of a lost result after it."""
    for path in paths:
        if not path:
            continue
        target = Path(path)
        if target.is_dir():
            raise InputError("is a directory; give a file name", source=str(path))
        probe = target.with_name(f".ragjudge-probe-{target.name}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
        except OSError as exc:
            raise InputError(f"cannot write here ({exc.strerror or exc})", source=str(path)) from None
        finally:
            try:
                probe.unlink(missing_ok=True)
            except OSError:
                pass


def add_format_options(p: Any, *, qrels: bool = True, runs: bool = True) -> None:
    """``--qrels-format`` and/or ``--run-format`` (default ``auto``: sniffed from the content)."""
    if qrels:
        p.add_argument("--qrels-format", choices=("auto", *QRELS_FORMATS), default="auto",
                       help="qrels file format (default auto: from the content, then the name)")
    if runs:
        p.add_argument("--run-format", choices=("auto", *RUN_FORMATS), default="auto",
                       help="run file format; msmarco = 'qid docid rank' (default auto)")


def add_beir_options(p: Any, what: str) -> None:
    """``--beir DIR`` and ``--split NAME`` (default ``test``)."""
    p.add_argument("--beir", metavar="DIR",
                   help=f"a BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv): {what}")
    p.add_argument("--split", default="test", metavar="NAME",
                   help="with --beir: the qrels split to read (default test)")


def check_inputs(paths: list[str]) -> None:
    """Fail early and in one line on a missing input, or on standard input named twice."""
    stdin = [p for p in paths if p in STDIN]
    if len(stdin) > 1:
        raise InputError("standard input ('-') can be read only once", source=stdin[0])
    for path in paths:
        if path not in STDIN and not os.path.exists(path):
            raise InputError("file not found", source=path)


def read_qrels_arg(path: str, args: argparse.Namespace, *, dedup: Dedup = "error") -> Qrels:
    return read_qrels(path, format=getattr(args, "qrels_format", "auto"), dedup=dedup)


def read_run_arg(
    path: str, args: argparse.Namespace, *, name: str | None = None, dedup: Dedup = "error"
) -> Run:
    return read_run(path, name=name, format=getattr(args, "run_format", "auto"), dedup=dedup)


def beir_from_args(
    args: argparse.Namespace, *, corpus: bool = True, all_queries: bool = False,
    dedup: Dedup = "error",
) -> BeirDataset | None:
    """The BEIR folder given with ``--beir`` (None without it)."""
    folder = getattr(args, "beir", None)
    if folder is None:
        return None
    return read_beir(folder, split=args.split, corpus=corpus, all_queries=all_queries, dedup=dedup)
