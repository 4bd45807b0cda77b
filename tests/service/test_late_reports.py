"""At most once across a partition, on the server's side: a job lost with its silent node
waits until the node's agent has surely stopped it (self-fencing) before it is placed
again, and an attempt that succeeded while its node was unreachable is taken late: the
job ends succeeded and is not run again, and a newer attempt of it is withdrawn."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from service.config import Settings
from service.db import transaction, utcnow
from service.jobs.models import Job
from tests.conftest import register_node, submit
from tests.service.test_leases import expire, silence
from tests.service.test_lifecycle import beat, cycle, exited, running

A100 = "NVIDIA A100-SXM4-40GB"


def wait_out_fencing(client: TestClient, job_id: int) -> None:
    """As if the fencing margin had passed: the job may be placed again."""
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        past = utcnow() - timedelta(seconds=1)
        session.execute(update(Job).where(Job.id == job_id).values(not_before=past))


def lose(client: TestClient, settings: Settings, node: str) -> None:
    silence(client, node, settings.node_lease_s + 1)
    assert expire(client, settings) == [node]


def lost_while_running(client: TestClient, settings: Settings) -> tuple[int, int]:
    """A job running on node n1 when n1's lease ends: (n1's id, the job's id)."""
    n1 = register_node(client, "n1", [(A100, 40960)])
    job = submit(client, memory_mib=30000)["id"]
    cycle(client)
    beat(client, n1, [running(job)])
    lose(client, settings, "n1")
    return n1, job


def placed_again_on_n2(client: TestClient, settings: Settings) -> tuple[int, int, int]:
    """That job placed again, on a new node n2, once the fencing margin has passed:
    (n1's id, n2's id, the job's id)."""
    n1, job = lost_while_running(client, settings)
    n2 = register_node(client, "n2", [(A100, 40960)])
    wait_out_fencing(client, job)
    cycle(client)
    return n1, n2, job


def second_node_beat(
    client: TestClient, node_id: int, attempts: list[dict[str, Any]]
) -> dict[str, Any]:
    body = {"gpus": [{"uuid": "GPU-n2-0", "memory_used_mib": 0}], "attempts": attempts}
    response = client.post(f"/v1/nodes/{node_id}/heartbeat", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_heartbeat_replies_tell_the_agent_its_lease(client: TestClient, settings: Settings) -> None:
    n1 = register_node(client, "n1", [(A100, 40960)])
    assert beat(client, n1)["lease_s"] == settings.node_lease_s


def test_a_job_lost_with_its_node_waits_out_the_fencing_margin(
    client: TestClient, settings: Settings
) -> None:
    _n1, job = lost_while_running(client, settings)
    register_node(client, "n2", [(A100, 40960)])
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "pending"
    assert shown["not_before"] is not None
    cycle(client)  # n2 is free, but n1's agent may still be stopping attempt 1
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "pending"
    wait_out_fencing(client, job)
    cycle(client)
    again = client.get(f"/v1/jobs/{job}").json()
    assert again["state"] == "placed" and again["attempts"][1]["node"] == "n2"


def test_a_success_reported_late_ends_the_job_and_it_is_not_run_again(
    client: TestClient, settings: Settings
) -> None:
    n1, job = lost_while_running(client, settings)
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "pending"

    reply = beat(client, n1, [exited(job, code=0)])  # it had finished during the partition
    assert reply["acknowledged"] == [{"job_id": job, "attempt": 1}]
    done = client.get(f"/v1/jobs/{job}").json()
    assert done["state"] == "succeeded" and done["exit_code"] == 0
    assert [a["state"] for a in done["attempts"]] == ["succeeded"]
    wait_out_fencing(client, job)
    cycle(client)
    assert len(client.get(f"/v1/jobs/{job}").json()["attempts"]) == 1  # never run again
    assert beat(client, n1, [exited(job, code=0)])["assignments"] == []  # a re-send: once
    kinds = [
        e["kind"] for e in client.get("/v1/admin/events", params={"job_id": job}).json()["events"]
    ]
    assert kinds.count("job.late_success") == 1


def test_a_late_success_withdraws_the_newer_attempt(client: TestClient, settings: Settings) -> None:
    n1, n2, job = placed_again_on_n2(client, settings)
    assert client.get(f"/v1/jobs/{job}").json()["attempts"][1]["node"] == "n2"
    second_node_beat(client, n2, [running(job, attempt=2)])  # the newer attempt runs

    beat(client, n1, [exited(job, code=0)])
    done = client.get(f"/v1/jobs/{job}").json()
    assert done["state"] == "succeeded"
    assert [a["state"] for a in done["attempts"]] == ["succeeded", "cancelled"]
    assert "withdrawn" in done["attempts"][1]["reason"]
    # n2's agent is told to stop attempt 2, and its GPU is free again
    reply = second_node_beat(client, n2, [running(job, attempt=2)])
    assert reply["cancellations"] == [{"job_id": job, "attempt": 2}]
    gpus = [g for n in client.get("/v1/admin/cluster").json()["nodes"] for g in n["gpus"]]
    assert all(g["memory_reserved_mib"] == 0 for g in gpus)


def test_a_late_failure_changes_nothing(client: TestClient, settings: Settings) -> None:
    n1, job = lost_while_running(client, settings)
    reply = beat(client, n1, [exited(job, code=0, outcome="lost")])  # fenced by its agent
    assert reply["acknowledged"] == [{"job_id": job, "attempt": 1}]
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "pending" and [a["state"] for a in shown["attempts"]] == ["lost"]
