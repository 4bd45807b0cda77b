"""What the process itself measures: request and scheduling-cycle latency.

Each app has its own registry (tests run several apps in one process); everything
read from the database is added at scrape time by `collector.ClusterCollector`.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Instruments:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "colloc_http_request_duration_seconds",
            "API request latency, by method, route template and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            "colloc_scheduling_cycle_duration_seconds",
            "Time one scheduling cycle took (snapshot, placement, commit).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )


class RequestTimer:
    """ASGI middleware observing every HTTP request's latency; the route label is the
    matched path template (`/v1/jobs/{job_id}`), or "unmatched", so it stays bounded."""

    def __init__(self, app: ASGIApp, instruments: Instruments) -> None:
        self._app = app
        self._histogram = instruments.request_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, send_status)
        finally:
            self._histogram.labels(scope["method"], _route_template(scope), str(status)).observe(
                time.perf_counter() - started
            )


def _route_template(scope: Scope) -> str:
    """The request path with each path parameter's value put back as `{name}`."""
    if scope.get("route") is None:
        return "unmatched"
    names = {str(value): name for name, value in scope.get("path_params", {}).items()}
    segments = scope["path"].split("/")
    return "/".join(f"{{{names[s]}}}" if s in names else s for s in segments)
