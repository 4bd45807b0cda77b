"""The in-flight bound: requests past it are refused at once, probes and agents have
slots of their own, a slot is free again once its request ends, even by an error, and a
request whose body has not all come takes no slot (and gets 408 past the deadline), and
only agents' and admins' tokens take the agents' slots."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from fastapi.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from service.app import create_app
from service.auth.tokens import agent_slot_hashes, hash_of
from service.config import Settings
from service.load_shedding import PROBE_SLOTS, AgentTokens, Capacity, LoadShedding
from tests.conftest import bearer

ANSWER_WITHIN_S = 30


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


async def call(
    app: LoadShedding, path: str, method: str = "GET", token: str | None = None
) -> dict[str, Any]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        given = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
        await app({"type": "http", "method": method, "path": path, "headers": given}, receive, send)
    except RuntimeError:
        return {"status": "raised"}
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return {"status": sent[0]["status"], "headers": headers, "body": sent[1]["body"]}


async def scenario() -> None:
    held = HeldApp()
    app = LoadShedding(
        held, Capacity(requests=1), body_timeout_s=10, agent_tokens=AgentTokens(None)
    )
    failing = asyncio.create_task(call(app, "/boom"))
    probes = [asyncio.create_task(call(app, "/healthz")) for _ in range(PROBE_SLOTS)]
    await asyncio.sleep(0)  # every task is now in flight, waiting for its release

    refused = await call(app, "/v1/jobs")
    assert refused["status"] == 503
    assert refused["headers"]["retry-after"] == "1"
    assert json.loads(refused["body"])["error"]["code"] == "overloaded"
    assert (await call(app, "/metrics"))["status"] == 503  # the probes' slots are full too
    heartbeat = asyncio.create_task(call(app, "/v1/nodes/7/heartbeat", "POST"))
    await asyncio.sleep(0)
    assert (await call(app, "/v1/nodes/register", "POST"))["status"] == 503  # agents' full
    assert (await call(app, "/v1/nodes/n1/cordon", "POST"))["status"] == 503  # a user's

    held.release.set()
    assert (await failing)["status"] == "raised"
    assert [r["status"] for r in await asyncio.gather(*probes)] == [200] * PROBE_SLOTS
    assert (await heartbeat)["status"] == 200  # served beside the users' full slots
    assert (await call(app, "/v1/jobs"))["status"] == 200  # the failed one's slot came back


def test_requests_past_the_bound_are_refused_at_once() -> None:
    asyncio.run(scenario())


def http_scope(method: str, path: str, headers: dict[str, str]) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def exchange(app: Any, method: str, path: str, headers: dict[str, str]) -> Message:
    """A request with an empty body; its response's start."""
    sent: list[Message] = []
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            await asyncio.Event().wait()  # no disconnect before the answer
        given = True
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(http_scope(method, path, headers), receive, send)
    return sent[0]


