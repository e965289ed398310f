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


# ``-m "not slow"`` is the fast set. A slow test is marked where it is written (a module-level
# ``pytestmark = pytest.mark.slow`` or ``@pytest.mark.slow``); these, in modules whose owners had
# not marked them yet, are marked here by file and name (an entry whose test is marked in place
# is redundant: remove it then). Slow = subprocesses, kill -9, real servers, peer cross-checks,
# or more than ~2 s on a 2-core machine.
SLOW_ELSEWHERE = frozenset({
    "test_llm_cache_claims.py::test_claims_of_a_killed_process_are_taken_over",  # kill -9
    "test_llm_client.py::test_429s_do_not_use_up_the_attempt_budget",  # ~10 s
    "test_llm_deadlines.py::test_evaluate_judge_takes_the_attempt_bounds_and_ends_against_a_trickling_server",
    "test_llm_deadlines.py::test_a_judge_facing_a_trickling_server_ends_with_every_pair_failed_with_its_reason",
    "test_llm_redaction.py::test_a_server_quoting_the_url_does_not_make_the_run_print_the_key",  # subprocess
    "test_runner_adaptive.py::test_real_judge_learns_a_header_less_per_second_limit",  # ~6 s
    "test_simulator_faults.py::test_a_shared_rate_limit_loses_nothing",  # ~10 s
    "test_simulator_faults.py::test_cli_no_server_exits_2_with_one_line",  # ~5 s
    "test_simulator_faults.py::test_an_outage_pauses_the_run_and_loses_nothing",  # ~5 s each
    "test_simulator_faults.py::test_a_single_slot_server_is_not_flooded",  # ~3 s
    "test_simulator_faults.py::test_retry_after_is_honoured_and_rate_limits_respected",  # ~2.5 s
    "test_simulator_faults.py::test_faults_lose_no_judgment_and_pay_nothing_twice",  # ~2.5 s
    "test_simulator_faults.py::test_standalone_simulator_prints_its_url_and_serves",  # subprocess
    "test_trust_ppi.py::test_exactness_leftovers_from_trec_eval_and_ir_measures",  # peer cross-check
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests of :data:`SLOW_ELSEWHERE` slow. Tests mocked at openai 3's transport
    (``httpx2_mock``) cannot intercept openai 1.x/2.x, which speak httpx: CI runs the loopback
    tests on the oldest supported openai instead."""
    for item in items:
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        if f"{item.path.name}::{name}" in SLOW_ELSEWHERE:
            item.add_marker(pytest.mark.slow)
    try:
        import httpcore2  # noqa: F401
    except ImportError:
        skip = pytest.mark.skip(reason="mocked at the httpx2 transport of openai >= 3; this "
                                       "environment's openai uses httpx (loopback tests cover it)")
        for item in items:
            if "httpx2_mock" in getattr(item, "fixturenames", ()):
                item.add_marker(skip)
