"""A model answering from a Python function, without a network or a server: :class:`FakeLLM`.

``FakeLLM`` is the real session (:class:`ragjudge.llm.LLM`) over the ``function`` provider
(:mod:`.providers.function`), in the spirit of pydantic-ai's ``FunctionModel`` or inspect_ai's
``mockllm``: the cache and its keys, provenance, the budget, estimates, retries and the repair
policy are the ones every real call goes through. Use it for tests and examples, to replay
answers you already have, or to put a rule of your own behind the judges and metrics::

    from ragjudge.judges import LLMRelevanceJudge
    from ragjudge.llm.fake import FakeLLM, Failure, Reply

    def reply(prompt, variables):
        if "Bananas" in variables["passage"]:
            return Failure("refusal", "I do not grade fruit")
        return {"reasoning": "on topic", "grade": 3}

    judge = LLMRelevanceJudge(llm=FakeLLM(reply))
    judge.judge_sync("capital of france", "Paris is the capital of France.").grade  # 3

``reply`` is a function ``(prompt, variables) -> answer`` (``prompt`` is the loaded
:class:`~ragjudge.llm.prompts.Prompt`, ``variables`` the mapping the caller passed; the
function may be ``async``), or a mapping from a prompt's id (``"relevance"``) or name
(``"relevance.v1"``) to an answer or to such a function. What an answer may be, and how each
kind of :class:`Failure` is answered, is in :mod:`.providers.function`. Replies go through the
real checks and the real repair policy: a reply that breaks the schema is asked again (a repair
turn calls the function again) and fails as ``UNPARSABLE`` when the answer does not change.
Raise :class:`ragjudge.errors.LLMError` to stop a run as a revoked key would.

``calls`` records every request the function answered; usage is counted as the function's
:class:`Reply` states, or estimated. To judge with a model object you already have (LangChain,
LlamaIndex, LiteLLM, an async function of the messages), give it to :class:`ragjudge.llm.LLM`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from .cache import NullCache
from .cachestore import CacheStore
from .cost import PriceTable
from .defaults import DEFAULT_CONCURRENCY
from .endpoint import Endpoint
from .prompts import Prompt, load_prompt
from .providers.function import (
    Answer,
    Failure,
    FakeCall,
    FunctionModel,
    Reply,
    ReplyFn,
    answering,
    hashed_embedding,
)
from .session import LLM
from .values import Outcome, Validator

__all__ = ["FakeCall", "FakeLLM", "Failure", "MemoryCache", "Reply", "hashed_embedding"]


class MemoryCache(CacheStore):
    """An in-process cache store (``FakeLLM(cache=True)``): the interface of
    :class:`~ragjudge.llm.cachestore.CacheStore`, successes only, gone with the object."""

    def __init__(self) -> None:
        super().__init__()
        self._records: dict[str, str] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        record = self._records.get(key)
        if record is None:
            return None
        self.hits += 1
        return json.loads(record)  # a copy, as a file would give

    def put(self, key: str, record: dict[str, Any]) -> None:
        self._records[key] = json.dumps(record)
        self.writes += 1

    def claim(self, key: str) -> bool:
        return True  # one process: the session's own de-duplication is enough

    def release(self, key: str) -> None:
        return None

    def renew(self) -> None:
        return None

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"MemoryCache({len(self._records)} records)"


class FakeLLM(LLM):
    """The real session over the ``function`` provider (see the module docstring).

    ``model``: the name in provenance, cache keys and reports. ``cache``: ``False`` (none,
    the default), ``True`` (a :class:`MemoryCache`) or a cache store. ``prices``: a
    :class:`PriceTable` (``cost`` is ``None`` -- unknown -- without the model's price).
    ``prompt_tokens`` / ``completion_tokens``: fixed per-call usage instead of the estimate.
    ``embed``: a function text -> vector (default :func:`hashed_embedding`); it may return a
    :class:`Failure` or an exception to fail the request. Other keywords are the session's
    (``max_cost``, ``max_tokens``...) and the endpoint's (``concurrency``, ``max_attempts``...).
    """

    def __init__(
        self,
        reply: ReplyFn | Mapping[str, Answer | ReplyFn] | None = None,
        *,
        model: str = "fake-model",
        cache: bool | str | Path | CacheStore | NullCache | None = False,
        prices: PriceTable | str | Path | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        embed: Callable[[str], Sequence[float] | Failure | BaseException] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        **keywords: Any,
    ) -> None:
        if reply is not None and not callable(reply) and not isinstance(reply, Mapping):
            raise InputError("FakeLLM(reply) takes a function (prompt, variables) -> answer or a "
                             "mapping {prompt id: answer}", field="reply")
        self.function = FunctionModel(reply, embed=embed, prompt_tokens=prompt_tokens,
                                      completion_tokens=completion_tokens)
        session = {k: keywords.pop(k) for k in list(keywords) if k not in Endpoint.names()}
        if not model:
            raise InputError("no model given", field="model")
        endpoint = Endpoint(model, provider="function", target=self.function, concurrency=concurrency,
                            **keywords)
        if cache is True:
            cache = MemoryCache()
        # No list prices for a function: cost is unknown unless prices are given.
        super().__init__(endpoint, cache=cache if cache is not None else False,
                         prices=prices if prices is not None else PriceTable(), **session)
        for caller in self.callers:
            # A function shows no server load to adapt to: the concurrency is the ceiling given
            # (the adaptive limit would start with one request alone, as against a server).
            caller.runner.limiter = None

    def __repr__(self) -> str:
        return f"FakeLLM(model={self.model!r})"

    @property
    def reply(self) -> Any:
        """The reply function or mapping."""
        return self.function.reply

    @property
    def calls(self) -> list[FakeCall]:
        """Every request the function answered, in order."""
        return self.function.calls

    async def structured(self, prompt: Prompt | str | Path, variables: Mapping[str, Any], *,
                         validate: Validator | None = None) -> Outcome:
        """The session's :meth:`~ragjudge.llm.LLM.structured`, telling the function which
        prompt and variables each request renders."""
        prompt = load_prompt(prompt)
        with answering(prompt, variables):
            return await super().structured(prompt, variables, validate=validate)

