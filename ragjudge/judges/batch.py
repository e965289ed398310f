"""The relevance judge through the OpenAI Batch API (``ragjudge judge --batch``).

The generic, resumable Batch API flow (prepare, upload, poll, join, accept) lives in
:func:`ragjudge.llm.batch.run_batch`; this module only pools the pairs, hands the judge's
prompt and grade validator to it and turns the outcomes into a :class:`JudgeResult`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._sync import run_sync
from ..data import Qrels, Run
from ..errors import InputError
from ..llm.batch import BatchOptions, ExportedBatch, Progress, export_batch, import_batch, run_batch
from ..llm.session import LLM
from .relevance import JudgeResult, Judgment, LLMRelevanceJudge, pool_pairs

__all__ = ["judge_with_batch", "judge_with_batch_sync", "export_judge_batch", "import_judge_batch"]


async def judge_with_batch(
    judge: LLMRelevanceJudge,
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    runs: Run | Sequence[Run],
    depth: int = 20,
    *,
    qrels: Qrels | None = None,
    all_queries: bool = False,
    state_path: str | Path | None = None,
    options: BatchOptions | None = None,
    progress: Progress | None = None,
) -> JudgeResult:
    """:meth:`LLMRelevanceJudge.judge_run` (or ``fill_holes`` with ``qrels``) through the Batch
    API; returns the same :class:`JudgeResult`."""
    llm = judge.llm
    if not isinstance(llm, LLM):
        raise InputError("batch mode needs the judge's session to be a ragjudge.llm.LLM", field="llm")
    pairs = pool_pairs(queries, corpus, runs, depth, skip=qrels, all_queries=all_queries)
    before = llm.usage
    try:
        outs = await run_batch(
            llm,
            judge.prompt,
            [{"query": p.query, "passage": p.passage} for p in pairs],
            validate=judge.grade_of,
            state_path=state_path,
            options=options,
            progress=progress,
        )
    finally:
        await llm.aclose()
    judgments = [Judgment.from_outcome(p, o) for p, o in zip(pairs, outs)]
    usage = llm.usage - before
    cost = llm.cost_of(usage, batch=True)
    return JudgeResult.build(judgments, usage, cost, f"llm:{llm.model}:{judge.prompt.name}:batch",
                             human=qrels)


def judge_with_batch_sync(
    judge: LLMRelevanceJudge,
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    runs: Run | Sequence[Run],
    depth: int = 20,
    **kwargs: Any,
) -> JudgeResult:
    """Blocking :func:`judge_with_batch` (also inside a running event loop); progress lines
    go to stderr unless ``progress=`` is given."""
    kwargs.setdefault("progress", lambda msg: print(msg, file=sys.stderr, flush=True))
    return run_sync(judge_with_batch(judge, queries, corpus, runs, depth, **kwargs))


def export_judge_batch(judge: LLMRelevanceJudge, queries: Mapping[str, str], corpus: Mapping[str, str],
                       runs: Run | Sequence[Run], depth: int, path: str | Path, *,
                       qrels: Qrels | None = None, all_queries: bool = False) -> ExportedBatch:
    """The pooled pairs :meth:`LLMRelevanceJudge.judge_run` (or ``fill_holes`` with ``qrels``)
    would judge, written as an OpenAI batch input file for a batch runner of one's own
    (``vllm run-batch``, LiteLLM, OpenAI's Batch API); nothing is sent."""
    llm = judge.llm
    if not isinstance(llm, LLM):
        raise InputError("batch files need the judge's session to be a ragjudge.llm.LLM", field="llm")
    pairs = pool_pairs(queries, corpus, runs, depth, skip=qrels, all_queries=all_queries)
    return export_batch(llm, judge.prompt, [{"query": p.query, "passage": p.passage} for p in pairs], path)


def import_judge_batch(judge: LLMRelevanceJudge, queries: Mapping[str, str], corpus: Mapping[str, str],
                       runs: Run | Sequence[Run], depth: int, paths: Sequence[str | Path], *,
                       qrels: Qrels | None = None, all_queries: bool = False) -> JudgeResult:
    """The :class:`JudgeResult` of the same pooled pairs from the batch runner's output files
    (replies checked, counted at the batch price and cached, with provenance)."""
    llm = judge.llm
    if not isinstance(llm, LLM):
        raise InputError("batch files need the judge's session to be a ragjudge.llm.LLM", field="llm")
    pairs = pool_pairs(queries, corpus, runs, depth, skip=qrels, all_queries=all_queries)
    before = llm.usage
    outs = import_batch(llm, judge.prompt, [{"query": p.query, "passage": p.passage} for p in pairs],
                        paths, validate=judge.grade_of)
    judgments = [Judgment.from_outcome(p, o) for p, o in zip(pairs, outs)]
    usage = llm.usage - before
    return JudgeResult.build(judgments, usage, llm.cost_of(usage, batch=True),
                             f"llm:{llm.model}:{judge.prompt.name}:batch-file", human=qrels)
