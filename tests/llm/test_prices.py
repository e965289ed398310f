"""Prices: the maintained price database (genai-prices) first, ``--prices FILE`` over it, the
built-in table as the fallback, an exact name before any prefix, and one line for a price
taken from a prefix or missing; the cost of the issue's runs at list price."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ragjudge.llm import LLM, Endpoint
from ragjudge.llm import cost as cost_mod
from ragjudge.llm.cost import Price, PriceTable, Usage
from ragjudge.llm.providers.anthropic import PRICES as ANTHROPIC_PRICES


@pytest.fixture(params=["database", "built-in"])
def table(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> PriceTable:
    """The session's table (the database with the built-in prices under it), and the same
    without genai-prices (as if it were not installed)."""
    if request.param == "database":
        pytest.importorskip("genai_prices")
    else:
        monkeypatch.setattr(cost_mod, "_DB", [None])
    return PriceTable.default().merged(ANTHROPIC_PRICES)


def test_claude_opus_4_6_is_not_priced_as_opus_4(table: PriceTable) -> None:
    p = table.get("claude-opus-4-6")
    assert p is not None and (p.input, p.output) == (5.0, 25.0)
    assert table.source("claude-opus-4-6") in (cost_mod.DATABASE, cost_mod.BUILT_IN)
    opus4 = table.get("claude-opus-4-20250514")
    assert opus4 is not None and (opus4.input, opus4.output) == (15.0, 75.0)


@pytest.mark.parametrize("model, rates", [("claude-3-7-sonnet-20250219", (3.0, 15.0)),
                                          ("claude-3-opus-20240229", (15.0, 75.0))])
def test_sonnet_3_7_and_opus_3_have_prices_so_a_cap_can_start(table: PriceTable, model: str,
                                                              rates: tuple[float, float]) -> None:
    p = table.get(model)
    assert p is not None and (p.input, p.output) == rates
    assert p.cache_write == pytest.approx(1.25 * p.input) and p.cache_write_1h == pytest.approx(2 * p.input)


def test_cache_writes_have_their_own_rates(table: PriceTable) -> None:
    p = table.get("claude-haiku-4-5")
    assert p is not None and (p.cached_input, p.cache_write, p.cache_write_1h) == pytest.approx((0.1, 1.25, 2.0))


def test_a_cap_on_a_model_the_database_knows_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("genai_prices")
    llm = LLM(Endpoint("claude-3-7-sonnet-20250219", provider="anthropic", api_key="sk-ant-x-0000000000"),
              cache=False, max_cost=1.0)
    assert llm.prices.get("claude-3-7-sonnet-20250219") is not None


def test_the_database_knows_models_the_built_in_table_does_not() -> None:
    pytest.importorskip("genai_prices")
    # Not in either built-in table; the database has it.
    assert "o3-mini" not in cost_mod._DEFAULT_PRICES
    assert PriceTable.default().source("o3-mini") == cost_mod.DATABASE


def test_a_price_file_overrides_the_database(tmp_path: Path) -> None:
    f = tmp_path / "prices.json"
    f.write_text(json.dumps({"claude-opus-4-6": {"input": 1, "output": 2, "cache_write": 3, "cache_write_1h": 4}}))
    t = PriceTable.load(f, base=PriceTable.default().merged(ANTHROPIC_PRICES))
    assert t.get("claude-opus-4-6") == Price(1.0, 2.0, None, 3.0, 4.0)
    assert t.source("claude-opus-4-6") == cost_mod.GIVEN
    assert t.get("claude-haiku-4-5") is not None  # the rest still comes from the database / table


def test_an_exact_name_wins_over_a_longer_prefix_and_a_prefix_is_said_once(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cost_mod, "_DB", [None])
    t = PriceTable.default()
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        assert t.get("gpt-4o-2099-01-01") == t.get("gpt-4o")  # a dated snapshot: the prefix's price
        t.cost("gpt-4o-2099-01-01", Usage(1, 10, 0, 1))
        assert t.get("gpt-4o-mini") != t.get("gpt-4o")
    said = [r.getMessage() for r in caplog.records if "gpt-4o-2099-01-01" in r.getMessage()]
    assert len(said) == 1 and "'gpt-4o'" in said[0] and "--prices" in said[0] and "\n" not in said[0]
    assert t.source("gpt-4o-2099-01-01") == cost_mod.PREFIX


def test_a_model_without_a_price_is_one_line_never_a_silent_zero(caplog: pytest.LogCaptureFixture) -> None:
    t = PriceTable.default()
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        assert t.cost("my-local-model", Usage(1, 100, 0, 10)) is None
        assert t.cost("my-local-model", Usage(1, 100, 0, 10)) is None
    said = [r.getMessage() for r in caplog.records if "my-local-model" in r.getMessage()]
    assert len(said) == 1 and "--prices" in said[0] and "unknown" in said[0]


def test_prompt_tokens_count_each_cache_write_once_and_the_issue_cost_is_list_price(table: PriceTable) -> None:
    from ragjudge.llm.providers.anthropic import messages_usage

    # One reply of a run on claude-opus-4-6 with 1-hour and 5-minute cache writes.
    u = messages_usage({"input_tokens": 1200, "output_tokens": 80, "cache_read_input_tokens": 3000,
                        "cache_creation_input_tokens": 700,
                        "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 400}})
    assert u.prompt_tokens == 1200 + 3000 + 700
    list_price = (1200 * 5 + 3000 * 0.5 + 300 * 6.25 + 400 * 10 + 80 * 25) / 1e6
    assert table.cost("claude-opus-4-6", u) == pytest.approx(list_price)


def test_cache_write_fields_survive_the_cache_record() -> None:
    u = Usage(1, 100, 10, 5, cache_write_tokens=20, cache_write_1h_tokens=30)
    assert Usage.from_dict(u.to_dict()) == u
    assert (u + u).cache_write_1h_tokens == 60


@pytest.mark.slow  # a subprocess
def test_the_database_is_imported_only_when_a_price_is_needed() -> None:
    import subprocess
    import sys

    code = ("import sys; from ragjudge.llm.cost import PriceTable, Usage; t = PriceTable.default();"
            "assert 'genai_prices' not in sys.modules; t.cost('gpt-4o-mini', Usage(1, 1, 0, 1));"
            "print('genai_prices' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(_has_database())


def _has_database() -> bool:
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_request_past_the_long_context_threshold_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    from ragjudge.llm.caller import Accounts

    pytest.importorskip("genai_prices")  # the threshold comes from the database's price tiers
    table = PriceTable.default().merged(ANTHROPIC_PRICES)
    if table.source("claude-sonnet-4-5") != cost_mod.DATABASE:
        pytest.skip("the long-context threshold comes from the price database")
    assert table.get("claude-sonnet-4-5").long_context_above == 200_000  # from the database's tiers
    accounts = Accounts("claude-sonnet-4-5", table, None)
    caplog.set_level(logging.WARNING)
    accounts.count(Usage(1, 150_000, 0, 100))
    assert not [r for r in caplog.records if "long-context" in r.getMessage()]
    accounts.count(Usage(1, 250_000, 0, 100))
    accounts.count(Usage(1, 260_000, 0, 100))
    lines = [r.getMessage() for r in caplog.records if "long-context" in r.getMessage()]
    assert len(lines) == 1 and "200,000" in lines[0] and "--prices" in lines[0]


@pytest.mark.parametrize("text, why", [
    ('{"m": {"input": 1, "output": 2, "cache_read": 0.1}}',  # a misspelt rate fell back silently
     "m.cache_read: unknown price field 'cache_read' of 'm' (known: input, output, cached_input"),
    ('{"m": {"input": 1, "output": 2}, "m": {"input": 9, "output": 9}}',  # the last won silently
     "m: 'm' is given twice (which price is meant?)"),
])
def test_a_price_file_with_a_field_or_model_that_cannot_be_meant_is_refused(tmp_path, text: str, why: str) -> None:  # type: ignore[no-untyped-def]
    from ragjudge.errors import InputError

    f = tmp_path / "p.json"
    f.write_text(text)
    with pytest.raises(InputError) as info:
        PriceTable.load(f, base=PriceTable())
    assert str(info.value).startswith(f"{f}: {why}")


def test_a_missing_price_is_logged_once_for_every_table_but_kept_by_each(caplog) -> None:
    import logging

    from ragjudge.llm.cost import PriceTable, Usage

    model = "no-such-model-for-the-log-test-7"
    with caplog.at_level(logging.WARNING, logger="ragjudge.llm"):
        tables = [PriceTable.default().merged({}) for _ in range(3)]  # a service: one per job
        for t in tables:
            assert t.cost(model, Usage(prompt_tokens=10, completion_tokens=1, calls=1)) is None
    said = [r.getMessage() for r in caplog.records if model in r.getMessage()]
    assert len(said) == 1
    assert all(any(model in n for n in t.notes) for t in tables)
