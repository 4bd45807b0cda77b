"""Serving at most a fixed number of requests at once, and refusing the rest at once.

Sync dependencies and handlers run on the anyio thread pool, one call at a time, and a
request keeps its database session (a pooled connection; on SQLite maybe the write lock)
between those calls. With more requests in progress than threads, requests holding
connections wait for threads while the threads wait for connections (or for the SQLite
lock) those requests hold: the server deadlocks. So no more requests run than there are
threads, and the pool has a connection for each one any thread may ask for: no request
ever waits for a thread, and no thread for a connection. Past that, a request gets 503
with Retry-After without waiting, instead of queueing until its client gives up.

A request takes its slot only once its whole body is in (within `request_body_timeout_s`,
else 408): a client that sends headers and trickles its body, token or not, holds no
slot. Agents' register and heartbeat have slots of their own, so no flood of users'
requests (not even fast 401s) keeps heartbeats out and makes agents fence their jobs;
and only a request bearing an agent's (or an admin's) token takes one, so neither does a
flood of tokenless or forged heartbeats: those queue for the users' slots, where the
handler's authentication refuses them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import anyio
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth.tokens import hash_of
from service.errors import error_body

# Probes have slots of their own, so a load balancer or Prometheus still reaches a
# server that is shedding load (one liveness prober and one scraper at a time).
PROBE_PATHS = frozenset({"/healthz", "/metrics"})
PROBE_SLOTS = 2
# A request may hold two connections at once: its session, and authentication's own
# short read (service/auth/deps.py), when a dependency listed before the caller's
# principal has already used the session.
CONNECTIONS_PER_REQUEST = 2
# One each, a session at a time, on their own threads: the scheduler loop (service/
# scheduling/loop.py), the estimator refit it starts beside itself (one session for the
# whole refit, and never two refits at once), the usage sampler (service/usage/
# sampler.py), the retention pruner (service/retention.py: its read and its delete
# transactions one after the other) and AgentTokens' re-read (one at a time).
BACKGROUND_CONNECTIONS = 5
# How often, at most, AgentTokens reads the tokens table again: a new agent token takes
# an agents' slot, and a revoked one stops taking them, within about a second, and a
# flood of forged tokens costs one small read a second.
AGENT_TOKENS_REFRESH_S = 1.0
log = logging.getLogger(__name__)
# Seconds a refused client waits: the least whole number HTTP's Retry-After allows, as a
# slot frees whenever any running request ends (the same as the database-down 503's).
RETRY_AFTER_S = 1


class Pool(Enum):
    """Whose slots a request takes."""

    USERS = "users"
    AGENTS = "agents"
    PROBES = "probes"


def pool_of(method: str, path: str) -> Pool:
    """Agents' two calls (agent/client.py) are POST /v1/nodes/register and POST
    /v1/nodes/{id}/heartbeat; an admin's cordon, drain or resume under /v1/nodes is a
    user's request."""
    if path in PROBE_PATHS:
        return Pool.PROBES
    if method == "POST" and path.startswith("/v1/nodes/"):
        rest = path.removeprefix("/v1/nodes/")
        if rest == "register" or (rest.endswith("/heartbeat") and rest.count("/") == 1):
            return Pool.AGENTS
    return Pool.USERS


