"""The fault matrix: every LLM command x every fault mode x one or several endpoints x each
cache store, the same invariants each time (see ``tests/_faultmatrix.py``): it ends within a
bound, every item is graded or failed with a reason, nothing is paid twice, the reported cost
is at least what the servers billed, and the bill is within the cap.

The fast set runs a sample; the whole matrix is ``slow``. A cell known to break an invariant
on this code is an ``xfail(strict=True)`` naming the invariant, so the mark must go when the
fix lands.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from _faultmatrix import COMMANDS, ENDPOINTS, MODES, STORES, run_cell
from _faultserver import MODES as SERVER_MODES
from _faultserver import FaultServer

Cell = tuple[str, str, str, str]

# What breaks today, observed with the SQLite cache (``bench_faults.py --matrix``); the cache
# store does not enter these invariants, so PostgreSQL cells carry the same marks.
REPORTED = ("reported < true spend: a billed reply whose body cannot be read (a stall after the "
            "headers, a reset mid-body, a gzip header on a plain body) is not counted")
OTHER = "other_model: replies naming another model are used (and cached) without a word"
HEALTHY = ("healthy: an endpoint failing every call is not drained: its items fail while two "
           "healthy endpoints idle")
EXIT = "exit: synth exits 0 although every generation call failed"
BUDGET = "budget: a run cut short by --max-cost exits 0"
HANG = "bound: with --max-cost and several endpoints the run stops sending after a few calls and never ends"
LLM_COMMANDS = ("judge", "rag", "evaluate --judge", "synth")


SERVICE_NOTICE = ("other_model: the service takes a renaming server's first name with one line in "
                  "the server's log, which this harness does not read")


def _known(command: str, mode: str, endpoints: str) -> tuple[str, bool] | None:
    """(why, strict) for a cell that breaks an invariant today; not strict where the outcome
    depends on timing (when the budget binds against the calls in flight)."""
    if command == "service judge" and mode == "other model":
        return SERVICE_NOTICE, False
    return None


FAST: list[Cell] = [
    ("judge", "clean", "one", "sqlite"),
    ("judge", "gzip", "one", "sqlite"),
    ("rag", "usage huge", "one", "sqlite"),
    ("evaluate --judge", "other model", "one", "sqlite"),
    # a cap over several endpoints: waiters for the budget are woken by any endpoint's replies
    ("judge", "mix + cap", "several", "sqlite"),
]


def _param(cell: Cell) -> object:
    known = _known(*cell[:3])
    marks = [pytest.mark.xfail(strict=known[1], reason=known[0])] if known else []
    return pytest.param(*cell, marks=marks, id="-".join(c.replace(" ", "_") for c in cell))


def _check(cell: Cell, tmp_path: Path) -> None:
    result = run_cell(*cell, tmp_path)
    assert not result.violations(), (result.row(), result.stderr[-1500:])


@pytest.mark.parametrize("command, mode, endpoints, store", [_param(c) for c in FAST])
def test_fault_matrix_sample(command: str, mode: str, endpoints: str, store: str, tmp_path: Path) -> None:
    _check((command, mode, endpoints, store), tmp_path)


ALL: list[Cell] = [c for c in itertools.product(COMMANDS, MODES, ENDPOINTS, STORES) if c not in FAST]


@pytest.mark.slow
@pytest.mark.parametrize("command, mode, endpoints, store", [_param(c) for c in ALL])
def test_fault_matrix(command: str, mode: str, endpoints: str, store: str, tmp_path: Path) -> None:
    _check((command, mode, endpoints, store), tmp_path)


# ----------------------------------------------------------------------------- the fault server itself
def _post(url: str, body: dict) -> tuple[int, dict[str, str], bytes]:
    import http.client
    import json
    from urllib.parse import urlsplit

    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    try:
        conn.request("POST", u.path + "/chat/completions", json.dumps(body), {"content-type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


BODY = {"model": "fault-model", "messages": [{"role": "user", "content": "is this passage relevant"}],
        "max_tokens": 50, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"grade": {"type": "integer", "enum": [0, 1, 2, 3]}},
            "required": ["grade"]}}}}


@pytest.mark.parametrize("mode", sorted(set(SERVER_MODES) - {"stall", "reset"}))
def test_each_fault_mode_is_what_it_says_and_billed_as_a_provider_would(mode: str) -> None:
    import json

    with FaultServer({mode: 1.0}) as s:
        status, headers, data = _post(s.base_url, BODY)
        stats = s.stats()
    assert stats["billed_calls"] == int(SERVER_MODES[mode])
    if mode == "5xx":
        assert status == 500
    elif mode.startswith("429"):
        assert status == 429 and (("retry-after" in headers) == (mode == "429"))
    elif mode == "gzip":
        assert headers["content-encoding"] == "gzip" and json.loads(data)["choices"]
    elif mode == "malformed":
        with pytest.raises(ValueError):
            json.loads(data)
    else:
        reply = json.loads(data)
        assert status == 200
        if mode == "empty_choices":
            assert reply["choices"] == []
        elif mode == "other_model":
            assert reply["model"] != "fault-model"
        else:
            assert reply["usage"]["completion_tokens"] in (float("inf"), -500, "many")
            assert json.loads(reply["choices"][0]["message"]["content"])["grade"] in (0, 1, 2, 3)


def test_a_second_bill_after_a_clean_reply_is_paid_twice() -> None:
    with FaultServer({}) as s:
        for _ in range(3):
            assert _post(s.base_url, BODY)[0] == 200
        assert s.stats()["paid_twice"] == 2 and s.billed_calls == 3 and s.spend > 0


def test_stall_and_reset_are_billed_and_never_complete() -> None:
    import http.client

    for mode in ("stall", "reset"):
        with FaultServer({mode: 1.0}, stall_s=1.0) as s:
            with pytest.raises((TimeoutError, OSError, http.client.HTTPException)):
                _post(s.base_url, BODY)  # the stall ends after stall_s with the body unsent
            assert s.stats()["billed_calls"] == 1
