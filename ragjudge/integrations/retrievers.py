"""A run from your own retriever: :func:`run_retriever` calls it for every query and keeps what
it returns as a :class:`~ragjudge.Run`, ready for :func:`ragjudge.evaluate` / ``compare``.

The retriever may be

* a function or coroutine function ``(query_text) -> results``, where results are ids, ``(id,
  score)`` pairs, or documents of any of the frameworks below (or mappings with ``id_key``);
* a LangChain ``BaseRetriever`` (or any LangChain runnable returning documents): ``ainvoke``
  when the retriever has its own async code, else ``invoke`` on a thread;
* a LlamaIndex ``BaseRetriever``: ``aretrieve`` when it defines ``_aretrieve``, else
  ``retrieve`` on a thread;
* a Haystack retriever component: ``run(query=..., top_k=k)`` (``top_k`` when it takes one;
  ``run_async`` when it has one) -> ``{"documents": [...]}``.

Ids and scores are read as :mod:`ragjudge.integrations.frameworks` says: the corpus id is
``metadata[id_key]`` / ``meta[id_key]`` first, then the framework's own id (LlamaIndex: the
source document's ``ref_doc_id``, then ``node_id``). Scores are the retriever's when every
result of a query has one (higher is better), else rank scores (n, n-1, ..., 1) that keep the
retriever's order. A document returned twice for one query (two chunks of it) keeps its first,
best place. Each query keeps its top ``k`` in trec_eval order.

A query whose call raises is left out of the run and listed in :attr:`RetrievedRun.failed`
with its reason; when most queries fail, :class:`RetrievalError` is raised (``partial`` holds
the run of the others).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .._sync import run_sync
from ..data import Run
from ..errors import InputError, RagjudgeError
from ..llm.progress import Progress
from ..retrieve import read_texts
from .frameworks import (
    Failure,
    call_many,
    describe,
    document_id,
    document_score,
    finite,
    framework,
    is_async_callable,
    overrides,
)

__all__ = ["RetrievalError", "RetrievalWarning", "RetrievedRun", "run_retriever", "run_retriever_sync"]


class RetrievedRun(Run):
    """A :class:`~ragjudge.Run` made by :func:`run_retriever`, with what went wrong.

    ``failed`` -- ``{qid: reason}`` of the queries whose call raised (left out of the run, so
    ``evaluate`` scores them as empty rankings, or skips them with ``skip_missing``);
    ``retriever`` -- what was called. It compares equal to a plain ``Run`` with the same rows.
    """

    __slots__ = ("failed", "retriever", "num_queries_asked")

    failed: dict[str, str]
    retriever: str
    num_queries_asked: int

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Run):
            return Run.__eq__(_plain(self), _plain(other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        failed = f", {len(self.failed)} failed" if self.failed else ""
        return (f"RetrievedRun({self.name!r}: {self.num_queries} of {self.num_queries_asked} "
                f"queries, {len(self)} documents{failed})")


def _plain(run: Run) -> Run:
    if type(run) is Run:
        return run
    return Run(*run.arrays, name=run.name, source=run.source)


class RetrievalWarning(UserWarning):
    """The retriever returned fewer than ``k`` documents for most queries."""


class RetrievalError(RagjudgeError):
    """Most queries (or questions) failed. ``partial`` is what the others gave (the
    :class:`RetrievedRun`, or the collected samples) with its ``failed``; the message gives
    the commonest reason."""

    partial: Any = None


#: LangChain retrievers' own count fields: ``k`` (BM25, TF-IDF, kNN, SVM), ``top_k`` (Azure AI
#: Search, Pinecone hybrid), ``top_k_results`` (Wikipedia, Arxiv, PubMed).
_LANGCHAIN_K = ("k", "top_k", "top_k_results")
#: Where LangChain wrappers keep the retrievers they call (contextual compression, multi-query,
#: ensemble): the count is set on those.
_LANGCHAIN_INNER = ("base_retriever", "retriever", "retrievers")


def with_k(retriever: Any, k: int) -> tuple[Any, str | None]:
    """A copy of ``retriever`` asked for ``k`` results where the framework has a setting for it
    (LangChain ``k``, ``top_k``, ``top_k_results`` or ``search_kwargs["k"]`` -- with ``fetch_k``
    raised to ``k`` for MMR -- or those of the retrievers a wrapper calls; LlamaIndex
    ``similarity_top_k``), and the name of the setting; the caller's object is never changed.
    Haystack takes ``top_k`` per call."""
    kind = framework(retriever)
    if kind == "langchain":
        for field in _LANGCHAIN_K:
            value = getattr(retriever, field, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return _copied(retriever, field, k), field
        kwargs = getattr(retriever, "search_kwargs", None)
        if isinstance(kwargs, dict):
            kwargs = {**kwargs, "k": k}
            # MMR picks k of fetch_k candidates (20 by default): fewer candidates than k cap it.
            if "fetch_k" in kwargs or getattr(retriever, "search_type", None) == "mmr":
                kwargs["fetch_k"] = max(int(kwargs.get("fetch_k") or 20), k)
            return _copied(retriever, "search_kwargs", kwargs), "search_kwargs['k']"
        for field in _LANGCHAIN_INNER:
            inner = getattr(retriever, field, None)
            if field == "retrievers" and isinstance(inner, (list, tuple)) and inner:
                pairs = [with_k(r, k) for r in inner]
                if any(setting for _, setting in pairs):
                    names = sorted({setting for _, setting in pairs if setting})
                    return (_copied(retriever, field, type(inner)(r for r, _ in pairs)),
                            f"{field}[*].{'/'.join(names)}")
            elif inner is not None and framework(inner) == "langchain":
                copy_, setting = with_k(inner, k)
                if setting:
                    return _copied(retriever, field, copy_), f"{field}.{setting}"
    if kind == "llamaindex" and isinstance(getattr(retriever, "similarity_top_k", None), int):
        return _copied(retriever, "similarity_top_k", k), "similarity_top_k"
    if kind == "haystack" and hasattr(retriever, "run"):
        try:
            takes = "top_k" in inspect.signature(getattr(retriever, "run_async", None) or retriever.run).parameters
        except (TypeError, ValueError):
            takes = False
        return retriever, ("top_k" if takes else None)
    return retriever, None


def _copied(obj: Any, field: str, value: Any) -> Any:
    """A shallow copy of ``obj`` with ``field`` set (pydantic's ``model_copy`` when it has one:
    LangChain retrievers are pydantic models)."""
    if hasattr(obj, "model_copy"):
        try:
            return obj.model_copy(update={field: value})
        except Exception:  # noqa: BLE001 - a model that refuses the update: copy and set
            pass
    out = copy.copy(obj)
    setattr(out, field, value)
    return out


def _caller(retriever: Any, k: int) -> tuple[Any, bool, str]:
    """(call(text) -> raw output, is_async, description)."""
    who = describe(retriever)
    kind = framework(retriever)
    if kind == "langchain" and hasattr(retriever, "invoke"):
        is_retriever = any(c.__name__ == "BaseRetriever" for c in type(retriever).__mro__)
        if is_retriever and not overrides(retriever, "BaseRetriever", "_aget_relevant_documents"):
            return retriever.invoke, False, f"the {who} retriever"
        return retriever.ainvoke, True, f"the {who} retriever"
    if kind == "llamaindex" and hasattr(retriever, "retrieve"):
        if overrides(retriever, "BaseRetriever", "_aretrieve"):
            return retriever.aretrieve, True, f"the {who} retriever"
        return retriever.retrieve, False, f"the {who} retriever"
    if kind == "haystack" and hasattr(retriever, "run"):
        run = getattr(retriever, "run_async", None) or retriever.run
        try:
            params = inspect.signature(run).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        if params and "query" not in params:
            raise InputError(f"the {who} component takes no 'query' input (its inputs: "
                             f"{', '.join(params)}); wrap it in a function (query_text) -> documents")
        extra = {"top_k": k} if "top_k" in params else {}
        if inspect.iscoroutinefunction(run):
            async def acall(text: str) -> Any:
                return await run(query=text, **extra)
            return acall, True, f"the {who} component"
        return (lambda text: run(query=text, **extra)), False, f"the {who} component"
    if kind is None and callable(retriever):
        asks = _k_parameter(retriever)
        if asks is not None:  # "def search(query, k=10)": asked for k, like a framework's setting
            fn = retriever
            if is_async_callable(fn):
                async def acall_k(text: str) -> Any:
                    return await fn(text, **{asks: k})
                return acall_k, True, f"the retriever {who}"
            return (lambda text: fn(text, **{asks: k})), False, f"the retriever {who}"
        return retriever, is_async_callable(retriever), f"the retriever {who}"
    raise InputError(f"cannot call {who} as a retriever: pass a function (query_text) -> ids, "
                     "(id, score) pairs or documents, or a LangChain, LlamaIndex or Haystack retriever")


def _k_parameter(fn: Any) -> str | None:
    """The name of a plain retriever function's count parameter (``k``, ``top_k``), when it
    takes one by keyword besides the query."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for p in params[1:]:
        if p.name in ("k", "top_k") and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return p.name
    return None


