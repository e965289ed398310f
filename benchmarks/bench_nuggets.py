"""Calls and tokens of nugget evaluation: ragjudge's defaults vs the reference implementation's.

Setting: the loopback simulator (no latency), a generated collection of ``--topics`` queries,
each with ``--passages`` relevant passages of ~100 words and ``--runs`` answers of ~250 words in
the TREC RAG 2024 layout, and the same ``--nuggets`` nuggets per query for both sides (30, the
reference's default maximum).

ragjudge runs for real through the library with its default options (creation reads 10
passages per call and returns only new nuggets; importance labels 30 nuggets per call;
assignment grades 30 nuggets per call), and its requests and tokens are the simulator's own
counters -- instructions, reasons and all.

The reference implementation (castorini/nuggetizer) is not run here; its call pattern at its
defaults is counted: creation windows of 10 passages, each call sending the nugget list so far
and getting the whole updated list back; importance and assignment windows of 10 nuggets, each
assignment call sending the query and the whole answer again. Its calls are exact; its tokens
are the data those calls must carry (query, passages, nuggets, answer; the lists it gets back),
counted with the simulator's own token estimate and **without any instruction text** -- a lower
bound on what it sends.

    python benchmarks/bench_nuggets.py [--topics 20] [--passages 20] [--runs 3] [--nuggets 30]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from ragjudge.testing.simulator import SimConfig, SimulatorThread, estimate_tokens

from ragjudge.llm import LLM
from ragjudge.nuggets import (
    Answer,
    Nugget,
    NuggetOptions,
    NuggetSet,
    Sentence,
    assign_nuggets_sync,
    create_nuggets_sync,
)

_WORDS = ["system", "process", "energy", "water", "river", "history", "design", "network", "protocol", "cell", "structure", "material", "temperature", "pressure", "population", "century", "region", "method", "result", "study", "evidence", "model", "function", "layer", "surface", "growth", "signal", "capacity", "efficiency", "source", "cycle"]
_LABELS = ("support", "partial_support", "not_support")


def _text(rng: random.Random, topic: str, words: int) -> str:
    out, n = [], 0
    while n < words:
        k = rng.randint(8, 16)
        w = [rng.choice(_WORDS) for _ in range(k)]
        w.insert(rng.randint(0, k), topic)
        out.append(" ".join(w).capitalize() + ".")
        n += k + 1
    return " ".join(out)


def collection(topics: int, passages: int, runs: int, nuggets: int, seed: int = 7
               ) -> tuple[dict[str, str], dict[str, list[tuple[str, str]]], list[Answer], list[NuggetSet]]:
    rng = random.Random(seed)
    queries, ps, answers, sets = {}, {}, [], []
    for t in range(topics):
        qid, topic = f"q{t}", f"topic{t}"
        queries[qid] = f"what is known about the {topic} {rng.choice(_WORDS)}"
        ps[qid] = [(f"{qid}-d{i}", _text(rng, topic, 100)) for i in range(passages)]
        sets.append(NuggetSet(qid, queries[qid], tuple(
            Nugget(_text(rng, topic, 11).rstrip("."), "vital" if i < nuggets // 3 else "okay")
            for i in range(nuggets))))
        for r in range(runs):
            refs = tuple(d for d, _ in rng.sample(ps[qid], 5))
            sents = tuple(Sentence(_text(rng, topic, 25), (rng.randrange(5),)) for _ in range(10))
            answers.append(Answer(f"run{r}", qid, queries[qid], sents, refs))
    return queries, ps, answers, sets


def reference_counts(queries: dict[str, str], ps: dict[str, list[tuple[str, str]]],
                     answers: list[Answer], sets: list[NuggetSet],
                     created: dict[str, list[str]]) -> dict[str, tuple[int, int]]:
    """(calls, payload tokens) of the reference's default call pattern, per stage; creation
    with the nuggets ragjudge created for the query (the same number of nuggets)."""
    window, n_max = 10, 30
    create = importance = assign = (0, 0)
    rng = random.Random(1)
    for s in sets:
        texts = created.get(s.qid, [])
        passages = [t for _, t in ps[s.qid]]
        wins = math.ceil(len(passages) / window)
        calls = tokens = 0
        for w in range(wins):
            # the list so far grows toward the final one; the reply is the whole updated list
            before = texts[: round(len(texts) * w / wins)]
            after = texts[: round(len(texts) * (w + 1) / wins)][:n_max]
            sent = s.query + "\n".join(passages[w * window:(w + 1) * window]) + repr(before)
            calls += 1
            tokens += estimate_tokens(sent) + estimate_tokens(repr(after))
        create = (create[0] + calls, create[1] + tokens)
        texts = [n.text for n in s.nuggets]
        for w in range(0, len(texts), window):
            chunk = texts[w:w + window]
            importance = (importance[0] + 1, importance[1] + estimate_tokens(s.query + repr(chunk))
                          + estimate_tokens(repr([rng.choice(("vital", "okay")) for _ in chunk])))
    by_q = {s.qid: s for s in sets}
    for a in answers:
        texts = [n.text for n in by_q[a.qid].nuggets]
        for w in range(0, len(texts), window):
            chunk = texts[w:w + window]
            assign = (assign[0] + 1, assign[1] + estimate_tokens(a.query + a.text + repr(chunk))
                      + estimate_tokens(repr([rng.choice(_LABELS) for _ in chunk])))
    return {"creation": create, "importance": importance, "assignment": assign}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--passages", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nuggets", type=int, default=30)
    args = ap.parse_args()
    queries, ps, answers, sets = collection(args.topics, args.passages, args.runs, args.nuggets)
    mine: dict[str, tuple[int, int]] = {}
    opts = NuggetOptions()
    with tempfile.TemporaryDirectory() as tmp, SimulatorThread(SimConfig(latency=0.0, max_lifetime=900.0)) as sim:
        llm = LLM("sim-model", base_url=sim.base_url, api_key="sim", cache=str(Path(tmp) / "c.sqlite"))

        def measured(fn: object) -> tuple[int, int, object]:
            before = sim.stats()
            out = fn()  # type: ignore[operator]
            after = sim.stats()
            return (after["requests"] - before["requests"],
                    after["prompt_tokens"] + after["completion_tokens"]
                    - before["prompt_tokens"] - before["completion_tokens"], out)

        c, t, made = measured(lambda: create_nuggets_sync(queries, llm=llm, passages=ps, importance=False,
                                                            options=opts))
        mine["creation"] = (c, t)
        # importance and assignment on the same nuggets as the reference's count
        from ragjudge.nuggets import label_importance_sync
        unlabelled = [NuggetSet(s.qid, s.query, tuple(Nugget(n.text) for n in s.nuggets)) for s in sets]
        c, t, _ = measured(lambda: label_importance_sync(unlabelled, llm=llm, options=opts))
        mine["importance"] = (c, t)
        c, t, res = measured(lambda: assign_nuggets_sync(sets, answers, llm=llm, options=opts))
        mine["assignment"] = (c, t)
        failed = res.failed  # type: ignore[attr-defined]
    created = {s.qid: [n.text for n in s.nuggets] for s in made.sets}  # type: ignore[attr-defined]
    ref = reference_counts(queries, ps, answers, sets, created)
    n_made = sum(len(v) for v in created.values()) / max(1, len(created))
    n_ans, n_q = len(answers), len(sets)
    print(f"{n_q} queries x {args.passages} passages (~100 words), {args.runs} answers each "
          f"(~250 words, TREC RAG 2024 layout), {args.nuggets} nuggets per query; "
          f"{n_ans} answers; simulator token estimate (4 characters a token)")
    print(f"ragjudge: measured on the simulator, default options, instructions included; "
          f"{failed} nugget grades failed; creation made {n_made:.1f} nuggets per query (the "
          f"reference's creation is counted with the same ones)")
    print("reference: its default call pattern counted; tokens = data carried only, no "
          "instructions (a lower bound)\n")
    head = f"{'stage':<12} {'per':<7} {'ragjudge calls':>14} {'ref calls':>10} {'ratio':>6}   " \
           f"{'ragjudge tokens':>15} {'ref tokens >=':>13} {'ratio':>6}"
    print(head)
    print("-" * len(head))
    total_m = [0, 0]
    total_r = [0, 0]
    for stage, per, n in (("creation", "query", n_q), ("importance", "query", n_q),
                          ("assignment", "answer", n_ans)):
        (mc, mt), (rc, rt) = mine[stage], ref[stage]
        total_m[0] += mc
        total_m[1] += mt
        total_r[0] += rc
        total_r[1] += rt
        print(f"{stage:<12} {per:<7} {mc / n:>14.2f} {rc / n:>10.2f} {mc / rc:>6.2f}   "
              f"{mt / n:>15.0f} {rt / n:>13.0f} {mt / rt:>6.2f}")
    print(f"{'all stages':<12} {'answer':<7} {total_m[0] / n_ans:>14.2f} {total_r[0] / n_ans:>10.2f} "
          f"{total_m[0] / total_r[0]:>6.2f}   {total_m[1] / n_ans:>15.0f} {total_r[1] / n_ans:>13.0f} "
          f"{total_m[1] / total_r[1]:>6.2f}")
    ok_calls = total_m[0] < total_r[0]
    ok_tokens = total_m[1] < total_r[1]
    print(f"\nfewer calls per answer than the reference's defaults: {'yes' if ok_calls else 'NO'}; "
          f"fewer tokens than its lower bound: {'yes' if ok_tokens else 'NO'}")


if __name__ == "__main__":
    main()
