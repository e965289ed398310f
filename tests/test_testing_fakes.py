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
