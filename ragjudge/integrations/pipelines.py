"""RAG samples from your own pipeline: :func:`collect_samples` asks it every question and keeps
the answer and the contexts it used, in the RAGAS fields that ``ragjudge rag`` and
:func:`ragjudge.evaluate_samples` read (``id``, ``user_input``, ``response``,
``retrieved_contexts``, ``retrieved_context_ids``, ``reference``).

The pipeline may be

* a function or coroutine function ``(question) -> (answer, contexts)`` or ``-> {"answer": ...,
  "contexts": [...]}``; contexts are texts or documents of any framework below;
* a LangChain runnable (a chain) whose output is a dict with the answer under ``answer`` /
  ``result`` / ``output`` / ``response`` and the documents under ``context`` / ``contexts`` /
  ``source_documents`` / ``documents`` (``create_retrieval_chain``'s and ``RetrievalQA``'s
  shapes); it is given the question as a string, or as ``{"input" | "question" | "query": q}``
  when its input schema is an object with such a field;
* a LlamaIndex query engine: ``Response.response`` and ``Response.source_nodes``;
* a Haystack ``Pipeline``: the question goes to every open input named ``query``, ``question``
  or ``text``; the answer is the first of an ``answers`` output (``AnswerBuilder``; its
  documents are the contexts) or of a ``replies`` output (a generator), and the contexts are
  the ``documents`` output of the component furthest downstream that has one (the retriever,
  or the ranker after it). Anything else: wrap the pipeline in a function.

Context ids are read as in :mod:`ragjudge.integrations.frameworks` (``id_key``); they are
written when every context has one. A question whose call raises is left out and listed in
``failed`` with its reason; most failing raises :class:`RetrievalError`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .._sync import run_sync
from ..errors import InputError
from ..llm.progress import Progress
from ..retrieve import read_texts
from .frameworks import (
    Failure,
    call_many,
    describe,
    document_id,
    document_text,
    framework,
    is_async_callable,
    overrides,
)
from .retrievers import RetrievalError

__all__ = ["CollectedSamples", "collect_samples", "collect_samples_sync"]

_ANSWER_KEYS = ("answer", "result", "output", "response")
_CONTEXT_KEYS = ("contexts", "context", "retrieved_contexts", "source_documents", "source_nodes",
                 "documents")
_INPUT_KEYS = ("input", "question", "query")
_HAYSTACK_INPUTS = ("query", "question", "text")


class CollectedSamples(list):  # type: ignore[type-arg]
    """The samples (a list of dicts) plus ``failed``: ``{id: reason}`` of the questions whose
    call raised, and ``pipeline``: what was called."""

    failed: dict[str, str]
    pipeline: str


# ----------------------------------------------------------------------------- reading outputs
def _text(answer: Any) -> str | None:
    if answer is None or isinstance(answer, str):
        return answer
    for attr in ("data", "text", "content", "response"):  # GeneratedAnswer, ChatMessage, AIMessage
        value = getattr(answer, attr, None)
        if isinstance(value, str):
            return value
    return str(answer)


def _split(output: Any, who: str) -> tuple[Any, Any]:
    """(answer, contexts) from a function's, a chain's or a query engine's output."""
    if isinstance(output, tuple) and len(output) == 2:
        return output
    if isinstance(output, Mapping):
        answer = next((output[k] for k in _ANSWER_KEYS if k in output), None)
        contexts = next((output[k] for k in _CONTEXT_KEYS if k in output), None)
        if answer is None and not any(k in output for k in _ANSWER_KEYS):
            raise InputError(f"{who} returned no answer: its output has {', '.join(map(str, output))}; "
                             f"expected one of {', '.join(_ANSWER_KEYS)}")
        if contexts is None:
            raise InputError(f"{who} returned no contexts: its output has {', '.join(map(str, output))}; "
                             f"expected one of {', '.join(_CONTEXT_KEYS)} (return the retrieved "
                             "documents beside the answer, e.g. return_source_documents=True)")
        return answer, contexts
    if hasattr(output, "source_nodes"):  # a LlamaIndex Response
        return getattr(output, "response", None), output.source_nodes
    raise InputError(f"{who} returned {type(output).__name__} output without contexts; expected "
                     "(answer, contexts), a dict with answer and contexts, or a response with "
                     "source_nodes")


