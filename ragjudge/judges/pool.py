"""A pool you can keep: every LLM label judged on demand, with its provenance, in one file.

The file *is* TREC qrels (``qid 0 docid grade``), so every ragjudge command reads it as qrels
(``ragjudge evaluate pool.qrels run``); ``#`` lines, comments to a qrels reader, keep what the
labels alone cannot say:

* ``#judge {...}``: the model and prompt (id and sha256) every label came from;
* ``#label {...}``: one judgment per label (``Judgment.to_dict()``: grade, reasoning, model,
  prompt, sampling parameters, usage);
* ``#run {...}``: each run scored against the pool -- its file and a fingerprint of its
  content, the judging depth, the metrics' means and how many labels the pool held then.

Judging with a pool judges only the pairs it lacks and adds them; the runs recorded in it are
then re-scored against the grown pool, so scores of runs judged at different times are
comparable (:func:`ragjudge.judges.ondemand.rescore_pool`). The file is rewritten whole, through a
temporary file and an atomic rename, after every judging step (an interrupted run keeps what it
paid for).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..data import Qrels, Run
from ..errors import InputError
from ..io import format_qrels, read_qrels
from ..io.streams import decode_text

__all__ = ["Pool", "PoolRun", "run_fingerprint"]

_HEADER = ("# ragjudge pool 1: TREC qrels of LLM labels (ragjudge reads this file as qrels); the "
           "'#' lines keep each label's provenance and the runs scored against the pool\n")


def run_fingerprint(run: Run) -> str:
    """A sha256 of a run's content (queries, documents, scores): the same run read again, from
    any format, has the same fingerprint."""
    h = hashlib.sha256()
    for a in run.arrays:
        arr = np.ascontiguousarray(a)
        h.update(str(arr.dtype).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


@dataclass
class PoolRun:
    """A run scored against the pool: where it came from and what it scored, with how many
    labels the pool held at the time (``labels``)."""

    name: str
    path: str | None
    fingerprint: str
    depth: int
    labels: int
    mean: dict[str, float | None]
    scored: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "fingerprint": self.fingerprint,
                "depth": self.depth, "labels": self.labels, "mean": self.mean, "scored": self.scored}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PoolRun:
        mean = d.get("mean") or {}
        return cls(str(d["name"]), None if d.get("path") is None else str(d["path"]),
                   str(d.get("fingerprint") or ""), int(d.get("depth") or 0),
                   int(d.get("labels") or 0),
                   {str(k): None if v is None else float(v) for k, v in dict(mean).items()},
                   str(d.get("scored") or ""))


@dataclass
class Pool:
    """The labels of a kept pool (``grades``, in the order they were added), their provenance
    (``records``), the judge they came from and the runs scored against it."""

    path: Path | None = None
    judge: dict[str, Any] | None = None
    grades: dict[tuple[str, str], int] = field(default_factory=dict)
    records: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, PoolRun] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.grades)

    # -- reading -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Pool:
        """The pool in ``path``; an empty pool (to be written there) when the file does not
        exist. The labels are read by the qrels reader (which names a bad line); a ``#`` line
        of the pool's own kinds must hold a JSON object."""
        p = Path(path)
        pool = cls(path=p)
        if not p.exists():
            return pool
        if p.is_dir():
            raise InputError("is a folder, not a pool file", source=str(p), field="--pool")

        has_data = False

        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read the pool: {exc.strerror or exc}", source=str(p), field="--pool") from None
        lines = decode_text(raw, str(p)).splitlines()  # bad UTF-8 names its line
        for lineno, line in enumerate(lines, 1):
            kind, _, body = line.strip().partition(" ")
            has_data = has_data or bool(kind and not kind.startswith("#"))
            if kind not in ("#judge", "#label", "#run"):
                continue
            try:
                obj = json.loads(body)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                if kind == "#judge":
                    pool.judge = obj
                elif kind == "#label":
                    pool.records[(str(obj["qid"]), str(obj["docid"]))] = obj
                else:
                    r = PoolRun.from_dict(obj)
                    pool.runs[r.name] = r
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"a {kind} line must be a JSON object ({exc})", source=str(p),
                                 line=lineno, field=kind[1:]) from None
        if has_data:
            for q, d, g in read_qrels(p, dedup="first").rows():
                pool.grades[(q, d)] = int(g)
        return pool

    def qrels(self) -> Qrels:
        """The pool's labels as qrels (empty when it has none)."""
        if not self.grades:
            return Qrels.from_arrays([], [], np.zeros(0, dtype=np.int64), source=self._source())
        qs, ds = zip(*self.grades)
        return Qrels.from_arrays(list(qs), list(ds), np.fromiter(self.grades.values(), np.int64),
                                 source=self._source())

    def _source(self) -> str:
        return str(self.path) if self.path is not None else "pool"

    # -- growing -------------------------------------------------------------------------
    def check_judge(self, model: str, prompt: str) -> None:
        """Refuse to mix judges in one pool: its labels are comparable only when one model and
        one prompt made them all."""
        mine = {"model": model, "prompt": prompt}
        if self.judge is None:
            self.judge = mine
            return
        if (self.judge.get("model"), self.judge.get("prompt")) != (model, prompt):
            raise InputError(f"the pool holds labels of model {self.judge.get('model')!r} with prompt "
                             f"{self.judge.get('prompt')!r}, not {model!r} with {prompt!r}: "
                             "use another pool file for another judge", source=self._source(),
                             field="--pool")

    def check_scale(self, grades: Iterable[Any]) -> None:
        """Refuse a kept label outside the judge's scale (``grades``: the prompt's label
        values): the file is plain qrels, so a hand-edited or foreign line would otherwise
        move every mean it enters."""
        allowed = {int(g) for g in grades if isinstance(g, int) and not isinstance(g, bool)}
        if not allowed:
            return  # a prompt without an integer scale: nothing to check against
        for (q, d), g in self.grades.items():
            if g not in allowed:
                raise InputError(f"grade {g} of query {q!r}, document {d!r} is outside the judge's "
                                 f"scale {sorted(allowed)}", source=self._source(),
                                 line=self._line_of(q, d), field="grade")

    def _line_of(self, qid: str, docid: str) -> int | None:
        """The line of the label of (``qid``, ``docid``) in the pool file, for an error."""
        if self.path is None or not self.path.exists():
            return None
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) == 4 and parts[0] == qid and parts[2] == docid:
                    return lineno
        return None

    def add(self, judgments: Iterable[Any]) -> int:
        """Add the successful judgments the pool lacks (a label already kept wins); returns
        how many were added."""
        added = 0
        for j in judgments:
            key = (j.qid, j.docid)
            if j.grade is None or key in self.grades:
                continue
            self.grades[key] = int(j.grade)
            rec = j.to_dict()
            rec.pop("cached", None)  # a property of this command, not of the label
            self.records[key] = rec
            added += 1
        return added

    def record(self, run: Run, *, path: str | os.PathLike[str] | None, depth: int,
               mean: Mapping[str, float | None]) -> PoolRun:
        """Record (or replace) ``run``'s scores against the pool as it is now."""
        r = PoolRun(run.name, None if path is None else os.path.abspath(os.fspath(path)),
                    run_fingerprint(run), depth, len(self),
                    {str(k): None if v is None else float(v) for k, v in mean.items()},
                    datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.runs[run.name] = r
        return r

    # -- writing -------------------------------------------------------------------------
    def text(self) -> str:
        """The pool file's content."""
        parts = [_HEADER]
        if self.judge is not None:
            parts.append("#judge " + json.dumps(self.judge, sort_keys=True) + "\n")
        if self.grades:
            parts.append(format_qrels(self.qrels(), "trec"))
        parts.extend("#label " + json.dumps(self.records[k], sort_keys=True) + "\n"
                     for k in self.grades if k in self.records)
        parts.extend("#run " + json.dumps(r.to_dict(), sort_keys=True, allow_nan=False) + "\n"
                     for r in self.runs.values())
        return "".join(parts)

    def save(self) -> None:
        """Write the pool (temporary file, then an atomic rename: never half a pool)."""
        if self.path is None:
            return
        text = self.text()
        folder = self.path.parent if str(self.path.parent) else Path(".")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise InputError(f"cannot write the pool: {exc.strerror}", source=str(self.path),
                             field="--pool") from None

    def info(self) -> dict[str, Any]:
        """What a report's ``meta["judging"]["pool"]`` says of the pool."""
        return {"file": None if self.path is None else str(self.path), "labels": len(self),
                "runs": list(self.runs), "judge": self.judge}
