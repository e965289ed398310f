"""The page's nugget views, without any web framework: each answer with its nuggets and the
LLM's assignments and reasons (from an LLM assignments file), and labelling a nugget to-label
file (``ragjudge plan-labels --nuggets``) into the workspace's labels log -- blind: the LLM's
assignments are in an answer's labelling view only when the assessor turns review on, a choice
recorded in the log and carried by every label given with them in view (opening a sampled
answer in the answers view counts as review for whoever labels it).

The labels log is the workspace's (same append, lock, torn-line and reload rules); only the
records differ (:mod:`ragjudge.nuggets.labelling`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from ...errors import InputError
from ...nuggets.agree import nugget_agreement
from ...nuggets.labelling import (complete_nugget_queries, human_assignments, nugget_undo_target,
                                  replay_nugget_labels, revealed_answers)
from ...nuggets.score import answer_scores

__all__ = ["NuggetDesk"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _page(items: Sequence[Any], offset: int, limit: int) -> dict[str, Any]:
    offset, limit = max(0, int(offset)), max(1, int(limit))
    return {"total": len(items), "offset": offset, "limit": limit, "items": list(items[offset:offset + limit])}


class NuggetDesk:
    """Nugget answers and labels over a workspace's files. ``records()`` is the labels log
    as it is now (reloaded), ``append(rec)`` adds one record durably, both under ``lock``."""

    def __init__(self, to_label: Any, assignments: list[Any], *, records: Callable[[], list[dict[str, Any]]],
                 append: Callable[[dict[str, Any]], None], lock: Any) -> None:
        self.tl = to_label
        self.assignments = assignments
        self._records = records
        self._append = append
        self._lock = lock
        self._by_answer: dict[tuple[str, str], Any] = {}
        for a in assignments:
            if (a.run_id, a.qid) in self._by_answer:
                raise InputError(f"run {a.run_id!r} has two LLM assignments for query {a.qid!r} "
                                 "(one assignments file per run, or one for all)", field="assignments")
            self._by_answer[(a.run_id, a.qid)] = a
        self._ppi_cache: tuple[Any, Any] | None = None

    # ------------------------------------------------------------------------- reading
    def _need(self) -> Any:
        if self.tl is None:
            raise LookupError("no nugget to-label file was given (ragjudge plan-labels LLM_ASSIGNMENTS "
                              "--nuggets --sample N -o FILE)")
        return self.tl

    def labels(self) -> dict[tuple[str, str, int], dict[str, Any]]:
        with self._lock:
            recs = [r for r in self._records() if r.get("op") == "undo" or "run_id" in r]
        return replay_nugget_labels(recs)

    def overview(self) -> dict[str, Any]:
        return {"answers": len(self.assignments), "labelling": self.tl is not None,
                "runs": list(dict.fromkeys(a.run_id for a in self.assignments))}

    # ------------------------------------------------------------------------- explorer
    def answers(self, run: str = "", search: str = "", offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """Every LLM-assigned answer (filter by run and by query id or text)."""
        if not self.assignments:
            raise LookupError("no LLM nugget assignments were given (assignments=FILE)")
        s = search.strip().lower()
        rows = []
        for a in self.assignments:
            if run and a.run_id != run:
                continue
            if s and s not in a.qid.lower() and s not in a.query.lower():
                continue
            scores, why = answer_scores(a)
            rows.append({"qid": a.qid, "run_id": a.run_id, "query": a.query,
                         "nuggets": len(a.nuggets), "failed": len(a.failed),
                         "all": scores["all"], "vital": scores["vital"], "note": why})
        return _page(rows, offset, limit)

    def answer(self, run_id: str, qid: str) -> dict[str, Any]:
        """One answer: its text, each nugget with the LLM's assignment and reason, and the
        human label in force (when the labels log has one)."""
        a = self._by_answer.get((run_id, qid))
        if a is None:
            raise KeyError(f"no LLM assignment of run {run_id!r} for query {qid!r}")
        sampled = self.tl is not None and self.tl.index_of(qid, run_id) is not None
        if sampled:
            # an answer people are to assign: seeing the model's assignments here is review
            # too, recorded for whoever labels it (the viewer is not known)
            with self._lock:
                self._append({"op": "reveal", "qid": qid, "run_id": run_id, "who": "",
                              "at": _now(), "via": "answers view"})
        now = self.labels() if self.tl is not None else {}
        scores, why = answer_scores(a)
        return {"qid": a.qid, "run_id": a.run_id, "query": a.query, "answer": a.answer_text,
                "sampled": sampled, "scores": scores, "note": why, "provenance": dict(a.provenance),
                "nuggets": [{"index": i, "text": n.text, "importance": n.importance,
                             "llm": {"assignment": n.assignment, "reason": n.reason, "failure": n.failure},
                             "human": self._label_view(now.get((a.qid, a.run_id, i)))}
                            for i, n in enumerate(a.nuggets)]}

    @staticmethod
    def _label_view(rec: dict[str, Any] | None) -> dict[str, Any] | None:
        if rec is None:
            return None
        return {"assignment": rec.get("assignment"), "who": rec.get("who"), "at": rec.get("at"),
                "llm_shown": bool(rec.get("llm_shown"))}

    # ------------------------------------------------------------------------- labelling
    def state(self) -> dict[str, Any]:
        tl = self._need()
        now = self.labels()
        per = []
        nxt = None
        labelled = skipped = 0
        for i, a in enumerate(tl.answers):
            recs = [now.get((a["qid"], a["run_id"], j)) for j in range(len(a["nuggets"]))]
            done = sum(1 for r in recs if r is not None)
            labelled += done
            skipped += sum(1 for r in recs if r is not None and r.get("assignment") is None)
            per.append({"done": done, "of": len(recs)})
            if nxt is None and done < len(recs):
                nxt = i
        meta = tl.meta
        return {"answers": len(tl.answers), "items": tl.items, "labelled": labelled,
                "skipped": skipped, "next": nxt, "per_answer": per,
                "labels": list(meta.get("labels") or ("support", "partial_support", "not_support")),
                "queries": len(tl.queries), "complete_queries": len(complete_nugget_queries(tl, now)),
                "meta": {k: meta.get(k) for k in ("seed", "sample", "frame", "metric", "llm_assignments")}}

    def label_answer(self, index: int, review: bool = False, who: str = "") -> dict[str, Any]:
        """Answer ``index`` of the to-label file to label; ``review``: with the LLM's
        assignments and reasons, a choice recorded in the labels log."""
        tl = self._need()
        if not 0 <= index < len(tl.answers):
            raise KeyError(f"no answer {index}")
        a = tl.answers[index]
        if review:
            with self._lock:
                self._append({"op": "reveal", "qid": a["qid"], "run_id": a["run_id"], "who": who,
                              "at": _now()})
        now = self.labels()
        nuggets = []
        for j, n in enumerate(a["nuggets"]):
            item: dict[str, Any] = {"index": j, "text": n["text"], "importance": n.get("importance"),
                                    "label": self._label_view(now.get((a["qid"], a["run_id"], j)))}
            if review:  # blind otherwise: the model's answer never reaches the page
                item["llm"] = {"assignment": n.get("llm"), "reason": n.get("reason")}
            nuggets.append(item)
        return {"index": index, "qid": a["qid"], "run_id": a["run_id"], "query": a.get("query", ""),
                "answer": a.get("answer", ""), "review": bool(review), "nuggets": nuggets}

    def add_label(self, index: int, nugget: int, assignment: str | None, who: str) -> dict[str, Any]:
        tl = self._need()
        if not 0 <= index < len(tl.answers):
            raise KeyError(f"no answer {index}")
        a = tl.answers[index]
        if not 0 <= nugget < len(a["nuggets"]):
            raise KeyError(f"answer {index} has no nugget {nugget}")
        scale = list(tl.meta.get("labels") or ())
        if assignment is not None and assignment not in scale:
            raise InputError(f"assignment {assignment!r} is not one of {', '.join(scale)}",
                             field="assignment")
        with self._lock:
            seen = revealed_answers(self._records())
            shown = any((a["qid"], a["run_id"], w) in seen for w in (who, ""))
            self._append({"op": "label", "qid": a["qid"], "run_id": a["run_id"], "nugget": nugget,
                          "text": a["nuggets"][nugget]["text"], "assignment": assignment,
                          "who": who, "at": _now(), "llm_shown": shown})
        return self.state()

    def undo(self, who: str) -> dict[str, Any]:
        """Take back ``who``'s latest nugget label still in force (never another assessor's)."""
        tl = self._need()
        with self._lock:
            recs = [r for r in self._records() if r.get("op") == "undo" or "run_id" in r]
            last = nugget_undo_target(recs, who)
            if last is not None:
                self._append({"op": "undo", "who": who, "at": _now()})
        state = self.state()
        state["undone"] = None if last is None else [tl.index_of(last[0], last[1]), last[2]]
        return state

    def human(self) -> list[Any]:
        """The human assignments of the completed queries."""
        return human_assignments(self._need(), self.labels())

    def human_jsonl(self) -> str:
        return "".join(json.dumps(a.to_dict(), ensure_ascii=False) + "\n" for a in self.human())

    def ppi(self) -> dict[str, Any]:
        """Each run's nugget score over all its answers: PPI from the LLM assignments and the
        human ones of the completed queries (with LLM-only and human-only intervals)."""
        tl = self._need()
        metric = tl.meta.get("metric") or "all"
        human = self.human()
        out: dict[str, Any] = {
            "metric": metric, "complete_queries": len({a.qid for a in human}),
            "sampled_queries": len(tl.queries), "human_answers": len(human),
            "method": "ppi++", "confidence": 0.95, "estimates": [], "notes": [],
            "note": ("queries count once every nugget of every answer is assigned or skipped; an "
                     "answer with a skipped nugget has no human score; queries are labelled in "
                     "their random order, so the completed ones are a simple random sample")}
        if not self.assignments:
            out["status"] = "needs the LLM assignments of every answer: ragjudge ui to_label.jsonl LLM_ASSIGNMENTS"
            return out
        if len(human) < 2:
            out["status"] = f"needs human assignments of at least 2 answers per run ({len(human)} answers so far)"
            return out
        key = tuple((a.qid, a.run_id, tuple(n.assignment for n in a.nuggets)) for a in human)
        if self._ppi_cache is not None and self._ppi_cache[0] == key:
            return self._ppi_cache[1]
        try:
            rep = nugget_agreement(self.assignments, human, metric=metric, n_resamples=200)
        except InputError as exc:
            out["status"] = str(exc)
            return out
        out["status"] = "ok" if rep.ppi else "no run has 2 answers assigned by hand yet"
        out["estimates"] = [{"run": r, "mean": e.mean, "ci": [e.ci_low, e.ci_high],
                             "n_human": e.n_human, "n_llm": e.n_llm, "lambda": e.lam,
                             "small_sample": e.small_sample(),
                             "llm_only": [e.llm_only.value, e.llm_only.ci_low, e.llm_only.ci_high],
                             "human_only": [e.human_only.value, e.human_only.ci_low, e.human_only.ci_high]}
                            for r, e in rep.ppi.items()]
        out["kendall_tau"] = rep.kendall_tau
        out["kappa"] = None if rep.assignments is None else rep.assignments.to_dict().get("cohen_kappa")
        out["notes"] = list(rep.notes)
        shown = sum(int(a.provenance.get("llm_shown") or 0) for a in human)
        if shown:
            out["notes"].append(f"{shown} of the human assignments were given with the LLM's in view: "
                                "PPI assumes human labels independent of the LLM's, so the interval "
                                "may be too narrow")
        self._ppi_cache = (key, out)
        return out
