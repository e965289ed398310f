"""A chat-completion reply carrying a JSON object, for RAG tests that mock the HTTP layer."""

from __future__ import annotations

import json
from typing import Any

import respx


def chat_reply(obj: Any, *, prompt_tokens: int = 50, completion_tokens: int = 20) -> respx.MockResponse:
    return respx.MockResponse(200, json={
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": json.dumps(obj)}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}})
