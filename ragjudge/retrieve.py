"""Runs for your own queries: BM25, dense and hybrid retrieval over a corpus, as :class:`Run`.

So that queries made with ``ragjudge synth`` (or any others) can be turned into runs and
evaluated without another toolkit::

    from ragjudge.retrieve import retrieve_bm25, retrieve_dense_sync, retrieve_hybrid
    bm25 = retrieve_bm25("corpus.jsonl", "synth/queries.jsonl", k=100, stemmer="english")
    dense = retrieve_dense_sync("corpus.jsonl", "synth/queries.jsonl", llm=llm,
                                embedding_model="text-embedding-3-small")
    hybrid = retrieve_hybrid([bm25, dense])          # reciprocal rank fusion

Corpus and queries are ``{id: text}`` dicts, files read by :func:`ragjudge.io.read_corpus` /
:func:`ragjudge.io.read_queries` (BEIR JSONL or TSV), or any value with a ``corpus`` /
``queries`` attribute (a :class:`ragjudge.io.BeirDataset`, a synthesis result).

Every run keeps the top ``k`` documents of each query in trec_eval's order: score descending,
ties by document id descending (``strcmp``). The cut at ``k`` follows the same order, so the
run is exactly the first ``k`` lines of the complete ranking, whatever the input order.
"""

from __future__ import annotations

import asyncio
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._sync import run_sync
from .data import Run
from ._lazy import optional
from .errors import InputError, LLMError
from .fuse import FUSION_METHODS, fuse
from .io import read_corpus, read_queries
from .synth.text import tokens

# Deferred imports: ragjudge.llm. Its session brings the LLM stack (client, providers,
# tenacity), which BM25 runs never need: dense retrieval imports it where it embeds.

if TYPE_CHECKING:
    from .llm import LLM, DryRun

__all__ = [
    "BM25_METHODS",
    "analyzer",
    "estimate_dense",
    "read_texts",
    "retrieve_bm25",
    "retrieve_dense",
    "retrieve_dense_sync",
    "retrieve_hybrid",
]

#: BM25 variants of ``bm25s`` (Kamphuis et al., ECIR 2020): ``lucene`` is Lucene's/Anserini's.
BM25_METHODS: tuple[str, ...] = ("lucene", "robertson", "atire", "bm25l", "bm25+")


# ----------------------------------------------------------------------------- inputs
def read_texts(value: Any, kind: str) -> dict[str, str]:
    """``{id: text}`` from a dict, a file (BEIR JSONL or TSV) or a value with a ``corpus`` /
    ``queries`` attribute; ``kind`` is ``"corpus"`` or ``"queries"``."""
    if kind not in ("corpus", "queries"):
        raise ValueError(f"kind must be 'corpus' or 'queries', got {kind!r}")
    if isinstance(value, (str, os.PathLike)):
        out = read_corpus(value) if kind == "corpus" else read_queries(value)
    elif isinstance(value, Mapping):
        out = {}
        for ident, text in value.items():
            if not isinstance(text, str):
                raise InputError(f"the text of {ident!r} must be a string, got {type(text).__name__}",
                                 field=kind)
            out[str(ident)] = text
    elif hasattr(value, kind) and isinstance(getattr(value, kind), Mapping):
        return read_texts(getattr(value, kind), kind)
    else:
        raise InputError(f"{kind} must be a {{id: text}} dict or a file name, got {type(value).__name__}",
                         field=kind)
    if not out:
        raise InputError(f"no {'documents' if kind == 'corpus' else 'queries'}", field=kind)
    return out


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be an integer >= 1, got {k!r}", field="k")
    return int(k)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        # The name is the run file's tag column: one token, or it would be cut at the space.
        raise InputError(f"a run name is one word (the TREC tag column), got {name!r}", field="name")
    return name


# ----------------------------------------------------------------------------- ranking
class _Ranker:
    """Top-k selection in trec_eval order (score desc, doc id desc as UTF-8 bytes)."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = np.asarray(ids, dtype=object)
        order = sorted(range(len(ids)), key=lambda i: ids[i].encode("utf-8"))
        self.id_rank = np.empty(len(ids), dtype=np.int64)
        self.id_rank[np.asarray(order, dtype=np.int64)] = np.arange(len(ids), dtype=np.int64)

    def top(self, cand: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices and scores of the best ``k`` of the candidate documents ``cand``
        (``scores`` aligned with ``cand``); ties at the cut go to the higher document id."""
        if len(cand) > k:
            cut = len(scores) - k
            kth = np.partition(scores, cut)[cut]  # the k-th largest score
            above = scores > kth
            tied = np.flatnonzero(scores == kth)
            need = k - int(above.sum())
            tied = tied[np.argsort(-self.id_rank[cand[tied]], kind="stable")[:need]]
            keep = np.concatenate([np.flatnonzero(above), tied])
            cand, scores = cand[keep], scores[keep]
        return cand, scores


