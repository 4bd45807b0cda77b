"""Node leases: a silent agent's node is lost, its attempts end `lost` and are retried
elsewhere, and the node comes back cleanly when its agent reports again."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update

from service.config import Settings
from service.db import transaction, utcnow
from service.jobs.models import Job
from service.nodes.models import Node
from service.nodes.service import expire_leases
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import beat, cycle, running

A100 = "NVIDIA A100-SXM4-40GB"


def expire(client: TestClient, settings: Settings, up_for_s: float = 3600) -> list[str]:
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        up_since = utcnow() - timedelta(seconds=up_for_s)
        return [
            n.name for n in expire_leases(session=session, settings=settings, up_since=up_since)
        ]


def silence(client: TestClient, name: str, seconds: float) -> None:
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        at = utcnow() - timedelta(seconds=seconds)
        session.execute(update(Node).where(Node.name == name).values(last_heartbeat_at=at))


def test_a_silent_node_is_lost_its_job_retried_elsewhere_and_it_recovers(
    client: TestClient, settings: Settings
) -> None:
    n1 = register_node(client, "n1", [(A100, 40960)])
    job = submit(client, memory_mib=30000)["id"]
    cycle(client)
    beat(client, n1, [running(job)])
    silence(client, "n1", settings.node_lease_s - 10)
    assert expire(client, settings) == []  # still within its lease (10 s for a slow machine)
    silence(client, "n1", settings.node_lease_s + 1)
    assert expire(client, settings, up_for_s=settings.node_lease_s - 1) == []  # server new
    assert expire(client, settings) == ["n1"]
    assert expire(client, settings) == []  # once

    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "pending" and shown["attempts"][0]["state"] == "lost"
    assert "silent" in shown["attempts"][0]["reason"]
    cluster = client.get("/v1/admin/cluster").json()["nodes"]
    assert cluster[0]["state"] == "lost" and cluster[0]["gpus"][0]["memory_reserved_mib"] == 0
    cycle(client)  # nothing is placed on a lost node
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "pending"

    register_node(client, "n2", [(A100, 40960)])
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        # past the wait for n1's agent to have stopped it (tests/service/test_late_reports.py)
        session.execute(update(Job).where(Job.id == job).values(not_before=utcnow()))
    cycle(client)
    again = client.get(f"/v1/jobs/{job}").json()
    assert again["state"] == "placed" and again["attempts"][1]["node"] == "n2"

    # n1's agent comes back still running attempt 1: it is told to stop it, and the
    # node takes work again
    reply = beat(client, n1, [running(job)], used=30000)
    assert reply["cancellations"] == [{"job_id": job, "attempt": 1}]
    assert client.get("/v1/admin/cluster").json()["nodes"][0]["state"] == "ready"
    kinds = [
        e["kind"] for e in client.get("/v1/admin/events", params={"node_id": n1}).json()["events"]
    ]
    assert kinds[-3:] == ["node.lost", "job.lost", "node.recovered"]
    assert client.get(f"/v1/jobs/{job}").json()["attempts"][1]["state"] == "placed"


def test_a_lease_shorter_than_three_heartbeats_is_refused() -> None:
    try:
        Settings(heartbeat_interval_s=5, node_lease_s=10)
    except ValueError as exc:
        assert "3 heartbeat intervals" in str(exc)
    else:
        raise AssertionError("a 10 s lease with 5 s heartbeats was accepted")
