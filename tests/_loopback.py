"""Helpers to run the loopback OpenAI-compatible simulator (:mod:`ragjudge.testing.simulator`)
in tests. The simulator needs aiohttp (a dev dependency); tests that use it call
:func:`simulator_module` first, which skips with a clear message when aiohttp is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest


def simulator_module() -> ModuleType:
    """:mod:`ragjudge.testing.simulator` (skips the test when aiohttp is not installed)."""
    pytest.importorskip("aiohttp", reason="the loopback simulator needs aiohttp (pip install -e '.[dev]')")
    from ragjudge.testing import simulator

    return simulator


@contextmanager
def simulator_thread(**config: Any) -> Iterator[Any]:
    """A :class:`SimulatorThread` on its own loop; ``max_lifetime`` defaults to 120 s so a
    forgotten server always goes away."""
    mod = simulator_module()
    config.setdefault("max_lifetime", 120.0)
    sim = mod.SimulatorThread(mod.SimConfig(**config))
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()
