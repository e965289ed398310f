"""What the integrations share: recognising a framework's object, reading its documents, and
calling it for many inputs at once.

No framework is imported here: objects are recognised by the modules of their classes
(``langchain_core``, ``llama_index``, ``haystack``), so a plain function costs no import, and a
framework's object can only come from a framework that is installed.

Documents, whatever made them, are read the same way (``id_key`` names the corpus id):

* LangChain ``Document``: ``metadata[id_key]``, else ``Document.id``; text ``page_content``;
  no score (LangChain retrievers return none, so the retriever's order is kept);
* LlamaIndex ``NodeWithScore`` / node: ``metadata[id_key]``, else ``ref_doc_id`` (the id of the
  source document a chunk was cut from), else ``node_id``; text ``get_content()``; score
  ``NodeWithScore.score``;
* Haystack ``Document``: ``meta[id_key]``, else ``Document.id``; text ``content``; score
  ``Document.score``;
* a mapping: ``[id_key]``, text ``text`` / ``content`` / ``page_content``, score ``score``;
* a string: an id in a ranking, a text among a pipeline's contexts.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..errors import InputError

__all__ = [
    "Failure",
    "call_many",
    "describe",
    "document_id",
    "document_score",
    "document_text",
    "finite",
    "framework",
    "is_async_callable",
    "overrides",
]

_TEXT_KEYS = ("text", "content", "page_content")


def _modules(obj: Any) -> list[str]:
    return [getattr(c, "__module__", "") or "" for c in type(obj).__mro__]


def framework(obj: Any) -> str | None:
    """``"langchain"``, ``"llamaindex"``, ``"haystack"`` or ``None`` (anything else)."""
    mods = _modules(obj)
    if any(m.startswith(("langchain_core", "langchain.", "langchain_")) or m == "langchain"
           for m in mods):
        return "langchain"
    if any(m.startswith("llama_index") for m in mods):
        return "llamaindex"
    if any(m.startswith("haystack") for m in mods) or hasattr(obj, "__haystack_input__") \
            or (getattr(type(type(obj)), "__module__", "") or "").startswith("haystack"):
        return "haystack"
    return None


def describe(obj: Any) -> str:
    """How an error names the object: ``"the LangChain retriever MyRetriever"``."""
    kind = {"langchain": "LangChain ", "llamaindex": "LlamaIndex ", "haystack": "Haystack "}
    name = getattr(obj, "__qualname__", None) if inspect.isroutine(obj) else type(obj).__name__
    return f"{kind.get(framework(obj) or '', '')}{name or type(obj).__name__}"


def overrides(obj: Any, base_name: str, method: str) -> bool:
    """Whether ``obj``'s class defines ``method`` below the framework class ``base_name`` (e.g.
    a LlamaIndex retriever with its own ``_aretrieve``, not the default that calls the sync one)."""
    base = next((c for c in type(obj).__mro__ if c.__name__ == base_name), None)
    if base is None or not hasattr(base, method):
        return hasattr(obj, method)
    return getattr(type(obj), method, None) is not getattr(base, method)


def is_async_callable(fn: Any) -> bool:
    """A coroutine function, a ``functools.partial`` of one, or an object whose ``__call__`` is."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


# ----------------------------------------------------------------------------- documents
def _meta(item: Any) -> Mapping[str, Any]:
    for attr in ("metadata", "meta"):
        value = getattr(item, attr, None)
        if isinstance(value, Mapping):
            return value
    return {}


def _node(item: Any) -> Any:
    """A LlamaIndex ``NodeWithScore``'s node (anything else is itself)."""
    node = getattr(item, "node", None)
    return node if node is not None and hasattr(node, "node_id") else item


# The kind of each document class, found once: pydantic models (LangChain, LlamaIndex) make a
# failed attribute look-up cost microseconds, so the look-ups are not repeated per document.
_KINDS: dict[type, str] = {}


def _kind(item: Any) -> str:
    t = type(item)
    kind = _KINDS.get(t)
    if kind is None:
        if isinstance(item, str):
            kind = "str"
        elif isinstance(item, Mapping):
            kind = "mapping"
        elif hasattr(item, "page_content") and isinstance(getattr(item, "metadata", None), Mapping):
            kind = "langchain"
        elif _node(item) is not item:
            kind = "scored_node"
        elif hasattr(item, "node_id"):
            kind = "node"
        elif hasattr(item, "content") and isinstance(getattr(item, "meta", None), Mapping):
            kind = "haystack"
        else:
            kind = "other"
        _KINDS[t] = kind
    return kind


def _no_id(node: Any, id_key: str, who: str) -> InputError:
    field = "metadata" if hasattr(node, "metadata") else "meta"
    return InputError(f"a {type(node).__name__} from {who} has no id: neither {field}[{id_key!r}] "
                      f"nor {type(node).__name__}.id is set (pass id_key= naming the {field} field "
                      "that holds the corpus id)")


def _node_id(node: Any, id_key: str) -> str:
    value = node.metadata.get(id_key)
    if value is not None:
        return str(value)
    ref = node.ref_doc_id  # the source document's id, else the node's own
    return str(ref if ref is not None else node.node_id)


