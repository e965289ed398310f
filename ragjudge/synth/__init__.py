"""Synthetic test collections from a corpus alone: queries, reference answers, qrels, RAG samples.

::

    from ragjudge.synth import synthesize_sync
    result = synthesize_sync("corpus.jsonl", 50, model="gpt-4o-mini")
    print(result)                 # kept / dropped per filter, with example reasons
    result.write("synth/")        # queries.jsonl, qrels.txt, samples.jsonl, synth.jsonl

``synthesize`` is the async original; ``estimate_synth`` is the dry run. See
:mod:`ragjudge.synth.generate` for the pipeline and :mod:`ragjudge.synth.filters` for the
filters and their order.
"""

from __future__ import annotations

from .filters import FILTERS, Candidate, FilterLine, accounting, judge_filter, text_filters
from .generate import (
    DEFAULT_STYLES, STYLE_PROMPTS, SynthPlan, estimate_synth, parse_styles, read_examples, synthesize,
    synthesize_sync,
)
from .lexical import LexicalIndex
from .result import OUTPUT_FILES, SynthResult
from .sampling import PassagePool, SamplingReport

__all__ = [
    "synthesize",
    "synthesize_sync",
    "estimate_synth",
    "SynthResult",
    "SynthPlan",
    "Candidate",
    "FilterLine",
    "FILTERS",
    "accounting",
    "text_filters",
    "judge_filter",
    "parse_styles",
    "read_examples",
    "DEFAULT_STYLES",
    "STYLE_PROMPTS",
    "PassagePool",
    "SamplingReport",
    "LexicalIndex",
    "OUTPUT_FILES",
]