def _hits(output: Any, id_key: str, who: str) -> list[tuple[str, float | None]]:
    """A retriever's output as (id, score or None) in its order."""
    if isinstance(output, dict) and "documents" in output:  # a Haystack component's output
        output = output["documents"]
    if output is None:
        return []
    if isinstance(output, (str, bytes)) or not isinstance(output, (Sequence, tuple)) \
            and not hasattr(output, "__iter__"):
        raise InputError(f"{who} returned a {type(output).__name__}; expected a list of ids, "
                         "(id, score) pairs or documents")
    hits: list[tuple[str, float | None]] = []
    for item in output:
        if isinstance(item, tuple) and len(item) == 2:
            doc, score = item
            s = None if score is None else finite(float(score), who)
            hits.append((document_id(doc, id_key, who), s))
        else:
            s = document_score(item)
            hits.append((document_id(item, id_key, who), None if s is None else finite(s, who)))
    return hits


def _ranking(hits: list[tuple[str, float | None]]) -> tuple[list[str], list[float]]:
    seen: set[str] = set()
    kept = []
    for doc, score in hits:
        if doc not in seen:
            seen.add(doc)
            kept.append((doc, score))
    if kept and all(s is not None for _, s in kept):
        return [d for d, _ in kept], [float(s) for _, s in kept]  # type: ignore[arg-type]
    n = len(kept)
    return [d for d, _ in kept], [float(n - i) for i in range(n)]


