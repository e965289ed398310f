"""Helpers to run the loopback OpenAI-compatible simulator (``benchmarks/simulator.py``) in tests.

``benchmarks/`` is not a package, so the module is loaded from its path once and cached in
``sys.modules``. The simulator needs aiohttp (a dev dependency); tests that use it call
:func:`simulator_module` first, which skips with a clear message when aiohttp is missing.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SIMULATOR_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "simulator.py"
_NAME = "ragjudge_bench_simulator"


def simulator_module() -> ModuleType:
    """``benchmarks/simulator.py`` as a module (skips the test when aiohttp is not installed)."""
    pytest.importorskip("aiohttp", reason="the loopback simulator needs aiohttp (pip install -e '.[dev]')")
    mod = sys.modules.get(_NAME)
    if mod is None:
        spec = importlib.util.spec_from_file_location(_NAME, SIMULATOR_PATH)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = mod  # dataclasses need the module registered while executing
        spec.loader.exec_module(mod)
    return mod


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
