"""Priorities within bounds: users up to their queue's maximum, admins any and later;
preemption only of lower-priority preemptible jobs, within quotas."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service.cli import build_parser, run_command
from service.scheduler.framework import Limit, Quotas, SchedulerConfig
from service.scheduler.snapshot import RunningJob
from tests.conftest import bearer, make_token
from tests.service.test_placement import gpu, job, place


def test_users_set_priority_only_up_to_their_queues_maximum(
    make_client: Any, database_url: str
) -> None:
    client = make_client(queue_max_priority={"*": 0, "urgent": 50})
    alice = bearer(make_token(database_url, "user", "alice"))

    def post(**spec: Any) -> Any:
        body = {"name": "j", "command": ["true"], **spec}
        return client.post("/v1/jobs", json=body, headers=alice)

    refused = post(priority=1)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "priority_too_high" and "above 0" in error["message"]
    assert "COLLOC_QUEUE_MAX_PRIORITY" in error["message"]
    assert post(priority=51, queue="urgent").status_code == 422
    assert post(priority=50, queue="urgent").status_code == 201
    assert post(priority=-5).status_code == 201  # lowering one's own is always allowed
    assert (
        client.post("/v1/jobs", json={"name": "j", "command": ["a"], "priority": 900}).json()[
            "priority"
        ]
        == 900
    )  # an admin


def test_admins_change_a_jobs_priority(client: TestClient, database_url: str) -> None:
    alice = bearer(make_token(database_url, "user", "alice"))
    created = client.post("/v1/jobs", json={"name": "j", "command": ["a"]}, headers=alice).json()
    path = f"/v1/jobs/{created['id']}/priority"
    assert client.post(path, json={"priority": 10}, headers=alice).status_code == 403
    assert client.post(path, json={"priority": 5000}).status_code == 422
    changed = client.post(path, json={"priority": 10})
    assert changed.status_code == 200 and changed.json()["priority"] == 10
    events = client.get("/v1/admin/events", params={"kind": "job.priority"}).json()["events"]
    assert "from 0 to 10 by admin" in events[0]["message"]
    client.post(f"/v1/jobs/{created['id']}/cancel")
    assert client.post(path, json={"priority": 1}).status_code == 409


def test_the_priority_command(through_app: TestClient, capsys: Any) -> None:
    client = through_app
    created = client.post("/v1/jobs", json={"name": "j", "command": ["a"]}).json()
    args = build_parser().parse_args(
        ["priority", str(created["id"]), "7", "--server", "http://colloc"]
    )
    assert run_command(args) == 0
    assert capsys.readouterr().out == f"job {created['id']}: priority 7\n"
    assert client.get(f"/v1/jobs/{created['id']}").json()["priority"] == 7


def test_preemption_stays_within_the_preemptors_quotas() -> None:
    gpus = (gpu(1, 1, reserved_mib=12000, jobs=1), gpu(2, 2, reserved_mib=12000, jobs=1))
    running = (
        RunningJob(7, 0, "x", "research", (1,), 12000, preemptible=False),
        RunningJob(8, 0, "y", "default", (2,), 12000, preemptible=True),
    )
    urgent = job(1, 10000, priority=5, queue="research")
    quotas = Quotas(queues={"research": Limit(memory_mib=16000)})  # 12,000 MiB used
    config = SchedulerConfig(headroom_mib=0, preemption=True, quotas=quotas)
    plan = place(gpus, (urgent,), config, running=running)
    assert plan.preemptions == {}  # GPU 2 would hold it, the queue could not
    roomy = SchedulerConfig(
        headroom_mib=0, preemption=True, quotas=Quotas(queues={"research": Limit(memory_mib=22000)})
    )
    assert place(gpus, (urgent,), roomy, running=running).preemptions == {8: 1}
