"""ragjudge.testing's offline stand-ins for LLM APIs, as a user's own test suite starts them:
in-process (a thread) or as a command."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

pytest.importorskip("aiohttp", reason="the simulator and the Anthropic fake need aiohttp")


def _post(url: str, body: dict, headers: dict[str, str]) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=30) as reply:
        return json.loads(reply.read())


SCHEMA = {"type": "object", "properties": {"grade": {"type": "integer", "enum": [0, 1, 2, 3]}},
          "required": ["grade"], "additionalProperties": False}


def test_the_simulator_in_process_answers_a_schema_deterministically() -> None:
    from ragjudge.testing import SimConfig, SimulatorThread

    body = {"model": "m", "messages": [{"role": "user", "content": "grade this"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "g", "schema": SCHEMA}}}
    with SimulatorThread(SimConfig(latency=0.0)) as sim:
        first = _post(sim.base_url + "/chat/completions", body, {"authorization": "Bearer x"})
        again = _post(sim.base_url + "/chat/completions", body, {"authorization": "Bearer x"})
        assert sim.stats()["requests"] == 2
    grade = json.loads(first["choices"][0]["message"]["content"])["grade"]
    assert grade in (0, 1, 2, 3) and again["choices"] == first["choices"]


def test_the_anthropic_fake_in_process_answers_a_forced_tool() -> None:
    from ragjudge.testing import AnthropicFakeThread

    body = {"model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "grade"}],
            "tools": [{"name": "grade", "input_schema": SCHEMA}],
            "tool_choice": {"type": "tool", "name": "grade"}}
    with AnthropicFakeThread(latency=0.0) as fake:
        reply = _post(fake.base_url + "/v1/messages", body,
                      {"x-api-key": fake.api_key, "anthropic-version": "2023-06-01"})
        fake.fake.script.append(529)  # a queued fault
        with pytest.raises(urllib.error.HTTPError) as info:
            _post(fake.base_url + "/v1/messages", body,
                  {"x-api-key": fake.api_key, "anthropic-version": "2023-06-01"})
        assert info.value.code == 529
    assert reply["content"][0]["type"] == "tool_use" and reply["content"][0]["input"]["grade"] in (0, 1, 2, 3)
    assert reply["usage"]["input_tokens"] > 0



def _get(url: str, headers: dict[str, str]) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
        return json.loads(reply.read())


def test_the_anthropic_fake_lists_dated_models_in_pages() -> None:
    from ragjudge.testing import AnthropicFakeThread
    from ragjudge.testing.anthropic import MODELS

    auth = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    with AnthropicFakeThread(api_key="k", latency=0.0) as fake:
        models = fake.base_url + "/v1/models"
        whole = _get(models, auth)  # 20 a page by default: the whole short list
        first = _get(models + "?limit=3", auth)
        second = _get(f"{models}?limit=3&after_id={first['last_id']}", auth)
        back = _get(f"{models}?limit=3&before_id={second['first_id']}", auth)
        for query, headers, status in (("?limit=0", auth, 400), ("?limit=1001", auth, 400),
                                       ("", {"anthropic-version": "2023-06-01"}, 401)):
            with pytest.raises(urllib.error.HTTPError) as info:
                _get(models + query, headers)
            assert info.value.code == status
        assert fake.fake is not None and fake.fake.model_pages == 4
    assert [m["id"] for m in whole["data"]] == list(MODELS) and not whole["has_more"]
    assert all(not m["id"].endswith(("-latest", "-4-5")) for m in whole["data"])  # no aliases listed
    ids = [m["id"] for m in first["data"] + second["data"]]
    assert ids == list(MODELS[:6]) and first["has_more"] and second["has_more"]
    assert back["data"] == first["data"] and not back["has_more"]  # nothing before the first page
    assert whole["data"][0]["created_at"] == "2025-10-01T00:00:00Z"


def test_the_anthropic_fake_reports_prompt_cache_writes_by_ttl_then_reads() -> None:
    from ragjudge.testing import AnthropicFakeThread

    auth = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    system = [{"type": "text", "text": "notes " * 400, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    body = {"model": "claude-x", "max_tokens": 50, "system": system,
            "messages": [{"role": "user", "content": "grade"}]}
    with AnthropicFakeThread(api_key="k", latency=0.0) as fake:
        write = _post(fake.base_url + "/v1/messages", body, auth)["usage"]
        read = _post(fake.base_url + "/v1/messages", body, auth)["usage"]
        assert fake.fake is not None
        fake.fake.script.append("spend")
        for _ in range(2):  # the spend limit holds for every later request
            with pytest.raises(urllib.error.HTTPError) as info:
                _post(fake.base_url + "/v1/messages", body, auth)
            assert info.value.code == 429 and "retry-after" not in info.value.headers
    assert write["cache_creation_input_tokens"] > 0 and write["cache_read_input_tokens"] == 0
    assert write["cache_creation"] == {"ephemeral_5m_input_tokens": 0,
                                       "ephemeral_1h_input_tokens": write["cache_creation_input_tokens"]}
    assert read["cache_read_input_tokens"] == write["cache_creation_input_tokens"]
    assert read["cache_creation_input_tokens"] == 0 and read["input_tokens"] == write["input_tokens"]


@pytest.mark.slow
@pytest.mark.parametrize("module", ["ragjudge.testing.simulator", "ragjudge.testing.anthropic"])
def test_each_fake_runs_as_a_command(module: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", "0", "--latency", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_the_assertions_do_not_load_aiohttp() -> None:
    code = ("import sys, ragjudge.testing as t; t.assert_metric; "
            "print('aiohttp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
