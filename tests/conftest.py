"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests never reach the network: Haystack (the integration tests' pipelines) otherwise sends
# usage statistics from a background thread, retrying while the tests run (and leaving its
# failed attempts' objects for the cycle collector, which a test of ours counts).
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

# The public trec_eval test data lives beside the repository, never inside it.
CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "trec_eval"


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    """Folder of trec_eval's public test files and expected outputs (skips when absent)."""
    if not (CONFORMANCE_DIR / "README.md").is_file():
        pytest.skip(
            f"trec_eval conformance data not found at {CONFORMANCE_DIR} "
            "(copy usnistgov/trec_eval test/ files there to run the conformance tests)"
        )
    return CONFORMANCE_DIR


# ``-m "not slow"`` is the fast set. A slow test is marked where it is written (a module-level
# ``pytestmark = pytest.mark.slow`` or ``@pytest.mark.slow``). Slow = subprocesses, kill -9,
# real servers, peer cross-checks, or more than ~2 s on a 2-core machine.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests mocked at openai 3's transport (``httpx2_mock``) cannot intercept openai 1.x/2.x,
    which speak httpx: CI runs the loopback tests on the oldest supported openai instead."""
    # httpx2 may be installed by another package (genai-prices) beside an openai that speaks
    # httpx: what counts is the openai in use and the fixture's plugin.
    import importlib.util

    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("openai").split(".")[0])
    except (PackageNotFoundError, ValueError):
        major = 0
    if major < 3 or importlib.util.find_spec("pytest_httpx2") is None:
        skip = pytest.mark.skip(reason="mocked at the httpx2 transport of openai >= 3; this "
                                       "environment's openai uses httpx (loopback tests cover it)")
        for item in items:
            if "httpx2_mock" in getattr(item, "fixturenames", ()):
                item.add_marker(skip)
