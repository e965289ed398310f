"""What a server lacks, learned from its 400s (``ServerFeatures``): pure bookkeeping, no session."""

from __future__ import annotations

import pytest

from ragjudge.errors import LLMError
from ragjudge.llm.client import UnsupportedFeature
from ragjudge.llm.conversation import FORMATS, ServerFeatures


def test_response_format_steps_down_once_for_the_whole_session() -> None:
    f = ServerFeatures()
    no_schema = UnsupportedFeature("response_format", "json_schema is not supported")
    # The server lacks json_schema itself: the schema without its keywords is skipped.
    assert f.downgrade(no_schema, 0, set(), "the server") == "response_format -> json_object"
    assert FORMATS[f.format] == "json_object"
    # A call that was sent with the old format learns nothing new and records nothing.
    assert f.downgrade(no_schema, 0, set(), "the server") is None
    assert FORMATS[f.format] == "json_object"


def test_a_rejected_length_keyword_keeps_the_schema_without_it() -> None:
    f = ServerFeatures()
    keyword = UnsupportedFeature("response_format", "maxLength is not permitted in strict mode")
    assert f.downgrade(keyword, 0, set(), "the server") == "response_format -> json_schema_basic"
    with pytest.raises(LLMError, match="the server rejected the request"):
        f.downgrade(UnsupportedFeature("response_format", "no"), len(FORMATS) - 1, set(), "the server")


def test_a_field_is_dropped_once_and_a_second_refusal_gives_up() -> None:
    f = ServerFeatures()
    exc = UnsupportedFeature("max_tokens", "use max_completion_tokens")
    assert f.downgrade(exc, 0, set(), "the server") == "max_tokens -> max_completion_tokens"
    assert f.drop == {"max_tokens"}
    assert f.downgrade(UnsupportedFeature("seed", "no seed"), 0, set(), "x") == "dropped seed"
    # Rejected although the request was sent without it: nothing left to drop.
    with pytest.raises(LLMError, match="x rejected the request"):
        f.downgrade(UnsupportedFeature("seed", "no seed"), 0, {"seed"}, "x")
