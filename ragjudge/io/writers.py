"""Writing qrels and runs: TREC, BEIR TSV and JSON text, plain or gzipped files.

Scores are printed with ``repr(float)``, the shortest text that reads back to the identical
float, so reading a written file yields identical values. Ids a format cannot hold (empty,
whitespace, a query id starting with ``#``) are refused before anything is written.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator

import numpy as np

from ..data import Qrels, Run
from ..errors import InputError
from ..ids import decode_id, full_id, key_rows
from .sniff import QRELS_FORMATS
from .streams import PathLike, source_name

__all__ = ["format_qrels", "write_qrels", "format_run", "write_run"]

# Formats a run can be written in (MS MARCO runs are read only: they carry no score).
_RUN_WRITE_FORMATS = ("trec", "json")


def _ws_mask(raw: np.ndarray, tabs_only: bool) -> np.ndarray:
    if tabs_only:
        return (raw == 9) | (raw == 10) | (raw == 13)
    return (raw == 32) | ((raw >= 9) & (raw <= 13))


def _check_ids(ids: np.ndarray, what: str, fmt: str, *, hash_ok: bool) -> None:
    """Refuse ids that ``fmt`` cannot hold without reading back differently (vectorized)."""
    n = len(ids)
    if not n:
        return
    keys = key_rows(ids)
    if keys.any():  # long-id keys stand for ids: check those ids themselves (few)
        _check_ids(np.array([full_id(b) for b in ids[keys].tolist()], dtype=bytes), what, fmt,
                   hash_ok=hash_ok)
        ids = ids[~keys]
        n = len(ids)
        if not n:
            return
    width = ids.dtype.itemsize
    raw = ids.view(np.uint8).reshape(n, width)
    tabs_only = fmt == "BEIR TSV"
    bad = _ws_mask(raw, tabs_only).any(axis=1) | (raw[:, 0] == 0)
    if tabs_only:  # the BEIR reader strips spaces around fields
        lengths = np.char.str_len(ids)
        last = raw[np.arange(n), np.maximum(lengths - 1, 0)]
        bad |= (raw[:, 0] == 32) | (last == 32)
    if not hash_ok:
        bad |= raw[:, 0] == 35
    if bad.any():
        value = ids[int(np.flatnonzero(bad)[0])].decode("utf-8", "replace")
        raise InputError(
            f"{what} {value!r} cannot be written as {fmt} (it is empty, contains whitespace"
            f"{'' if hash_ok else ' or starts with #'}); write JSON instead",
            field=what,
        )


def _qrels_chunks(qrels: Qrels, format: str) -> Iterator[str]:
    qids, offsets, docids, grades = qrels.arrays
    if format == "json":
        yield json.dumps(qrels.to_dict(), ensure_ascii=False, indent=1) + "\n"
        return
    if format == "trec":
        fmt, mid, sep = "TREC", " 0 ", " "
    elif format == "beir":
        fmt, mid, sep = "BEIR TSV", "\t", "\t"
        yield "query-id\tcorpus-id\tscore\n"
    else:
        raise InputError(
            f"unknown qrels format {format!r}; expected one of {', '.join(QRELS_FORMATS)}",
            field="format",
        )
    _check_ids(qids, "query id", fmt, hash_ok=False)
    _check_ids(docids, "doc id", fmt, hash_ok=True)
    ol = offsets.tolist()
    for i, q in enumerate(qids.tolist()):
        qs = q.decode("utf-8")
        lo, hi = ol[i], ol[i + 1]
        yield "".join(
            f"{qs}{mid}{decode_id(d)}{sep}{g}\n"
            for d, g in zip(docids[lo:hi].tolist(), grades[lo:hi].tolist())
        )


def _run_chunks(run: Run, format: str, tag: str | None) -> Iterator[str]:
    qids, offsets, docids, scores = run.arrays
    if format == "json":
        yield json.dumps(run.to_dict(), ensure_ascii=False, indent=1) + "\n"
        return
    if format != "trec":
        raise InputError(
            f"unknown run format {format!r}; expected one of {', '.join(_RUN_WRITE_FORMATS)}",
            field="format",
        )
    _check_ids(qids, "query id", "TREC", hash_ok=False)
    _check_ids(docids, "doc id", "TREC", hash_ok=True)
    if tag is not None and (not tag or tag.split() != [tag]):
        raise InputError(f"a TREC tag is one word, got {tag!r}", field="tag")
    words = (run.name if tag is None else tag).split()
    tag = words[0] if words else "run"  # the tag is one token; it is not read back
    ol = offsets.tolist()
    for i, q in enumerate(qids.tolist()):
        qs = q.decode("utf-8")
        lo, hi = ol[i], ol[i + 1]
        # repr(float) is the shortest text that reads back to the identical float.
        yield "".join(
            f"{qs} Q0 {decode_id(d)} {r} {x!r} {tag}\n"
            for r, (d, x) in enumerate(zip(docids[lo:hi].tolist(), scores[lo:hi].tolist()), 1)
        )


def format_qrels(qrels: Qrels, format: str = "trec") -> str:
    """Qrels as text: ``trec`` (``qid 0 docid grade``), ``beir`` (TSV with header) or ``json``."""
    return "".join(_qrels_chunks(qrels, format))


def format_run(run: Run, format: str = "trec", *, tag: str | None = None) -> str:
    """A run as text: ``trec`` (``qid Q0 docid rank score tag``, rank from 1) or ``json``.

    Scores are written with ``repr`` so they read back identical; ``tag`` defaults to the run name.
    """
    return "".join(_run_chunks(run, format, tag))


def _write_chunks(path: PathLike, chunks: Iterator[str]) -> None:
    src = source_name(path)
    first = next(chunks, "")  # format errors are raised before the file is created
    try:
        # Like `mkdir -p`: write_run(run, "out/bm25.trec") into a folder that does not exist yet.
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        opener = gzip.open if src.lower().endswith(".gz") else open
        with opener(path, "wb") as f:  # type: ignore[operator]
            f.write(first.encode("utf-8"))
            batch: list[str] = []
            size = 0
            for chunk in chunks:
                batch.append(chunk)
                size += len(chunk)
                if size > 1 << 20:
                    f.write("".join(batch).encode("utf-8"))
                    batch, size = [], 0
            f.write("".join(batch).encode("utf-8"))
    except OSError as exc:
        raise InputError(f"cannot write file ({exc.strerror or exc})", source=src) from None


def _format_for_path(path: PathLike, default: str, allowed: tuple[str, ...]) -> str:
    name = source_name(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".json") and "json" in allowed:
        return "json"
    if name.endswith(".tsv") and "beir" in allowed:
        return "beir"
    return default


def write_qrels(qrels: Qrels, path: PathLike, format: str = "auto") -> None:
    """Write qrels; ``format="auto"`` picks JSON for ``.json``, BEIR for ``.tsv``, else TREC.
    A ``.gz`` path is gzipped."""
    if format == "auto":
        format = _format_for_path(path, "trec", QRELS_FORMATS)
    _write_chunks(path, _qrels_chunks(qrels, format))


def write_run(run: Run, path: PathLike, format: str = "auto", *, tag: str | None = None) -> None:
    """Write a run; ``format="auto"`` picks JSON for ``.json``, else TREC. ``.gz`` is gzipped."""
    if format == "auto":
        format = _format_for_path(path, "trec", _RUN_WRITE_FORMATS)
    _write_chunks(path, _run_chunks(run, format, tag))

