"""Regenerate the example runs and RAG samples from the hand-made corpus, queries and qrels.

    python examples/make_dataset.py            # rewrites examples/runs/*.run and rag_samples.jsonl
    python examples/make_dataset.py --check    # exits 1 if the files on disk differ

The corpus, the queries and the graded qrels were written by hand (see ``examples/README.md``);
this script only derives the system outputs from them, deterministically. It needs the example-only
dependency ``rank_bm25`` (``pip install rank_bm25``); ragjudge itself does not.

Runs (top 100 per query, TREC format, scores rounded to 4 decimals):

* ``bm25_stemmed`` -- BM25 (Okapi, k1=1.5, b=0.75) over title + text, lower-cased, punctuation
  stripped, English stop words removed, plural/suffix folding (the intended best system);
* ``bm25_raw`` -- the same BM25 over the text only, split on whitespace with case and punctuation
  kept ("Bees," and "bees" are different terms), so vocabulary mismatch hurts (medium);
* ``term_overlap`` -- number of distinct query tokens (whitespace split, case and punctuation kept,
  stop words included) present in the text: no idf, no length normalisation (weak).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from rank_bm25 import BM25Okapi  # noqa: E402  (example-only dependency)

from ragjudge import Run  # noqa: E402
from ragjudge.io import (  # noqa: E402
    format_run,
    parse_run,
    read_corpus,
    read_qrels,
    read_queries,
    read_run,
)

DEPTH = 100
RAG_DEPTH = 5

STOPWORDS = frozenset(
    """a about after all also an and are around as at be because been before being between both
    but by can could did do does during each for from had has have how i if in into is it its
    made make makes more most much my no not of on one only or other so some such than that the
    their them then there these they this those through to up use used was were what when where
    which while who why will with would you your""".split()
)
_WORD = re.compile(r"[a-z0-9]+")


def fold(word: str) -> str:
    """Light suffix folding (an S-stemmer plus -ing/-ed), enough to match bee/bees, erupted/erupt."""
    if len(word) > 4 and word.endswith("ies") and not word.endswith(("eies", "aies")):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("es") and not word.endswith(("aes", "ees", "oes", "ses")):
        word = word[:-1]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("us", "ss", "is")):
        word = word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    return word


def tokens_stemmed(text: str) -> list[str]:
    return [fold(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def tokens_raw(text: str) -> list[str]:
    return text.split()


def bm25_run(
    name: str,
    docs: dict[str, str],
    queries: dict[str, str],
    tokenize: Callable[[str], list[str]],
) -> Run:
    ids = list(docs)
    bm25 = BM25Okapi([tokenize(docs[d]) for d in ids], k1=1.5, b=0.75)
    by_query: dict[str, dict[str, float]] = {}
    for qid, text in queries.items():
        scores = bm25.get_scores(tokenize(text))
        by_query[qid] = _top(ids, [float(s) for s in scores])
    return Run.from_dict(by_query, name=name)


def overlap_run(name: str, docs: dict[str, str], queries: dict[str, str]) -> Run:
    ids = list(docs)
    doc_words = [set(tokens_raw(docs[d])) for d in ids]
    by_query: dict[str, dict[str, float]] = {}
    for qid, text in queries.items():
        q = set(tokens_raw(text))
        by_query[qid] = _top(ids, [float(len(q & w)) for w in doc_words])
    return Run.from_dict(by_query, name=name)


def _top(ids: list[str], scores: list[float]) -> dict[str, float]:
    """The ``DEPTH`` best documents with a positive score (ties: document id descending, like
    trec_eval, so the cut at ``DEPTH`` is the one trec_eval would see)."""
    ranked = sorted(
        ((round(s, 4), d) for d, s in zip(ids, scores) if s > 0), key=lambda x: (x[0], x[1]),
        reverse=True,
    )
    return {d: s for s, d in ranked[:DEPTH]}


def build_runs(corpus: dict[str, str], queries: dict[str, str]) -> dict[str, Run]:
    # read_corpus joins "title\ntext"; the raw variant indexes the text alone.
    text_only = {d: body.split("\n", 1)[-1] for d, body in corpus.items()}
    return {
        "bm25_stemmed": bm25_run("bm25_stemmed", corpus, queries, tokens_stemmed),
        "bm25_raw": bm25_run("bm25_raw", text_only, queries, tokens_raw),
        "term_overlap": overlap_run("term_overlap", text_only, queries),
    }


# Hand-written reference answers and system responses for the RAG example. Responses vary on
# purpose: most are faithful to the retrieved passages, some add claims the passages do not
# support, some are incomplete, and a few answer from the wrong passage.
RAG_ANSWERS: dict[str, tuple[str, str]] = {
    "q01": (
        "The 2010 eruption of Eyjafjallajokull in Iceland spread an ash cloud over Europe, and "
        "because ash can melt inside jet engines, air traffic was halted for about six days.",
        "Flights were grounded for about six days in 2010 because the Icelandic volcano "
        "Eyjafjallajokull sent an ash cloud over Europe, and volcanic ash can melt inside jet "
        "engines.",
    ),
    "q02": (
        "It is the same molten rock: it is called magma while underground and lava once it "
        "reaches the surface.",
        "Magma is molten rock underground; once it erupts onto the surface it is called lava.",
    ),
    "q03": (
        "They watch for signs of moving magma: swarms of small earthquakes recorded by "
        "seismometers, ground swelling measured by GPS and satellite radar, and rising output of "
        "gases such as sulphur dioxide.",
        "Scientists monitor earthquakes with seismometers and measure ground deformation with GPS "
        "and radar. They can predict the exact day of an eruption several months in advance.",
    ),
    "q04": (
        "The April 1815 eruption of Mount Tambora in Indonesia; its sulphur cooled the northern "
        "hemisphere, making 1816 the Year Without a Summer.",
        "The 1815 eruption of Mount Tambora in Indonesia, the largest in recorded history, cooled "
        "the northern hemisphere so that 1816 became the Year Without a Summer.",
    ),
    "q05": (
        "The eruption of Mount Vesuvius in 79 AD buried Pompeii under several metres of ash and "
        "pumice and pyroclastic flows.",
        "Pompeii was destroyed by the eruption of Mount Vesuvius in 79 AD, which buried the town "
        "under ash and pumice.",
    ),
    "q07": (
        "The Pacific is ringed by subduction zones, where oceanic plates sink beneath other "
        "plates and release water that melts the mantle; this Ring of Fire holds about three "
        "quarters of the world's active volcanoes.",
        "Most volcanoes around the Pacific lie on the Ring of Fire, above subduction zones where "
        "one plate sinks under another.",
    ),
    "q08": (
        "Olympus Mons on Mars, about 22 kilometres high.",
        "The tallest volcano in the solar system is Mauna Kea in Hawaii, more than 10,000 metres "
        "from its base.",
    ),
    "q10": (
        "With the waggle dance: the angle of the waggle run to the vertical gives the direction "
        "of the food relative to the sun and the length of the run gives its distance.",
        "A forager performs the waggle dance on the comb; the angle of the run shows the "
        "direction relative to the sun and its length shows the distance.",
    ),
    "q11": (
        "Its food: a larva fed royal jelly throughout its development becomes a queen, while "
        "worker larvae get royal jelly only for the first few days.",
        "A larva that is fed royal jelly for its whole development becomes a queen; other larvae "
        "only get it for a few days and become workers.",
    ),
    "q12": (
        "Foragers carry nectar in their honey stomach to house bees, who add enzymes that split "
        "sucrose into simpler sugars and fan it until most of the water evaporates; the honey is "
        "then sealed in wax cells.",
        "Bees add enzymes to nectar and fan it with their wings to evaporate water, then cap the "
        "honey in wax cells.",
    ),
    "q13": (
        "No single cause: colony losses are attributed to a combination of varroa mites and the "
        "viruses they spread, pesticides such as neonicotinoids, poor nutrition and loss of "
        "habitat.",
        "Colony collapse disorder is caused by mobile phone radiation that confuses the bees' "
        "navigation.",
    ),
    "q14": (
        "Almonds, apples, blueberries and melons depend strongly on bees; tomatoes, blueberries "
        "and potatoes need buzz pollination; staple grains like wheat, rice and maize are wind "
        "pollinated.",
        "Crops such as almonds, apples, blueberries and melons depend strongly on bees, while "
        "wheat, rice and maize are pollinated by wind.",
    ),
    "q15": (
        "A worker honey bee's barbed sting lodges in mammal skin and tears away from her body, so "
        "she dies soon after.",
        "The barbed sting stays in your skin and is torn from the bee's body, so the bee dies "
        "soon after; the sting keeps pumping venom.",
    ),
    "q16": (
        "They form a tight cluster around the queen and shiver their flight muscles to keep its "
        "centre warm, burning 20 to 30 kilograms of stored honey.",
        "Honey bees hibernate in the hive until spring.",
    ),
    "q19": (
        "Not by much: by weight the caffeine difference between light and dark roasts is small; "
        "dark roasts only taste stronger.",
        "No. Dark roasting does not greatly increase caffeine; by weight the difference is small.",
    ),
    "q20": (
        "A cup of brewed coffee has roughly 80 to 120 mg of caffeine, an espresso about 60 to "
        "75 mg, and a cup of black tea about 40 to 50 mg.",
        "Brewed coffee has about 80 to 120 milligrams of caffeine per cup, roughly twice as much "
        "as a cup of black tea at 40 to 50 milligrams.",
    ),
    "q21": (
        "Both come from Camellia sinensis; green tea is heated soon after picking to stop "
        "oxidation, while black tea is fully oxidised, which darkens the leaves and changes the "
        "flavour.",
        "Green tea is heated right after picking so it does not oxidise; black tea is fully "
        "oxidised. Black tea comes from a different plant than green tea.",
    ),
    "q22": (
        "Caffeine is removed from the green beans before roasting with solvents such as ethyl "
        "acetate, with the Swiss Water process, or with supercritical carbon dioxide.",
        "Caffeine is taken out of green beans before roasting, for example with ethyl acetate, "
        "the Swiss Water process or supercritical carbon dioxide.",
    ),
    "q23": (
        "Coffee leaf rust, a fungal disease, wiped out Ceylon's coffee industry in the 1870s, and "
        "the planters turned to tea.",
        "In the 1870s coffee leaf rust destroyed the coffee plantations of Ceylon, so planters "
        "switched to growing tea.",
    ),
    "q24": (
        "Coffee drinking is first documented in fifteenth-century Yemen among Sufi communities.",
        "Coffee was first drunk in China during the Han dynasty.",
    ),
    "q25": (
        "About nine bars of pressure.",
        "Espresso machines force water through the coffee at about nine bars of pressure.",
    ),
    "q27": (
        "Karl Drais built the first two-wheeled running machine in 1817; pedals were added by "
        "French makers in the 1860s and the chain-driven safety bicycle came in the 1880s.",
        "Karl Drais invented the first two-wheeler, a running machine without pedals, in "
        "Mannheim in 1817.",
    ),
    "q28": (
        "Their pedals were fixed to the front hub, so a bigger wheel travelled further per turn "
        "of the cranks.",
        "Because the pedals drove the front wheel directly, a larger wheel covered more distance "
        "with each turn of the pedals.",
    ),
    "q29": (
        "Mainly because the rider steers into any lean, bringing the wheels back under the centre "
        "of mass; fork geometry also makes the bike steer itself, and gyroscopic effects are "
        "minor.",
        "A bicycle stays upright mainly because of the gyroscopic effect of its spinning wheels.",
    ),
    "q31": (
        "Yellow for the overall leader, green for the points leader, and white with red dots for "
        "the best climber.",
        "The leader overall wears yellow, the best sprinter on points wears green and the best "
        "climber wears white with red dots.",
    ),
    "q32": (
        "In the EU a pedelec's motor may assist only up to 25 km/h with at most 250 W continuous "
        "power; faster models count as mopeds.",
        "Electric bikes in the European Union may assist up to 25 kilometres per hour.",
    ),
    "q33": (
        "To draft: riding in another rider's slipstream cuts air resistance, the main force "
        "above about 20 km/h, saving around a third of the effort.",
        "Riding close behind another cyclist, called drafting, reduces air resistance and can "
        "save around a third of the effort.",
    ),
    "q36": (
        "With a marine chronometer keeping the time of a reference meridian: comparing it with "
        "local noon gives longitude, 15 degrees per hour of difference.",
        "They compared the time at a reference place with the local time at the same moment; "
        "each hour of difference corresponds to 15 degrees of longitude.",
    ),
    "q37": (
        "The French physicist Augustin Fresnel, in 1822.",
        "Augustin Fresnel designed the lighthouse lens in 1822.",
    ),
    "q38": (
        "Sailors measured speed with a chip log, counting the knots on its line that ran out in "
        "a fixed time; one knot is one nautical mile per hour.",
        "Because sailors counted knots on a line paid out behind the ship; a knot is one "
        "nautical mile per hour, and a nautical mile is exactly 1,852 metres.",
    ),
    "q40": (
        "The Bay of Fundy in eastern Canada, with a range of up to about 16 metres.",
        "The Bay of Fundy in Canada has the highest tides, up to about 16 metres, because the "
        "bay resonates with the tide.",
    ),
    "q45": (
        "Chest pain or pressure that may spread to the arm, neck or jaw, often with shortness of "
        "breath, sweating or nausea; women and older people may have fatigue or breathlessness.",
        "The main warning sign is chest pain or pressure spreading to the arm, neck or jaw, often "
        "with breathlessness, sweating or nausea.",
    ),
    "q46": (
        "Around 120 over 80 mmHg is typical for a healthy adult.",
        "A normal reading is about 120/80 mmHg; hypertension starts at 200 over 120.",
    ),
    "q47": (
        "William Harvey, in 1628.",
        "The English physician William Harvey showed in 1628 that blood circulates in a closed "
        "loop pumped by the heart.",
    ),
    "q48": (
        "Push hard and fast in the centre of the chest, about 5 to 6 cm deep, at 100 to 120 "
        "compressions per minute, and call for help and a defibrillator.",
        "Push hard and fast in the centre of the chest at 100 to 120 compressions per minute.",
    ),
    "q51": (
        "A normal resting rate for adults is about 60 to 100 beats per minute.",
        "An adult heart beats about 60 to 100 times per minute at rest, and trained athletes "
        "often below 50.",
    ),
    "q53": (
        "Mainly because the starch recrystallises after baking (retrogradation), not simply "
        "because it dries out; it happens fastest at refrigerator temperatures.",
        "Bread goes stale because it dries out, so keeping it in the refrigerator is best.",
    ),
    "q54": (
        "Mix flour and water, let the wild microbes multiply, and feed it daily for one to two "
        "weeks until it reliably doubles in volume.",
        "Mix flour and water and feed the mixture every day for one to two weeks until it "
        "doubles reliably; keep back a portion from each batch.",
    ),
    "q55": (
        "Yeast ferments sugars into carbon dioxide, which the gluten network traps, so the "
        "dough rises.",
        "Yeast turns sugars in the dough into carbon dioxide and ethanol, and the gas trapped in "
        "the gluten makes it rise.",
    ),
    "q58": (
        "Boiling sets the outer layer, giving bagels their shiny, chewy crust.",
        "Bagels are boiled briefly so that the outer layer sets, which gives them a shiny, chewy "
        "crust.",
    ),
    "q60": (
        "It is baked slowly at low temperature in a covered tin for up to 24 hours, and slow "
        "Maillard reactions turn it deep brown without added colouring.",
        "Pumpernickel is dark because bakers add cocoa and coffee to the dough.",
    ),
}


def build_rag_samples(
    run: Run, corpus: dict[str, str], queries: dict[str, str], qrels_by_query: dict[str, dict[str, int]]
) -> list[dict[str, object]]:
    """RAGAS-style samples from the top ``RAG_DEPTH`` of ``run`` plus the hand-written answers.

    ``reference_context_ids`` are the passages judged 2 or 3 (they contain the answer).
    """
    out: list[dict[str, object]] = []
    for qid, (reference, response) in RAG_ANSWERS.items():
        top = [d for d, _ in run.ranked(qid, RAG_DEPTH)]
        gold = sorted(d for d, g in qrels_by_query.get(qid, {}).items() if g >= 2)
        out.append(
            {
                "id": qid,
                "user_input": queries[qid],
                "retrieved_contexts": [corpus[d].split("\n", 1)[-1] for d in top],
                "retrieved_context_ids": top,
                "reference": reference,
                "reference_context_ids": gold,
                "response": response,
            }
        )
    return out


def _same(path: Path, text: str) -> bool:
    """Whether ``path`` holds the same data as ``text``: runs compared as parsed rankings and
    samples as parsed JSON, so a change in number formatting alone does not count."""
    if not path.exists():
        return False
    if path.suffix == ".run":
        return read_run(path) == parse_run(text)
    old = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    return old == [json.loads(line) for line in text.splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=HERE, help="examples directory (default: here)")
    ap.add_argument("--check", action="store_true", help="compare with the files on disk; write nothing")
    args = ap.parse_args(argv)

    corpus = read_corpus(args.dir / "corpus.jsonl")
    queries = read_queries(args.dir / "queries.jsonl")
    qrels = read_qrels(args.dir / "qrels.txt")

    outputs: dict[Path, str] = {}
    runs = build_runs(corpus, queries)
    for name, run in runs.items():
        outputs[args.dir / "runs" / f"{name}.run"] = format_run(run, "trec")
    samples = build_rag_samples(runs["bm25_stemmed"], corpus, queries, qrels.to_dict())
    outputs[args.dir / "rag_samples.jsonl"] = "".join(
        json.dumps(s, ensure_ascii=False) + "\n" for s in samples
    )

    stale = [p for p, text in outputs.items() if not _same(p, text)]
    if args.check:
        for p in stale:
            print(f"differs: {p}")
        return 1 if stale else 0
    (args.dir / "runs").mkdir(exist_ok=True)
    for p, text in outputs.items():
        p.write_text(text, encoding="utf-8")
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
