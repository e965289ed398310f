"""The nugget example's LLM assignments made by a fake assessor (word overlap, no network), a
nugget to-label sample drawn by ``plan-labels --nuggets``'s library function, and the human
assessor the tests play (the example's human assignments where they exist, word overlap
elsewhere)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragjudge.llm.fake import FakeLLM
from ragjudge.nuggets import assign_nuggets_sync, read_answers, read_assignments
from ragjudge.nuggets.labelling import sample_nuggets_to_label

EX = Path(__file__).resolve().parents[1] / "examples" / "nuggets"
RUNS = [EX / "runs" / f"run_{x}.jsonl" for x in "abc"]
_STOP = {"the", "of", "to", "and", "in", "on", "by", "is", "are", "its", "for", "with", "from", "that"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP and len(w) > 2}


def overlap(fact: str, text: str) -> str:
    f = _words(fact)
    share = len(f & _words(text)) / max(1, len(f))
    return "support" if share >= 0.5 else "partial_support" if share >= 0.25 else "not_support"


def assessor(prompt: Any, v: Mapping[str, Any]) -> Any:
    """A fake LLM's replies to the assignment prompt (with a reason naming the overlap)."""
    nuggets = [re.sub(r"^\d+\.\s*", "", x) for x in v["nuggets"].splitlines() if x.strip()]
    return {"reasons": [f"overlap of '{n[:20]}'" for n in nuggets],
            "labels": [overlap(n, v["answer"]) for n in nuggets]}


def make_nugget_workspace(tmp: Path, *, sample: int = 4, seed: int = 0) -> dict[str, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    answers = [a for r in RUNS for a in read_answers(r)]
    res = assign_nuggets_sync(EX / "nuggets.jsonl", answers, llm=FakeLLM(assessor))
    llm = tmp / "llm_assignments.jsonl"
    res.write(llm)
    todo = sample_nuggets_to_label(res.assignments, sample, seed=seed,
                                   extra={"llm_assignments": str(llm)})
    tl = tmp / "nuggets_to_label.jsonl"
    tl.write_text(todo.to_jsonl(), encoding="utf-8")
    return {"llm": llm, "tolabel": tl}


def truth() -> dict[tuple[str, str, int], str]:
    """What the tests' human assessor says of each (query, run, nugget)."""
    out: dict[tuple[str, str, int], str] = {}
    human = {(a.qid, a.run_id): a for a in read_assignments(EX / "human_assignments.jsonl")}
    for a in read_assignments_of_llm():
        h = human.get((a.qid, a.run_id))
        for i, n in enumerate(a.nuggets):
            out[(a.qid, a.run_id, i)] = h.nuggets[i].assignment if h else overlap(n.text, a.answer_text)
    return out


def read_assignments_of_llm() -> list[Any]:
    answers = [a for r in RUNS for a in read_answers(r)]
    return assign_nuggets_sync(EX / "nuggets.jsonl", answers, llm=FakeLLM(assessor)).assignments