async def trickle(
    app: Any, token: str, sent: list[Message], waiting: asyncio.Event | None = None
) -> None:
    """POST /v1/jobs whose body starts and never finishes; `waiting` is set once the
    server waits for the rest."""
    started = False

    async def receive() -> Message:
        nonlocal started
        if started:
            if waiting is not None:
                waiting.set()
            await asyncio.Event().wait()
        started = True
        return {"type": "http.request", "body": b'{"name": ', "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    await app(http_scope("POST", "/v1/jobs", headers), receive, send)


async def unfinished_bodies_hold_no_slot(settings: Settings, token: str) -> None:
    app = create_app(settings.model_copy(update={"request_body_timeout_s": 600}))
    sent: list[Message] = []
    waiting = [asyncio.Event() for _ in range(settings.max_requests_in_flight)]
    trickling = [asyncio.create_task(trickle(app, token, sent, event)) for event in waiting]
    try:
        await asyncio.gather(*(event.wait() for event in waiting))
        heartbeat = await exchange(app, "POST", "/v1/nodes/1/heartbeat", {})
        assert heartbeat["status"] == 401  # served: authentication answered, not 503
        listed = await exchange(app, "GET", "/v1/jobs", bearer(token))
        assert listed["status"] == 200
        assert sent == [] and not any(task.done() for task in trickling)
    finally:
        for task in trickling:
            task.cancel()
        await asyncio.gather(*trickling, return_exceptions=True)


def test_requests_still_sending_their_body_hold_no_slot(
    settings: Settings, admin_token: str
) -> None:
    asyncio.run(unfinished_bodies_hold_no_slot(settings, admin_token))


async def timed_out(settings: Settings, token: str) -> list[Message]:
    app = create_app(settings.model_copy(update={"request_body_timeout_s": 0.01}))
    sent: list[Message] = []
    # a bound on being answered at all (without the deadline it never is), not a latency
    await asyncio.wait_for(trickle(app, token, sent), ANSWER_WITHIN_S)
    return sent


def test_a_body_not_in_by_the_deadline_gets_408(settings: Settings, admin_token: str) -> None:
    start, body = asyncio.run(timed_out(settings, admin_token))
    assert start["status"] == 408
    assert (b"connection", b"close") in start["headers"]
    assert json.loads(body["body"])["error"]["code"] == "http_408"


async def forged_heartbeats() -> None:
    """A users' slot is taken; the agents' pool is free."""
    now = [0.0]
    reads: list[float] = []
    valid = {hash_of("colloc_agent-token")}

    def read() -> frozenset[str]:
        reads.append(now[0])
        return frozenset(valid)

    held = HeldApp()
    tokens = AgentTokens(read, refresh_s=1.0, clock=lambda: now[0])
    app = LoadShedding(held, Capacity(requests=1), body_timeout_s=10, agent_tokens=tokens)
    user = asyncio.create_task(call(app, "/v1/jobs"))
    await asyncio.sleep(0)
    path = "/v1/nodes/7/heartbeat"
    assert (await call(app, path, "POST"))["status"] == 503  # tokenless: a user's slot
    for forged in range(50):
        assert (await call(app, path, "POST", f"colloc_forged{forged}"))["status"] == 503
    assert reads == [0.0]  # the flood cost one read of the tokens
    agent = asyncio.create_task(call(app, path, "POST", "colloc_agent-token"))
    await asyncio.sleep(0)
    assert not agent.done()  # admitted to the agents' pool, beside the full users' one
    valid.clear()  # the agent's token is revoked: a second later it takes no agents' slot
    now[0] = 5.0
    assert (await call(app, path, "POST", "colloc_agent-token"))["status"] == 503
    assert reads == [0.0, 5.0]
    held.release.set()
    assert (await agent)["status"] == 200
    assert (await user)["status"] == 200


async def slow_read() -> None:
    """While the tokens are being read, requests are answered from the last read."""
    release = threading.Event()
    tokens = AgentTokens(
        lambda: frozenset({hash_of("colloc_a")}) if release.wait(ANSWER_WITHIN_S) else frozenset()
    )
    scope = {"headers": [(b"authorization", b"Bearer colloc_a")]}
    reading = asyncio.create_task(tokens.admits(scope))
    await asyncio.sleep(0.01)
    assert not reading.done()
    assert not await tokens.admits(scope)  # not held up behind the read
    release.set()
    assert await reading and await tokens.admits(scope)


def test_only_agents_tokens_take_the_agents_slots() -> None:
    asyncio.run(forged_heartbeats())


def test_a_slow_token_read_holds_no_request_up() -> None:
    asyncio.run(slow_read())


def test_agents_and_admins_tokens_take_the_agents_slots(
    settings: Settings, admin_token: str
) -> None:
    app = create_app(settings)
    with TestClient(app) as client:
        agent = client.post(
            "/v1/admin/tokens", json={"role": "agent", "name": "n1"}, headers=bearer(admin_token)
        )
        assert agent.status_code == 201, agent.text
        user = client.post(
            "/v1/admin/tokens", json={"role": "user", "name": "ann"}, headers=bearer(admin_token)
        )
        with app.state.sessions() as session:
            hashes = agent_slot_hashes(session)
    assert hash_of(agent.json()["token"]) in hashes
    assert hash_of(admin_token) in hashes
    assert hash_of(user.json()["token"]) not in hashes
