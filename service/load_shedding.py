"""Serving at most a fixed number of requests at once, and refusing the rest at once.

Sync dependencies and handlers run on the anyio thread pool, one call at a time, and a
request keeps its database session (a pooled connection; on SQLite maybe the write lock)
between those calls. With more requests in progress than threads, requests holding
connections wait for threads while the threads wait for connections (or for the SQLite
lock) those requests hold: the server deadlocks. So no more requests run than there are
threads, and the pool has a connection for each one any thread may ask for: no request
ever waits for a thread, and no thread for a connection. Past that, a request gets 503
with Retry-After without waiting, instead of queueing until its client gives up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_body

# Probes have slots of their own, so a load balancer or Prometheus still reaches a
# server that is shedding load (one liveness prober and one scraper at a time).
PROBE_PATHS = frozenset({"/healthz", "/metrics"})
PROBE_SLOTS = 2
# A request may hold two connections at once: its session, and authentication's own
# short read (service/auth/deps.py), when a dependency listed before the caller's
# principal has already used the session.
CONNECTIONS_PER_REQUEST = 2
# The scheduler loop, the estimator refit thread and the usage sampler each hold one.
BACKGROUND_CONNECTIONS = 3
# Seconds a refused client waits: the least whole number HTTP's Retry-After allows, as a
# slot frees whenever any running request ends (the same as the database-down 503's).
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class Capacity:
    """How many requests run at once (`Settings.max_requests_in_flight`), and the
    worker threads and pooled connections that lets them run without waiting."""

    requests: int

    @property
    def threads(self) -> int:
        return self.requests + PROBE_SLOTS

    @property
    def connections(self) -> int:
        return CONNECTIONS_PER_REQUEST * self.threads + BACKGROUND_CONNECTIONS


class LoadShedding:
    """ASGI middleware: at most `capacity.requests` requests (and PROBE_SLOTS probes) in
    the app at once; any more are answered 503 with Retry-After straight away."""

    def __init__(self, app: ASGIApp, capacity: Capacity) -> None:
        self._app = app
        self._limits = {False: capacity.requests, True: PROBE_SLOTS}
        self._in_flight = {False: 0, True: 0}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        probe = scope["path"] in PROBE_PATHS
        # one event loop and no await between the check and the count: no lock needed
        if self._in_flight[probe] >= self._limits[probe]:
            await self._refuse(send, self._limits[probe])
            return
        self._in_flight[probe] += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._in_flight[probe] -= 1

    async def _refuse(self, send: Send, limit: int) -> None:
        message = f"the server is at capacity ({limit} requests at once); retry shortly"
        body = json.dumps(error_body("overloaded", message)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(RETRY_AFTER_S).encode()),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
