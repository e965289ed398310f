"""BEIR: qrels TSV ``query-id<TAB>corpus-id<TAB>score`` and whole dataset folders
(``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data import Dedup, Qrels
from ..errors import InputError
from .numbers import parse_int
from .streams import Input, PathLike, decode_text, opened
from .texts import read_corpus, read_queries

__all__ = ["BeirDataset", "parse_beir_qrels", "read_beir_qrels", "read_beir"]


def parse_beir_qrels(
    text: str | bytes, *, source: str | None = None, dedup: Dedup = "error"
) -> Qrels:
    """Qrels from BEIR TSV text. A first row whose score is not a number is the header
    (``query-id corpus-id score``) and skipped; every other row is data."""
    if isinstance(text, bytes):
        text = decode_text(text, source)
    elif text.startswith("\ufeff"):
        text = text[1:]
    qs: list[str] = []
    ds: list[str] = []
    gs: list[int] = []
    lines: list[int] = []
    seen_data = False
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise InputError(
                f"expected 3 tab-separated columns 'query-id corpus-id score', got {len(fields)}",
                source=source,
                line=lineno,
                field="columns",
            )
        qid, docid, grade = fields[0].strip(), fields[1].strip(), fields[2].strip()
        if not seen_data:
            seen_data = True
            # Only a score without a digit marks a header ("score"): a first row "q1 d1 0.5"
            # or "q1 d1 1_0" is data (and an error below), never silently dropped.
            if not any(c.isdigit() for c in grade):
                continue
        for name, value in (("query-id", qid), ("corpus-id", docid)):
            if not value:
                raise InputError("empty id", source=source, line=lineno, field=name)
        qs.append(qid)
        ds.append(docid)
        gs.append(parse_int(grade.encode("utf-8"), source, lineno, "score"))
        lines.append(lineno)
    if not qs:
        raise InputError(
            "no judgments found: the input is empty or has only a header", source=source
        )
    return Qrels.from_arrays(
        qs, ds, np.array(gs, dtype=np.int64), source=source,
        line_numbers=np.array(lines, dtype=np.int64), dedup=dedup,
    )


def read_beir_qrels(path: PathLike | Input, *, dedup: Dedup = "error") -> Qrels:
    """Qrels from a BEIR TSV file (``.gz``, pipe or ``-`` too)."""
    with opened(path) as inp:
        return parse_beir_qrels(inp.read(), source=inp.source, dedup=dedup)


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR dataset split: ``corpus`` and ``queries`` as ``{id: text}``, ``qrels`` of the split.

    ``queries`` holds only the queries judged in the split (as BEIR's own loader does) unless
    read with ``all_queries=True``.
    """

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: Qrels
    split: str
    path: str


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def read_beir(
    path: PathLike,
    split: str = "test",
    *,
    corpus: bool = True,
    all_queries: bool = False,
    dedup: Dedup = "error",
) -> BeirDataset:
    """Read a BEIR dataset folder in one call: ``corpus.jsonl``, ``queries.jsonl`` and
    ``qrels/{split}.tsv`` (each may be ``.gz``). ``corpus=False`` skips the (large) corpus;
    ``all_queries=True`` keeps every query, not only those judged in the split."""
    folder = Path(os.fspath(path))
    if not folder.is_dir():
        raise InputError("not a folder (expected a BEIR dataset folder)", source=str(folder))
    qrels_file = _find(folder / "qrels", f"{split}.tsv")
    if qrels_file is None:
        found = sorted(p.name.split(".")[0] for p in (folder / "qrels").glob("*.tsv*"))
        have = f"; splits found: {', '.join(found)}" if found else ""
        raise InputError(f"no qrels/{split}.tsv{have}", source=str(folder), field="split")
    missing = [n for n in (["corpus.jsonl"] if corpus else []) + ["queries.jsonl"]
               if _find(folder, n) is None]
    if missing:
        raise InputError(f"missing {', '.join(missing)}", source=str(folder))
    qrels = read_beir_qrels(qrels_file, dedup=dedup)
    texts = read_queries(_find(folder, "queries.jsonl"), format="jsonl")  # type: ignore[arg-type]
    judged = set(qrels.query_ids)
    unknown = sorted(judged - set(texts))
    if unknown:
        raise InputError(
            f"{len(unknown)} judged queries have no text in queries.jsonl (e.g. {unknown[0]!r})",
            source=str(qrels_file), field="query-id",
        )
    queries = texts if all_queries else {q: t for q, t in texts.items() if q in judged}
    docs = read_corpus(_find(folder, "corpus.jsonl"), format="jsonl") if corpus else {}  # type: ignore[arg-type]
    return BeirDataset(corpus=docs, queries=queries, qrels=qrels, split=split, path=str(folder))
