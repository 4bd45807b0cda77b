"""Self-fencing: an agent whose heartbeats go unanswered for nearly the server's lease
stops its jobs before the server gives them away, and reports them `lost` once the
server answers again; with fencing off they run on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agent.daemon import Agent
from agent.protocol import FENCE_MARGIN_HEARTBEATS
from tests.agent.test_daemon import SIMJOB, FakeServer, assign, make_agent

LEASE_S = 1.0  # with the fake server's 0.1 s heartbeats: fenced after 0.8 s of silence


class LeasingServer(FakeServer):
    """The fake server, telling agents its lease as the real one does."""

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


def test_an_agent_cut_off_for_its_lease_stops_its_jobs_and_reports_them_lost(
    tmp_path: Path,
) -> None:
    server = LeasingServer()
    agent = make_agent(tmp_path, server)
    assign(agent, server, 1, [*SIMJOB, "--peak-mib", "1000", "--seconds", "600"], 2000)
    step(agent, lambda: any(r["state"] == "running" for r in server.reports))
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
    assign(agent, server, 2, [*SIMJOB, "--peak-mib", "1000", "--seconds", "600"], 2000)
    step(agent, lambda: any(r["state"] == "running" for r in server.reports))
    server.down = True
    silent_until = time.monotonic() + 2 * LEASE_S
    step(agent, lambda: time.monotonic() > silent_until)
    assert agent.jobs[(2, 1)].outcome is None
    agent.shutdown()  # stops it
