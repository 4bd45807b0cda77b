"""Launch timeout: a placed attempt its node does not start within `launch_timeout_s` is
taken back, with an event, and its job requeued; the node, which heartbeats all along
but never starts it, is no longer sent it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.config import Settings
from service.db import lock_placements, transaction, utcnow
from service.jobs.lifecycle import take_back_unstarted
from service.jobs.models import Attempt
from tests.conftest import register_node, submit
from tests.service.test_concurrency import postgres_only
from tests.service.test_lifecycle import beat, cycle, running

A100 = "NVIDIA A100-SXM4-40GB"


def placed_ago(client: TestClient, job_id: int, seconds: float) -> None:
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        at = utcnow() - timedelta(seconds=seconds)
        session.execute(update(Attempt).where(Attempt.job_id == job_id).values(placed_at=at))


def take_back(client: TestClient, settings: Settings) -> list[int]:
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        return take_back_unstarted(session=session, settings=settings, now=utcnow())


def test_an_attempt_never_started_is_taken_back_and_requeued(
    client: TestClient, settings: Settings
) -> None:
    n1 = register_node(client, "n1", [(A100, 40960)])
    job = submit(client, memory_mib=30000)["id"]
    cycle(client)
    # the agent heartbeats and is sent the assignment each time, but never starts it
    for _ in range(3):
        assert [a["job_id"] for a in beat(client, n1)["assignments"]] == [job]
    placed_ago(client, job, settings.launch_timeout_s - 5)
    assert take_back(client, settings) == []  # not yet
    placed_ago(client, job, settings.launch_timeout_s + 1)
    assert take_back(client, settings) == [job]
    assert take_back(client, settings) == []  # once

    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "pending"
    (attempt,) = shown["attempts"]
    assert attempt["state"] == "lost" and "launch_timeout_s" in attempt["reason"]
    assert client.get("/v1/admin/cluster").json()["nodes"][0]["gpus"][0]["memory_reserved_mib"] == 0
    assert beat(client, n1)["assignments"] == []  # no longer sent
    # should the agent start it after all, it is told to stop it
    assert beat(client, n1, [running(job)])["cancellations"] == [{"job_id": job, "attempt": 1}]
    events = client.get("/v1/admin/events", params={"kind": "job.launch_timeout"}).json()
    assert events["total"] == 1 and events["events"][0]["job_id"] == job


def test_a_started_attempt_is_never_taken_back(client: TestClient, settings: Settings) -> None:
    n1 = register_node(client, "n1", [(A100, 40960)])
    job = submit(client, memory_mib=30000)["id"]
    cycle(client)
    beat(client, n1, [running(job)])
    placed_ago(client, job, settings.launch_timeout_s + 1)
    assert take_back(client, settings) == []
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "running"


def test_a_launch_timeout_shorter_than_three_heartbeats_is_refused() -> None:
    with pytest.raises(ValueError, match="3 heartbeat intervals"):
        Settings(heartbeat_interval_s=5, launch_timeout_s=10)


def test_an_attempt_started_while_the_take_back_waits_for_the_lock_is_kept(
    client: TestClient, settings: Settings, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node starts the attempt between the take-back's read and its placement lock:
    the take-back must see it running and leave it (on PostgreSQL, where the two can
    interleave; SQLite serialises writers)."""
    postgres_only(database_url)
    n1 = register_node(client, "n1", [(A100, 40960)])
    job = submit(client, memory_mib=30000)["id"]
    cycle(client)
    placed_ago(client, job, settings.launch_timeout_s + 1)

    def start_then_lock(session: Any) -> None:
        beat(client, n1, [running(job)])  # the node's heartbeat, committed meanwhile
        lock_placements(session)

    monkeypatch.setattr("service.jobs.lifecycle.lock_placements", start_then_lock)
    assert take_back(client, settings) == []
    assert client.get(f"/v1/jobs/{job}").json()["attempts"][0]["state"] == "running"
