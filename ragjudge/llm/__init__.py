"""The LLM layer: prompts as files, one OpenAI-compatible client, one runner, a SQLite cache, cost.

Everything that talks to a model goes through :class:`LLM` (a session). The relevance judge
(:mod:`ragjudge.judges`) and the RAG metrics are thin users of its one generic entry point,
:meth:`LLM.structured`.

API overview (kept true; other modules build on exactly these names)
--------------------------------------------------------------------
``prompts.py``
    ``load_prompt(name_or_path) -> Prompt``: ``"relevance.v1"`` finds ``prompts/relevance.v1.md``
    shipped as the ``ragjudge.prompts`` package; a path loads a user's template. ``Prompt``
    (frozen): ``id``, ``version``, ``sha256`` (of the file bytes), ``labels`` (``{grade: text}``
    or ``None``), ``label_field`` (JSON field holding the label, e.g. ``"grade"``),
    ``output_schema`` (JSON Schema of the reply), ``variables``, ``max_tokens``,
    ``render(**variables) -> list[message dict]``, ``validate(obj) -> obj`` (strict schema check,
    raises ``ValueError``). Front-matter is a JSON object between ``---`` lines.

``client.py``
    ``ClientConfig(model, base_url=None, api_key=None, api_key_env="OPENAI_API_KEY",
    azure_endpoint=None, azure_api_version=None, timeout=60.0, max_attempts=6)`` and
    ``LLMClient(config)``: the only place with retries (tenacity; 408/409/429/5xx, timeouts,
    connection errors; exponential backoff + jitter; honours ``Retry-After``/``retry-after-ms``).
    The wrapped ``openai.AsyncOpenAI`` has ``max_retries=0`` so retries never multiply.
    ``await client.complete(body, gate=..., observe=...) -> Completion`` where ``body`` is the
    JSON body of ``/chat/completions`` (``model``, ``messages``, sampling params,
    ``response_format``...), ``gate`` the runner's per-attempt admission (a zero-argument
    async context manager factory) and ``observe(headers, status)`` the runner's signal sink. 400/401/403/404 raise :class:`ragjudge.errors.LLMError` at once
    (never containing the API key). ``Completion``: ``text``, ``refusal``, ``finish_reason``,
    ``usage`` (:class:`Usage`), ``logprobs`` (list of ``{"token", "logprob", "top_logprobs"}``),
    ``system_fingerprint``, ``model``, ``latency``, ``attempts``, ``raw`` (the reply JSON).
    ``client.openai`` is the underlying ``AsyncOpenAI`` (batch mode uses its files/batches API).

``runner.py``
    ``Runner(concurrency=16, rpm=None, tpm=None)``: owns concurrency (semaphore), the
    requests-per-minute pacing (evenly spaced starts; adaptive: learns the ceiling from
    ``x-ratelimit-*`` headers -- 98% of the advertised limit -- and from 429s; slow start: the
    first request goes alone) and a tokens-per-minute budget (reserve an estimate, settle from
    ``usage``). ``runner.slot(estimated_tokens)`` is the per-call concurrency slot (async
    context manager yielding a ``Reservation`` with ``settle(actual_tokens)``);
    ``runner.attempt(tokens)`` is the per-HTTP-attempt gate given to the client (waits for a
    cooldown after 429, the server's reported remaining budget, and the pacing);
    ``runner.observe(headers, status)`` feeds it rate-limit signals; ``runner.rpm`` /
    ``runner.tpm`` are the limits in force, ``runner.rate_limited`` counts 429s.

``cache.py``
    ``Cache(path)`` SQLite (WAL, one commit per answer), ``NullCache()``; ``get(key) -> dict|None``,
    ``put(key, record: dict)``; default path ``$RAGJUDGE_CACHE`` or
    ``~/.cache/ragjudge/judgments.sqlite`` (``default_cache_path()``). Only parsed, successful
    answers are stored, so a rerun retries failures.

``cost.py``
    ``Usage(calls, prompt_tokens, cached_tokens, completion_tokens)`` (addable),
    ``PriceTable`` (USD per 1M tokens; ``PriceTable.default()``, ``.load(path)``, ``.cost(model,
    usage) -> float|None``), ``estimate_tokens(messages) -> int``.

``session.py``  -- the entry point
    ``LLM(model, *, base_url=None, api_key=None, api_key_env=None, azure_endpoint=None,
    azure_api_version=None, concurrency=16, rpm=None, tpm=None, cache=True|False|path|Cache,
    prices=None|PriceTable|path, max_cost=None, temperature=0.0, seed=0, max_tokens=None,
    timeout=60.0, max_attempts=6, backoff_base=0.5, logprobs=True, top_logprobs=5,
    check_key=True)`` (``check_key=False``: no API key needed until the first call -- dry runs).
    Usable from several event loops in turn (loop-bound HTTP clients are per loop; call
    ``await llm.aclose()`` at the end of each loop's work, or ``async with llm:``).

    * ``await llm.structured(prompt, variables, *, validate=None) -> Outcome``: render ->
      cache lookup -> in-flight dedup -> runner slot + budget check -> client (strict
      ``json_schema`` response format, falling back to ``json_object`` then plain text; also
      drops ``logprobs``/``seed``/``temperature`` or renames ``max_tokens`` when the server
      rejects them -- remembered per session) -> tolerant JSON extraction + strict schema check
      (``prompt.validate``) + the optional ``validate(obj)`` (may return a converted value or
      raise ``ValueError``) with a repair turn (at most two, never the same request twice; a
      truncated reply is asked again once with twice ``max_tokens``) -> probability per label
      from logprobs -> cache write (successes only) -> usage/cost accounting. Never raises for
      per-item failures (``Outcome.error``); raises ``LLMError`` for configuration failures
      (bad key, unknown model, unsupported request). A call the budget cannot cover returns
      ``Outcome.error == BUDGET_REASON`` (``outcome.skipped``).
    * ``await llm.structured_many(prompt, variables_list, *, validate=None, desc=None,
      progress=True) -> list[Outcome]`` (input order; tqdm bar with done/failed/tokens/cost;
      an ``LLMError`` cancels the rest and is raised).
    * ``llm.estimate(prompt, variables_list) -> DryRun`` (pairs, cached, duplicates, calls,
      prompt_tokens, completion_tokens, cost|None; ``.describe()``; no network).
    * Batch-mode hooks: ``llm.prepare(prompt, variables) -> PreparedCall`` (``key``, ``prompt``,
      ``messages``, ``body``: the exact ``/v1/chat/completions`` JSON body, ``cached``:
      Outcome|None, ``estimated_prompt_tokens``) and ``llm.accept(call, completion: dict,
      validate=None, batch=False) -> Outcome`` (parse, account, cache write; no repair turn;
      ``batch=True`` costs the reply at the Batch API price, ``cost.BATCH_DISCOUNT``).
    * ``await llm.embed(texts, *, model) -> Embeddings`` (``vectors`` in input order or
      ``None`` with ``error``; ``usage``; ``cached``): ``/embeddings`` through the same client
      retries and runner pacing, cached per text under sha256 of (embedding model, text),
      costed at the embedding model's own price (``llm.embedding_usage`` per model).
    * ``llm.usage`` (:class:`Usage`), ``llm.cost`` (USD or ``None`` if the price is unknown),
      ``llm.stats`` (calls, cache_hits, deduplicated, retries, repaired, failed, skipped,
      fallbacks), ``llm.rate_limited``, ``llm.params(prompt)`` (sampling params = provenance).

    ``Outcome``: ``value`` (parsed/validated, or ``None``), ``error`` (reason or ``None``),
    ``ok``, ``skipped``, ``obj`` (the reply's JSON object), ``text``, ``probs`` (``{label: p}``
    from logprobs renormalised over the valid labels, or ``None``), ``expected``
    (probability-weighted label), ``usage`` (all calls made for it), ``latency``, ``cached``,
    ``model``, ``served_model``, ``prompt_id``, ``prompt_version``, ``prompt_sha``, ``params``,
    ``system_fingerprint``, ``key``, ``attempts``, ``repaired``, ``response_format``.

Judges on top (``ragjudge.judges``): ``LLMRelevanceJudge(model | llm=LLM(...), prompt=
"relevance.v1")`` with ``judge``/``judge_many``/``judge_run``/``fill_holes``/``estimate`` and
``judge.sync.*``; batch mode (``ragjudge.llm.batch``) also uses ``pool_pairs``,
``Judgment.from_outcome``, ``JudgeResult`` and the judge's ``_grade`` validator.
"""

from __future__ import annotations

from .cache import Cache, NullCache, cache_key, default_cache_path
from .client import CallFailed, ClientConfig, Completion, LLMClient, UnsupportedFeature, redact
from .cost import Price, PriceTable, Usage, estimate_tokens
from .prompts import Prompt, list_prompts, load_prompt, parse_prompt
from .runner import Runner
from .session import (
    BUDGET_REASON, LLM, DryRun, Embeddings, Outcome, PreparedCall, Stats, embedding_key, label_probs,
    parse_reply,
)

__all__ = [
    "LLM",
    "Outcome",
    "PreparedCall",
    "DryRun",
    "Stats",
    "Embeddings",
    "embedding_key",
    "BUDGET_REASON",
    "Prompt",
    "load_prompt",
    "parse_prompt",
    "list_prompts",
    "ClientConfig",
    "LLMClient",
    "Completion",
    "CallFailed",
    "UnsupportedFeature",
    "redact",
    "Runner",
    "Cache",
    "NullCache",
    "cache_key",
    "default_cache_path",
    "Usage",
    "Price",
    "PriceTable",
    "estimate_tokens",
    "parse_reply",
    "label_probs",
]
