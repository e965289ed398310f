"""The LLM session: the one generic structured-call entry point every judge and metric uses.

``await llm.structured(prompt, variables)`` does, in order: render the template -> cache
lookup -> in-flight dedup (identical concurrent requests share one call) -> runner slot ->
per turn: budget admission (the turn's worst case is reserved, see :mod:`.budget`) -> client
call (strict ``json_schema`` response format, falling back to a schema without length
keywords, ``json_object`` and plain text for servers that lack them) -> reply checks and
the repair/retry policy of :mod:`.replies` -> probability per label from logprobs -> cache
write -> usage and cost accounting.

Per-item failures come back as :class:`Outcome` with ``value=None``, an ``error`` reason and
a :class:`FailureKind`; configuration failures (bad key, unknown model, unsupported request)
raise :class:`ragjudge.errors.LLMError` and stop the run. Values live in :mod:`.values`,
reply parsing and the policy in :mod:`.replies`, the cost cap in :mod:`.budget`. The session
holds the rendering, the cache, the accounts and the provenance, and delegates: the turns of
one call to :mod:`.conversation`, the choice of an endpoint and moving work off one that is
down to :mod:`.dispatch`, the fan-out of ``structured_many`` to :mod:`.many`.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import InputError, LLMError
from .budget import check_finite, worst_case_prompt_tokens
from .cache import NullCache, cache_key, open_cache
from .cachestore import CacheStore
from .caller import Accounts, AccountsView, Caller, loop_state
from .client import LLMClient, RejectedReply, redact_url
from .conversation import FORMATS, Converser, ServerFeatures
from .cost import PriceTable, Usage, estimate_tokens
from .dispatch import Dispatcher
from .endpoint import Endpoint
from .many import fan_out
from .prompts import Prompt, load_prompt
from .provenance import FailureKind, Provenance
from .providers import provider_spec, recognise_object
from .providers.openai import parse_completion
from .replies import apply_validate, check_reply, describe_exc, label_probs
from .runner import Runner
from .values import DryRun, Embeddings, Outcome, PreparedCall, Validator

__all__ = ["LLM", "embedding_key", "FORMATS", "EMBED_BATCH"]

#: Texts per ``/embeddings`` request (OpenAI accepts up to 2,048 inputs per request).
EMBED_BATCH = 256


def embedding_key(model: str, text: str) -> str:
    """Cache key of one embedding: sha256 of exactly (embedding model, text)."""
    return cache_key({"kind": "embedding", "model": model, "text": text})


class _LoopState:
    """What the session binds to one event loop: the calls in flight (for de-duplication)."""

    def __init__(self) -> None:
        self.inflight: dict[str, asyncio.Future[Outcome]] = {}


class LLM(AccountsView):
    """A configured model endpoint with its runner, cache, prices, budget and running totals.

    Safe to use from several event loops in turn (each sync-wrapper call runs on a fresh
    loop): loop-bound objects (the HTTP client) are created per loop; the cache, totals, the
    budget and the learned rate limits are shared.
    """

    def __init__(
        self,
        model: Any,
        *,
        endpoints: Sequence[Endpoint] | None = None,
        cache: bool | str | Path | CacheStore | NullCache | None = True,
        prices: PriceTable | str | Path | None = None,
        max_cost: float | None = None,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int | None = None,
        logprobs: bool = True,
        top_logprobs: int = 5,
        http_client: Any = None,
        check_key: bool = True,
        **changes: Any,
    ) -> None:
        """``model``: a model name (the endpoint is made from the keyword arguments), an
        :class:`~ragjudge.llm.endpoint.Endpoint` (keyword arguments given replace its fields),
        several endpoints serving the same model (or ``endpoints=``: the work is spread over
        them, see :func:`.routing.route`, with one budget and one cache), or a model object you already
        have -- a LangChain chat model, a LlamaIndex LLM, LiteLLM's ``acompletion`` (bound to
        its model with ``functools.partial``) or an async function ``(messages, schema) ->
        text`` -- called through its provider (see :mod:`.providers`).

        ``**changes`` are the endpoint's fields (``base_url``, ``timeout``, ``max_attempts``,
        ``patience``, ``concurrency``, ``rpm``... as declared on :class:`Endpoint`, with their
        defaults there); ``None`` leaves a field as it is."""
        unknown = sorted(set(changes) - set(Endpoint.names()) - {"model"})
        if unknown:
            raise TypeError(f"LLM() got unexpected keyword argument(s) {', '.join(unknown)} "
                            f"(the endpoint's fields: {', '.join(Endpoint.names())})")
        if endpoints is None and isinstance(model, (list, tuple)):
            model, endpoints = (model[0] if model else ""), model
        if endpoints is not None:
            endpoints = list(endpoints)
            if not endpoints or not all(isinstance(e, Endpoint) for e in endpoints):
                raise InputError("endpoints must be a non-empty list of Endpoint values", field="endpoints")
            names = {e.model for e in endpoints}
            if len(names) > 1:
                raise InputError(f"the endpoints of one session must serve one model, got {sorted(names)}",
                                 field="endpoints")
            if isinstance(model, str) and model and model not in names:
                raise InputError(f"model {model!r} is not the endpoints' model {endpoints[0].model!r}",
                                 field="endpoints")
            model = endpoints[0]
        given = {name: value for name, value in changes.items() if value is not None}
        if isinstance(model, Endpoint):
            endpoint = model.replace(**given) if given else model
        elif isinstance(model, str) or model is None:
            if not model:
                raise InputError("no model given (pass --model)", field="model")
            endpoint = Endpoint(model, **given)
        else:
            # A model object of the user's: its provider is told by the object's class.
            provider, name = recognise_object(model)
            endpoint = Endpoint(name, **{"provider": provider, **given, "target": model})
        for name, value in (("max_tokens", max_tokens),):
            check_finite(value, name, integer=True)
        check_finite(temperature, "temperature", positive=False)
        check_finite(seed, "seed", positive=False, integer=True)  # llama.cpp: -1 = random
        check_finite(max_cost, "max_cost", positive=False)
        self.endpoint = endpoint
        self.model = endpoint.model
        #: The older name of :attr:`endpoint`.
        self.config = endpoint
        self.spec = provider_spec(endpoint.provider)
        extra = [e.replace(**given) if given else e for e in (endpoints or [])[1:]]
        if check_key:  # fail fast on a missing key, before any work (a dry run needs none)
            for e in (endpoint, *extra):
                e.resolve_key()
        if cache is False or cache is None:
            self.cache: CacheStore | NullCache = NullCache()
        elif isinstance(cache, NullCache):
            self.cache = cache
        else:  # True (the default target), a path, a postgresql:// URL or an open store
            self.cache = open_cache(cache)
        # The provider's list prices join the built-in table; a price file overrides both.
        base = PriceTable.default().merged(self.spec.prices)
        if isinstance(prices, (str, Path)):
            prices = PriceTable.load(prices, base=base)
        #: The money and counts of the session, shared by its callers (one budget).
        self.accounts = Accounts(endpoint.model, prices if prices is not None else base, max_cost)
        several = bool(extra)
        #: One caller per endpoint: everything between a ready request and a counted reply
        #: (see :mod:`.caller`); the first is :attr:`caller`.
        self.callers = [Caller(e, accounts=self.accounts, http_client=http_client, fail_fast=several)
                        for e in (endpoint, *extra)]
        self.caller = self.callers[0]
        #: Where each request goes among the endpoints, and what moves when one is down.
        self.dispatcher = Dispatcher(self.callers, self.model)
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        #: Server capabilities learned from 400s, shared by every call of the session.
        self.features = ServerFeatures()
        #: The turns of one call (send, strict parse, repair, downgrade): :mod:`.conversation`.
        self.converser = Converser(self.dispatcher, self.features, self.stats, render=self._body,
                                   provenance=self.provenance, attempts=endpoint.max_attempts)
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    # -- plumbing --------------------------------------------------------------------
    def __repr__(self) -> str:
        where = redact_url(self.endpoint.azure_endpoint or self.endpoint.resolved_base_url()) or self.endpoint.provider
        return f"LLM(model={self.model!r}, provider={self.endpoint.provider!r}, endpoint={where!r})"

    # The shared accounts (prices, budget, stats, usage, cost) read as the session's own come
    # from AccountsView; the first endpoint's runner is the session's.
    @property
    def runner(self) -> Runner:
        return self.caller.runner

    def _state(self) -> _LoopState:
        return loop_state(self._states, _LoopState)

    def client(self) -> LLMClient:
        """This event loop's client (batch mode uses its provider's SDK for the files/batches
        API)."""
        return self.caller.client()

    async def aclose(self) -> None:
        """Close this loop's HTTP clients (the cache stays open for later calls)."""
        for caller in self.callers:
            await caller.aclose()

    async def __aenter__(self) -> LLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _count(self, usage: Usage, *, batch: bool = False) -> None:
        self.caller.count(usage, batch=batch)

    @property
    def rate_limited(self) -> int:
        return sum(c.runner.rate_limited for c in self.callers)

    def params(self, prompt: Prompt) -> dict[str, Any]:
        """Sampling parameters: part of the cache key and of every answer's provenance."""
        return {
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens or prompt.max_tokens,
        }

    def provenance(self, prompt: Prompt, **reported: Any) -> Provenance:
        """The provenance of an answer to ``prompt`` from this session (``reported``: what the
        server said -- ``served_model``, ``system_fingerprint`` -- and ``response_format``)."""
        return Provenance(model=self.model, prompt_id=prompt.id, prompt_version=prompt.version,
                          prompt_sha=prompt.sha256, params=self.params(prompt), **reported)

    def failure(self, call: PreparedCall, kind: FailureKind, reason: str, **fields: Any) -> Outcome:
        """A failed :class:`Outcome` for ``call`` with this session's provenance."""
        fmt = (call.body.get("response_format") or {}).get("type", "text")
        return Outcome(value=None, error=reason, failure=kind, key=call.key,
                       provenance=self.provenance(call.prompt, response_format=fmt), **fields)

    # -- requests --------------------------------------------------------------------
    def prepare(self, prompt: Prompt | str | Path, variables: Mapping[str, Any]) -> PreparedCall:
        """Render one request and look it up in the cache (no network)."""
        prompt = load_prompt(prompt)
        messages = prompt.render(**variables)
        key = cache_key({
            "model": self.model,
            "prompt_sha": prompt.sha256,
            "params": self.params(prompt),
            "messages": messages,
        })
        record = self.cache.get(key)
        cached = self._from_record(record, prompt, key) if record is not None else None
        body = self._body(prompt, messages, self.features.format)
        return PreparedCall(key, prompt, messages, body,
                            estimate_tokens(messages, body.get("response_format"),
                                            schema_overhead=self.spec.schema_overhead), cached,
                            data=tuple(str(v) for v in variables.values()))

    def _body(self, prompt: Prompt, messages: list[dict[str, str]], fmt: int,
              boost: int = 1) -> dict[str, Any]:
        params = self.params(prompt)
        params["max_tokens"] *= boost
        drop = self.features.drop
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if "temperature" not in drop:
            body["temperature"] = params["temperature"]
        if params["seed"] is not None and "seed" not in drop and "seed" in self.spec.features:
            body["seed"] = params["seed"]
        body["max_completion_tokens" if "max_tokens" in drop else "max_tokens"] = params["max_tokens"]
        kind = FORMATS[fmt]
        rf = prompt.response_format("json_schema", basic=True) if kind == "json_schema_basic" \
            else prompt.response_format(kind)
        if rf is not None:
            body["response_format"] = rf
        if self.logprobs and prompt.labels and "logprobs" not in drop and "logprobs" in self.spec.features:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        return body

    def _from_record(self, record: Mapping[str, Any], prompt: Prompt, key: str) -> Outcome:
        prov = Provenance.from_dict(record)
        # The session's own identity wins over whatever an old record says.
        prov = replace(prov, model=self.model, prompt_id=prompt.id, prompt_version=prompt.version,
                       prompt_sha=prompt.sha256, params=prov.params or self.params(prompt))
        raw_usage = record.get("usage")
        return Outcome(
            value=record.get("obj"),
            error=None,
            text=record.get("text"),
            probs=record.get("probs"),
            expected=record.get("expected"),
            usage=Usage.from_dict(raw_usage) if isinstance(raw_usage, Mapping) else Usage(),
            latency=float(record.get("latency") or 0.0),
            cached=True,
            provenance=prov,
            key=key,
            attempts=int(record.get("attempts") or 0),
            repaired=bool(record.get("repaired")),
            dropped=tuple(record.get("dropped") or ()),
            obj=record.get("obj"),
        )

    @staticmethod
    def _record(o: Outcome) -> dict[str, Any]:
        """The cache record of a successful outcome: its provenance fields and the reply."""
        return {
            **o.provenance.to_dict(),
            "obj": o.obj, "text": o.text, "probs": o.probs, "expected": o.expected,
            "usage": o.usage.to_dict(), "latency": o.latency, "attempts": o.attempts,
            "repaired": o.repaired, "dropped": list(o.dropped),
        }

    # -- the entry point ---------------------------------------------------------------
    async def structured(
        self,
        prompt: Prompt | str | Path,
        variables: Mapping[str, Any],
        *,
        validate: Validator | None = None,
    ) -> Outcome:
        """One structured call (see the module docstring). Never raises for per-item failures."""
        call = self.prepare(prompt, variables)
        if call.cached is not None:
            self.stats.cache_hits += 1
            return apply_validate(call.cached, validate)
        st = self._state()
        while (pending := st.inflight.get(call.key)) is not None:
            try:
                shared = await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and not (task is not None and getattr(task, "cancelling", lambda: 0)()):
                    continue  # the task making the call was cancelled, not us: take it over
                raise
            self.stats.deduplicated += 1
            return replace(apply_validate(shared, validate), cached=True) if shared.ok else shared
        fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        # Nobody may await a failed future: retrieve its exception so asyncio does not warn.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        st.inflight[call.key] = fut
        try:
            # runtime: in-flight claim in the cache file -- another process paying for this very
            # answer is waited for instead of paid again (Cache.claim_or_wait).
            record = await self.cache.claim_or_wait(call.key)
            if record is not None:
                self.stats.cache_hits += 1
                outcome = apply_validate(self._from_record(record, call.prompt, call.key), validate)
            else:
                try:
                    outcome = await self._call(call, validate)
                finally:
                    self.cache.release(call.key)
        except Exception as exc:
            if not fut.done():
                fut.set_exception(exc)
            raise
        except BaseException:
            fut.cancel()
            raise
        finally:
            st.inflight.pop(call.key, None)
        if not fut.done():
            fut.set_result(outcome)
        return outcome

    async def _call(self, call: PreparedCall, validate: Validator | None) -> Outcome:
        # Reserve what OpenAI's limiter counts at admission (prompt + max_tokens); settled to
        # the real usage when the call ends.
        tokens = call.estimated_prompt_tokens + self.params(call.prompt)["max_tokens"]
        # The slot (concurrency, tokens per minute) of the endpoint the call will go to.
        runner = self.dispatcher.route(call.data[0] if call.data else call.key).runner
        async with runner.slot(tokens) as reservation:
            outcome = await self.converser.run(call, validate)
            reservation.settle(outcome.usage.total_tokens)
        if outcome.ok:
            self.cache.put(call.key, self._record(outcome))
        elif outcome.skipped:
            self.stats.skipped += 1
        else:
            self.stats.failed += 1
        return outcome

    # -- embeddings --------------------------------------------------------------------
    async def embed(self, texts: Sequence[str], *, model: str) -> Embeddings:
        """Embedding vectors of ``texts`` (in order) from the endpoint's ``/embeddings``.

        Same client retries and runner pacing as the chat calls; each vector is cached under
        sha256 of (embedding model, text), identical texts are sent once, and requests carry
        up to :data:`EMBED_BATCH` texts. Usage is accounted per embedding model (its own
        price). A failed request or the budget gives ``Embeddings(vectors=None, error=...)``;
        configuration errors raise :class:`LLMError`.
        """
        if isinstance(texts, str):
            raise InputError("embed() takes a list of texts, not one string", field="texts")
        if not model:
            raise InputError("no embedding model given (pass --embedding-model M)", field="embedding_model")
        if "embeddings" not in self.spec.features:
            raise LLMError(f"the {self.spec.name} provider has no embeddings endpoint: give the embedding "
                           "metrics a session on an OpenAI-compatible endpoint")
        if self.max_cost is not None and self.prices.get(model) is None:
            raise InputError(f"a cost cap needs a price for embedding model {model!r}: give prices",
                             field="max_cost")
        texts = [str(t) for t in texts]
        keys = [embedding_key(model, t) for t in texts]
        found: dict[str, list[float]] = {}
        for key in dict.fromkeys(keys):
            record = self.cache.get(key)
            vec = record.get("embedding") if record is not None else None
            if isinstance(vec, list) and vec:
                found[key] = [float(x) for x in vec]
        cached = sum(1 for k in keys if k in found)
        self.stats.cache_hits += cached
        todo = [t for k, t in dict(zip(keys, texts)).items() if k not in found]
        usage = Usage()
        for i in range(0, len(todo), EMBED_BATCH):
            chunk = todo[i : i + EMBED_BATCH]
            reply, billed, failure = await self.dispatcher.embeddings(model, chunk)
            usage = usage + billed
            if reply is None:
                assert failure is not None
                if failure[0] is not FailureKind.BUDGET:
                    self.stats.failed += 1
                return Embeddings(None, failure[1], model, usage, cached, failure[0])
            for text, vec in zip(chunk, reply.vectors):
                key = embedding_key(model, text)
                found[key] = vec
                self.cache.put(key, {"embedding": vec, "model": model, "prompt_id": "embedding",
                                     "served_model": reply.model})
        return Embeddings([found[k] for k in keys], None, model, usage, cached)

    # -- many calls ----------------------------------------------------------------------
    async def structured_many(
        self,
        prompt: Prompt | str | Path,
        variables: Iterable[Mapping[str, Any]],
        *,
        validate: Validator | None = None,
        desc: str | None = None,
        progress: bool = True,
    ) -> list[Outcome]:
        """Many structured calls, results in input order, with progress (a bar on a
        terminal or in a notebook, a few lines when stderr is redirected).

        A configuration failure (:class:`LLMError`) cancels the rest and is raised with the
        outcomes that finished as ``exc.partial`` (``None`` where unfinished); they are also
        in the cache, so a rerun resumes without paying for them again.
        """
        prompt = load_prompt(prompt)
        return await fan_out(self.structured, prompt, list(variables), dispatcher=self.dispatcher,
                             accounts=self.accounts, validate=validate, desc=desc or prompt.name,
                             progress=progress)

    @staticmethod
    def _worst_reply(call: PreparedCall | None) -> Usage:
        """The stand-in for a billed reply to ``call`` whose usage cannot be read: its worst
        case (with no call to measure, one call of unknown size)."""
        if call is None:
            return Usage(1, unknown=1)
        allowed = int(call.body.get("max_tokens") or call.body.get("max_completion_tokens") or 0)
        return Usage(1, worst_case_prompt_tokens(call.messages), 0, allowed, unknown=1)

    def count_unused(self, completion: Any, call: PreparedCall | None = None, *,
                     batch: bool = False) -> Usage:
        """Count a reply obtained elsewhere that was billed but is not used (a second answer
        to a request already answered, e.g. by two Batch API jobs): at the usage it states,
        or the worst case of ``call``."""
        stated = Usage.from_openai(completion.get("usage")) if isinstance(completion, Mapping) \
            else Usage(1, unknown=1)
        billed = self._worst_reply(call) if stated.unknown else stated
        self._count(billed, batch=batch)
        return billed

    def accept(self, call: PreparedCall, completion: Mapping[str, Any],
               *, validate: Validator | None = None, batch: bool = False) -> Outcome:
        """Complete a prepared call from a reply obtained elsewhere: parse, account usage,
        write the cache. No repair turn is possible here. ``batch=True``: the reply came from
        the Batch API and is costed at the batch price."""
        worst = self._worst_reply(call)
        try:
            comp = parse_completion(completion)
        except RejectedReply as exc:
            # Billed though unusable: counted at what it says, or the worst case.
            self._count(exc.usage if exc.usage is not None else worst, batch=batch)
            self.stats.failed += 1
            return self.failure(call, FailureKind.MALFORMED, exc.reason)
        if comp.usage.unknown:
            comp.usage = worst
        self._count(comp.usage, batch=batch)
        refused = self.caller.check_model(self.model, comp.model)
        if refused is not None:  # billed, counted, never cached as this model's answer
            self.stats.failed += 1
            return self.failure(call, FailureKind.MALFORMED, refused)
        fmt = (call.body.get("response_format") or {}).get("type", "text")
        prov = self.provenance(call.prompt, served_model=comp.model,
                               system_fingerprint=comp.system_fingerprint, response_format=fmt)
        common: dict[str, Any] = dict(text=comp.text, usage=comp.usage, attempts=1, provenance=prov,
                                      key=call.key)
        failure: tuple[FailureKind, str] | None = None
        if comp.refusal:
            failure = (FailureKind.REFUSAL, f"refusal: {comp.refusal}")
        elif comp.finish_reason == "content_filter":
            failure = (FailureKind.REFUSAL, "refusal: content filter")
        elif comp.finish_reason == "length":
            failure = (FailureKind.TRUNCATED, "truncated reply (finish_reason=length)")
        else:
            try:
                obj, value = check_reply(call.prompt, comp.text, validate, quoted=call.data)
            except (ValueError, TypeError, KeyError) as exc:
                failure = (FailureKind.UNPARSABLE, f"unparsable reply: {describe_exc(exc)}")
        if failure is not None:
            self.stats.failed += 1
            return Outcome(value=None, error=failure[1], failure=failure[0], **common)
        label = obj.get(call.prompt.label_field) if call.prompt.label_field else None
        probs, expected = label_probs(comp.logprobs, comp.text, call.prompt, label)
        outcome = Outcome(value=value, error=None, probs=probs, expected=expected, obj=obj, **common)
        self.cache.put(call.key, self._record(outcome))
        return outcome

    # -- dry run -----------------------------------------------------------------------
    def estimate(self, prompt: Prompt | str | Path, variables: Iterable[Mapping[str, Any]]) -> DryRun:
        """Calls, tokens and cost a job would need (cached and duplicate requests are free),
        and the most it could cost (every reply at ``max_tokens``); no network."""
        prompt = load_prompt(prompt)
        seen: set[str] = set()
        pairs = cached = dups = 0
        ptoks = worst_ptoks = 0
        max_tokens = self.params(prompt)["max_tokens"]
        out_tokens = min(prompt.expected_output_tokens, max_tokens)
        for v in variables:
            pairs += 1
            call = self.prepare(prompt, v)
            if call.cached is not None:
                cached += 1
                continue
            if call.key in seen:
                dups += 1
                continue
            seen.add(call.key)
            ptoks += call.estimated_prompt_tokens
            worst_ptoks += worst_case_prompt_tokens(call.messages, call.body.get("response_format"))
            if call.body.get("response_format"):
                worst_ptoks += self.spec.schema_overhead
        calls = len(seen)
        ctoks = calls * out_tokens
        cost = self.cost_of(Usage(calls, ptoks, 0, ctoks))
        worst = self.cost_of(Usage(calls, worst_ptoks, 0, calls * max_tokens, cache_write_tokens=worst_ptoks))
        assumptions = (f"~4 characters per prompt token; {out_tokens} completion tokens per call "
                       f"(the prompt's typical reply; at most {max_tokens}); no repair turns or "
                       "retries; no provider prompt caching")
        return DryRun(pairs, cached, dups, calls, ptoks, ctoks, cost, self.model,
                      worst_cost=worst, assumptions=assumptions)


def _signature() -> Any:
    """``LLM``'s signature with the endpoint's fields as keywords, made from their declarations
    (``help(LLM)``, notebooks' completion and callers that split keywords read it)."""
    own = inspect.signature(LLM.__init__)
    params = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in params}
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
               for name in Endpoint.names() if name not in taken]
    return own.replace(parameters=params)


LLM.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
