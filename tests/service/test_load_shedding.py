"""The in-flight bound: requests past it are refused at once, probes have slots of
their own, and a slot is free again once its request ends, even by an error."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from service.load_shedding import PROBE_SLOTS, Capacity, LoadShedding


class HeldApp:
    """An app whose requests stay in flight until released; "/boom" fails."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.release.wait()
        if scope["path"] == "/boom":
            raise RuntimeError("boom")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: LoadShedding, path: str) -> dict[str, Any]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await app({"type": "http", "path": path, "headers": []}, receive, send)
    except RuntimeError:
        return {"status": "raised"}
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return {"status": sent[0]["status"], "headers": headers, "body": sent[1]["body"]}


async def scenario() -> None:
    held = HeldApp()
    app = LoadShedding(held, Capacity(requests=1))
    failing = asyncio.create_task(call(app, "/boom"))
    probes = [asyncio.create_task(call(app, "/healthz")) for _ in range(PROBE_SLOTS)]
    await asyncio.sleep(0)  # every task is now in flight, waiting for its release

    refused = await call(app, "/v1/jobs")
    assert refused["status"] == 503
    assert refused["headers"]["retry-after"] == "1"
    assert json.loads(refused["body"])["error"]["code"] == "overloaded"
    assert (await call(app, "/metrics"))["status"] == 503  # the probes' slots are full too

    held.release.set()
    assert (await failing)["status"] == "raised"
    assert [r["status"] for r in await asyncio.gather(*probes)] == [200] * PROBE_SLOTS
    assert (await call(app, "/v1/jobs"))["status"] == 200  # the failed one's slot came back


def test_requests_past_the_bound_are_refused_at_once() -> None:
    asyncio.run(scenario())
