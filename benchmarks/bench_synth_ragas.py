"""LLM calls and tokens RAGAS's TestsetGenerator spends per synthetic test query.

The counterpart of ``bench_synth.py`` (``ragjudge synth``): RAGAS 0.4.x builds a knowledge graph
from the corpus with its default transforms, generates personas, then scenarios and samples with
its default query distribution; this script counts what each phase costs at the project's
loopback simulator, reading its counters between phases (each transform runs on its own, as
``apply_transforms`` runs them anyway).

* The passages (25-52 words) go in as chunks, as ``generate_with_chunks`` does
  (``default_transforms_for_prechunked``). ``--mode docs`` uses ``default_transforms`` (the
  ``generate_with_langchain_docs`` path), which rejects documents of 100 tokens or fewer.
* The simulator has no ``/v1/embeddings``: a local deterministic hashed bag-of-words model
  counts the embedding calls (each one HTTP request with langchain's ``OpenAIEmbeddings``).
* tiktoken's vocabularies cannot be downloaded here: RAGAS's extractors get a character
  tokenizer (they only split texts over 32,000 tokens), ``--mode docs`` the simulator's estimate.
* Samples are counted from the executor ``generate(return_executor=True)`` hands back, since
  ``generate`` cannot build a Testset around failed sample jobs.
* By default everything runs inside one event loop (as in a notebook, where RAGAS applies
  nest_asyncio). ``--fresh-loops`` calls RAGAS as a plain script does: each phase gets a new
  loop while langchain-openai keeps one cached httpx client, so pooled connections of a closed
  loop fail ("Event loop is closed"; ragas issue #1718) and requests are retried (``dup``).

Run in a separate venv (never run by tests; ragas 0.4.3 needs langchain-community < 0.4.2 and
does not pull in rapidfuzz)::

    python -m venv /tmp/ragas-venv
    /tmp/ragas-venv/bin/pip install ragas==0.4.3 langchain-community==0.4.1 langchain-openai aiohttp rapidfuzz
    PYTHONPATH=benchmarks /tmp/ragas-venv/bin/python benchmarks/bench_synth_ragas.py \\
        [-k PASSAGES] [-n SIZE] [--mode chunks|docs] [--fresh-loops]

Caveat: the simulator answers with schema-shaped pseudo-random content, not a real model's, so
what depends on content (parse failures, graph edges, persona/theme matches, hence scenarios
and samples) is not what a real model would give; call counts are RAGAS's, tokens are the
simulator's estimate. Against the simulator RAGAS keeps no scenario at all: its persona/theme
matching answer is a ``Dict[str, List[str]]`` (a schema without ``properties``), the simulator
answers ``{}``, no persona matches, and every node is tried and dropped without a warning.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import logging
import math
import os
import re
import time
import traceback
import warnings
from typing import Any

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")  # no telemetry calls

import ragas
import ragas.testset.transforms.default as ragas_default
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_openai import ChatOpenAI
from ragas.embeddings import LangchainEmbeddingsWrapper
from ragas.llms import LangchainLLMWrapper
from ragas.run_config import RunConfig
from ragas.testset import TestsetGenerator
from ragas.testset.graph import KnowledgeGraph, Node, NodeType
from ragas.testset.persona import generate_personas_from_kg
from ragas.testset.transforms import Parallel, apply_transforms, default_transforms_for_prechunked
from ragas.tokenizers import BaseTokenizer

from ragjudge.testing.simulator import SimConfig, SimulatorThread, estimate_tokens

warnings.filterwarnings("ignore", category=DeprecationWarning)  # LangchainLLMWrapper et al.
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "corpus.jsonl")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
KEYS = ("requests", "paid", "duplicate_paid", "prompt_tokens", "completion_tokens", "emb_calls", "emb_texts")


class CountingEmbeddings(Embeddings):
    """Deterministic hashed bag-of-words vectors of unit length; counts calls and texts."""

    def __init__(self, dim: int = 256) -> None:
        self.dim, self.calls, self.texts = dim, 0, 0

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for w in text.lower().split():
            v[int(hashlib.md5(w.encode()).hexdigest()[:8], 16) % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls, self.texts = self.calls + 1, self.texts + len(texts)
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


class CharTokenizer(BaseTokenizer):
    """One token a character, standing in for tiktoken (its vocabularies are not downloadable
    here); RAGAS's extractors only use it to split texts over 32,000 tokens."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int]) -> str:
        return "".join(map(chr, tokens))


class PromptCounter(BaseCallbackHandler):
    """Chat-model invocations keyed by the prompt's first words (i.e. which RAGAS prompt)."""

    run_inline = True

    def __init__(self) -> None:
        self.seen: collections.Counter[str] = collections.Counter()

    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]], **kwargs: Any) -> None:
        self.seen[str(messages[0][0].content)[:60].replace("\n", " ")] += 1