def document_id(item: Any, id_key: str, who: str) -> str:
    """The corpus id of one document (see the module docstring for where it is read)."""
    kind = _kind(item)
    if kind == "str":
        return item  # type: ignore[no-any-return]
    if kind == "langchain" or kind == "haystack":
        value = (item.metadata if kind == "langchain" else item.meta).get(id_key)
        if value is None:
            value = item.id
        if value is None or value == "":
            raise _no_id(item, id_key, who)
        return str(value)
    if kind == "scored_node":
        return _node_id(item.node, id_key)
    if kind == "node":
        return _node_id(item, id_key)
    if kind == "mapping":
        value = item.get(id_key)
        if value is None:
            raise InputError(f"a document from {who} has no {id_key!r} key (pass id_key= naming "
                             f"the key that holds the corpus id; keys: {', '.join(map(str, item)) or 'none'})")
        return str(value)
    if isinstance(item, bool):
        raise InputError(f"{who} returned {item!r} where a document or an id was expected")
    if isinstance(item, int) or type(item).__name__.startswith(("int", "uint")) and hasattr(item, "item"):
        return str(item)
    value = _meta(item).get(id_key)
    if value is None:
        value = getattr(item, "id", None)
    if value is None or value == "":
        raise _no_id(item, id_key, who)
    return str(value)


def document_text(item: Any) -> str | None:
    """The text of one retrieved document (``None`` when it has none)."""
    kind = _kind(item)
    if kind == "str":
        return item  # type: ignore[no-any-return]
    if kind == "mapping":
        for key in _TEXT_KEYS:
            if isinstance(item.get(key), str):
                return str(item[key])
        return None
    if kind == "langchain":
        return str(item.page_content)
    if kind in ("scored_node", "node"):
        return str((item.node if kind == "scored_node" else item).get_content())
    for attr in ("content", "text"):
        value = getattr(item, attr, None)
        if isinstance(value, str):
            return value
    return None


def document_score(item: Any) -> float | None:
    """The score a framework attached to a document (``None``: none; LangChain's have none)."""
    kind = _kind(item)
    if kind in ("str", "langchain", "node"):
        return None
    value = item.get("score") if kind == "mapping" else getattr(item, "score", None)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- calling
class Failure:
    """One input whose call raised: the one-line reason (``TimeoutError: read timed out``)."""

    __slots__ = ("reason",)

    def __init__(self, exc: BaseException) -> None:
        text = str(exc).strip().splitlines()
        self.reason = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__

    def __repr__(self) -> str:
        return f"Failure({self.reason!r})"


async def call_many(
    items: Sequence[Any],
    call: Callable[[Any], Any] | Callable[[Any], Awaitable[Any]],
    read: Callable[[Any, Any], Any],
    *,
    is_async: bool,
    concurrency: int,
    on_done: Callable[[bool], None] | None = None,
) -> list[Any]:
    """``read(item, call(item))`` for every item, at most ``concurrency`` at a time, in order.

    A call that raises gives a :class:`Failure` in its place (failures are data); ``read``
    raising (a document without an id: the caller's set-up, not one input) stops everything and
    raises. Async calls run as ``concurrency`` workers on this loop; sync ones on
    ``concurrency`` threads that each take the next item, so a fast retriever pays one function
    call per item, not a thread hand-off.
    """
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise InputError(f"concurrency must be a positive integer, got {concurrency!r}", field="concurrency")
    out: list[Any] = [None] * len(items)
    counter = itertools.count()
    stop = threading.Event()
    n_workers = min(concurrency, len(items))

    if is_async:
        async def worker() -> None:
            for i in counter:
                if i >= len(items) or stop.is_set():
                    return
                try:
                    value = await call(items[i])
                except Exception as exc:
                    out[i] = Failure(exc)
                else:
                    out[i] = read(items[i], value)
                if on_done is not None:
                    on_done(not isinstance(out[i], Failure))

        tasks = [asyncio.ensure_future(worker()) for _ in range(n_workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
        return out

    lock = threading.Lock()

    def thread_worker() -> None:
        for i in counter:
            if i >= len(items) or stop.is_set():
                return
            try:
                value = call(items[i])
                if inspect.isawaitable(value):
                    if inspect.iscoroutine(value):
                        value.close()
                    raise InputError("returned an awaitable from a sync call: pass the async "
                                     "function itself (async def), not a wrapper around it")
            except InputError:
                stop.set()
                raise
            except Exception as exc:
                out[i] = Failure(exc)
            else:
                try:
                    out[i] = read(items[i], value)
                except BaseException:
                    stop.set()
                    raise
            if on_done is not None:
                with lock:
                    on_done(not isinstance(out[i], Failure))

    if n_workers == 0:
        return out
    # Its own pool: the loop's default one may have fewer threads than ``concurrency``.
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="ragjudge-call") as pool:
        try:
            await asyncio.gather(*(loop.run_in_executor(pool, thread_worker) for _ in range(n_workers)))
        finally:
            stop.set()
    return out


def finite(score: float, who: str) -> float:
    if not math.isfinite(score):
        raise InputError(f"{who} returned the score {score!r}; scores must be finite numbers")
    return score