def _sample(qid: str, question: str, answer: Any, contexts: Any, reference: str | None,
            id_key: str, who: str) -> dict[str, Any]:
    if contexts is None or isinstance(contexts, (str, bytes, Mapping)) or not hasattr(contexts, "__iter__"):
        raise InputError(f"{who} returned {type(contexts).__name__} as its contexts; expected a list "
                         "of texts or documents")
    contexts = list(contexts)
    texts = [document_text(c) for c in contexts]
    ids: list[str | None] = []
    for c in contexts:
        if isinstance(c, str):
            ids.append(None)
            continue
        try:
            ids.append(document_id(c, id_key, who))
        except InputError:
            ids.append(None)
    if contexts and all(t is None for t in texts) and any(i is None for i in ids):
        raise InputError(f"{who} returned contexts with neither text nor id ({type(contexts[0]).__name__})")
    sample: dict[str, Any] = {"id": qid, "user_input": question, "response": _text(answer)}
    if all(t is not None for t in texts):
        sample["retrieved_contexts"] = texts
    if all(i is not None for i in ids):
        sample["retrieved_context_ids"] = ids
    if reference is not None:
        sample["reference"] = reference
    return sample


# ----------------------------------------------------------------------------- callers
def _langchain_input(chain: Any, who: str) -> Any:
    """How a chain takes the question: ``q`` itself or ``{"input" | "question" | "query": q}``."""
    try:
        get = getattr(chain, "get_input_jsonschema", None)
        schema = get() if callable(get) else chain.input_schema.model_json_schema()
    except Exception:
        schema = {}
    props = schema.get("properties") if schema.get("type") == "object" else None
    if not props:
        return lambda q: q
    key = next((k for k in _INPUT_KEYS if k in props), None)
    if key is None and len(props) == 1:
        key = next(iter(props))
    if key is None:
        raise InputError(f"{who} takes {', '.join(props)}; none is the question ({', '.join(_INPUT_KEYS)}): "
                         "wrap the chain in a function (question) -> output")
    return lambda q: {key: q}


def _haystack_caller(pipe: Any, who: str) -> tuple[Any, Any]:
    """(call(question) -> outputs, read(outputs) -> (answer, documents)) for a Haystack Pipeline."""
    inputs = pipe.inputs()
    targets = {comp: [s for s in sockets if s in _HAYSTACK_INPUTS] for comp, sockets in inputs.items()}
    targets = {c: s for c, s in targets.items() if s}
    if not targets:
        opened = ", ".join(f"{c}.{s}" for c, sockets in inputs.items() for s in sockets) or "none"
        raise InputError(f"{who} has no open input named {', '.join(_HAYSTACK_INPUTS)} (its open inputs: "
                         f"{opened}): wrap it in a function (question) -> (answer, documents)")
    graph = pipe.graph
    sockets = {name: set(graph.nodes[name].get("output_sockets", {})) for name in graph.nodes}
    producers = [n for n, s in sockets.items() if "documents" in s]
    answerers = [n for n, s in sockets.items() if "answers" in s or "replies" in s]
    if not answerers:
        raise InputError(f"{who} has no component with an answers or replies output (the answer): "
                         "wrap it in a function (question) -> (answer, documents)")
    import networkx as nx  # a dependency of haystack-ai

    last = [p for p in producers if not any(o in nx.descendants(graph, p) for o in producers)]
    include = set(producers) | set(answerers)

    def call(question: str) -> Any:
        data = {c: {s: question for s in socks} for c, socks in targets.items()}
        return pipe.run(data, include_outputs_from=include)

    def read(outputs: Mapping[str, Any]) -> tuple[Any, Any]:
        answer: Any = None
        documents: Any = None
        for name in answerers:
            out = outputs.get(name) or {}
            if out.get("answers"):
                first = out["answers"][0]
                answer = first
                if getattr(first, "documents", None):
                    documents = first.documents
                break
            if out.get("replies"):
                answer = out["replies"][0]
                break
        if documents is None:
            found = [n for n in last if "documents" in (outputs.get(n) or {})]
            if len(found) > 1:
                raise InputError(f"{who}: several components output documents ({', '.join(found)}); "
                                 "wrap it in a function (question) -> (answer, documents)")
            if not found:
                raise InputError(f"{who} output no documents (the contexts): none of "
                                 f"{', '.join(producers) or 'its components'} has a documents output")
            documents = outputs[found[0]]["documents"]
        return answer, documents

    return call, read


