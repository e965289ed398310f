"""``read_qrels`` / ``read_run`` and their ``parse_*`` twins: sniff the format (see
:mod:`ragjudge.io.sniff`), then hand the input to the format's reader."""

from __future__ import annotations

from typing import Literal

from ..data import Dedup, Qrels, Run
from ..errors import InputError
from .beir import parse_beir_qrels, read_beir_qrels
from .jsonfmt import parse_json_qrels, parse_json_run, read_json_qrels, read_json_run
from .sniff import QRELS_FORMATS, RUN_FORMATS, sniff_format
from .streams import PathLike, as_bytes, open_input
from .trec import (
    parse_msmarco_run,
    parse_trec_qrels,
    parse_trec_run,
    read_msmarco_run,
    read_trec_qrels,
    read_trec_run,
    run_name,
)

__all__ = ["parse_qrels", "read_qrels", "parse_run", "read_run", "QrelsFormat", "RunFormat"]

QrelsFormat = Literal["auto", "trec", "beir", "json"]
RunFormat = Literal["auto", "trec", "msmarco", "json"]


def _check(fmt: str, allowed: tuple[str, ...], what: str) -> None:
    if fmt != "auto" and fmt not in allowed:
        raise InputError(
            f"unknown {what} format {fmt!r}; expected one of auto, {', '.join(allowed)}",
            field="format",
        )


def parse_qrels(
    text: str | bytes,
    *,
    source: str | None = None,
    format: QrelsFormat = "trec",
    dedup: Dedup = "error",
) -> Qrels:
    """Parse qrels text in ``format`` ("trec", "beir", "json" or "auto").

    ``source`` names the input in error messages. A duplicate (query, document) pair raises
    :class:`InputError` unless ``dedup="first"``.
    """
    _check(format, QRELS_FORMATS, "qrels")
    data = as_bytes(text)
    fmt = sniff_format(data[:65536], source, QRELS_FORMATS) if format == "auto" else format
    if fmt == "json":
        return parse_json_qrels(data, source=source)
    if fmt == "beir":
        return parse_beir_qrels(data, source=source, dedup=dedup)
    return parse_trec_qrels(data, source=source, dedup=dedup)


def read_qrels(path: PathLike, *, format: QrelsFormat = "auto", dedup: Dedup = "error") -> Qrels:
    """Read a qrels file: TREC, BEIR TSV or JSON; ``.gz``, named pipes and ``-`` (stdin) too.

    ``format="auto"`` looks at the content first (4 columns ending in an integer are TREC, 3
    tab-separated columns BEIR, ``{`` JSON) and at the name only when the content is silent.
    """
    _check(format, QRELS_FORMATS, "qrels")
    with open_input(path) as inp:
        fmt = sniff_format(inp.peek(), inp.source, QRELS_FORMATS) if format == "auto" else format
        if fmt == "json":
            return read_json_qrels(inp)
        if fmt == "beir":
            return read_beir_qrels(inp, dedup=dedup)
        return read_trec_qrels(inp, dedup=dedup)


def parse_run(
    text: str | bytes,
    *,
    source: str | None = None,
    format: RunFormat = "trec",
    name: str = "run",
    dedup: Dedup = "error",
) -> Run:
    """Parse a run in ``format`` ("trec", "msmarco", "json" or "auto").

    A document listed twice for one query raises :class:`InputError` naming the line, unless
    ``dedup="first"`` (keep the first line).
    """
    _check(format, RUN_FORMATS, "run")
    data = as_bytes(text)
    fmt = sniff_format(data[:65536], source, RUN_FORMATS) if format == "auto" else format
    if fmt == "json":
        return parse_json_run(data, source=source, name=name)
    if fmt == "msmarco":
        return parse_msmarco_run(data, source=source, name=name, dedup=dedup)
    return parse_trec_run(data, source=source, name=name, dedup=dedup)


def read_run(
    path: PathLike,
    *,
    name: str | None = None,
    format: RunFormat = "auto",
    dedup: Dedup = "error",
) -> Run:
    """Read a run: TREC, MS MARCO (``qid docid rank``) or JSON; ``.gz``, pipes and ``-`` too.

    ``name`` defaults to the file stem; for ``/dev/fd/N`` (bash's ``<(...)``), to the TREC
    run's tag column.
    """
    _check(format, RUN_FORMATS, "run")
    with open_input(path) as inp:
        fmt = sniff_format(inp.peek(), inp.source, RUN_FORMATS) if format == "auto" else format
        run_as = name if name is not None else run_name(path, inp.peek() if fmt == "trec" else None)
        if fmt == "json":
            return read_json_run(inp, name=run_as)
        if fmt == "msmarco":
            return read_msmarco_run(inp, name=run_as, dedup=dedup)
        return read_trec_run(inp, name=run_as, dedup=dedup)
