"""A deterministic fake assessor for the nugget prompts (word overlap), and the example's paths."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EX = Path(__file__).resolve().parents[2] / "examples" / "nuggets"

_STOP = set(["a", "an", "the", "of", "to", "and", "or", "in", "on", "by", "is", "are", "it", "its", "as", "for", "with", "from", "that", "this", "these", "their"])


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP and len(w) > 2}


def overlap_label(fact: str, text: str, grades: int = 3) -> str:
    f, t = words(fact), words(text)
    share = len(f & t) / max(1, len(f))
    if share >= 0.5:
        return "support"
    if share >= 0.25 and grades == 3:
        return "partial_support"
    return "not_support"


def _items(block: str) -> list[str]:
    return [re.sub(r"^\d+\.\s*", "", line) for line in block.strip().splitlines() if line.strip()]


def oracle(prompt: Any, v: Mapping[str, Any]) -> Any:
    """Replies of a careful but simple assessor to every nugget prompt."""
    if prompt.id.startswith("nugget_assign"):
        grades = 2 if "2grade" in prompt.id else 3
        nuggets = _items(v["nuggets"])
        return {"reasons": ["word overlap"] * len(nuggets),
                "labels": [overlap_label(n, v["answer"], grades) for n in nuggets]}
    if prompt.id == "nugget_create":
        found = set() if v["nuggets"] == "(none yet)" else {x.lower() for x in _items(v["nuggets"])}
        new = []
        for line in v["passages"].splitlines():
            m = re.match(r"\[(\d+)\] (.*)", line)
            assert m, line
            first = m.group(2).split(",")[0].rstrip(".")[:150]
            if first.lower() not in found:
                new.append({"text": first, "sources": [int(m.group(1))]})
        return {"nuggets": new[: int(v["room"])]}
    if prompt.id == "nugget_importance":
        n = len(_items(v["nuggets"]))
        return {"labels": ["vital" if i < (n + 1) // 2 else "okay" for i in range(n)]}
    if prompt.id == "citation_support":
        passages = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\[(\d+)\] (.*)$", v["passages"], re.MULTILINE)}
        sentences = {}
        for line in v["sentences"].splitlines():
            m = re.match(r"(\d+)\. (.*) \(cites (.*)\)$", line)
            assert m, line
            sentences[int(m.group(1))] = (m.group(2), [int(x) for x in re.findall(r"\d+", m.group(3))])

        def lab(text: str, ctx: str) -> str:
            return {"support": "full", "partial_support": "partial", "not_support": "none"}[overlap_label(text, ctx)]

        pairs = []
        for line in v["pairs"].splitlines():
            m = re.match(r"\d+\. sentence (\d+) / passage \[(\d+)\]", line)
            assert m, line
            pairs.append(lab(sentences[int(m.group(1))][0], passages[int(m.group(2))]))
        joint = [lab(t, " ".join(passages[c] for c in cs)) for t, cs in sentences.values()]
        return {"pairs": pairs, "sentences": joint}
    raise AssertionError(f"unexpected prompt {prompt.id}")
