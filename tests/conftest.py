"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

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