class AgentTokens:
    """Which bearer tokens may take the agents' slots: the SHA-256 hashes of unrevoked
    agent and admin tokens (as service/auth/tokens.py stores them), read again by `read`
    when the last read is `refresh_s` old, by the first request to find it so: a new
    agent token takes an agents' slot, and a revoked one stops taking them, within about
    that. A request that comes while a read is under way is answered from the last one,
    without waiting, so a slow database piles up no requests here. This only chooses a
    pool; the handler still authenticates every request."""

    def __init__(
        self,
        read: Callable[[], frozenset[str]] | None,
        refresh_s: float = AGENT_TOKENS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read  # None: authentication is off, every caller is an admin
        self._refresh_s = refresh_s
        self._clock = clock
        self._hashes: frozenset[str] = frozenset()
        self._read_at = -math.inf
        self._reading = False  # one event loop: a flag is enough
        self._limiter = anyio.CapacityLimiter(1)  # its own thread: never a request's

    async def admits(self, scope: Scope) -> bool:
        if self._read is None:
            return True
        scheme, _, raw = Headers(scope=scope).get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            return False
        if not self._reading and self._clock() - self._read_at >= self._refresh_s:
            self._reading, self._read_at = True, self._clock()
            try:
                await self._reread(self._read)
            finally:
                self._reading = False
        return hash_of(raw.strip()) in self._hashes

    async def _reread(self, read: Callable[[], frozenset[str]]) -> None:
        try:
            self._hashes = await anyio.to_thread.run_sync(read, limiter=self._limiter)
        except Exception:  # a database down: known tokens stay; the handler answers 503
            log.warning("could not read the agents' tokens", exc_info=True)


@dataclass(frozen=True)
class Capacity:
    """How many users' requests run at once (`Settings.max_requests_in_flight`), and the
    worker threads and pooled connections that lets them, agents' and probes' run
    without waiting.

    Agents get as many slots as users: max_requests_in_flight is the measured best
    number of heartbeats at once (service/config.py: more only queue on the placement
    lock), and with their own pool the agents keep that many whatever users send."""

    requests: int

    @property
    def slots(self) -> dict[Pool, int]:
        return {Pool.USERS: self.requests, Pool.AGENTS: self.requests, Pool.PROBES: PROBE_SLOTS}

    @property
    def threads(self) -> int:
        return sum(self.slots.values())

    @property
    def connections(self) -> int:
        return CONNECTIONS_PER_REQUEST * self.threads + BACKGROUND_CONNECTIONS


class LoadShedding:
    """ASGI middleware: reads a request's whole body (within `body_timeout_s`, else 408),
    then lets it into the app if its pool has a free slot; any more are answered 503
    with Retry-After straight away. Sits inside BodyLimit, so the body read is capped."""

    def __init__(
        self,
        app: ASGIApp,
        capacity: Capacity,
        body_timeout_s: float,
        agent_tokens: AgentTokens,
    ) -> None:
        self._app = app
        self._limits = capacity.slots
        self._in_flight = dict.fromkeys(Pool, 0)
        self._body_timeout_s = body_timeout_s
        self._agent_tokens = agent_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        body = await self._read_body(receive, send)
        if body is None:  # answered already, or the client left
            return
        pool = pool_of(scope["method"], scope["path"])
        if pool is Pool.AGENTS and not await self._agent_tokens.admits(scope):
            pool = Pool.USERS
        # one event loop and no await between the check and the count: no lock needed
        if self._in_flight[pool] >= self._limits[pool]:
            message = f"the server is at capacity ({self._limits[pool]} requests at once)"
            await _answer(send, 503, "overloaded", f"{message}; retry shortly", RETRY_AFTER_S)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:  # the body is all given: what follows is the disconnect
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        self._in_flight[pool] += 1
        try:
            await self._app(scope, replay, send)
        finally:
            self._in_flight[pool] -= 1

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or None once the client is answered (408, or BodyLimit's
        413 for a chunked body past the cap) or has disconnected."""
        chunks: list[bytes] = []
        try:
            with anyio.fail_after(self._body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            late = f"request body not received within {self._body_timeout_s:g} s"
            await _answer(send, 408, "http_408", late)
        except HTTPException as exc:  # raised in receive, outside the app's error handlers
            await _answer(send, exc.status_code, f"http_{exc.status_code}", str(exc.detail))
        return None


async def _answer(
    send: Send, status: int, code: str, message: str, retry_after_s: int | None = None
) -> None:
    """An error in the API's shape; a 4xx closes the connection, whose body was not all
    read, and a 503 says when to retry."""
    body = json.dumps(error_body(code, message)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if retry_after_s is None:
        headers.append((b"connection", b"close"))
    else:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