class ErrorLog(logging.Handler):
    """Tallies RAGAS's logged warnings and errors (failed jobs, skipped synthesizers)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        msg = re.sub(r"Exception raised in Job\[\d+\]", "job failed", UUID.sub("<id>", record.getMessage()))
        self.seen[f"{record.name}: {msg[:160]}"] += 1


def bench(args: argparse.Namespace) -> None:
    with open(CORPUS, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()][: args.passages]
    docs = [Document(page_content=f"{r.get('title', '')}\n{r['text']}".strip(), metadata={"_id": r["_id"]})
            for r in rows]
    sim = SimulatorThread(SimConfig(latency=0.0, max_lifetime=3600)).start()
    prompts, errors, emb = PromptCounter(), ErrorLog(), CountingEmbeddings()
    logging.getLogger("ragas").addHandler(errors)
    chat = ChatOpenAI(model="sim-model", base_url=sim.base_url, api_key="sim",  # type: ignore[arg-type]
                      callbacks=[prompts])
    llm, remb = LangchainLLMWrapper(chat), LangchainEmbeddingsWrapper(emb)
    phases: list[tuple[str, dict[str, int]]] = []
    last = {**sim.stats(), "emb_calls": 0, "emb_texts": 0}

    def mark(phase: str) -> None:  # the counters' growth since the previous mark
        nonlocal last
        now = {**sim.stats(), "emb_calls": emb.calls, "emb_texts": emb.texts}
        phases.append((phase, {k: now[k] - last[k] for k in KEYS}))
        last = now

    t0, kinds, outcome, scenarios = time.monotonic(), collections.Counter[str](), "ok", 0
    fixed: int | None = None
    node_type = NodeType.DOCUMENT if args.mode == "docs" else NodeType.CHUNK
    kg = KnowledgeGraph(nodes=[Node(type=node_type, properties={
        "page_content": d.page_content, "document_metadata": d.metadata}) for d in docs])
    try:
        if args.mode == "docs":  # count tokens as the simulator does (tiktoken is offline)
            ragas_default.num_tokens_from_string = lambda text, *a, **k: estimate_tokens(text)  # type: ignore
            transforms = ragas_default.default_transforms(documents=docs, llm=llm, embedding_model=remb)
        else:
            transforms = default_transforms_for_prechunked(llm=llm, embedding_model=remb)
        for step in [s for t in transforms for s in (t.transformations if isinstance(t, Parallel) else [t])]:
            if hasattr(step, "tokenizer"):
                step.tokenizer = CharTokenizer()
            try:
                apply_transforms(kg, step, run_config=RunConfig())
            finally:
                mark("transform " + type(step).__name__)
        try:
            personas = generate_personas_from_kg(kg=kg, llm=llm, num_personas=3)  # generate()'s default
        finally:
            mark("personas")
        fixed = sum(p["requests"] for _, p in phases)  # the graph and personas, paid for in full
        gen = TestsetGenerator(llm=llm, embedding_model=remb, knowledge_graph=kg, persona_list=personas)
        try:  # default query distribution: scenarios are generated, the sample jobs handed back
            executor: Any = gen.generate(testset_size=args.testset_size, raise_exceptions=False,
                                         return_executor=True)
        finally:
            mark("scenarios (generate)")
        names = [type(job[2].get("scenario")).__name__ for job in executor.jobs]
        scenarios = len(names)
        try:
            results = executor.results()
        finally:
            mark("samples (generate)")
        for name, r in zip(names, results):
            kinds[f"{name} {'failed' if isinstance(r, float) and math.isnan(r) else 'ok'}"] += 1
    except Exception as exc:  # noqa: BLE001 - report the calls spent whatever happened
        outcome = f"{type(exc).__name__}: {str(exc)[:300]}"
        traceback.print_exc()
    wall = time.monotonic() - t0
    sim.stop()

    total = {k: sum(p[k] for _, p in phases) for k in KEYS}
    samples = sum(n for k, n in kinds.items() if k.endswith(" ok"))
    print(f"ragas {ragas.__version__}  mode={args.mode}  K={len(docs)} passages  N={args.testset_size}"
          f"  loops={'fresh' if args.fresh_loops else 'one'}")
    print(f"outcome: {outcome}")
    print(f"graph: {len(kg.nodes)} nodes, {len(kg.relationships)} relationships; wall {wall:.1f}s")
    cols = (("chat", "requests", 5), ("paid", "paid", 5), ("dup", "duplicate_paid", 4),
            ("prompt_tok", "prompt_tokens", 10), ("compl_tok", "completion_tokens", 9),
            ("emb_calls", "emb_calls", 9), ("emb_texts", "emb_texts", 9))
    print(f"{'phase':34s}" + "".join(f" {head:>{w}s}" for head, _, w in cols))
    for name, p in phases + [("TOTAL", total)]:
        print(f"{name:34s}" + "".join(f" {p[key]:{w}d}" for _, key, w in cols))
    calls = total["requests"]
    print(f"scenarios: {scenarios}  samples returned: {samples}  sample jobs: {dict(kinds)}")
    if samples:
        print(f"per returned sample: {calls / samples:.2f} chat calls, "
              f"{(total['prompt_tokens'] + total['completion_tokens']) / samples:.0f} tokens, "
              f"{total['emb_calls'] / samples:.2f} embedding calls")
    else:
        print(f"per returned sample: undefined ({calls} chat calls, "
              f"{total['emb_calls']} embedding calls, 0 samples)")
    if fixed is not None:
        print(f"lower bound had all N been kept (graph+personas {fixed} calls, >= 1 call a sample): "
              f"{(fixed + args.testset_size) / args.testset_size:.2f} chat calls per sample")
    print("chat-model invocations by prompt (first 60 characters):")
    for text, n in prompts.seen.most_common():
        print(f"  {n:6d}  {text}")
    print(f"RAGAS warnings/errors logged: {sum(errors.seen.values())}")
    for text, n in errors.seen.most_common(15):
        print(f"  {n:6d}  {text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", "--passages", type=int, default=315, help="first K passages of the corpus")
    ap.add_argument("-n", "--testset-size", type=int, default=40)
    ap.add_argument("--mode", choices=("chunks", "docs"), default="chunks")
    ap.add_argument("--fresh-loops", action="store_true", help="call RAGAS outside any event loop")
    args = ap.parse_args()
    if args.fresh_loops:
        bench(args)
        return

    async def one_loop() -> None:  # inside a running loop RAGAS applies nest_asyncio: one loop
        bench(args)

    asyncio.run(one_loop())


if __name__ == "__main__":
    main()
