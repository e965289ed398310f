"""Fake OpenAI-compatible replies for the LLM tests (mocked at the HTTP layer with respx).

Test modules import these helpers; ``tests/llm/test_llm_fakes.py`` checks the fakes themselves
against the real openai client, so a fake that drifts from the wire format fails there first.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import respx

BASE = "http://llm.test/v1"
URL = BASE + "/chat/completions"
SECRET = "sk-test-SECRET-0123456789abcdef"


def completion(
    content: str | None,
    *,
    finish_reason: str = "stop",
    refusal: str | None = None,
    prompt_tokens: int = 120,
    completion_tokens: int = 20,
    cached_tokens: int = 0,
    logprobs: list[dict[str, Any]] | None = None,
    model: str = "judge-model-2025",
    fingerprint: str = "fp_test",
) -> dict[str, Any]:
    """A ``/chat/completions`` reply body."""
    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": finish_reason,
        "message": {"role": "assistant", "content": content, "refusal": refusal},
        "logprobs": None if logprobs is None else {"content": logprobs},
    }
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


def grade_reply(grade: int, reasoning: str = "Because.", **kw: Any) -> dict[str, Any]:
    return completion(json.dumps({"reasoning": reasoning, "grade": grade}), **kw)


def ok(body: dict[str, Any], headers: dict[str, str] | None = None) -> respx.MockResponse:
    return respx.MockResponse(200, json=body, headers=headers)


def error(status: int, message: str = "error", *, code: str | None = None,
          headers: dict[str, str] | None = None) -> respx.MockResponse:
    return respx.MockResponse(status, json={"error": {"message": message, "type": "test", "code": code}},
                              headers=headers)


def grade_logprobs(text: str, dist: dict[str, float]) -> list[dict[str, Any]]:
    """Per-character-ish tokens for ``text`` where the grade digit's token carries ``dist``
    (token -> probability) as its top_logprobs."""
    m = re.search(r'"grade"\s*:\s*', text)
    assert m
    pos = m.end()
    tokens = [text[:pos], text[pos], text[pos + 1:]]
    out = []
    for i, tok in enumerate(tokens):
        if not tok:
            continue
        entry: dict[str, Any] = {"token": tok, "logprob": -0.01, "bytes": None, "top_logprobs": []}
        if i == 1:
            entry["top_logprobs"] = [{"token": t, "logprob": math.log(p), "bytes": None}
                                     for t, p in dist.items()]
            entry["logprob"] = math.log(dist.get(tok, 1e-9))
        out.append(entry)
    return out


def body_of(call: Any) -> dict[str, Any]:
    return json.loads(call.request.content)


def passage_of(body: dict[str, Any]) -> str:
    user = [m for m in body["messages"] if m["role"] == "user"][0]["content"]
    m = re.search(r"<passage>\n(.*)\n</passage>", user, re.S)
    assert m, user
    return m.group(1)


def grader(rule: Callable[[str], int]) -> Callable[[Any], respx.MockResponse]:
    """A side effect grading each request by a rule on its passage text."""

    def effect(request: Any) -> respx.MockResponse:
        body = json.loads(request.content)
        return ok(grade_reply(rule(passage_of(body))))

    return effect
