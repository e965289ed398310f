"""Human nugget assignments for PPI: which (answer, nugget) items a person should assign, the
labels log read back as human :class:`~.data.Assignment` values.

PPI (:func:`ragjudge.trust.ppi_mean`, through :func:`.agree.nugget_agreement`) needs human
scores on a *simple random sample* of the answers the LLM assigned. :func:`sample_nuggets_to_label`
draws queries at random (seeded) and lists every run's answer to each, with all its nuggets (an
answer's score needs every nugget), queries in the random order and answers shuffled within a
query: labelling in that order makes every prefix of completed queries a simple random sample of
each run's answers, so an estimate can be shown while labelling goes on.

The to-label file is JSONL: one ``{"kind": "meta", "format": "ragjudge-nugget-to-label/1", ...}``
line (seed, sampled queries, metric, the LLM assignments file) and one
``{"kind": "answer", "qid", "run_id", "query", "answer", "nuggets": [{"text", "importance",
"llm", "reason"}]}`` line per answer (``llm``/``reason``: the LLM's assignment, shown only in
review). The labels log beside it is the passage labels' log (:mod:`ragjudge.trust.labelling`)
with nugget records: ``{"op": "label", "qid", "run_id", "nugget", "text", "assignment", "who",
"at", "llm_shown"}`` (``assignment`` null: skipped / unsure), ``{"op": "reveal", "qid",
"run_id", "who", "at"}`` (the assessor turned review on for that answer) and ``{"op": "undo",
"who", "at"}`` (takes back the same assessor's latest label still in force).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io.records import jsonl_objects
from ..io.sniff import NUGGET_TO_LABEL_FORMAT  # the format id, which io.sniff recognises
from ..trust.labelling import replay_labels, undo_target
from ..trust.ppi import plan_labels
from .data import LABELS, Answer, AssignedNugget, Assignment, read_assignments
from .score import METRICS, answer_scores

__all__ = [
    "NUGGET_TO_LABEL_FORMAT",
    "NuggetToLabel",
    "complete_nugget_queries",
    "human_assignments",
    "human_from_files",
    "llm_assignments_of",
    "plan_nugget_labels",
    "nugget_key",
    "nugget_undo_target",
    "parse_nugget_to_label",
    "read_labels_log",
    "read_nugget_to_label",
    "replay_nugget_labels",
    "revealed_answers",
    "sample_nuggets_to_label",
]


@dataclass
class NuggetToLabel:
    """A sample of answers whose nuggets a person assigns: ``meta`` and the answers in
    labelling order, each ``{qid, run_id, query, answer, nuggets: [{text, importance, llm,
    reason}]}``."""

    meta: dict[str, Any]
    answers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def queries(self) -> list[str]:
        """The sampled queries, in labelling order."""
        return list(self.meta.get("queries") or dict.fromkeys(a["qid"] for a in self.answers))

    @property
    def items(self) -> int:
        """How many (answer, nugget) items there are to assign."""
        return sum(len(a["nuggets"]) for a in self.answers)

    def index_of(self, qid: str, run_id: str) -> int | None:
        return next((i for i, a in enumerate(self.answers)
                     if a["qid"] == qid and a["run_id"] == run_id), None)

    def to_jsonl(self) -> str:
        lines = [json.dumps({"kind": "meta", **self.meta}, ensure_ascii=False)]
        lines += [json.dumps({"kind": "answer", **a}, ensure_ascii=False) for a in self.answers]
        return "\n".join(lines) + "\n"


def sample_nuggets_to_label(
    assignments: Sequence[Assignment],
    n: int,
    *,
    seed: int = 0,
    metric: str = "all",
    answers: Iterable[Answer] = (),
    extra: Mapping[str, Any] | None = None,
) -> NuggetToLabel:
    """``n`` queries drawn uniformly without replacement (``random.Random(seed)``) from the
    queries of the LLM ``assignments``, with every run's answer to each and all its nuggets
    (the LLM's assignment and reason kept for review). ``answers`` give the texts of answers
    whose assignments do not carry them (the reference implementation's files). Raises :class:`InputError` when ``n`` is
    not positive or there is nothing to sample."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"must be a positive integer, got {n!r}", field="sample")
    if metric not in METRICS:
        raise InputError(f"unknown nugget score {metric!r}; expected {', '.join(METRICS)}",
                         field="metric")
    by_q: dict[str, list[Assignment]] = {}
    for a in assignments:
        if a.nuggets:
            by_q.setdefault(a.qid, []).append(a)
    frame = sorted(by_q)
    if not frame:
        raise InputError("no answer with nuggets to label", field="assignments")
    texts = {(x.run_id, x.qid): x.text for x in answers}
    rng = random.Random(seed)
    chosen = rng.sample(frame, min(n, len(frame)))
    answers: list[dict[str, Any]] = []
    for qid in chosen:
        group = list(by_q[qid])
        rng.shuffle(group)  # no run order for the assessor to lean on
        for a in group:
            answers.append({"qid": a.qid, "run_id": a.run_id, "query": a.query,
                            "answer": a.answer_text or texts.get((a.run_id, a.qid), ""),
                            "nuggets": [{"text": x.text, "importance": x.importance,
                                         "llm": x.assignment, "reason": x.reason}
                                        for x in a.nuggets]})
    runs = list(dict.fromkeys(a.run_id for a in assignments))
    meta = {"format": NUGGET_TO_LABEL_FORMAT, "seed": seed, "sample": len(chosen),
            "frame": len(frame), "queries": chosen, "runs": runs, "metric": metric,
            "labels": list(LABELS), "answers": len(answers),
            "items": sum(len(a["nuggets"]) for a in answers), **dict(extra or {})}
    return NuggetToLabel(meta, answers)


def parse_nugget_to_label(text: str, source: str = "<to-label>") -> NuggetToLabel:
    """A nugget to-label file's content (see the module docstring)."""
    meta: dict[str, Any] | None = None
    answers: list[dict[str, Any]] = []
    for i, rec in jsonl_objects(text, source):
        kind = rec.pop("kind", None)
        if kind == "meta":
            meta = rec
        elif kind == "answer":
            for name in ("qid", "run_id"):
                if not isinstance(rec.get(name), str):
                    raise InputError("expected a string", source=source, line=i, field=name)
            nug = rec.get("nuggets")
            if not isinstance(nug, list) or not all(
                    isinstance(x, dict) and isinstance(x.get("text"), str) for x in nug):
                raise InputError("expected a list of nuggets with a text", source=source, line=i,
                                 field="nuggets")
            rec.setdefault("query", "")
            rec.setdefault("answer", "")
            answers.append(rec)
        else:
            raise InputError(f"unknown kind {kind!r} (expected meta or answer)", source=source, line=i)
    if meta is None or meta.get("format") != NUGGET_TO_LABEL_FORMAT:
        raise InputError(f"not a nugget to-label file (no meta line of format "
                         f"{NUGGET_TO_LABEL_FORMAT})", source=source)
    return NuggetToLabel(meta, answers)


def read_nugget_to_label(path: str | Path) -> NuggetToLabel:
    """:func:`parse_nugget_to_label` of a file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(getattr(exc, "strerror", None) or str(exc), source=str(path)) from None
    return parse_nugget_to_label(text, source=str(path))


def nugget_key(rec: Mapping[str, Any]) -> tuple[str, str, int]:
    """What a nugget label record labels: ``(qid, run_id, nugget index)``."""
    return (str(rec["qid"]), str(rec["run_id"]), int(rec["nugget"]))


def replay_nugget_labels(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The nugget labels in force after a labels log (undo and relabel as for passages)."""
    return replay_labels(records, nugget_key)


def nugget_undo_target(records: Iterable[Mapping[str, Any]], who: str) -> tuple[str, str, int] | None:
    """The item an ``undo`` by ``who`` would take back (``None``: nothing)."""
    return undo_target(records, who, nugget_key)  # type: ignore[no-any-return]


def revealed_answers(records: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """``(qid, run_id, who)`` of every answer whose LLM assignments an assessor chose to see."""
    return {(str(r.get("qid")), str(r.get("run_id")), str(r.get("who", "")))
            for r in records if r.get("op") == "reveal"}


def complete_nugget_queries(to_label: NuggetToLabel, labels: Mapping[tuple[str, str, int], Any]) -> list[str]:
    """The sampled queries every item of which has a label or a skip, in labelling order."""
    todo: set[str] = set()
    for a in to_label.answers:
        if any((a["qid"], a["run_id"], i) not in labels for i in range(len(a["nuggets"]))):
            todo.add(a["qid"])
    have = {a["qid"] for a in to_label.answers}
    return [q for q in to_label.queries if q in have and q not in todo]


def human_assignments(to_label: NuggetToLabel, labels: Mapping[tuple[str, str, int], Mapping[str, Any]],
                      *, complete_only: bool = True) -> list[Assignment]:
    """The human assignments of the answers of completed queries (``complete_only``) whose every
    nugget was assigned (an answer with a skipped nugget has no human score and is left out)."""
    keep = set(complete_nugget_queries(to_label, labels)) if complete_only else None
    out = []
    for a in to_label.answers:
        if keep is not None and a["qid"] not in keep:
            continue
        recs = [labels.get((a["qid"], a["run_id"], i)) for i in range(len(a["nuggets"]))]
        if any(r is None or r.get("assignment") is None for r in recs):
            continue
        who = sorted({str(r.get("who") or "") for r in recs if r is not None})
        nuggets = tuple(AssignedNugget(n["text"], n.get("importance"), r["assignment"])  # type: ignore[index]
                        for n, r in zip(a["nuggets"], recs))
        out.append(Assignment(a["qid"], a["run_id"], nuggets, a.get("query") or "",
                              a.get("answer") or "",
                              {"source": "human labels", "who": who,
                               "llm_shown": sum(1 for r in recs if r and r.get("llm_shown"))}))
    return out


def read_labels_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a labels log (a torn last line from a crash is left out)."""
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(rec, dict):
                        out.append(rec)
    except FileNotFoundError:
        pass
    return out


def human_from_files(to_label: str | Path, labels: str | Path) -> list[Assignment]:
    """:func:`human_assignments` of a to-label file and its labels log."""
    tl = read_nugget_to_label(to_label)
    return human_assignments(tl, replay_nugget_labels(read_labels_log(labels)))


def llm_assignments_of(to_label: NuggetToLabel) -> list[Assignment] | None:
    """The LLM assignments file the to-label file names (``None`` when it names none)."""
    path = to_label.meta.get("llm_assignments")
    return read_assignments(path) if path else None


def _run_scores(items: Sequence[Assignment], metric: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for a in items:
        v = answer_scores(a)[0][metric]
        if v is not None:
            out.setdefault(a.run_id, {})[a.qid] = v
    return out


def plan_nugget_labels(
    llm: Sequence[Assignment],
    pilot: Sequence[Assignment],
    width: float,
    *,
    metric: str = "all",
    method: str = "ppi++",
    confidence: float = 0.95,
    population: str = "finite",
) -> list[dict[str, Any]]:
    """How many queries people must assign (every run's answer to each) for a ``width``-wide
    PPI interval of each run's ``metric``, from the LLM's assignments of every answer and a
    pilot of human assignments of a few (:func:`ragjudge.trust.ppi.plan_labels` per run, the
    answers of a run as its items). One dict per run with ``run`` and ``metric`` added; a run
    with fewer than 2 piloted answers is left out."""
    if metric not in METRICS:
        raise InputError(f"unknown nugget score {metric!r}; expected {', '.join(METRICS)}",
                         field="metric")
    ls, hs = _run_scores(llm, metric), _run_scores(pilot, metric)
    out = []
    for run, values in ls.items():
        both = [q for q in hs.get(run, {}) if q in values]
        if len(both) < 2:
            continue
        plan = plan_labels([hs[run][q] for q in both], [values[q] for q in both], len(values), width,
                           method=method, confidence=confidence, population=population,  # type: ignore[arg-type]
                           bounds=(0.0, 1.0))
        out.append({"run": run, "metric": metric, **plan})
    if not out:
        raise InputError("no run has 2 answers in both the LLM and the pilot assignments (same run "
                         "and query)", field="human")
    return out
