"""An in-process fake LLM session for tests and users: :class:`FakeLLM`.

It implements what judges and RAG metrics use (``StructuredSession`` and
``EmbeddingSession`` of :mod:`.protocols`) without a network, a server or an HTTP mock, in
the spirit of pydantic-ai's ``FunctionModel`` or inspect_ai's ``mockllm``::

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
(``"relevance.v1"``) to an answer or to such a function. An answer is

* a ``dict`` -- the reply object, or a ``str`` -- the reply text;
* a :class:`Reply` -- either of those with label probabilities (as read from logprobs),
  usage, latency or a served model name;
* a :class:`Failure` or an exception instance -- a failed :class:`Outcome` with its
  :class:`FailureKind` (an exception's ``kind`` attribute, else ``OTHER``).

Replies go through the same checks as the real session's (:func:`.replies.check_reply`:
JSON extraction, obvious type slips, the prompt's output schema, then the caller's
validator), so a reply the real judge would refuse is refused here too: a reply that breaks
the schema fails as ``UNPARSABLE`` and one the validator rejects as ``INVALID`` (the fake
asks no repair turns). An exception *raised* by the function propagates: raise
:class:`ragjudge.errors.LLMError` to stop a run as a revoked key would
(``structured_many`` then attaches the finished outcomes as ``exc.partial``).

Every answered call is counted (``usage``, ``stats``, ``cost`` when ``prices`` has the
model's price); outcomes carry the session's :class:`Provenance` with the prompt's id,
version and sha256 and the same sampling parameters as :class:`ragjudge.llm.LLM` -- and the
same cache keys, so a fake and a real session of the same model can share a
:class:`~ragjudge.llm.cache.Cache`. ``calls`` records every request the function answered.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InputError, LLMError
from .budget import worst_case_prompt_tokens
from .cache import Cache, NullCache, cache_key
from .cost import PriceTable, Usage, estimate_tokens
from .defaults import DEFAULT_CONCURRENCY
from .prompts import Prompt, load_prompt
from .provenance import FailureKind, Provenance
from .replies import apply_validate, check_reply, describe_exc
from .values import DryRun, Embeddings, Outcome, PreparedCall, Stats, Validator, gather_or_stop

__all__ = ["FakeCall", "FakeLLM", "Failure", "MemoryCache", "Reply", "hashed_embedding"]

#: Failure kinds that imply a reply came back and was billed (counted as one call).
_BILLED = frozenset({FailureKind.UNPARSABLE, FailureKind.INVALID, FailureKind.TRUNCATED,
                     FailureKind.REFUSAL, FailureKind.MALFORMED})


@dataclass(frozen=True)
class Reply:
    """A fake model's answer with the details a real reply carries.

    ``content``: the reply object (``dict``) or its text. ``probs``: probability per label
    (keys as in the prompt's ``labels``, e.g. ``{"3": 0.8, "2": 0.2}``), renormalised over
    the labels like the logprobs of a real reply. ``usage``: what the call is billed for
    (default: one call at the estimated prompt tokens and ~4 characters per reply token).
    """

    content: Mapping[str, Any] | str
    probs: Mapping[str, float] | None = None
    usage: Usage | None = None
    latency: float = 0.0
    served_model: str | None = None


@dataclass(frozen=True)
class Failure:
    """A failed call: ``kind`` (a :class:`FailureKind` or its value, e.g. ``"refusal"``) and
    the reason. ``usage``: what it is billed for (default: one call at the estimate for the
    kinds where a reply came back -- refusal, truncated, unparsable, invalid, malformed --
    nothing for transport failures and the budget)."""

    kind: FailureKind | str = FailureKind.OTHER
    reason: str = ""
    usage: Usage | None = None


Answer = Mapping[str, Any] | str | Reply | Failure | BaseException
ReplyFn = Callable[[Prompt, Mapping[str, Any]], Answer | Awaitable[Answer]]


@dataclass(frozen=True)
class FakeCall:
    """One request the fake answered (cache hits and deduplicated waits are not calls)."""

    prompt: Prompt
    variables: dict[str, Any]
    messages: list[dict[str, str]]

    @property
    def prompt_id(self) -> str:
        return self.prompt.id

    @property
    def user(self) -> str:
        """The text of the last user message."""
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")


class MemoryCache:
    """An in-process cache with the interface of :class:`~ragjudge.llm.cache.Cache`
    (``FakeLLM(cache=True)``): successes only, gone with the object."""

    path = None

    def __init__(self) -> None:
        self._records: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self.writes = 0

    def get(self, key: str) -> dict[str, Any] | None:
        record = self._records.get(key)
        if record is not None:
            self.hits += 1
            return json.loads(json.dumps(record))  # a copy, as a file would give
        return None

    def put(self, key: str, record: dict[str, Any]) -> None:
        self._records[key] = json.loads(json.dumps(record))
        self.writes += 1

    def claim(self, key: str) -> bool:
        return True

    def release(self, key: str) -> None:
        return None

    async def claim_or_wait(self, key: str, *, poll: float = 0.05) -> dict[str, Any] | None:
        return None

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"MemoryCache({len(self._records)} records)"


_WORD = re.compile(r"\w+", re.UNICODE)


def hashed_embedding(text: str, dim: int = 64) -> list[float]:
    """A deterministic unit vector of ``text``'s words (feature hashing): texts sharing words
    are similar, unrelated texts nearly orthogonal. The fake's default embedding."""
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        h = hashlib.sha256(word.encode("utf-8")).digest()
        vec[int.from_bytes(h[:4], "big") % dim] += 1.0 if h[4] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        vec[0], norm = 1.0, 1.0
    return [x / norm for x in vec]


class FakeLLM:
    """An in-process session answering from a function or a mapping (see the module
    docstring). Implements ``StructuredSession`` and ``EmbeddingSession``.

    ``model``: the name in provenance, cache keys and reports. ``cache``: ``False`` (none,
    the default), ``True`` (a :class:`MemoryCache`) or a ``Cache``/``NullCache``/
    ``MemoryCache`` object. ``prices``: a :class:`PriceTable` (``cost`` is ``None`` -- unknown
    -- without the model's price, as for a real local server). ``prompt_tokens`` /
    ``completion_tokens``: fixed per-call usage instead of the estimate. ``embed``: a function
    text -> vector (default :func:`hashed_embedding`); it may return a :class:`Failure` or an
    exception to fail the request. ``concurrency``: calls in flight in ``structured_many``.
    """

    def __init__(
        self,
        reply: ReplyFn | Mapping[str, Answer | ReplyFn] | None = None,
        *,
        model: str = "fake-model",
        cache: bool | Cache | NullCache | MemoryCache | None = False,
        prices: PriceTable | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        embed: Callable[[str], Sequence[float] | Failure | BaseException] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int | None = None,
    ) -> None:
        if not model:
            raise InputError("no model given", field="model")
        if reply is not None and not callable(reply) and not isinstance(reply, Mapping):
            raise InputError("FakeLLM(reply) takes a function (prompt, variables) -> answer or a "
                             "mapping {prompt id: answer}", field="reply")
        if concurrency < 1:
            raise InputError("concurrency must be >= 1", field="concurrency")
        self.model = model
        self.reply = reply
        if cache is True:
            self.cache: Cache | NullCache | MemoryCache = MemoryCache()
        elif cache is False or cache is None:
            self.cache = NullCache()
        else:
            self.cache = cache
        self.prices = prices if prices is not None else PriceTable()
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.embed_fn = embed if embed is not None else hashed_embedding
        self.concurrency = concurrency
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_cost: float | None = None
        self.usage = Usage()
        self.batch_usage = Usage()
        self.embedding_usage: dict[str, Usage] = {}
        self.stats = Stats()
        self.calls: list[FakeCall] = []
        self._inflight: dict[str, asyncio.Future[Outcome]] = {}

    def __repr__(self) -> str:
        return f"FakeLLM(model={self.model!r})"

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> FakeLLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- identity and accounting -------------------------------------------------------
    def params(self, prompt: Prompt) -> dict[str, Any]:
        """Sampling parameters, as :meth:`ragjudge.llm.LLM.params` (cache key, provenance)."""
        return {"temperature": self.temperature, "seed": self.seed,
                "max_tokens": self.max_tokens or prompt.max_tokens}

    def provenance(self, prompt: Prompt, **reported: Any) -> Provenance:
        reported.setdefault("response_format", "json_schema")
        return Provenance(model=self.model, prompt_id=prompt.id, prompt_version=prompt.version,
                          prompt_sha=prompt.sha256, params=self.params(prompt), **reported)

    def cost_of(self, usage: Usage, *, batch: bool = False) -> float | None:
        return self.prices.cost(self.model, usage, batch=batch)

    @property
    def cost(self) -> float | None:
        """USD spent so far (``None`` when a price is unknown, never 0 for unknown)."""
        total = self.cost_of(self.usage)
        if total is None:
            return None
        for model, usage in self.embedding_usage.items():
            c = self.prices.cost(model, usage)
            if c is None:
                return None
            total += c
        return total

    @property
    def rate_limited(self) -> int:
        return 0

    def _count(self, usage: Usage) -> None:
        self.usage = self.usage + usage
        self.stats.calls += usage.calls

    # -- requests ----------------------------------------------------------------------
    def prepare(self, prompt: Prompt | str | Path, variables: Mapping[str, Any]) -> PreparedCall:
        """Render one request and look it up in the cache (the real session's keys)."""
        prompt = load_prompt(prompt)
        messages = prompt.render(**variables)
        key = cache_key({"model": self.model, "prompt_sha": prompt.sha256,
                         "params": self.params(prompt), "messages": messages})
        record = self.cache.get(key)
        cached = self._from_record(record, prompt, key) if record is not None else None
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "temperature": self.temperature,
                                "max_tokens": self.params(prompt)["max_tokens"]}
        if self.seed is not None:
            body["seed"] = self.seed
        rf = prompt.response_format("json_schema")
        if rf is not None:
            body["response_format"] = rf
        return PreparedCall(key, prompt, messages, body, estimate_tokens(messages), cached,
                            data=tuple(str(v) for v in variables.values()))

    def estimate(self, prompt: Prompt | str | Path,
                 variables: Iterable[Mapping[str, Any]]) -> DryRun:
        """Calls, tokens and cost a job would need, as :meth:`ragjudge.llm.LLM.estimate`."""
        prompt = load_prompt(prompt)
        seen: set[str] = set()
        pairs = cached = dups = ptoks = worst_ptoks = 0
        max_tokens = self.params(prompt)["max_tokens"]
        out_tokens = min(prompt.expected_output_tokens, max_tokens)
        for v in variables:
            pairs += 1
            call = self.prepare(prompt, v)
            if call.cached is not None:
                cached += 1
            elif call.key in seen:
                dups += 1
            else:
                seen.add(call.key)
                ptoks += call.estimated_prompt_tokens
                worst_ptoks += worst_case_prompt_tokens(call.messages, call.body.get("response_format"))
        calls = len(seen)
        ctoks = calls * out_tokens
        return DryRun(pairs, cached, dups, calls, ptoks, ctoks,
                      self.cost_of(Usage(calls, ptoks, 0, ctoks)), self.model,
                      worst_cost=self.cost_of(Usage(calls, worst_ptoks, 0, calls * max_tokens)),
                      assumptions=f"a fake session; {out_tokens} completion tokens per call")

    async def structured(self, prompt: Prompt | str | Path, variables: Mapping[str, Any], *,
                         validate: Validator | None = None) -> Outcome:
        """One call answered by the fake (cache, then in-flight dedup, then the function)."""
        call = self.prepare(prompt, variables)
        if call.cached is not None:
            self.stats.cache_hits += 1
            return apply_validate(call.cached, validate)
        pending = self._inflight.get(call.key)
        if pending is not None:
            shared = await asyncio.shield(pending)
            self.stats.deduplicated += 1  # one call served both: the second is not billed
            return replace(apply_validate(shared, validate), cached=True) if shared.ok else shared
        fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._inflight[call.key] = fut
        try:
            outcome = await self._answer(call, dict(variables), validate)
        except BaseException as exc:
            if isinstance(exc, Exception):
                fut.set_exception(exc)
            else:
                fut.cancel()
            raise
        finally:
            self._inflight.pop(call.key, None)
        fut.set_result(outcome)
        return outcome

    def _function(self, prompt: Prompt) -> Any:
        if self.reply is None:
            raise LLMError(f"FakeLLM has no reply for prompt {prompt.name}")
        if isinstance(self.reply, Mapping):
            for name in (prompt.name, prompt.id):
                if name in self.reply:
                    return self.reply[name]
            raise LLMError(f"FakeLLM has no reply for prompt {prompt.name} "
                           f"(it knows {', '.join(map(str, self.reply))})")
        return self.reply

    async def _answer(self, call: PreparedCall, variables: dict[str, Any],
                      validate: Validator | None) -> Outcome:
        prompt = call.prompt
        fn = self._function(prompt)
        self.calls.append(FakeCall(prompt, variables, [dict(m) for m in call.messages]))
        answer = fn(prompt, variables) if callable(fn) else fn
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, BaseException):
            kind = FailureKind.parse(getattr(answer, "kind", None)) or FailureKind.OTHER
            answer = Failure(kind, describe_exc(answer))
        if isinstance(answer, Failure):
            return self._failed(call, answer)
        if not isinstance(answer, Reply):
            answer = Reply(answer)
        content = answer.content
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        usage = answer.usage or self._usage(call, text)
        self._count(usage)
        prov = self.provenance(prompt, served_model=answer.served_model or self.model,
                               system_fingerprint="fake")
        common: dict[str, Any] = dict(text=text, usage=usage, latency=answer.latency,
                                      provenance=prov, key=call.key, attempts=1)
        try:
            obj, _ = check_reply(prompt, text, None, quoted=call.data)
        except (ValueError, TypeError, KeyError) as exc:
            self.stats.failed += 1
            return Outcome(value=None, error=f"unparsable reply: {describe_exc(exc)}",
                           failure=FailureKind.UNPARSABLE, **common)
        try:
            value = validate(obj) if validate is not None else obj
        except (ValueError, TypeError, KeyError) as exc:
            self.stats.failed += 1
            return Outcome(value=None, error=f"invalid reply: {describe_exc(exc)}",
                           failure=FailureKind.INVALID, **common)
        probs, expected = self._probs(prompt, answer.probs)
        outcome = Outcome(value=value, error=None, probs=probs, expected=expected, obj=obj, **common)
        self.cache.put(call.key, self._record(outcome))
        return outcome

    def _usage(self, call: PreparedCall, text: str) -> Usage:
        prompt_tokens = self.prompt_tokens if self.prompt_tokens is not None else call.estimated_prompt_tokens
        completion = self.completion_tokens if self.completion_tokens is not None else len(text) // 4 + 1
        return Usage(1, prompt_tokens, 0, completion)

    def _failed(self, call: PreparedCall, failure: Failure) -> Outcome:
        kind = FailureKind.parse(failure.kind) or FailureKind.OTHER
        if failure.usage is not None:
            usage = failure.usage
        elif kind in _BILLED:
            usage = self._usage(call, "")
        else:
            usage = Usage()
        self._count(usage)
        if kind is FailureKind.BUDGET:
            self.stats.skipped += 1
        else:
            self.stats.failed += 1
        return Outcome(value=None, error=failure.reason or str(kind), failure=kind, usage=usage,
                       provenance=self.provenance(call.prompt), key=call.key,
                       attempts=int(usage.calls > 0))

    @staticmethod
    def _probs(prompt: Prompt, probs: Mapping[str, float] | None
               ) -> tuple[dict[str, float] | None, float | None]:
        if probs is None or not prompt.labels:
            return None, None
        mass = {label: float(probs.get(label, probs.get(_int_or_none(label), 0.0)))  # type: ignore[arg-type]
                for label in prompt.labels}
        if any(not math.isfinite(p) or p < 0 for p in mass.values()):
            raise InputError(f"Reply.probs must be finite and >= 0, got {dict(probs)!r}", field="probs")
        total = sum(mass.values())
        if total <= 0:
            return None, None
        out = {label: p / total for label, p in mass.items()}
        try:
            expected: float | None = sum(float(k) * p for k, p in out.items())
        except ValueError:
            expected = None
        return out, expected

    @staticmethod
    def _record(o: Outcome) -> dict[str, Any]:
        return {**o.provenance.to_dict(), "obj": o.obj, "text": o.text, "probs": o.probs,
                "expected": o.expected, "usage": o.usage.to_dict(), "latency": o.latency,
                "attempts": o.attempts, "repaired": o.repaired, "dropped": list(o.dropped)}

    def _from_record(self, record: Mapping[str, Any], prompt: Prompt, key: str) -> Outcome:
        stored = Provenance.from_dict(record)
        prov = self.provenance(prompt, served_model=stored.served_model,
                               system_fingerprint=stored.system_fingerprint,
                               response_format=stored.response_format)
        raw_usage = record.get("usage")
        return Outcome(value=record.get("obj"), error=None, text=record.get("text"),
                       probs=record.get("probs"), expected=record.get("expected"),
                       usage=Usage.from_dict(raw_usage) if isinstance(raw_usage, Mapping) else Usage(),
                       latency=float(record.get("latency") or 0.0), cached=True, provenance=prov,
                       key=key, attempts=int(record.get("attempts") or 0),
                       repaired=bool(record.get("repaired")),
                       dropped=tuple(record.get("dropped") or ()), obj=record.get("obj"))

    async def structured_many(self, prompt: Prompt | str | Path,
                              variables: Iterable[Mapping[str, Any]], *,
                              validate: Validator | None = None, desc: str | None = None,
                              progress: bool = True) -> list[Outcome]:
        """Many calls, results in input order (``desc``/``progress`` are accepted and
        ignored: no bar). An :class:`LLMError` cancels the rest and is raised with the
        finished outcomes as ``exc.partial`` (``None`` where unfinished)."""
        prompt = load_prompt(prompt)
        items = list(variables)
        results: list[Outcome | None] = [None] * len(items)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(i: int) -> None:
            async with gate:
                results[i] = await self.structured(prompt, items[i], validate=validate)

        await gather_or_stop([asyncio.ensure_future(one(i)) for i in range(len(items))], results)
        return [r for r in results if r is not None]

    # -- embeddings --------------------------------------------------------------------
    async def embed(self, texts: Sequence[str], *, model: str) -> Embeddings:
        """Vectors from the ``embed`` function, in order; one call per request, usage
        counted per embedding model (~4 characters per token)."""
        if isinstance(texts, str):
            raise InputError("embed() takes a list of texts, not one string", field="texts")
        if not model:
            raise InputError("no embedding model given (pass --embedding-model M)",
                             field="embedding_model")
        texts = [str(t) for t in texts]
        usage = Usage(1, sum(len(t) // 4 + 1 for t in texts), 0, 0)
        self.embedding_usage[model] = self.embedding_usage.get(model, Usage()) + usage
        self.stats.calls += 1
        vectors: list[list[float]] = []
        for t in texts:
            got = self.embed_fn(t)
            if isinstance(got, BaseException):
                got = Failure(FailureKind.parse(getattr(got, "kind", None)) or FailureKind.OTHER,
                              describe_exc(got))
            if isinstance(got, Failure):
                self.stats.failed += 1
                kind = FailureKind.parse(got.kind) or FailureKind.OTHER
                return Embeddings(None, f"embedding call failed: {got.reason or kind}", model,
                                  usage, 0, kind)
            vectors.append([float(x) for x in got])
        return Embeddings(vectors, None, model, usage, 0)


def _int_or_none(label: str) -> int | None:
    try:
        return int(label)
    except ValueError:
        return None
