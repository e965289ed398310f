"""The budget's reservations: the worst case of every call in flight is held, capped or not."""

from __future__ import annotations

import pytest

from ragjudge.llm.budget import Admission, Budget


def test_an_uncapped_budget_still_holds_the_calls_in_flight() -> None:
    b = Budget(None)
    assert b.admit(100.0, 0.25) is Admission.GO and b.admit(100.0, 0.5) is Admission.GO
    assert b.in_flight == 2 and b.reserved == pytest.approx(0.75)
    b.release(0.25, completion_tokens=3, allowed_tokens=10)
    assert b.in_flight == 1 and b.reserved == pytest.approx(0.5)
    b.release(0.5)
    assert b.in_flight == 0 and b.reserved == 0.0


def test_a_capped_budget_waits_then_skips() -> None:
    b = Budget(1.0)
    assert b.admit(0.0, 0.6) is Admission.GO
    assert b.admit(0.0, 0.6) is Admission.WAIT  # would cross the cap while the first is in flight
    b.release(0.6, completion_tokens=5, allowed_tokens=10)
    assert b.admit(0.5, 0.6) is Admission.SKIP  # spent + worst crosses the cap: never
    assert b.admit(0.5, 0.4) is Admission.GO and b.reserved == pytest.approx(0.4)