def _top(docs: list[str], scores: list[float], k: int) -> tuple[list[str], list[float]]:
    """The first ``k`` in trec_eval's order: score descending, ties by id descending (strcmp)."""
    if len(docs) <= k:
        return docs, scores
    pairs = sorted(zip(docs, scores), key=lambda p: p[0].encode("utf-8"), reverse=True)
    pairs.sort(key=lambda p: -p[1])  # stable: equal scores stay in descending id order
    return [d for d, _ in pairs[:k]], [s for _, s in pairs[:k]]


async def run_retriever(
    retriever: Any,
    queries: Any,
    k: int = 100,
    *,
    concurrency: int = 8,
    id_key: str = "id",
    name: str | None = None,
    progress: bool = True,
) -> RetrievedRun:
    """Call ``retriever`` for every query and return the rankings as a run (top ``k`` each).

    ``queries``: ``{qid: text}`` (what :func:`ragjudge.read_queries` returns), a queries file
    (BEIR JSONL or TSV) or a value with a ``queries`` attribute. ``name`` defaults to the
    retriever's class or function name. See the module docstring for what is accepted.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}", field="k")
    texts = read_texts(queries, "queries")
    if name is None:
        name = getattr(retriever, "__name__", None) or type(retriever).__name__
    retriever, setting = with_k(retriever, k)
    if setting is None and framework(retriever) is None and callable(retriever):
        setting = _k_parameter(retriever)  # passed by _caller on each call
    call, is_async, who = _caller(retriever, k)
    qids = list(texts)

    bar: Any = None
    if progress:
        bar = Progress(len(qids), f"retrieve {name}", unit="query")
    failures = [0]

    def done(ok: bool) -> None:
        failures[0] += not ok
        if bar is not None:
            bar.update(1, status=f"{failures[0]} failed" if failures[0] else "")

    try:
        results = await call_many(
            [texts[q] for q in qids], call, lambda _text, out: _ranking(_hits(out, id_key, who)),
            is_async=is_async, concurrency=concurrency, on_done=done,
        )
    finally:
        if bar is not None:
            bar.close()

    q_col: list[str] = []
    d_col: list[str] = []
    s_col: list[float] = []
    failed: dict[str, str] = {}
    for qid, result in zip(qids, results):
        if isinstance(result, Failure):
            failed[qid] = result.reason
            continue
        docs, scores = _top(*result, k)
        q_col.extend([qid] * len(docs))
        d_col.extend(docs)
        s_col.extend(scores)
    answered = len(qids) - len(failed)
    short = sum(1 for r in results if not isinstance(r, Failure) and len(r[0]) < k)
    if answered and short * 2 > answered:
        asked = (f"asked with {setting}={k}" if setting else
                 "ragjudge knows no k setting of it: set it on the retriever")
        warnings.warn(f"{who} returned fewer than k={k} documents for {short} of {answered} "
                      f"queries ({asked}); metrics at deeper cutoffs count the missing ranks as "
                      "non-relevant", RetrievalWarning, stacklevel=3)
    run = RetrievedRun.from_arrays(q_col, d_col, s_col, name=name, source=who)
    run.failed = failed
    run.retriever = who
    run.num_queries_asked = len(qids)
    if len(failed) * 2 > len(qids):
        reason, count = Counter(failed.values()).most_common(1)[0]
        err = RetrievalError(f"{len(failed)} of {len(qids)} queries failed calling {who}; "
                             f"most common ({count}): {reason}")
        err.partial = run
        raise err
    return run


def run_retriever_sync(
    retriever: Any,
    queries: Any,
    k: int = 100,
    *,
    concurrency: int = 8,
    id_key: str = "id",
    name: str | None = None,
    progress: bool = True,
) -> RetrievedRun:
    """:func:`run_retriever` from synchronous code (works inside Jupyter too)."""
    return run_sync(run_retriever(retriever, queries, k, concurrency=concurrency, id_key=id_key,
                                  name=name, progress=progress))