def _run(qids: list[str], picked: list[tuple[np.ndarray, np.ndarray]], ranker: _Ranker, name: str) -> Run:
    counts = [len(c) for c, _ in picked]
    total = sum(counts)
    if total == 0:
        return Run.from_arrays([], [], [], name=name)
    q = np.repeat(np.asarray(qids, dtype=object), counts)
    d = ranker.ids[np.concatenate([c for c, _ in picked])]
    s = np.concatenate([s for _, s in picked]).astype(np.float64)
    return Run.from_arrays(q.tolist(), d.tolist(), s, name=name)


# ----------------------------------------------------------------------------- BM25
def analyzer(stemmer: str | Callable[[str], str] | None = None,
             stopwords: str | Iterable[str] | None = None) -> Callable[[str], list[str]]:
    """The text -> terms function of :func:`retrieve_bm25`: the word tokens of
    :func:`ragjudge.synth.text.tokens` (lower-cased, NFKC, CJK characters one by one), minus
    ``stopwords`` (``"en"``: the English list shipped with ``bm25s``, NLTK's; or your own
    words), stemmed by ``stemmer`` (``"english"`` or another Snowball language through
    PyStemmer, the ``stem`` extra; or any ``word -> stem`` function)."""
    stop: frozenset[str] = frozenset()
    if stopwords is not None:
        if isinstance(stopwords, str):
            if stopwords.lower() not in ("en", "english"):
                raise InputError(f"unknown stopword list {stopwords!r}; use 'en' or give the words",
                                 field="stopwords")
            from bm25s.stopwords import STOPWORDS_EN

            stop = frozenset(STOPWORDS_EN)
        else:
            stop = frozenset(str(w).lower() for w in stopwords)
    stem: Callable[[str], str] | None
    if stemmer is None:
        stem = None
    elif callable(stemmer):
        stem = stemmer
    elif isinstance(stemmer, str):
        Stemmer = optional("Stemmer", extra="stem", what=f"stemmer {stemmer!r}")  # PyStemmer (Snowball, C)
        try:
            stem = Stemmer.Stemmer(stemmer.lower()).stemWord
        except KeyError:
            raise InputError(f"unknown stemmer {stemmer!r}; known: {', '.join(Stemmer.algorithms())}",
                             field="stemmer") from None
    else:
        raise InputError(f"stemmer must be a language name or a function, got {stemmer!r}", field="stemmer")

    memo: dict[str, str] = {}

    def analyze(text: str) -> list[str]:
        words = [w for w in tokens(text) if w not in stop]
        if stem is None:
            return words
        out = []
        for w in words:
            s = memo.get(w)
            if s is None:
                s = memo[w] = str(stem(w))
            out.append(s)
        return out

    return analyze


