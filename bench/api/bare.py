"""The floor for ``bench.api``: a bare ASGI endpoint under the same uvicorn (uvloop, httptools), no FastAPI.

It reads the request body and answers ``202`` with a small JSON body, as ``POST /objects`` does without
``Prefer: wait``: what is left of the API's CPU per request above this is Arbiter's (and FastAPI's) own.
"""

from __future__ import annotations

from typing import Any

BODY = b'{"status":"queued"}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:  # noqa: ANN401 - the ASGI callables
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 202,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
