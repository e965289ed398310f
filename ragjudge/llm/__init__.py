"""The LLM layer: prompts as files, one OpenAI-compatible client, one runner, a SQLite cache,
cost and budget, and the session every judge and metric calls through.

Modules, lowest first (each imports only those above it in this list):

``provenance.py``  ``FailureKind`` (str enum of failure kinds) and ``Provenance`` (model,
    prompt id/version/sha256, params, served model, fingerprint, response format): the one
    shape used by outcomes, cache records, judgments and reports.
``cost.py``  ``Usage`` (calls, prompt/cached/completion/reasoning tokens, ``unknown``; never
    raises on odd ``usage`` blocks), ``Price``, ``PriceTable`` (NaN/negative prices refused),
    ``estimate_tokens``.
``prompts.py``  ``load_prompt``/``parse_prompt`` -> ``Prompt``: front-matter checked (the
    label scale lives only in ``labels``: the schema enum must match it and the template
    renders it with ``{{labels}}``/``{{label_choices}}``); data tags escaped in every
    spelling; ``response_format(kind, basic=)``, ``validate``.
``redaction.py``  ``redact``: no key or credential-bearing URL leaves the process.
``providers/``  the provider seam: ``base.py`` (the ``Provider`` protocol, ``Verdict``,
    ``RateInfo``, ``Completion``), the registry (``__init__.py``), one module per API
    (``openai.py``; ``anthropic.py``), ``function.py`` (a Python function of the prompt and
    its variables) and one per kind of model object (``langchain.py``, ``llamaindex.py``,
    ``litellm.py``, ``callable.py``, on ``objects.py``): ``LLM(obj)``.
``defaults.py``  the endpoint's fields declared once (default, help, flag):
    ``ENDPOINT_OPTIONS``, read by the CLI without loading the LLM stack.
``endpoint.py``  ``Endpoint``: the frozen options value of where and how to call (provider,
    model, URL, key variable, timeout, attempts, patience, concurrency, rpm, tpm, target).
``client.py``  ``LLMClient``: the one provider-neutral retry loop (see its docstring).
``rate.py``, ``health.py``, ``concurrency.py``, ``looplag.py``  the runner's parts, each pure
    bookkeeping under a clock passed in: ``RateLearner`` (the rpm learned from 429s),
    ``CircuitBreaker``/``EndpointDown``/``Slowdown`` (an endpoint's health),
    ``ConcurrencyLimit`` (the adaptive in-flight limit), ``LoopLag`` (our own loop's lateness).
``runner.py``  ``Runner``: concurrency, rpm pacing, tpm budget (``slot``, ``attempt``),
    admitting each attempt through its parts and feeding them its end.
``cache.py``  ``Cache``/``NullCache`` (SQLite; successes only), ``cache_key``.
``budget.py``  ``Budget``: the ``--max-cost`` ledger (worst case of every call reserved
    before it is sent); ``check_finite`` for limits.
``values.py``  ``Outcome``, ``PreparedCall``, ``DryRun``, ``Stats``, ``Embeddings``.
``replies.py``  ``parse_reply`` (quotations of the input are no verdict), ``check_reply``,
    ``label_probs``, ``apply_validate`` and ``Conversation``: the one repair/retry policy
    (repair turns for unusable replies; for cut-off replies the label alone, then twice the
    tokens) that every structured call follows.
``progress.py``  ``Progress``: a bar on a terminal or in a notebook, a few lines in a log.
``protocols.py``  ``StructuredSession``/``EmbeddingSession``: what judges and metrics use.
``caller.py``  ``Caller``: everything between a ready request and a counted reply for one
    endpoint: the provider's client per event loop, the runner, the budget (worst case
    reserved before sending) and the accounting of every billed reply.
``routing.py``  work across endpoints: ``route`` (weighted rendezvous hashing over the
    healthy ones), ``weight``, ``room`` and ``WorkQueues`` (an idle endpoint takes queued work).
``dispatch.py``  ``Dispatcher``: a session's callers as one: sends a request where ``route``
    says, moves it off an endpoint that is down, drains one that refuses the session, checks
    that each serves the model.
``conversation.py``  ``Converser``: the turns of one structured call (send, strict parse, the
    repair turn of ``replies.Conversation``), and ``ServerFeatures``: the response format and
    fields the server was learned to lack (the downgrade).
``many.py``  ``fan_out``: the workers and per-endpoint queues behind ``structured_many``.
``session.py``  ``LLM``: the session over the caller (render -> cache -> claims -> dedup ->
    conversation -> cache write), holding the accounts and the provenance. ``structured``,
    ``structured_many``, ``prepare``/``accept`` (batch mode), ``estimate`` (dry run),
    ``embed``, ``client()``, ``cost``/``cost_of``, ``failure``, ``provenance``.
``batch.py``  ``run_batch``: the same calls through the OpenAI Batch API, resumable.
``fake.py``  ``FakeLLM``: the session over the ``function`` provider (a function or a mapping
    of the prompt and its variables) with an in-memory cache store: offline runs, replays,
    tests and examples of judges, RAG metrics and synth without HTTP.

Judges on top (``ragjudge.judges``): ``LLMRelevanceJudge`` and its Batch API twin
``ragjudge.judges.judge_with_batch`` (``judge_with_batch_sync``).
"""

from __future__ import annotations

from importlib import import_module

from .._lazy import lazy_exports

# Every name loads on first use: the CLI's parsers and the options values read the provider
# registry (ragjudge.llm.providers) without loading the client, cache and session.
_LAZY = {
    'Budget': 'budget',
    'check_finite': 'budget',
    'Cache': 'cache',
    'NullCache': 'cache',
    'cache_key': 'cache',
    'default_cache_path': 'cache',
    'CallFailed': 'client',
    'ClientConfig': 'client',
    'Completion': 'client',
    'LLMClient': 'client',
    'UnsupportedFeature': 'client',
    'redact': 'client',
    'Endpoint': 'endpoint',
    'provider_names': 'providers',
    'provider_spec': 'providers',
    'Price': 'cost',
    'PriceTable': 'cost',
    'Usage': 'cost',
    'estimate_tokens': 'cost',
    'Progress': 'progress',
    'Prompt': 'prompts',
    'list_prompts': 'prompts',
    'load_prompt': 'prompts',
    'parse_prompt': 'prompts',
    'EmbeddingSession': 'protocols',
    'StructuredSession': 'protocols',
    'FailureKind': 'provenance',
    'Provenance': 'provenance',
    'apply_validate': 'replies',
    'check_reply': 'replies',
    'label_probs': 'replies',
    'parse_reply': 'replies',
    'Runner': 'runner',
    'LLM': 'session',
    'embedding_key': 'session',
    'BUDGET_REASON': 'values',
    'DryRun': 'values',
    'Embeddings': 'values',
    'Outcome': 'values',
    'PreparedCall': 'values',
    'Stats': 'values',
    'Validator': 'values',
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))


__all__ = [
    "LLM",
    "Outcome",
    "PreparedCall",
    "DryRun",
    "Stats",
    "Embeddings",
    "embedding_key",
    "BUDGET_REASON",
    "FailureKind",
    "Provenance",
    "StructuredSession",
    "EmbeddingSession",
    "Validator",
    "Budget",
    "check_finite",
    "Progress",
    "Prompt",
    "load_prompt",
    "parse_prompt",
    "list_prompts",
    "Endpoint",
    "provider_names",
    "provider_spec",
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
    "check_reply",
    "apply_validate",
    "label_probs",
]