def retrieve_bm25(
    corpus: Any,
    queries: Any,
    *,
    k: int = 100,
    k1: float = 1.5,
    b: float = 0.75,
    method: str = "lucene",
    stemmer: str | Callable[[str], str] | None = None,
    stopwords: str | Iterable[str] | None = None,
    name: str = "bm25",
) -> Run:
    """BM25 run of ``queries`` over ``corpus`` (``bm25s``: a sparse index scored per query).

    A document is retrieved when it shares at least one term with the query; the best ``k``
    are kept. Queries without a term in the index (or without words) retrieve nothing and are
    absent from the run. Scores are ``bm25s``'s float32 values.
    """
    docs = read_texts(corpus, "corpus")
    qs = read_texts(queries, "queries")
    k = _check_k(k)
    name = _check_name(name)
    if method not in BM25_METHODS:
        raise InputError(f"unknown BM25 method {method!r}; choose one of {', '.join(BM25_METHODS)}",
                         field="method")
    for label, value, hi in (("k1", k1, math.inf), ("b", b, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 <= value <= hi:
            span = "a finite number >= 0" if hi == math.inf else f"a number in [0, {hi:g}]"
            raise InputError(f"{label} must be {span}, got {value!r}", field=label)
    with warnings.catch_warnings():  # bm25s imports tqdm.auto, which warns in a notebook
        warnings.filterwarnings("ignore", message="IProgress not found")  # without ipywidgets
        import bm25s

    analyze = analyzer(stemmer, stopwords)
    ids = list(docs)
    tokens = [analyze(docs[d]) for d in ids]
    if not any(tokens):
        raise InputError("no document has a word to index (every text is empty, or only stopwords)",
                         field="corpus")
    index = bm25s.BM25(k1=float(k1), b=float(b), method=method)
    index.index([t or [""] for t in tokens], show_progress=False)
    indptr = np.asarray(index.scores["indptr"])
    postings = np.asarray(index.scores["indices"])
    ranker = _Ranker(ids)
    qids: list[str] = []
    picked: list[tuple[np.ndarray, np.ndarray]] = []
    for qid, text in qs.items():
        term_ids = index.get_tokens_ids(analyze(text))
        if not term_ids:
            continue
        scores = np.asarray(index.get_scores_from_ids(term_ids), dtype=np.float64)
        matched = np.zeros(len(ids), dtype=bool)
        for t in set(term_ids):
            matched[postings[indptr[t]:indptr[t + 1]]] = True
        cand = np.flatnonzero(matched)
        qids.append(qid)
        picked.append(ranker.top(cand, scores[cand], k))
    if len(qids) < len(qs):
        # Absent from the run, such a query scores 0 (or is skipped with skip_missing): said.
        warnings.warn(f"{len(qs) - len(qids)} of {len(qs)} queries share no term with the corpus "
                      "(or have no words) and retrieved nothing; they are absent from the run",
                      stacklevel=2)
    return _run(qids, picked, ranker, name)


# ----------------------------------------------------------------------------- dense
def _usable(texts: Mapping[str, str]) -> list[str]:
    # An empty input is refused by embedding endpoints: such documents and queries are left out.
    return [i for i, t in texts.items() if t.strip()]


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


async def _embed(llm: Any, texts: list[str], model: str, what: str) -> np.ndarray:
    from .llm.session import EMBED_BATCH

    unique = list(dict.fromkeys(texts))
    # One embed() per request-sized chunk of distinct texts, so the session's runner can
    # overlap them (one embed() call sends its requests one after another).
    results = await asyncio.gather(*(llm.embed(c, model=model) for c in _chunks(unique, EMBED_BATCH)))
    got: list[list[float]] = []
    for r in results:
        if r.vectors is None:
            raise LLMError(f"embedding the {what} with {model} failed: {r.error}")
        got.extend(r.vectors)
    by_text = dict(zip(unique, got))
    vectors = [by_text[t] for t in texts]
    dims = {len(v) for v in vectors}
    if len(dims) != 1 or 0 in dims:
        raise LLMError(f"embedding the {what} with {model} failed: the endpoint returned vectors of "
                       f"lengths {sorted(dims)}")
    m = np.asarray(vectors, dtype=np.float32)
    if not np.isfinite(m).all():
        raise LLMError(f"embedding the {what} with {model} failed: a vector holds NaN or infinity")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)  # a zero vector stays zero: cosine 0 to everything


async def retrieve_dense(
    corpus: Any,
    queries: Any,
    *,
    llm: LLM,
    embedding_model: str,
    k: int = 100,
    name: str = "dense",
    block: int = 256,
) -> Run:
    """Dense run: cosine similarity of ``embedding_model`` vectors from ``await llm.embed``
    (cached per text, rate-limited and costed by the session; ``llm.embedding_usage`` has the
    tokens). Every document is a candidate; the best ``k`` are kept. Documents and queries
    whose text is blank are not embedded (not retrieved / absent from the run). A failed
    embedding request (after the session's retries) or the budget raises :class:`LLMError`
    naming the reason; vectors already received stay in the cache, so a rerun pays only for
    the rest. ``block`` queries are scored at a time (memory ``block x len(corpus)``)."""
    docs = read_texts(corpus, "corpus")
    qs = read_texts(queries, "queries")
    k = _check_k(k)
    name = _check_name(name)
    if not embedding_model:
        raise InputError("no embedding model given (pass --embedding-model M)", field="embedding_model")
    doc_ids, q_ids = _usable(docs), _usable(qs)
    if not doc_ids:
        raise InputError("every document's text is empty: nothing to embed", field="corpus")
    D = await _embed(llm, [docs[d] for d in doc_ids], embedding_model, "corpus")
    Q = await _embed(llm, [qs[q] for q in q_ids], embedding_model, "queries") if q_ids else None
    if Q is not None and Q.shape[1] != D.shape[1]:
        raise LLMError(f"query vectors have {Q.shape[1]} dimensions, document vectors {D.shape[1]}")
    ranker = _Ranker(doc_ids)
    everyone = np.arange(len(doc_ids))
    picked: list[tuple[np.ndarray, np.ndarray]] = []
    for start in range(0, len(q_ids), max(1, int(block))):
        sims = (Q[start:start + block] @ D.T).astype(np.float64)  # type: ignore[index]
        picked.extend(ranker.top(everyone, row, k) for row in sims)
    return _run(q_ids, picked, ranker, name)


def retrieve_dense_sync(corpus: Any, queries: Any, *, llm: LLM, embedding_model: str, k: int = 100,
                        name: str = "dense") -> Run:
    """Blocking :func:`retrieve_dense` (works inside a running event loop, e.g. Jupyter);
    closes the session's HTTP client at the end, as the other ``*_sync`` entry points do."""

    async def main() -> Run:
        try:
            return await retrieve_dense(corpus, queries, llm=llm, embedding_model=embedding_model,
                                        k=k, name=name)
        finally:
            await llm.aclose()

    return run_sync(main())


def estimate_dense(corpus: Any, queries: Any, *, llm: LLM, embedding_model: str) -> DryRun:
    """Dry run of :func:`retrieve_dense`: texts to embed, how many the cache already holds,
    requests, tokens (the session's own ~4 characters per token) and cost; nothing is sent."""
    from .llm import DryRun, Usage, embedding_key
    from .llm.session import EMBED_BATCH

    if not embedding_model:
        raise InputError("no embedding model given (pass --embedding-model M)", field="embedding_model")
    docs = read_texts(corpus, "corpus")
    qs = read_texts(queries, "queries")
    parts = [[docs[d] for d in _usable(docs)], [qs[q] for q in _usable(qs)]]
    # Exactly as retrieve_dense asks: the corpus's distinct texts in requests of EMBED_BATCH,
    # then the queries' (a query whose text is a document's is in the cache by then).
    known: set[str] = set()
    texts = cached = dups = calls = tokens_ = worst = 0
    for part in parts:
        texts += len(part)
        unique = list(dict.fromkeys(part))
        dups += len(part) - len(unique)
        for chunk in _chunks(unique, EMBED_BATCH):
            todo = 0
            for text in chunk:
                key = embedding_key(embedding_model, text)
                if key in known:  # a query with a document's text: asked once
                    dups += 1
                    continue
                record = llm.cache.get(key)
                if record is not None and record.get("embedding"):
                    cached += 1
                    continue
                known.add(key)
                todo += 1
                tokens_ += len(text) // 4 + 1
                worst += len(text.encode("utf-8")) + 2
            calls += todo > 0
    cost = llm.prices.cost(embedding_model, Usage(calls, tokens_, 0, 0))
    worst_cost = llm.prices.cost(embedding_model, Usage(calls, worst, 0, 0))
    return DryRun(texts, cached, dups, calls, tokens_, 0, cost, embedding_model, worst_cost=worst_cost,
                  assumptions=f"~4 characters per token; {EMBED_BATCH} texts per /embeddings request; "
                              "blank texts are not embedded")


# ----------------------------------------------------------------------------- hybrid
def retrieve_hybrid(
    runs: Sequence[Run] | Mapping[str, Run],
    *,
    method: str = "rrf",
    k: int = 100,
    name: str = "hybrid",
    rrf_k: float = 60.0,
) -> Run:
    """Fuse runs (e.g. :func:`retrieve_bm25` and :func:`retrieve_dense`) with
    :func:`ragjudge.fuse.fuse` (``rrf`` by default) and keep the top ``k`` per query."""
    if method not in FUSION_METHODS:
        raise InputError(f"unknown fusion method {method!r}; choose one of {', '.join(FUSION_METHODS)}",
                         field="method")
    k = _check_k(k)
    fused = fuse(runs, method=method, rrf_k=rrf_k, name=_check_name(name))  # type: ignore[arg-type]
    return fused.top(k) if len(fused) else fused
