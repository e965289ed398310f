"""What the nugget steps share about LLM calls: prompts sized to a count, the usage of a step,
the sum of dry runs, and how a failed call reads as a reason."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..llm.prompts import load_prompt
from ..llm.values import DryRun

__all__ = [
    "estimate_groups",
    "failure_reason",
    "load",
    "numbered",
    "provenance_of",
    "sized",
    "snapshot",
    "usage_since",
]

_SIZED: dict[tuple[str, tuple[str, ...], int, int | None], Any] = {}


def load(name: str) -> Any:
    """A shipped prompt (the llm package loads on first use, not with the readers)."""
    return load_prompt(name)


#: Reply tokens reserved besides the items (braces, keys) when ``per_item`` sizes a reply.
_REPLY_FRAME = 64


def sized(name: str, arrays: Sequence[str], n: int, *, per_item: int | None = None) -> Any:
    """Prompt ``name`` with each reply array in ``arrays`` pinned to exactly ``n`` items, so the
    structured output and the local check both enforce the count (a short or long reply is
    repaired or fails, never misaligned). With ``per_item`` (reply tokens one item may take),
    ``max_tokens`` is cut to what ``n`` items need: the budget reserves the worst case of each
    call, and the prompt's limit, made for a full window, would have a two-nugget call reserve
    as much as a thirty-nugget one (a cut reply is still asked again with a larger limit)."""
    p = load(name)
    key = (p.sha256, tuple(arrays), n, per_item)
    got = _SIZED.get(key)
    if got is None:
        schema = dict(p.output_schema)
        props = dict(schema["properties"])
        for a in arrays:
            props[a] = {**props[a], "minItems": n, "maxItems": n}
        schema["properties"] = props
        limit = p.max_tokens if per_item is None else min(p.max_tokens, _REPLY_FRAME + per_item * n)
        got = _SIZED[key] = replace(p, output_schema=schema, max_tokens=limit,
                                    expected_output_tokens=min(p.expected_output_tokens, limit))
    return got


def snapshot(llm: Any) -> dict[str, int]:
    """The session's running totals (calls, cache hits, retries, failures, tokens)."""
    u, st = llm.usage, llm.stats
    return {"calls": st.calls, "cache_hits": st.cache_hits, "retries": st.retries,
            "failed_calls": st.failed, "skipped": st.skipped, "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens}


def usage_since(llm: Any, before: Mapping[str, int], **extra: Any) -> dict[str, Any]:
    """What a step spent: the difference of two snapshots, the model and the session's cost."""
    after = snapshot(llm)
    out: dict[str, Any] = {k: after[k] - before.get(k, 0) for k in after}
    out["model"] = getattr(llm, "model", None)
    out["cost_usd"] = getattr(llm, "cost", None)
    out.update(extra)
    return out


def estimate_groups(llm: Any, groups: Iterable[tuple[Any, list[Mapping[str, Any]]]],
                    assumptions: str = "") -> Any:
    """One :class:`~ragjudge.llm.values.DryRun` summing the estimates of ``(prompt, variables)``
    groups (prompts sized to different counts are estimated apart)."""
    total = dict(pairs=0, cached=0, duplicates=0, calls=0, prompt_tokens=0, completion_tokens=0)
    cost: float | None = 0.0
    worst: float | None = 0.0
    for prompt, variables in groups:
        if not variables:
            continue
        est = llm.estimate(prompt, variables)
        for k in total:
            total[k] += getattr(est, k)
        cost = None if cost is None or est.cost is None else cost + est.cost
        worst = None if worst is None or est.worst_cost is None else worst + est.worst_cost
    return DryRun(**total, cost=cost, model=llm.model, worst_cost=worst, assumptions=assumptions)


def failure_reason(outcome: Any) -> str:
    """A failed call as one line: its kind and message."""
    kind = getattr(outcome.failure, "value", None) or "failed"
    return f"{kind}: {outcome.error}" if outcome.error else str(kind)


def numbered(items: Iterable[str]) -> str:
    """``1. first`` / ``2. second`` lines (newlines inside an item folded to spaces)."""
    return "\n".join(f"{i}. {' '.join(t.split())}" for i, t in enumerate(items, start=1))


def provenance_of(outcomes: Iterable[Any]) -> dict[str, Any]:
    """The provenance of the first answered call, with how many calls it took and were cached."""
    outs = [o for o in outcomes if o is not None]
    first = next((o for o in outs if o.error is None), outs[0] if outs else None)
    prov = first.provenance.to_dict() if first is not None else {}
    prov["calls"] = len(outs)
    prov["cached"] = sum(1 for o in outs if o.cached)
    return prov
