"""Refusing request bodies over `max_body_bytes` before they are read into memory."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_body


class BodyLimit:
    """ASGI middleware: a declared Content-Length over the limit is answered 413 at
    once; a body sent without one (chunked) is cut off with 413 when it passes it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self._app = app
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self._max_bytes):
            await self._refuse(send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self._max_bytes:  # turned into the JSON 413 by the error handlers
                    raise HTTPException(413, self._message())
            return message

        await self._app(scope, limited, send)

    def _message(self) -> str:
        return f"request body over {self._max_bytes} bytes"

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(error_body("http_413", self._message())).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
