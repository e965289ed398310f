"""The caller: everything between a ready request and a counted reply.

One :class:`Caller` per endpoint holds the provider's client (one per event loop), the runner
(rate limits, concurrency, circuit breaker), the provider-neutral retry loop, the budget (the
worst case of an attempt is reserved before it is sent) and the accounting of every billed
reply, at the usage it states or its worst case, never zero: a reply that cannot be used, one
that never finished, one cut off while the server had it.

The session (:mod:`.session`) sits above it: rendering, the cache and its claims, de-duplication,
the repair policy (:mod:`.conversation`), structured parsing and estimates, with the choice among
several callers in :mod:`.dispatch`. None of them talks to a provider itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import replace
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import InputError, LLMError
from .budget import Admission, Budget, worst_case_prompt_tokens
from .client import (
    CallFailed,
    Completion,
    EmbeddingReply,
    LLMClient,
    RejectedReply,
    UnsupportedFeature,
)
from .cost import PriceTable, Usage, estimate_tokens
from .endpoint import Endpoint
from .health import EndpointDown
from .provenance import FailureKind
from .providers import provider_spec
from .redaction import redact_url
from .replies import describe_exc
from .runner import Runner
from .values import BUDGET_REASON, Stats

log = logging.getLogger("ragjudge.llm")

__all__ = ["Caller", "Accounts", "AccountsView", "loop_state", "EndpointDown", "call_failed_kind"]


def call_failed_kind(exc: CallFailed) -> FailureKind:
    """The client names the kind of a transport failure (a ``FailureKind`` or its value)."""
    return FailureKind.parse(getattr(exc, "kind", None)) or FailureKind.RETRIES_EXHAUSTED


class Accounts:
    """The money and the counts of a session, shared by its callers (one per endpoint): the
    prices, the budget (one cap over every endpoint), the usage of every billed reply and the
    run's statistics."""

    def __init__(self, model: str, prices: PriceTable, max_cost: float | None) -> None:
        if max_cost is not None and prices.get(model) is None:
            raise InputError(f"a cost cap needs a price for model {model!r}: give prices "
                             '({"<model>": {"input": USD_per_1M, "output": USD_per_1M}})', field="max_cost")
        self.model = model
        self.prices = prices
        self.budget = Budget(max_cost)
        self.usage = Usage()
        #: The part of ``usage`` answered through the Batch API (billed at a discount).
        self.batch_usage = Usage()
        #: Embedding requests, per embedding model (priced by that model).
        self.embedding_usage: dict[str, Usage] = {}
        self.stats = Stats()
        # Requests waiting for the budget, per event loop: one event for every endpoint of the
        # session, since a reservation settled on one endpoint frees the budget for all of them
        # (a waiter woken only by its own endpoint's replies waited forever when another held
        # the reservations).
        self._budget_events: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[asyncio.Event]] = (
            weakref.WeakKeyDictionary())
        self._settle_listeners: list[Callable[[], None]] = []
        #: What a user must know about this run's numbers (a renamed model...), each said once
        #: on the log; services put them in their results.
        self.notices: list[str] = []

    def notice(self, text: str) -> None:
        """Say ``text`` once (a warning on the log) and keep it in :attr:`notices`."""
        if text not in self.notices:
            self.notices.append(text)
            log.warning(text)

    def all_notices(self) -> list[str]:
        """This run's notices and its price table's about its model (priced by a prefix, or
        unpriced; a table may be shared by runs of other models)."""
        return self.notices + [n.removeprefix("ragjudge: warning: ") for n in self.prices.notes
                               if repr(self.model) in n]

    def on_settle(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a call's reservation settles (its cost is then in
        :attr:`cost`), from the thread of the loop that made the call. A service job stores
        its account then, so a replica killed between heartbeats has left what it paid."""
        self._settle_listeners.append(listener)

    def budget_changed(self) -> asyncio.Event:
        """The event the running loop's budget waiters wait on (set when a reservation settles)."""
        return loop_state(self._budget_events, lambda: [asyncio.Event()])[0]

    def settled(self) -> None:
        """A reservation settled: wake the budget's waiters, tell the listeners."""
        box = loop_state(self._budget_events, lambda: [asyncio.Event()])
        box[0].set()
        box[0] = asyncio.Event()
        for listener in self._settle_listeners:
            listener()

    def cost_of(self, usage: Usage, *, batch: bool = False) -> float | None:
        """USD of ``usage`` at the model's price (``None``: price unknown)."""
        return self.prices.cost(self.model, usage, batch=batch)

    @property
    def cost(self) -> float | None:
        """USD spent so far (``None`` if a price is unknown: unknown, never 0); replies
        obtained through the Batch API are counted at the batch price."""
        online = self.cost_of(self.usage - self.batch_usage)
        batch = self.cost_of(self.batch_usage, batch=True)
        if online is None or batch is None:
            return None
        total = online + batch
        for model, usage in self.embedding_usage.items():
            c = self.prices.cost(model, usage)
            if c is None:
                return None
            total += c
        return total

    def count(self, usage: Usage, *, batch: bool = False) -> None:
        """Account one billed reply (``batch``: answered through the Batch API)."""
        self.prices.check_request(self.model, usage)
        self.usage = self.usage + usage
        if batch:
            self.batch_usage = self.batch_usage + usage
        self.stats.calls += 1

    def count_embedding(self, model: str, usage: Usage) -> None:
        """Account one billed embeddings reply (priced by its own model)."""
        self.embedding_usage[model] = self.embedding_usage.get(model, Usage()) + usage
        self.stats.calls += 1


