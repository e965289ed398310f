"""``LLM.embed``: the /embeddings call with the client's retries, the cache, budget and cost --
the real openai client mocked at the HTTP layer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import respx
from _llm_fakes import BASE, SECRET, error, ok

from ragjudge.errors import InputError, LLMError
from ragjudge.llm import LLM, BUDGET_REASON, Cache, embedding_key

EMB_URL = BASE + "/embeddings"
VEC = {"alpha": [1.0, 0.0, 0.0], "beta": [0.0, 2.0, 0.0], "gamma": [0.5, 0.5, 0.5]}


def embeddings_reply(request: Any) -> respx.MockResponse:
    """Vectors from VEC for each input, returned in reverse order with their indices (the
    client must put them back in input order)."""
    body = json.loads(request.content)
    inputs = body["input"]
    data = [{"object": "embedding", "index": i, "embedding": VEC[t]} for i, t in enumerate(inputs)]
    return ok({"object": "list", "model": body["model"], "data": data[::-1],
               "usage": {"prompt_tokens": 10 * len(inputs), "total_tokens": 10 * len(inputs)}})


def make_llm(tmp_path: Path, **kw: Any) -> LLM:
    kw.setdefault("cache", tmp_path / "cache.sqlite")
    kw.setdefault("backoff_base", 0.001)
    return LLM("chat-model", base_url=BASE, api_key=SECRET, **kw)


def embed(llm: LLM, texts: list[str], model: str = "emb-model") -> Any:
    async def go() -> Any:
        try:
            return await llm.embed(texts, model=model)
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_vectors_in_input_order_deduplicated_and_cached(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(EMB_URL).mock(side_effect=embeddings_reply)
    llm = make_llm(tmp_path)
    got = embed(llm, ["alpha", "beta", "alpha", "gamma"])
    assert got.ok and got.error is None and got.cached == 0
    assert got.vectors == [VEC["alpha"], VEC["beta"], VEC["alpha"], VEC["gamma"]]
    assert route.call_count == 1
    body = json.loads(route.calls[0].request.content)
    assert body == {"model": "emb-model", "input": ["alpha", "beta", "gamma"], "encoding_format": "float"}
    assert got.usage.prompt_tokens == 30 and llm.embedding_usage["emb-model"].prompt_tokens == 30
    assert llm.usage.calls == 0  # chat usage untouched
    # cache key = sha256 of (embedding model, text): a new session asks only for the new text
    cache = Cache(tmp_path / "cache.sqlite")
    assert embedding_key("emb-model", "alpha") in cache
    assert embedding_key("other-model", "alpha") not in cache
    llm2 = make_llm(tmp_path)
    again = embed(llm2, ["gamma", "alpha", "beta"])
    assert again.vectors == [VEC["gamma"], VEC["alpha"], VEC["beta"]] and again.cached == 3
    assert route.call_count == 1 and llm2.stats.calls == 0
    other = embed(make_llm(tmp_path), ["alpha"], model="other-model")
    assert other.cached == 0 and route.call_count == 2


def test_retries_then_succeeds(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    route = httpx2_mock.post(EMB_URL)
    route.side_effect = [error(429, "slow down", headers={"retry-after-ms": "1"}), error(500),
                         embeddings_reply]
    llm = make_llm(tmp_path)
    got = embed(llm, ["alpha"])
    assert got.ok and got.vectors == [VEC["alpha"]]
    assert route.call_count == 3 and llm.stats.retries == 2


def test_malformed_reply_is_retried_and_failure_is_data(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    short = ok({"object": "list", "data": [], "usage": {"prompt_tokens": 1}})  # 0 vectors for 1 input
    route = httpx2_mock.post(EMB_URL).mock(return_value=short)
    llm = make_llm(tmp_path, max_attempts=2)
    got = embed(llm, ["alpha"])
    assert not got.ok and got.vectors is None
    assert got.error == ("embedding call failed: malformed reply body (embeddings reply has 0 vectors "
                         "for 1 inputs) (after 2 unusable replies)")
    assert route.call_count == 2 and llm.stats.failed == 1
    # Both replies were billed: both are counted, at the usage they state.
    assert got.usage.calls == 2 and got.usage.prompt_tokens == 2
    assert embedding_key("emb-model", "alpha") not in Cache(tmp_path / "cache.sqlite")  # failures not cached


def test_nan_vector_is_not_accepted(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    bad = respx.MockResponse(200, content=b'{"data":[{"index":0,"embedding":[NaN, 1.0]}]}',
                             headers={"content-type": "application/json"})
    httpx2_mock.post(EMB_URL).mock(return_value=bad)
    got = embed(make_llm(tmp_path, max_attempts=1), ["alpha"])
    assert not got.ok and "malformed vector" in got.error


def test_wrong_model_stops_the_run(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(EMB_URL).mock(return_value=error(404, "model not found"))
    with pytest.raises(LLMError, match="HTTP 404"):
        embed(make_llm(tmp_path), ["alpha"])


def test_cost_at_the_embedding_models_price(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    httpx2_mock.post(EMB_URL).mock(side_effect=embeddings_reply)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"chat-model": {"input": 1.0, "output": 2.0},
                                  "emb-model": {"input": 0.5, "output": 0.0}}))
    llm = make_llm(tmp_path, prices=prices)
    embed(llm, ["alpha", "beta"])
    assert llm.cost == pytest.approx(20 * 0.5 / 1e6)
    # an embedding model without a price makes the total unknown, never 0
    unknown = make_llm(tmp_path, prices=prices, cache=False)
    embed(unknown, ["alpha"], model="unpriced")
    assert unknown.cost is None


def test_budget_and_arguments(httpx2_mock: respx.Router, tmp_path: Path) -> None:
    # No route: any request would fail unmocked; the budget must stop it before it is sent.
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"chat-model": {"input": 1.0, "output": 2.0},
                                  "emb-model": {"input": 1e6, "output": 0.0}}))
    llm = make_llm(tmp_path, prices=prices, max_cost=0.5)
    got = embed(llm, ["alpha"])
    assert got.error == BUDGET_REASON and not httpx2_mock.calls and llm.stats.skipped == 1
    with pytest.raises(InputError, match="price for embedding model"):
        embed(llm, ["alpha"], model="unpriced")
    with pytest.raises(InputError, match="list of texts"):
        embed(make_llm(tmp_path), "alpha")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no embedding model"):
        embed(make_llm(tmp_path), ["alpha"], model="")
