"""The LLM session: the one generic structured-call entry point every judge and metric uses.

``await llm.structured(prompt, variables)`` does, in order: render the template -> cache
lookup -> in-flight dedup (identical concurrent requests share one call) -> budget check ->
runner admission -> client call (strict ``json_schema`` response format, falling back to
``json_object`` and then plain text for servers that lack it) -> tolerant extraction of the
JSON object and strict validation against the prompt's schema, with a repair turn (two at most,
never the same request twice; a truncated reply is asked again once with twice the token
budget) ->
probability per label from logprobs -> cache write -> usage and cost accounting.

Per-item failures (unparsable after the repair, refusal, truncated reply, retries exhausted,
prompt too long, budget reached) come back as :class:`Outcome` with ``value=None`` and an
``error`` reason; configuration failures (bad key, unknown model, unsupported request)
raise :class:`ragjudge.errors.LLMError` and stop the run.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InputError, LLMError
from .cache import Cache, NullCache, cache_key, default_cache_path
from .client import (
    CallFailed, ClientConfig, Completion, EmbeddingReply, LLMClient, UnsupportedFeature, _BadBody,
)
from .cost import PriceTable, Usage, estimate_tokens
from .prompts import Prompt, load_prompt
from .runner import Runner

__all__ = ["LLM", "Outcome", "PreparedCall", "DryRun", "Stats", "Embeddings", "parse_reply",
           "label_probs", "embedding_key", "BUDGET_REASON"]

FORMATS = ("json_schema", "json_object", "text")
BUDGET_REASON = "not judged: max cost reached"
MAX_REPAIRS = 2
#: Texts per ``/embeddings`` request (OpenAI accepts up to 2,048 inputs per request).
EMBED_BATCH = 256
Validator = Callable[[Any], Any]


# ----------------------------------------------------------------------------- values
@dataclass(frozen=True)
class Outcome:
    """The result of one structured call. ``value is None`` exactly when ``error`` is set."""

    value: Any
    error: str | None
    text: str | None = None
    probs: dict[str, float] | None = None
    expected: float | None = None
    usage: Usage = field(default_factory=Usage)
    latency: float = 0.0
    cached: bool = False
    model: str = ""
    served_model: str | None = None
    prompt_id: str = ""
    prompt_version: str = ""
    prompt_sha: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    system_fingerprint: str | None = None
    key: str = ""
    attempts: int = 0
    repaired: bool = False
    response_format: str | None = None
    obj: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def skipped(self) -> bool:
        """Not attempted because the cost budget was reached (not a model failure)."""
        return self.error == BUDGET_REASON


@dataclass(frozen=True)
class Embeddings:
    """Vectors of :meth:`LLM.embed`'s texts in input order; ``vectors is None`` exactly when
    ``error`` says why (a failed request, the budget)."""

    vectors: list[list[float]] | None
    error: str | None
    model: str
    usage: Usage = field(default_factory=Usage)
    cached: int = 0  # texts answered from the cache

    @property
    def ok(self) -> bool:
        return self.error is None


def embedding_key(model: str, text: str) -> str:
    """Cache key of one embedding: sha256 of exactly (embedding model, text)."""
    return cache_key({"kind": "embedding", "model": model, "text": text})


@dataclass(frozen=True)
class PreparedCall:
    """A rendered request: what batch mode submits and :meth:`LLM.accept` completes."""

    key: str
    prompt: Prompt
    messages: list[dict[str, str]]
    body: dict[str, Any]
    estimated_prompt_tokens: int
    cached: Outcome | None = None


@dataclass(frozen=True)
class DryRun:
    """What a job would cost: nothing is sent."""

    pairs: int
    cached: int
    duplicates: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    model: str

    def describe(self) -> str:
        cost = "unknown (no price for this model; pass --prices)" if self.cost is None \
            else f"${self.cost:.4f}"
        return (f"dry run: {self.pairs} requests, {self.cached} already cached, "
                f"{self.duplicates} duplicates -> {self.calls} calls to {self.model}; "
                f"~{self.prompt_tokens} prompt + ~{self.completion_tokens} completion tokens; "
                f"estimated cost {cost}")


@dataclass
class Stats:
    calls: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    retries: int = 0
    repaired: int = 0
    failed: int = 0
    skipped: int = 0
    fallbacks: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- parsing
def parse_reply(text: str | None) -> dict[str, Any]:
    """The one JSON object in a model reply (tolerant of code fences and chatter around it).

    Several *different* objects are ambiguous and rejected rather than guessed between -- so
    a reply that quotes a fake verdict from the passage cannot decide the grade.
    """
    if text is None or not text.strip():
        raise ValueError("empty reply")
    stripped = text.strip()
    try:
        obj = json.loads(stripped)
        if isinstance(obj, dict):
            return obj
        raise ValueError(f"reply is JSON but not an object ({type(obj).__name__})")
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    i = stripped.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(stripped, i)
        except json.JSONDecodeError:
            i = stripped.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = stripped.find("{", end)
    if not found:
        raise ValueError("no JSON object in the reply")
    if any(o != found[0] for o in found[1:]):
        raise ValueError(f"ambiguous reply: {len(found)} different JSON objects")
    return found[0]


_STRIP_LEFT = " \t\n\r\":"
_STRIP_RIGHT = " \t\n\r\",}"


def label_probs(
    tokens: Sequence[Mapping[str, Any]] | None, text: str | None, prompt: Prompt, value: Any
) -> tuple[dict[str, float] | None, float | None]:
    """Probability of each label at the token where the reply states it, renormalised over
    the valid labels, and the expected label (for integer labels).

    The label is located in the token stream itself (the concatenated token texts), not in
    ``text``: llama.cpp's logprobs spell a fenced "```json ... ```" reply while its message
    content is the unwrapped object, so offsets taken from the content land on the wrong token.
    ``text`` is kept for the signature (and callers' provenance) only.

    Returns ``(None, None)`` when the server gave no logprobs or the label's token cannot be
    found in the stream (or does not carry the parsed label).
    """
    if not tokens or not prompt.labels or not prompt.label_field:
        return None, None
    texts = [str(tok.get("token", "")) for tok in tokens]
    stream = "".join(texts)
    pattern = re.compile(r'"' + re.escape(prompt.label_field) + r'"\s*:\s*"?')
    matches = list(pattern.finditer(stream))
    if not matches:
        return None, None
    # The last match: a mention inside a JSON string value is escaped (\"grade\") and does not
    # match, so the last unescaped one is the field itself.
    pos = matches[-1].end()
    offset = 0
    target = None
    for tok, t in zip(tokens, texts):
        if offset <= pos < offset + len(t):
            target = tok
            break
        offset += len(t)
    if target is None:
        return None, None
    labels = set(prompt.labels)
    mass: dict[str, float] = {}
    alternatives = target.get("top_logprobs") or [target]
    for alt in alternatives:
        lp = alt.get("logprob")
        if lp is None or not math.isfinite(float(lp)):
            continue
        label = str(alt.get("token", "")).lstrip(_STRIP_LEFT).rstrip(_STRIP_RIGHT)
        if label in labels:
            mass[label] = mass.get(label, 0.0) + math.exp(float(lp))
    total = sum(mass.values())
    if total <= 0:
        return None, None
    if str(value) not in mass:
        return None, None  # the token we found is not the one that carries the parsed label
    probs = {label: mass.get(label, 0.0) / total for label in prompt.labels}
    try:
        expected = sum(float(k) * p for k, p in probs.items())
    except ValueError:
        expected = None
    return probs, expected


def _describe_exc(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# ----------------------------------------------------------------------------- session
class _LoopState:
    def __init__(self) -> None:
        self.client: LLMClient | None = None
        self.inflight: dict[str, asyncio.Future[Outcome]] = {}


class LLM:
    """A configured model endpoint with its runner, cache, prices and running totals.

    Safe to use from several event loops in turn (each sync-wrapper call runs on a fresh
    loop): loop-bound objects (the HTTP client) are created per loop; the cache, totals and
    the learned rate limits are shared.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        azure_endpoint: str | None = None,
        azure_api_version: str | None = None,
        concurrency: int = 16,
        rpm: float | None = None,
        tpm: float | None = None,
        cache: bool | str | Path | Cache | NullCache = True,
        prices: PriceTable | str | Path | None = None,
        max_cost: float | None = None,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        max_attempts: int = 6,
        backoff_base: float = 0.5,
        logprobs: bool = True,
        top_logprobs: int = 5,
        http_client: Any = None,
        check_key: bool = True,
    ) -> None:
        if not model:
            raise InputError("no model given (pass --model)", field="model")
        self.model = model
        self.config = ClientConfig(
            model=model, base_url=base_url, api_key=api_key, api_key_env=api_key_env,
            azure_endpoint=azure_endpoint, azure_api_version=azure_api_version,
            timeout=timeout, max_attempts=max_attempts, backoff_base=backoff_base,
        )
        if check_key:  # fail fast on a missing key, before any work (a dry run needs none)
            self.config.resolve_key()
        self.runner = Runner(concurrency=concurrency, rpm=rpm, tpm=tpm)
        if cache is True:
            self.cache: Cache | NullCache = Cache(default_cache_path())
        elif cache is False or cache is None:
            self.cache = NullCache()
        elif isinstance(cache, (Cache, NullCache)):
            self.cache = cache
        else:
            self.cache = Cache(cache)
        if isinstance(prices, (str, Path)):
            self.prices = PriceTable.load(prices)
        else:
            self.prices = prices if prices is not None else PriceTable.default()
        if max_cost is not None:
            if max_cost < 0:
                raise InputError("max cost must not be negative", field="max_cost")
            if self.prices.get(model) is None:
                raise InputError(f"--max-cost needs a price for model {model!r}; pass --prices FILE "
                                 '({"<model>": {"input": USD_per_1M, "output": USD_per_1M}})',
                                 field="max_cost")
        self.max_cost = max_cost
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self._http_client = http_client
        self.usage = Usage()
        # The part of ``usage`` answered through the Batch API (billed at a discount).
        self.batch_usage = Usage()
        # Embedding requests, per embedding model (priced by that model, not ``model``).
        self.embedding_usage: dict[str, Usage] = {}
        self.stats = Stats()
        self._reserved_cost = 0.0
        # Server capabilities learned from 400s, shared by every call of the session.
        self._format = 0
        self._drop: set[str] = set()
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    # -- plumbing --------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"LLM(model={self.model!r}, endpoint={self.config.resolved_base_url() or 'openai'!r})"

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        st = self._states.get(loop)
        if st is None:
            st = _LoopState()
            self._states[loop] = st
        return st

    def _client(self) -> LLMClient:
        st = self._state()
        if st.client is None:
            st.client = LLMClient(self.config, http_client=self._http_client, on_retry=self._count_retry)
        return st.client

    async def aclose(self) -> None:
        """Close this loop's HTTP client (the cache stays open for later calls)."""
        st = self._states.get(asyncio.get_running_loop())
        if st is not None and st.client is not None:
            await st.client.close()
            st.client = None

    async def __aenter__(self) -> LLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def cost(self) -> float | None:
        """USD spent by this session so far (``None`` if the model's price is unknown);
        replies obtained through the Batch API are counted at the batch price."""
        online = self.prices.cost(self.model, self.usage - self.batch_usage)
        batch = self.prices.cost(self.model, self.batch_usage, batch=True)
        if online is None or batch is None:
            return None
        total = online + batch
        for model, usage in self.embedding_usage.items():
            c = self.prices.cost(model, usage)
            if c is None:
                return None  # an unknown price is unknown, never 0
            total += c
        return total

    def _count_retry(self) -> None:
        self.stats.retries += 1

    @property
    def rate_limited(self) -> int:
        return self.runner.rate_limited

    def params(self, prompt: Prompt) -> dict[str, Any]:
        """Sampling parameters: part of the cache key and of every answer's provenance."""
        return {
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens or prompt.max_tokens,
        }

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
        return PreparedCall(key, prompt, messages, self._body(prompt, messages, self._format),
                            estimate_tokens(messages), cached)

    def _body(self, prompt: Prompt, messages: list[dict[str, str]], fmt: int,
              boost: int = 1) -> dict[str, Any]:
        params = self.params(prompt)
        params["max_tokens"] *= boost
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if "temperature" not in self._drop:
            body["temperature"] = params["temperature"]
        if params["seed"] is not None and "seed" not in self._drop:
            body["seed"] = params["seed"]
        body["max_completion_tokens" if "max_tokens" in self._drop else "max_tokens"] = params["max_tokens"]
        rf = prompt.response_format(FORMATS[fmt])
        if rf is not None:
            body["response_format"] = rf
        if self.logprobs and prompt.labels and "logprobs" not in self._drop:
            body["logprobs"] = True
            body["top_logprobs"] = self.top_logprobs
        return body

    def _from_record(self, record: Mapping[str, Any], prompt: Prompt, key: str) -> Outcome:
        return Outcome(
            value=record.get("obj"),
            error=None,
            text=record.get("text"),
            probs=record.get("probs"),
            expected=record.get("expected"),
            usage=Usage.from_dict(record.get("usage") or {}),
            latency=float(record.get("latency") or 0.0),
            cached=True,
            model=self.model,
            served_model=record.get("served_model"),
            prompt_id=prompt.id,
            prompt_version=prompt.version,
            prompt_sha=prompt.sha256,
            params=dict(record.get("params") or self.params(prompt)),
            system_fingerprint=record.get("system_fingerprint"),
            key=key,
            attempts=int(record.get("attempts") or 0),
            repaired=bool(record.get("repaired")),
            response_format=record.get("response_format"),
            obj=record.get("obj"),
        )

    def _record(self, o: Outcome) -> dict[str, Any]:
        return {
            "obj": o.obj, "text": o.text, "probs": o.probs, "expected": o.expected,
            "usage": o.usage.to_dict(), "latency": o.latency, "model": self.model,
            "served_model": o.served_model, "prompt_id": o.prompt_id,
            "prompt_version": o.prompt_version, "prompt_sha": o.prompt_sha, "params": o.params,
            "system_fingerprint": o.system_fingerprint, "attempts": o.attempts,
            "repaired": o.repaired, "response_format": o.response_format,
        }

    def _base(self, call: PreparedCall) -> dict[str, Any]:
        p = call.prompt
        return {"model": self.model, "prompt_id": p.id, "prompt_version": p.version,
                "prompt_sha": p.sha256, "params": self.params(p), "key": call.key}

    def _apply_validate(self, o: Outcome, validate: Validator | None) -> Outcome:
        if validate is None or o.obj is None:
            return o
        try:
            return replace(o, value=validate(o.obj))
        except ValueError as exc:
            return replace(o, value=None, error=f"invalid reply: {_describe_exc(exc)}")

    def _check(self, prompt: Prompt, text: str | None, validate: Validator | None) -> tuple[dict[str, Any], Any]:
        obj = parse_reply(text)
        prompt.validate(obj)
        return obj, (validate(obj) if validate is not None else obj)

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
            return self._apply_validate(call.cached, validate)
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
            return replace(self._apply_validate(shared, validate), cached=True) if shared.ok else shared
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
                outcome = self._apply_validate(self._from_record(record, call.prompt, call.key), validate)
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

    def _estimated_cost(self, call: PreparedCall) -> float:
        """A call's cost before it is made: the token estimate, or the mean cost of the calls
        made so far when that is higher (the estimate cannot see system-prompt overheads)."""
        est = Usage(1, call.estimated_prompt_tokens, 0,
                    min(call.prompt.expected_output_tokens, self.params(call.prompt)["max_tokens"]))
        guess = self.prices.cost(self.model, est) or 0.0
        spent = self.cost
        if spent is not None and self.usage.calls:
            guess = max(guess, spent / self.usage.calls)
        return guess

    async def _call(self, call: PreparedCall, validate: Validator | None) -> Outcome:
        base = self._base(call)
        # Reserve what OpenAI's limiter counts at admission (prompt + max_tokens); settled to
        # the real usage when the call ends.
        tokens = call.estimated_prompt_tokens + self.params(call.prompt)["max_tokens"]
        start = time.monotonic()
        async with self.runner.slot(tokens) as reservation:
            # The budget is checked once the call holds its slot, against what is spent plus
            # what the calls in flight are expected to cost, so it is not overrun by a queue.
            reserve = 0.0
            if self.max_cost is not None:
                reserve = self._estimated_cost(call)
                if (self.cost or 0.0) + self._reserved_cost + reserve > self.max_cost:
                    self.stats.skipped += 1
                    reservation.settle(0)
                    return Outcome(value=None, error=BUDGET_REASON, **base)
                self._reserved_cost += reserve
            try:
                outcome = await self._converse(call, validate, base)
            finally:
                self._reserved_cost -= reserve
            reservation.settle(outcome.usage.total_tokens)
        outcome = replace(outcome, latency=time.monotonic() - start)
        if outcome.ok:
            self.cache.put(call.key, self._record(outcome))
        else:
            self.stats.failed += 1
        return outcome

    async def _converse(self, call: PreparedCall, validate: Validator | None,
                        base: dict[str, Any]) -> Outcome:
        client = self._client()
        prompt = call.prompt
        messages = list(call.messages)
        usage = Usage()
        attempts = 0
        repaired = False
        # Unusable replies seen so far. Each gets a repair turn (at most two, never the same
        # request twice): a judgment lost to one transient glitch is worse than one extra call,
        # while a model that repeats the same bad reply is not asked again.
        bad: list[str] = []
        # A truncated reply is asked again once with twice the token budget.
        boost = 1
        fingerprint = served = None
        while True:
            fmt = self._format
            dropped = set(self._drop)
            body = self._body(prompt, messages, fmt, boost)
            attempt_tokens = estimate_tokens(messages) + int(body.get("max_tokens")
                                                             or body.get("max_completion_tokens") or 0)
            try:
                comp: Completion = await client.complete(
                    body, gate=lambda: self.runner.attempt(attempt_tokens), observe=self.runner.observe)
            except UnsupportedFeature as exc:
                self._downgrade(exc, fmt, dropped)
                continue
            except CallFailed as exc:
                attempts += exc.attempts
                return Outcome(value=None, error=exc.reason, usage=usage, attempts=attempts,
                               repaired=repaired, response_format=FORMATS[fmt], **base)
            attempts += comp.attempts
            usage = usage + comp.usage
            self.usage = self.usage + comp.usage
            self.stats.calls += 1
            fingerprint = comp.system_fingerprint or fingerprint
            served = comp.model or served
            common = dict(text=comp.text, usage=usage, attempts=attempts, repaired=repaired,
                          response_format=FORMATS[fmt], system_fingerprint=fingerprint,
                          served_model=served, **base)
            if comp.refusal:
                return Outcome(value=None, error=f"refusal: {comp.refusal}", **common)
            if comp.finish_reason == "content_filter":
                return Outcome(value=None, error="refusal: content filter", **common)
            if comp.finish_reason == "length":
                if boost == 1:
                    boost = 2
                    continue
                return Outcome(value=None, error="truncated reply (finish_reason=length, also with "
                                                 f"max_tokens={body.get('max_tokens') or body.get('max_completion_tokens')})",
                               **common)
            try:
                obj, value = self._check(prompt, comp.text, validate)
            except ValueError as exc:
                text = comp.text or ""
                if len(bad) >= MAX_REPAIRS or text in bad:
                    n = len(bad)
                    return Outcome(value=None, error=f"unparsable reply after {n} repair{'s' * (n != 1)}: "
                                                     f"{_describe_exc(exc)}", **common)
                bad.append(text)
                repaired = True
                self.stats.repaired += 1
                # The repair turn: the original request, the unusable reply, what was wrong.
                messages = list(call.messages) + [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": (
                        f"Your reply could not be used: {_describe_exc(exc)}. Reply again with only "
                        "a JSON object matching this schema: "
                        + json.dumps(prompt.output_schema, separators=(",", ":")))},
                ]
                continue
            probs, expected = label_probs(comp.logprobs, comp.text, prompt,
                                          obj.get(prompt.label_field) if prompt.label_field else None)
            return Outcome(value=value, error=None, probs=probs, expected=expected, obj=obj, **common)

    def _downgrade(self, exc: UnsupportedFeature, fmt: int, dropped: set[str]) -> None:
        """Drop a feature the server rejected (once per session), or give up."""
        if exc.feature == "response_format":
            if fmt + 1 >= len(FORMATS):
                raise LLMError(f"{self.config.resolved_base_url() or 'the server'} rejected the request: {exc}")
            if self._format == fmt:
                self._format = fmt + 1
                self.stats.fallbacks.append(f"response_format -> {FORMATS[fmt + 1]}")
            return
        if exc.feature in dropped:
            raise LLMError(f"{self.config.resolved_base_url() or 'the server'} rejected the request: {exc}")
        if exc.feature not in self._drop:
            self._drop.add(exc.feature)
            self.stats.fallbacks.append(
                "max_tokens -> max_completion_tokens" if exc.feature == "max_tokens"
                else f"dropped {exc.feature}")

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
        if self.max_cost is not None and self.prices.get(model) is None:
            raise InputError(f"--max-cost needs a price for embedding model {model!r}; pass --prices FILE",
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
            body = {"model": model, "input": chunk, "encoding_format": "float"}
            tokens = sum(len(t) for t in chunk) // 4 + len(chunk)
            async with self.runner.slot(tokens) as reservation:
                reserve = 0.0
                if self.max_cost is not None:
                    reserve = self.prices.cost(model, Usage(1, tokens, 0, 0)) or 0.0
                    if (self.cost or 0.0) + self._reserved_cost + reserve > self.max_cost:
                        self.stats.skipped += 1
                        reservation.settle(0)
                        return Embeddings(None, BUDGET_REASON, model, usage, cached)
                    self._reserved_cost += reserve
                try:
                    # No ``observe``: an embedding model's rate-limit headers describe its own
                    # limits, which must not overwrite the ones learned for the chat model.
                    reply: EmbeddingReply = await self._client().embed(
                        body, gate=lambda: self.runner.attempt(tokens))
                except CallFailed as exc:
                    reservation.settle(0)
                    self.stats.failed += 1
                    return Embeddings(None, f"embedding call failed: {exc.reason}", model, usage, cached)
                except UnsupportedFeature as exc:
                    raise LLMError(f"{self.config.resolved_base_url() or 'the server'} rejected the "
                                   f"embeddings request: {exc}") from None
                finally:
                    self._reserved_cost -= reserve
                reservation.settle(reply.usage.total_tokens)
            usage = usage + reply.usage
            self.embedding_usage[model] = self.embedding_usage.get(model, Usage()) + reply.usage
            self.stats.calls += 1
            for text, vec in zip(chunk, reply.vectors):
                key = embedding_key(model, text)
                found[key] = vec
                self.cache.put(key, {"embedding": vec, "model": model, "prompt_id": "embedding",
                                     "served_model": reply.model})
        return Embeddings([found[k] for k in keys], None, model, usage, cached)

    # -- batches -----------------------------------------------------------------------
    async def structured_many(
        self,
        prompt: Prompt | str | Path,
        variables: Iterable[Mapping[str, Any]],
        *,
        validate: Validator | None = None,
        desc: str | None = None,
        progress: bool = True,
    ) -> list[Outcome]:
        """Many structured calls, results in input order, with a progress bar.

        A configuration failure (:class:`LLMError`) cancels the rest and is raised; whatever
        finished is already in the cache.
        """
        prompt = load_prompt(prompt)
        items = list(variables)
        results: list[Outcome | None] = [None] * len(items)
        bar = _progress(len(items), desc or prompt.name, progress)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(items)):
            queue.put_nowait(i)

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                out = await self.structured(prompt, items[i], validate=validate)
                results[i] = out
                bar.add(out, self)

        # More workers than slots: cache hits and deduplicated waits must not idle the runner.
        n_workers = min(len(items), self.runner.concurrency * 2 + 8) or 1
        tasks = [asyncio.create_task(worker()) for _ in range(n_workers)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            bar.close()
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def accept(self, call: PreparedCall, completion: Mapping[str, Any],
               *, validate: Validator | None = None, batch: bool = False) -> Outcome:
        """Complete a prepared call from a reply obtained elsewhere: parse, account usage,
        write the cache. No repair turn is possible here. ``batch=True``: the reply came from
        the Batch API and is costed at the batch price."""
        base = self._base(call)
        try:
            comp = Completion.from_dict(completion)
        except _BadBody as exc:
            self.stats.failed += 1
            return Outcome(value=None, error=f"malformed reply body ({exc})", **base)
        self.usage = self.usage + comp.usage
        if batch:
            self.batch_usage = self.batch_usage + comp.usage
        self.stats.calls += 1
        common = dict(text=comp.text, usage=comp.usage, attempts=1,
                      response_format=(call.body.get("response_format") or {}).get("type", "text"),
                      system_fingerprint=comp.system_fingerprint, served_model=comp.model, **base)
        error = None
        if comp.refusal:
            error = f"refusal: {comp.refusal}"
        elif comp.finish_reason == "content_filter":
            error = "refusal: content filter"
        elif comp.finish_reason == "length":
            error = "truncated reply (finish_reason=length)"
        if error is None:
            try:
                obj, value = self._check(call.prompt, comp.text, validate)
            except ValueError as exc:
                error = f"unparsable reply: {_describe_exc(exc)}"
        if error is not None:
            self.stats.failed += 1
            return Outcome(value=None, error=error, **common)
        probs, expected = label_probs(comp.logprobs, comp.text, call.prompt,
                                      obj.get(call.prompt.label_field) if call.prompt.label_field else None)
        outcome = Outcome(value=value, error=None, probs=probs, expected=expected, obj=obj, **common)
        self.cache.put(call.key, self._record(outcome))
        return outcome

    # -- dry run -----------------------------------------------------------------------
    def estimate(self, prompt: Prompt | str | Path, variables: Iterable[Mapping[str, Any]]) -> DryRun:
        """Calls, tokens and cost a job would need; cached and duplicate requests are free."""
        prompt = load_prompt(prompt)
        seen: set[str] = set()
        pairs = cached = dups = 0
        ptoks = ctoks = 0
        out_tokens = min(prompt.expected_output_tokens, self.params(prompt)["max_tokens"])
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
            ctoks += out_tokens
        calls = len(seen)
        cost = self.prices.cost(self.model, Usage(calls, ptoks, 0, ctoks))
        return DryRun(pairs, cached, dups, calls, ptoks, ctoks, cost, self.model)


class _Bar:
    """tqdm bar showing done, failed, tokens and cost (no-op when disabled)."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.failed = 0
        self._bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="call", dynamic_ncols=True, leave=True)

    def add(self, out: Outcome, llm: LLM) -> None:
        if not out.ok:
            self.failed += 1
        if self._bar is None:
            return
        cost = llm.cost
        self._bar.set_postfix_str(
            f"failed={self.failed} tokens={llm.usage.total_tokens} "
            + ("cost=?" if cost is None else f"cost=${cost:.4f}"),
            refresh=False,
        )
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _progress(total: int, desc: str, enabled: bool) -> _Bar:
    return _Bar(total, desc, enabled)