def _caller(pipeline: Any) -> tuple[Any, bool, Any, str]:
    """(call(question) -> raw output, is_async, read(raw) -> (answer, contexts), description)."""
    who = describe(pipeline)
    kind = framework(pipeline)
    if kind == "haystack" and hasattr(pipeline, "graph") and hasattr(pipeline, "inputs"):
        call, read = _haystack_caller(pipeline, f"the {who} pipeline")
        return call, False, read, f"the {who} pipeline"
    if kind == "llamaindex" and hasattr(pipeline, "aquery"):
        custom = any(c.__name__ == "CustomQueryEngine" for c in type(pipeline).__mro__)
        native = overrides(pipeline, "CustomQueryEngine", "acustom_query") if custom \
            else overrides(pipeline, "BaseQueryEngine", "_aquery")
        who = f"the {who} query engine"
        read = lambda out: _split(out, who)  # noqa: E731
        return (pipeline.aquery, True, read, who) if native else (pipeline.query, False, read, who)
    if kind == "langchain" and hasattr(pipeline, "ainvoke"):
        who = f"the {who} chain"
        shape = _langchain_input(pipeline, who)

        async def acall(question: str) -> Any:
            return await pipeline.ainvoke(shape(question))
        return acall, True, lambda out: _split(out, who), who
    if kind is None and callable(pipeline):
        who = f"the pipeline {who}"
        return pipeline, is_async_callable(pipeline), lambda out: _split(out, who), who
    raise InputError(f"cannot call {who} as a RAG pipeline: pass a function (question) -> (answer, "
                     "contexts), a LangChain chain, a LlamaIndex query engine or a Haystack Pipeline")


def _questions(questions: Any) -> dict[str, str]:
    if isinstance(questions, Sequence) and not isinstance(questions, str):
        if not all(isinstance(q, str) for q in questions):
            raise InputError("questions must be strings", field="questions")
        return {str(i): q for i, q in enumerate(questions)}
    return read_texts(questions, "queries")


def _references(references: Any, ids: list[str]) -> dict[str, str]:
    if references is None:
        return {}
    if isinstance(references, Mapping):
        refs = {str(k): v for k, v in references.items()}
        unknown = sorted(set(refs) - set(ids))
        if unknown:
            raise InputError(f"references for unknown question ids: {', '.join(unknown[:5])}",
                             field="references")
    elif isinstance(references, Sequence) and not isinstance(references, str):
        if len(references) != len(ids):
            raise InputError(f"{len(references)} references for {len(ids)} questions", field="references")
        refs = dict(zip(ids, references))
    else:
        raise InputError(f"references must be a dict or a list, got {type(references).__name__}",
                         field="references")
    for k, v in refs.items():
        if v is not None and not isinstance(v, str):
            raise InputError(f"the reference of {k!r} must be a string, got {type(v).__name__}",
                             field="references")
    return {k: v for k, v in refs.items() if v is not None}


async def collect_samples(
    pipeline: Any,
    questions: Any,
    references: Any = None,
    *,
    concurrency: int = 4,
    id_key: str = "id",
    progress: bool = True,
) -> CollectedSamples:
    """Ask ``pipeline`` every question; return one RAGAS-field sample dict per answered one.

    ``questions``: ``{id: text}`` (what :func:`ragjudge.read_queries` returns), a list of texts
    (ids ``"0"``, ``"1"``...), or a queries file. ``references``: reference answers as
    ``{id: text}`` or a list in the questions' order. See the module docstring for pipelines.
    """
    texts = _questions(questions)
    ids = list(texts)
    refs = _references(references, ids)
    call, is_async, read, who = _caller(pipeline)

    def build(qid: str, out: Any) -> dict[str, Any]:
        answer, contexts = read(out)
        return _sample(qid, texts[qid], answer, contexts, refs.get(qid), id_key, who)

    bar: Any = None
    if progress:
        bar = Progress(len(ids), "collect samples", unit="question")
    failures = [0]

    def done(ok: bool) -> None:
        failures[0] += not ok
        if bar is not None:
            bar.update(1, status=f"{failures[0]} failed" if failures[0] else "")

    async def acall(qid: str) -> Any:
        return await call(texts[qid])

    try:
        results = await call_many(ids, acall if is_async else (lambda qid: call(texts[qid])), build,
                                  is_async=is_async, concurrency=concurrency, on_done=done)
    finally:
        if bar is not None:
            bar.close()
    out = CollectedSamples(r for r in results if not isinstance(r, Failure))
    out.failed = {q: r.reason for q, r in zip(ids, results) if isinstance(r, Failure)}
    out.pipeline = who
    if out and all(not s.get("retrieved_contexts") and not s.get("retrieved_context_ids") for s in out):
        raise InputError(f"{who} returned no contexts for any question (every list of retrieved "
                         "documents was empty): return the documents the answer was made from")
    if len(out.failed) * 2 > len(ids):
        reason, count = Counter(out.failed.values()).most_common(1)[0]
        err = RetrievalError(f"{len(out.failed)} of {len(ids)} questions failed calling {who}; "
                             f"most common ({count}): {reason}")
        err.partial = out
        raise err
    return out


def collect_samples_sync(
    pipeline: Any,
    questions: Any,
    references: Any = None,
    *,
    concurrency: int = 4,
    id_key: str = "id",
    progress: bool = True,
) -> CollectedSamples:
    """:func:`collect_samples` from synchronous code (works inside Jupyter too)."""
    return run_sync(collect_samples(pipeline, questions, references, concurrency=concurrency,
                                    id_key=id_key, progress=progress))
