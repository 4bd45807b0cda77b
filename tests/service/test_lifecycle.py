"""A job's life through the scheduler and one agent's heartbeats (no processes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from service.db import transaction, utcnow
from service.jobs.models import Attempt
from service.scheduling.loop import run_cycle
from tests.conftest import register_node, submit

GPU0 = "GPU-n1-0"


def cycle(client: TestClient) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:
        run_cycle(session, state.scheduler, state.estimator_state.sync(session))


def beat(
    client: TestClient,
    node_id: int,
    attempts: list[dict[str, Any]] | None = None,
    used: int = 0,
    status: int = 200,
) -> dict[str, Any]:
    body = {"gpus": [{"uuid": GPU0, "memory_used_mib": used}], "attempts": attempts or []}
    response = client.post(f"/v1/nodes/{node_id}/heartbeat", json=body)
    assert response.status_code == status, response.text
    result: dict[str, Any] = response.json()
    return result


def running(job_id: int, attempt: int = 1, peak: int | None = None) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": attempt,
        "state": "running",
        "peak_mib_by_gpu": {GPU0: peak} if peak else {},
    }


def exited(
    job_id: int,
    attempt: int = 1,
    code: int = 0,
    outcome: str | None = None,
    peak: int = 1000,
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": attempt,
        "state": "exited",
        "exit_code": code,
        "outcome": outcome,
        "peak_mib_by_gpu": {GPU0: peak},
    }


def started_ago(client: TestClient, job_id: int, seconds: float) -> str:
    """When the job's attempt started, `seconds` ago, as its agent reports it; its
    placement is moved as far back, since the server takes no start before it."""
    then = utcnow() - timedelta(seconds=seconds)
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        session.execute(update(Attempt).where(Attempt.job_id == job_id).values(placed_at=then))
    return then.isoformat()


def exited_after(client: TestClient, job_id: int, ran_s: float, **exit: Any) -> dict[str, Any]:
    """The exit of the job's attempt, not reported running before, `ran_s` after it
    started."""
    return {**exited(job_id, **exit), "started_at": started_ago(client, job_id, ran_s)}


def job_of(client: TestClient, job_id: int) -> dict[str, Any]:
    result: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return result


def test_placed_run_and_succeed(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=5000, command=["python", "train.py"], env={"X": "1"})
    cycle(client)
    assert job_of(client, job["id"])["state"] == "placed"
    (assignment,) = beat(client, node)["assignments"]
    assert assignment == {
        "job_id": job["id"],
        "attempt": 1,
        "command": ["python", "train.py"],
        "env": {"X": "1"},
        "workdir": None,
        "gpu_uuids": [GPU0],
        "account": "admin",  # the owner's name: no mapping was set
        "reserved_mib": 5000,
        "reserved_mib_by_gpu": {GPU0: 5000},
    }
    reply = beat(client, node, [running(job["id"], peak=3000)], used=3000)
    assert reply["assignments"] == []
    shown = job_of(client, job["id"])
    assert shown["state"] == "running" and shown["attempts"][0]["peak_mib"] == 3000
    reply = beat(client, node, [exited(job["id"], peak=4200)])
    assert reply["acknowledged"] == [{"job_id": job["id"], "attempt": 1}]
    shown = job_of(client, job["id"])
    assert shown["state"] == "succeeded" and shown["exit_code"] == 0
    assert shown["attempts"][0]["peak_mib"] == 4200 and shown["finished_at"]
    cluster = client.get("/v1/admin/cluster").json()
    assert cluster["nodes"][0]["gpus"][0]["memory_reserved_mib"] == 0
    kinds = [
        e["kind"]
        for e in client.get("/v1/admin/events", params={"job_id": job["id"]}).json()["events"]
    ]
    assert kinds == ["job.submitted", "job.placed", "job.running", "job.succeeded"]
    # a repeated exit report (lost acknowledgement) changes nothing
    assert beat(client, node, [exited(job["id"], peak=9999)])["acknowledged"]
    assert job_of(client, job["id"])["attempts"][0]["peak_mib"] == 4200


def test_unreported_placement_is_resent_and_failure_recorded(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)
    cycle(client)
    assert len(beat(client, node)["assignments"]) == 1
    assert len(beat(client, node)["assignments"]) == 1  # the agent never got it: resend
    beat(client, node, [exited(job["id"], code=2)])
    shown = job_of(client, job["id"])
    assert shown["state"] == "failed" and shown["exit_code"] == 2


def test_oom_is_requeued_on_a_gpu_that_can_hold_more(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)])
    job = submit(client, memory_mib=4000, max_attempts=2)
    cycle(client)
    assert job_of(client, job["id"])["attempts"][0]["gpus"][0]["model"] == "Tesla T4"
    beat(client, node, [running(job["id"])])
    beat(client, node, [exited(job["id"], code=1, outcome="oom", peak=6000)])
    shown = job_of(client, job["id"])
    # it died alone on a 15360 MiB GPU past its reservation, so its estimate was wrong:
    # its last try gets the largest GPU whole (40960 less the 256 MiB headroom)
    assert shown["state"] == "pending" and shown["reservation_floor_mib"] == 40704
    cycle(client)
    second = job_of(client, job["id"])["attempts"][1]
    assert second["reserved_mib"] == 40704 and second["gpus"][0]["model"].endswith("40GB")
    beat(client, node, [running(job["id"], attempt=2)])
    beat(client, node, [exited(job["id"], attempt=2, code=1, outcome="oom", peak=9000)])
    shown = job_of(client, job["id"])
    assert shown["state"] == "oom" and [a["state"] for a in shown["attempts"]] == ["oom", "oom"]


def test_oom_beyond_every_gpu_ends_the_job(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=8000, max_attempts=3)
    cycle(client)
    beat(client, node, [exited(job["id"], code=1, outcome="oom", peak=15000)])
    shown = job_of(client, job["id"])
    assert shown["state"] == "oom" and "more than any eligible GPU" in shown["reason"]


def test_cancel_running_and_placed(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    first = submit(client, memory_mib=1000)
    second = submit(client, memory_mib=1000)
    cycle(client)
    beat(client, node, [running(first["id"])])  # only the first was started
    client.post(f"/v1/jobs/{first['id']}/cancel")
    client.post(f"/v1/jobs/{second['id']}/cancel")
    reply = beat(client, node, [running(first["id"])])
    assert reply["cancellations"] == [{"job_id": first["id"], "attempt": 1}]
    assert reply["assignments"] == []
    assert job_of(client, second["id"])["state"] == "cancelled"
    beat(client, node, [exited(first["id"], code=-15)])
    assert job_of(client, first["id"])["state"] == "cancelled"


def test_attempt_the_agent_forgot_is_lost_and_requeued(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)
    cycle(client)
    beat(client, node, [running(job["id"])])
    beat(client, node, [])
    shown = job_of(client, job["id"])
    assert shown["state"] == "pending" and shown["attempts"][0]["state"] == "lost"
    # the stale process, if it still runs, is told to stop
    assert beat(client, node, [running(job["id"])])["cancellations"]


def test_bad_heartbeats_change_nothing(client: TestClient) -> None:
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    register_node(client, "n2", [("Tesla T4", 15360)])
    before = client.get("/v1/admin/cluster").json()
    bad_bodies: list[Any] = [
        {"gpus": [{"uuid": "GPU-n2-0", "memory_used_mib": 5}]},
        {"gpus": [{"uuid": GPU0, "memory_used_mib": -5}]},
        {"gpus": [{"uuid": GPU0, "memory_used_mib": 1}, {"uuid": GPU0, "memory_used_mib": 2}]},
        {"gpus": [{"uuid": GPU0, "memory_used_mib": 5}], "attempts": [{"job_id": 1}]},
        {"gpus": "lots"},
        [],
    ]
    for body in bad_bodies:
        response = client.post(f"/v1/nodes/{node}/heartbeat", json=body)
        assert 400 <= response.status_code < 500, body
    after = client.get("/v1/admin/cluster").json()
    for node_before, node_after in zip(before["nodes"], after["nodes"], strict=True):
        assert node_before["gpus"] == node_after["gpus"]


def test_reregistration_keeps_the_node_and_a_foreign_gpu_is_refused(client: TestClient) -> None:
    first = register_node(client, "n1", [("Tesla T4", 15360)])
    assert register_node(client, "n1", [("Tesla T4", 15360)]) == first
    stolen = {
        "name": "n9",
        "agent_version": "t",
        "gpus": [{"uuid": GPU0, "index": 0, "model": "Tesla T4", "memory_total_mib": 15360}],
    }
    response = client.post("/v1/nodes/register", json=stolen)
    assert response.status_code == 409
    assert [n["name"] for n in client.get("/v1/admin/cluster").json()["nodes"]] == ["n1"]
