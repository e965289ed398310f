"""Not a benchmark: the smallest ASGI service answering ``POST /v1/evaluate`` for
``bench_server.py``'s ceiling row. No framework, guard, access log or error handling: it reads
the body, decodes it with pydantic-core, validates it, calls the same library function as the
service (``evaluate_json``) and sends the answer. ``POST /floor`` reads the body the same way
and answers its length without decoding it: the transport floor (what uvicorn and the socket
cost for this body, with no work). Run by the bench under the same uvicorn (httptools, uvloop)
as ``ragjudge serve``."""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

from ragjudge.server.models import EvaluateRequest
from ragjudge.server.service import evaluate_json


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    if scope["path"] == "/floor":
        data = b'{"bytes": %d}' % len(body)
    else:
        data = evaluate_json(EvaluateRequest.model_validate(from_json(body)), 10**9).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
