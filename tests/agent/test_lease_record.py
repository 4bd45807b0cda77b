"""lease.json is written (and fsynced) when what it keeps matters to a restarted agent's
fencing, not on every heartbeat: an unchanged lease is written again only once the kept
answer lags by a quarter of the time before fencing; a new lease or interval, a wall
clock set back and a clean shutdown are written at once. A restarted agent never fences
later than the agent it replaces would have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent import daemon, shim
from agent.daemon import Agent
from tests.agent.test_daemon import make_agent
from tests.agent.test_fencing import DEFAULT_INTERVAL_S, DEFAULT_LEASE_S, Clock, OutageServer

HEARTBEATS = 40


class Writes:
    """Counts the writes of lease.json, passing them on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        write = shim.write_json

        def counted(path: Path, data: dict[str, Any]) -> None:
            if path.name == "lease.json":
                self.count += 1
            write(path, data)

        monkeypatch.setattr(daemon, "write_json", counted)


def _beat(agent: Agent, clock: Clock) -> None:
    """One answered heartbeat, then the interval the loop waits."""
    assert agent._heartbeat_once() == agent.heartbeat_interval_s
    clock.sleep(agent.heartbeat_interval_s)


def _kept(tmp_path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((tmp_path / "state" / "lease.json").read_text())
    return record


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(daemon, "time", clock)
    return clock


def test_an_unchanged_lease_is_written_now_and_then_and_never_lags_past_its_bound(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = Writes(monkeypatch)
    agent = make_agent(tmp_path, OutageServer(clock))
    # the lag allowed: a quarter of the 26 s a lease leaves before fencing (6.5 s)
    bound_s = (DEFAULT_LEASE_S - 2 * DEFAULT_INTERVAL_S) / 4
    for _ in range(HEARTBEATS):
        _beat(agent, clock)
        lag_s = agent._answered_at - _kept(tmp_path)["answered_at"]
        assert 0 <= lag_s < bound_s
    # once on the first answer, then every 4th heartbeat (8 s of lag at 2 s intervals)
    assert writes.count == 1 + (HEARTBEATS - 1) // 4
    # a restarted agent fences from the kept answer: never later than this one would
    agent.lock.release()  # as if killed
    restarted = make_agent(tmp_path, OutageServer(clock))
    first_fence, restarted_fence = agent._fence_at(), restarted._fence_at()
    assert first_fence is not None and restarted_fence is not None
    assert first_fence - bound_s < restarted_fence <= first_fence


def test_a_new_lease_a_clock_set_back_and_a_shutdown_are_written_at_once(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = OutageServer(clock)
    agent = make_agent(tmp_path, server)
    _beat(agent, clock)
    writes = Writes(monkeypatch)
    _beat(agent, clock)
    assert writes.count == 0
    shorter = server.heartbeat

    def short_lease(node_id: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        return {**shorter(node_id, body, timeout_s), "lease_s": DEFAULT_LEASE_S / 2}

    monkeypatch.setattr(server, "heartbeat", short_lease)
    _beat(agent, clock)  # a shorter lease kept late would fence too late
    assert writes.count == 1 and _kept(tmp_path)["lease_s"] == DEFAULT_LEASE_S / 2
    clock.now -= 60  # the wall clock set back: a kept answer in its future fences late
    _beat(agent, clock)
    assert writes.count == 2 and _kept(tmp_path)["answered_at"] == agent._answered_at
    _beat(agent, clock)
    assert writes.count == 2
    agent.shutdown()  # a clean stop keeps the last answer exactly
    assert writes.count == 3
    assert _kept(tmp_path)["answered_at"] == clock.now - DEFAULT_INTERVAL_S
