"""The fake OpenAI-compatible replies (``tests/_llm_fakes.py``) checked against the real openai
client, so a fake that drifts from the wire format fails here first."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import respx
from _llm_fakes import BASE, SECRET, URL, grade_logprobs, grade_reply, ok


def test_fake_completion_parses_with_the_real_client(httpx2_mock: respx.Router) -> None:
    import openai

    httpx2_mock.post(URL).mock(return_value=ok(grade_reply(2, cached_tokens=7)))

    async def go() -> Any:
        client = openai.AsyncOpenAI(api_key=SECRET, base_url=BASE, max_retries=0)
        return await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    comp = asyncio.run(go())
    assert json.loads(comp.choices[0].message.content)["grade"] == 2
    assert comp.usage.prompt_tokens_details.cached_tokens == 7
    assert comp.system_fingerprint == "fp_test"


def test_grade_logprobs_tokens_reassemble_the_text() -> None:
    text = json.dumps({"reasoning": "r", "grade": 2})
    toks = grade_logprobs(text, {"2": 0.7, "3": 0.2, "x": 0.1})
    assert "".join(t["token"] for t in toks) == text
    assert [t["token"] for t in toks[1]["top_logprobs"]] == ["2", "3", "x"]
