"""Self-fencing: an agent whose heartbeats go unanswered for nearly the server's lease
stops its jobs before the server gives them away, and reports them `lost` once the
server answers again; with fencing off they run on."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent import daemon
from agent.client import SchedulerClient
from agent.daemon import Agent
from agent.protocol import FENCE_MARGIN_HEARTBEATS
from tests.agent.test_daemon import SIMJOB, FakeServer, assign, make_agent

LEASE_S = 1.0  # with the fake server's 0.1 s heartbeats: fenced after 0.8 s of silence


class LeasingServer(FakeServer):
    """The fake server, telling agents its lease as the real one does."""

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise httpx.ConnectError("connection refused")
        return super().register(body)

    def heartbeat(
        self, node_id: int, body: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        return {**super().heartbeat(node_id, body, timeout_s), "lease_s": LEASE_S}


def step(agent: Agent, done: Any, timeout_s: float = 30) -> None:
    """The agent's loop (agent.run), one pass at a time, until `done()`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline
        agent.sample()
        agent.fence()
        agent._heartbeat_once()
        time.sleep(0.05)


def run_long_job(agent: Agent, server: FakeServer, job_id: int) -> None:
    """Assign `agent` a job that runs ten minutes, and step it until the job runs."""
    assign(agent, server, job_id, [*SIMJOB, "--peak-mib", "1000", "--seconds", "600"], 2000)
    step(agent, lambda: any(r["state"] == "running" for r in server.reports))


def test_an_agent_cut_off_for_its_lease_stops_its_jobs_and_reports_them_lost(
    tmp_path: Path,
) -> None:
    server = LeasingServer()
    agent = make_agent(tmp_path, server)
    run_long_job(agent, server, 1)
    job = agent.jobs[(1, 1)]
    assert agent.lease_s == LEASE_S
    server.down = True
    step(agent, lambda: job.outcome is not None)
    assert job.outcome == "lost" and job.reason is not None and "fenced" in job.reason
    server.down = False
    step(agent, lambda: not agent.jobs)  # reported and acknowledged
    final = server.last(1)
    assert final["state"] == "exited" and final["outcome"] == "lost"
    assert "lease" in final["reason"]


def test_a_heartbeat_never_waits_past_the_fencing_point(tmp_path: Path) -> None:
    server = LeasingServer()
    agent = make_agent(tmp_path, server)
    step(agent, lambda: agent.lease_s is not None)
    now = time.monotonic()
    limit = agent._wait_limit_s(now)
    assert limit is not None
    assert limit <= LEASE_S - FENCE_MARGIN_HEARTBEATS * agent.heartbeat_interval_s


def test_with_fencing_off_jobs_run_through_the_outage(tmp_path: Path) -> None:
    server = LeasingServer()
    agent = make_agent(tmp_path, server, self_fencing=False, stop_jobs_on_exit=True)
    run_long_job(agent, server, 2)
    server.down = True
    silent_until = time.monotonic() + 2 * LEASE_S
    step(agent, lambda: time.monotonic() > silent_until)
    assert agent.jobs[(2, 1)].outcome is None
    agent.shutdown()  # stops it


# the server's defaults (service/config.py): fenced 26 s after the last answered heartbeat
DEFAULT_INTERVAL_S, DEFAULT_LEASE_S = 2.0, 30.0


class Clock:
    """Stands in for the daemon's `time`: moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class OutageServer(FakeServer):
    """The server's default interval and lease, unreachable until `clock` reaches `back_at`."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.back_at = 0.0

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**super().register(body), "heartbeat_interval_s": DEFAULT_INTERVAL_S}

    def heartbeat(
        self, node_id: int, body: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        if self.clock.now < self.back_at:
            raise httpx.ConnectError("connection refused")
        reply = super().heartbeat(node_id, body, timeout_s)
        return {**reply, "heartbeat_interval_s": DEFAULT_INTERVAL_S, "lease_s": DEFAULT_LEASE_S}


@pytest.mark.parametrize("outage_s", [22.0, 25.0])
def test_a_server_back_before_the_fence_point_is_heard_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outage_s: float
) -> None:
    """However many tries failed, one lands before the fence point: with the longest
    jitter every time, a doubling back-off alone would next try after 26 s."""
    clock = Clock()
    monkeypatch.setattr(daemon, "time", clock)
    monkeypatch.setattr(random, "uniform", lambda low, high: high)
    server = OutageServer(clock)
    agent = make_agent(tmp_path, server)
    next_try = clock.now + agent._heartbeat_once()
    assert agent.lease_s == DEFAULT_LEASE_S
    server.back_at = clock.now + outage_s
    while clock.now < server.back_at + DEFAULT_LEASE_S:  # the agent's loop (agent.run)
        fence_at = agent._fence_at()
        assert fence_at is not None and clock.now < fence_at, "the agent would fence"
        if clock.now >= next_try:
            next_try = clock.now + agent._heartbeat_once()
        clock.sleep(agent.config.sample_interval_s)
    assert agent._failures == 0


def test_a_503_is_retried_after_its_retry_after_not_a_doubling_back_off(
    tmp_path: Path,
) -> None:
    retry_after_s = 5.0  # more than the first back-off (at most one 2 s interval)

    def shedding(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/nodes/register":
            return httpx.Response(200, json={"node_id": 1, "heartbeat_interval_s": 2.0})
        body = {"error": {"code": "overloaded", "message": "busy"}}
        return httpx.Response(503, json=body, headers={"Retry-After": f"{retry_after_s:g}"})

    scheduler = SchedulerClient("http://server", token=None)
    scheduler.close()
    scheduler._http = httpx.Client(
        base_url="http://server", transport=httpx.MockTransport(shedding)
    )
    agent = make_agent(tmp_path, FakeServer())
    agent.client = scheduler
    # the shedding server's word each time, never more than half again as jitter
    delays = [agent._heartbeat_once() for _ in range(5)]
    assert all(retry_after_s <= d <= 1.5 * retry_after_s for d in delays), delays


def test_an_agent_restarted_while_cut_off_fences_from_the_lease_it_kept(
    tmp_path: Path,
) -> None:
    server = LeasingServer()
    first = make_agent(tmp_path, server)
    run_long_job(first, server, 3)
    kept = json.loads((tmp_path / "state" / "lease.json").read_text())
    assert kept["lease_s"] == LEASE_S
    server.down = True  # the node is cut off; its agent restarts
    first.lock.release()  # as if killed: the kernel drops its lock, nothing is shut down
    second = make_agent(tmp_path, server)
    job = second.jobs[(3, 1)]  # adopted, still running
    answered = len(server.reports)
    step(second, lambda: job.outcome is not None, timeout_s=10)
    assert job.outcome == "lost" and job.reason is not None and "fenced" in job.reason
    assert second.node_id is None and len(server.reports) == answered  # never reached