class AccountsView:
    """The shared accounts read as one's own (a caller's and the session's ``prices``,
    ``budget``, ``stats``, ``usage``...): both hold ``self.accounts``."""

    accounts: Accounts

    @property
    def prices(self) -> PriceTable:
        return self.accounts.prices

    @property
    def budget(self) -> Budget:
        return self.accounts.budget

    @property
    def stats(self) -> Stats:
        return self.accounts.stats

    @property
    def usage(self) -> Usage:
        return self.accounts.usage

    @property
    def batch_usage(self) -> Usage:
        """The part of :attr:`usage` answered through the Batch API (billed at a discount)."""
        return self.accounts.batch_usage

    @property
    def embedding_usage(self) -> dict[str, Usage]:
        """Embedding requests, per embedding model (priced by that model)."""
        return self.accounts.embedding_usage

    @property
    def max_cost(self) -> float | None:
        return self.accounts.budget.cap

    def cost_of(self, usage: Usage, *, batch: bool = False) -> float | None:
        """USD of ``usage`` at the model's price (``None``: price unknown)."""
        return self.accounts.cost_of(usage, batch=batch)

    @property
    def cost(self) -> float | None:
        """USD spent so far (every endpoint of the session: the budget is one); ``None`` when
        a price is unknown (unknown, never 0)."""
        return self.accounts.cost


S = TypeVar("S")


def loop_state(states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, S], make: Callable[[], S]) -> S:
    """The running event loop's entry of ``states`` (made on first use): what is bound to one
    loop (clients, events, locks) is made per loop, so sync wrappers may run each call on a
    fresh loop."""
    loop = asyncio.get_running_loop()
    st = states.get(loop)
    if st is None:
        st = states[loop] = make()
    return st


class _LoopState:
    """What is bound to one event loop: the provider's client."""

    def __init__(self) -> None:
        self.client: LLMClient | None = None


