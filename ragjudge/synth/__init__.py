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

from importlib import import_module

from .._lazy import lazy_exports

from .options import DEFAULT_STYLES, SynthOptions

# The pipeline (BM25, sampling, the judge and the LLM session) loads on first use, so that the
# options value alone (read by the CLI's parser and the service's models) stays cheap.
_LAZY = {
    "FILTERS": "filters", "Candidate": "filters", "FilterLine": "filters", "accounting": "filters",
    "judge_filter": "filters", "text_filters": "filters",
    "STYLE_PROMPTS": "generate", "SynthPlan": "generate", "estimate_synth": "generate",
    "parse_styles": "generate", "read_examples": "generate", "synthesize": "generate",
    "synthesize_sync": "generate",
    "LexicalIndex": "lexical",
    "OUTPUT_FILES": "result", "SynthResult": "result",
    "PassagePool": "sampling", "SamplingReport": "sampling",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))


__all__ = [
    "synthesize",
    "synthesize_sync",
    "estimate_synth",
    "SynthOptions",
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
