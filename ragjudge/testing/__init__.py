"""What a user's own test suite and CI need from ragjudge.

* assertions that gate retrieval and RAG quality (:func:`assert_metric`,
  :func:`assert_not_worse`; :mod:`ragjudge.testing.assertions`);
* offline stand-ins for the LLM APIs, so tests of code that calls an LLM through ragjudge
  run without a key, a network or a bill: an OpenAI-compatible server
  (:mod:`ragjudge.testing.simulator`: :class:`SimConfig`, :class:`Simulator` on the current
  event loop, :class:`SimulatorThread` on its own; ``python -m ragjudge.testing.simulator``)
  and Anthropic's Messages API (:mod:`ragjudge.testing.anthropic`: :class:`AnthropicFakeThread`;
  ``python -m ragjudge.testing.anthropic``). Both listen on 127.0.0.1 only, answer
  deterministically (valid JSON for a schema; plumbing, not quality) and need ``aiohttp``
  (``pip install -e '.[testing]'`` in the ragjudge checkout).

The names load on first use: importing the assertions never imports aiohttp.
"""

from __future__ import annotations

from importlib import import_module

from .._lazy import lazy_exports

__all__ = [
    "assert_metric",
    "assert_not_worse",
    "SimConfig",
    "Simulator",
    "SimulatorThread",
    "AnthropicFakeThread",
]

_LAZY = {
    "assert_metric": "assertions",
    "assert_not_worse": "assertions",
    "SimConfig": "simulator",
    "Simulator": "simulator",
    "SimulatorThread": "simulator",
    "AnthropicFakeThread": "anthropic",
}
__getattr__, __dir__ = lazy_exports(globals(), _LAZY, lambda m: import_module(f".{m}", __name__))