class Caller(AccountsView):
    """Sends requests to one :class:`Endpoint` within its limits and its budget, and counts
    what they cost. Safe to use from several event loops in turn (each sync-wrapper call runs
    on a fresh loop): the client is made per loop; totals, the budget and the learned rate
    limits are shared."""

    def __init__(self, endpoint: Endpoint, *, prices: PriceTable | None = None,
                 max_cost: float | None = None, http_client: Any = None,
                 accounts: Accounts | None = None, fail_fast: bool = False) -> None:
        """``accounts``: shared with the session's other callers (one budget over every
        endpoint); else the caller's own, from ``prices`` and ``max_cost``. ``fail_fast``: in an
        outage, raise :class:`EndpointDown` instead of waiting (the session has other endpoints)."""
        self.endpoint = endpoint
        self.spec = provider_spec(endpoint.provider)
        if accounts is None:
            # The provider's list prices join the built-in table; a price table given wins.
            accounts = Accounts(endpoint.model,
                                prices if prices is not None else PriceTable.default().merged(self.spec.prices),
                                max_cost)
        self.accounts = accounts
        self.runner = Runner(concurrency=endpoint.concurrency, rpm=endpoint.rpm, tpm=endpoint.tpm,
                             patience=endpoint.patience)
        self.runner.fail_fast = fail_fast
        #: Set when the session stops sending here for good (a refusal, another model): its
        #: work moves on. An outage only makes it unhealthy until a probe answers.
        self.drained: str | None = None
        #: The models the endpoint lists (``None``: not asked, or it does not say).
        self.listed: list[str] | None = None
        self._renamed: str | None = None  # the one other name this server answers under
        self._named_asked = False  # a reply named the asked model
        self._http_client = http_client
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary())

    def healthy(self, now: float | None = None) -> bool:
        """Not drained, and its server not down (circuit breaker closed, or a probe due: a
        short outage does not lose the endpoint for the whole run)."""
        if self.drained is not None:
            return False
        breaker = self.runner.breaker
        return not breaker.open or breaker.probe_due(time.monotonic() if now is None else now)

    def down(self) -> bool:
        """Its server is down now (circuit breaker open)."""
        return self.runner.breaker.open

    # -- plumbing ------------------------------------------------------------------------
    def where(self) -> str:
        """The endpoint, fit to print."""
        return redact_url(self.endpoint.azure_endpoint or self.endpoint.resolved_base_url()) or "the server"

    def _state(self) -> _LoopState:
        return loop_state(self._states, _LoopState)

    def client(self) -> LLMClient:
        """This event loop's client (created on first use)."""
        st = self._state()
        if st.client is None:
            st.client = LLMClient(self.endpoint, http_client=self._http_client, on_retry=self._count_retry)
            if self.runner.where == "the server":  # the runner's wait lines name the server
                self.runner.where = st.client.endpoint
        return st.client

    async def aclose(self) -> None:
        """Close this loop's client."""
        st = self._states.get(asyncio.get_running_loop())
        if st is not None and st.client is not None:
            await st.client.close()
            st.client = None

    # -- money -----------------------------------------------------------------------------
    def count(self, usage: Usage, *, batch: bool = False) -> None:
        self.accounts.count(usage, batch=batch)

    def count_embedding(self, model: str, usage: Usage) -> None:
        self.accounts.count_embedding(model, usage)

    def _count_retry(self) -> None:
        self.stats.retries += 1

    async def _admit(self, worst: float) -> Admission:
        """Wait until the budget can reserve ``worst`` (GO) or never will (SKIP)."""
        while True:
            changed = self.accounts.budget_changed()
            verdict = self.budget.admit(self.cost or 0.0, worst)
            if verdict is not Admission.WAIT:
                return verdict
            await changed.wait()

    def _released(self, worst: float, **settled: Any) -> None:
        self.budget.release(worst, **settled)
        self.accounts.settled()

    # -- chat ------------------------------------------------------------------------------
    async def chat(self, body: dict[str, Any], *, wait: bool = False) -> Completion | None:
        """One chat request through budget admission, the runner's gate and the retry loop;
        ``None`` when the budget cannot cover its worst case. The completion's usage is
        counted here (its worst case when the reply carried none); a reply naming another
        model is refused (:meth:`check_model`). ``wait``: wait out an outage even when the
        session has other endpoints (they are all down)."""
        messages = body["messages"]
        allowed = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        worst_prompt = worst_case_prompt_tokens(messages, body.get("response_format")) + (
            self.spec.schema_overhead if body.get("response_format") else 0)
        while True:
            changed = self.accounts.budget_changed()
            # Recomputed on every try: a reply settled meanwhile may have taught the ledger
            # that this server bills more output than it was allowed.
            # At worst every prompt token is a (dearer) prompt-cache write.
            worst_usage = Usage(1, worst_prompt, 0, self.budget.worst_output_tokens(allowed),
                                cache_write_tokens=worst_prompt)
            worst = self.cost_of(worst_usage) or 0.0
            verdict = self.budget.admit(self.cost or 0.0, worst)
            if verdict is Admission.GO:
                break
            if verdict is Admission.SKIP:
                return None
            await changed.wait()
        completion_tokens: int | None = None
        sent = [False]  # an attempt is with the server right now

        def in_flight(flag: bool) -> None:
            sent[0] = flag

        gates = [0]

        def gate() -> Any:
            # Only a request's first attempt may probe an endpoint that is down: a retry after
            # a failed probe moves to another endpoint instead of probing again and again.
            gates[0] += 1
            return self.runner.attempt(attempt_tokens, wait=wait, may_probe=gates[0] == 1)

        try:
            attempt_tokens = estimate_tokens(messages) + allowed
            try:
                comp: Completion = await self.client().complete(
                    body, gate=gate, observe=self.runner.observe,
                    in_flight=in_flight)
            except asyncio.CancelledError:
                if sent[0]:
                    # Cut off while the server had the request (a stop, a cancelled job): it may
                    # finish and bill it, so it is counted at its worst case, never at zero.
                    self.count(replace(worst_usage, unknown=1))
                    self.stats.cancelled += 1
                raise
            except RejectedReply as exc:
                # Billed though unusable: counted now, at what it says or the worst case.
                billed = exc.usage if exc.usage is not None else replace(worst_usage, unknown=1)
                if exc.usage is not None:
                    completion_tokens = billed.completion_tokens
                exc.usage = billed
                self.count(billed)
                raise
            except (CallFailed, UnsupportedFeature, LLMError):
                raise
            except Exception as exc:  # an odd reply the client could not read: this item fails
                raise CallFailed(f"malformed reply: {type(exc).__name__}: {exc}",
                                 kind=FailureKind.MALFORMED) from None
            if comp.usage.unknown:
                # No readable usage: count the worst case, never zero.
                comp.usage = replace(worst_usage, unknown=1)
            else:
                completion_tokens = comp.usage.completion_tokens
            self.count(comp.usage)
            refused = self.check_model(str(body.get("model") or ""), comp.model)
            if refused is not None:
                raise RejectedReply(refused, usage=comp.usage, attempts=comp.attempts)
            return comp
        finally:
            self._released(worst, completion_tokens=completion_tokens, allowed_tokens=allowed)

    # -- the model a reply names ---------------------------------------------------------------
    def check_model(self, asked: str, served: str | None) -> str | None:
        """``None`` when a reply naming ``served`` may be taken as an answer of ``asked``, else
        why it is refused. The rule, per endpoint:

        * the same name, any case, or a version of it (``gpt-4o-mini-2024-07-18``,
          ``llama3:latest``, ``org/model@rev`` for ``gpt-4o-mini``, ``llama3``, ``org/model``),
          or no name at all: taken;
        * another name from an endpoint that lists ``asked`` among its models, or that already
          answered under the asked name: a mix-up (a proxy routing to another model), refused
          -- billed and counted, and the turn is sent again;
        * else the server renames models (llama.cpp answers with its file name, Azure with the
          deployment's model): the first such name is taken for this endpoint and said once on
          stderr; any *other* name after it is refused.
        """
        if not served or not asked or _same_model(asked, served):
            if served:
                self._named_asked = True
            return None
        if self._renamed is None and not self._named_asked and not (self.listed and asked in self.listed):
            self._renamed = served
            self.accounts.notice(f"{self.where()} answers model {asked!r} as {served!r}: taken as the "
                                 "server's name for it (every answer records the name it was served under)")
            return None
        if served == self._renamed:
            return None
        return f"reply names model {served!r}, not {asked!r}"

    # -- embeddings ------------------------------------------------------------------------
    async def embeddings(self, model: str, texts: list[str]) -> tuple[EmbeddingReply | None, Usage,
                                                                      tuple[FailureKind, str] | None]:
        """One embeddings request for ``texts`` (a billed-but-unusable reply is asked again, up
        to ``max_attempts``): the reply, the usage billed for it, and the failure (kind,
        reason) when there is no reply. Configuration errors raise :class:`LLMError`."""
        body = {"model": model, "input": texts, "encoding_format": "float"}
        tokens = sum(len(t) for t in texts) // 4 + len(texts)
        worst_tokens = sum(len(t.encode("utf-8")) + 2 for t in texts)
        worst_usage = Usage(1, worst_tokens, 0, 0, unknown=1)
        worst = self.prices.cost(model, Usage(1, worst_tokens, 0, 0)) or 0.0
        billed = Usage()
        rejected = 0
        sent = [False]  # an attempt is with the server right now

        def in_flight(flag: bool) -> None:
            sent[0] = flag

        async with self.runner.slot(tokens) as reservation:
            while True:  # one more attempt per billed-but-unusable reply
                if await self._admit(worst) is Admission.SKIP:
                    self.stats.skipped += 1
                    reservation.settle(0)
                    return None, billed, (FailureKind.BUDGET, BUDGET_REASON)
                try:
                    # No ``observe``: an embedding model's rate-limit headers describe its own
                    # limits, which must not overwrite the ones learned for the chat model.
                    reply: EmbeddingReply = await self.client().embed(
                        body, gate=lambda: self.runner.attempt(tokens), in_flight=in_flight)
                except asyncio.CancelledError:
                    if sent[0]:  # cut off with the server: counted at its worst case
                        self.count_embedding(model, worst_usage)
                        self.stats.cancelled += 1
                    raise
                except RejectedReply as exc:
                    cost = exc.usage if exc.usage is not None else worst_usage
                    billed = billed + cost
                    self.count_embedding(model, cost)
                    rejected += 1
                    if rejected < self.endpoint.max_attempts:
                        continue
                    reservation.settle(0)
                    return None, billed, (FailureKind.MALFORMED, f"embedding call failed: {exc.reason} "
                                                                 f"(after {rejected} unusable replies)")
                except CallFailed as exc:
                    reservation.settle(0)
                    return None, billed, (call_failed_kind(exc), f"embedding call failed: {exc.reason}")
                except UnsupportedFeature as exc:
                    raise LLMError(f"{self.where()} rejected the embeddings request: {exc}") from None
                except LLMError:
                    raise
                except Exception as exc:  # an odd reply the client could not read
                    reservation.settle(0)
                    return None, billed, (FailureKind.MALFORMED,
                                          f"embedding call failed: malformed reply: {describe_exc(exc)}")
                finally:
                    self._released(worst, completion_tokens=0)
                if reply.usage.unknown:  # no readable count: the worst case, never zero
                    reply.usage = worst_usage
                reservation.settle(reply.usage.total_tokens)
                self.count_embedding(model, reply.usage)
                return reply, billed + reply.usage, None

    # -- the model it serves ---------------------------------------------------------------
    async def served_models(self) -> list[str] | None:
        """The models the endpoint lists (``None``: it does not say, or not in time)."""
        lister = getattr(self.client().provider, "models", None)
        if lister is None:
            return None
        try:
            self.listed = list(await asyncio.wait_for(lister(), timeout=self.endpoint.timeout))
        except (Exception, asyncio.TimeoutError):  # noqa: BLE001 - no list is no verdict
            return None
        return self.listed


def _same_model(asked: str, served: str) -> bool:
    """``served`` names ``asked`` or a version of it (a dated snapshot, a tag, a revision)."""
    a, s = asked.lower(), served.lower()
    return s == a or (s.startswith(a) and s[len(a)] in "-:@.")
