"""The anthropic provider's tests start :class:`ragjudge.testing.anthropic.AnthropicFakeThread`
(the shipped fake of Anthropic's Messages API) through :func:`fake_anthropic`, with a model
list longer than a page and pages of 20 so every model check reads more than one page."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _loopback import simulator_module

#: What /v1/models lists here: dated ids only, the ones the tests ask for past the first page.
MODELS = tuple(f"claude-test-{i:02d}-20250101" for i in range(30)) + (
    "claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929", "claude-opus-4-20250514",
    "claude-3-7-sonnet-20250219")


@contextmanager
def fake_anthropic(**sim: Any) -> Iterator[Any]:
    """The fake on a loopback port: its :class:`~ragjudge.testing.anthropic.FakeAnthropic`
    (``fake.url`` is the base URL to pass as ``--base-url``). ``sim``: simulator settings."""
    pytest.importorskip("anthropic", reason="the anthropic provider's tests need the anthropic SDK")
    simulator_module()  # skips without aiohttp
    from ragjudge.testing.anthropic import AnthropicFakeThread

    sim.setdefault("max_lifetime", 120.0)  # a forgotten server always goes away
    with AnthropicFakeThread(models=MODELS, page_size=20, **sim) as thread:
        assert thread.fake is not None
        yield thread.fake
