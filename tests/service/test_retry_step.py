"""The step a retry after an OOM takes is learned from the cluster's own jobs: how far
those that died went on to need, kept with their attempts in the database."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from estimator.learned.calibration import min_conformal_points
from service.scheduler.lifecycle import RETRY_COVERAGE
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import cycle

T4, A100 = ("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)
JOBS = 19  # the fewest for a bound at RETRY_COVERAGE


class Node:
    """One node of T4s and A100s, one job a GPU, whose agent reports exits."""

    def __init__(self, client: TestClient, gpus: int) -> None:
        self.client = client
        self.node_id = register_node(client, "n1", [T4] * gpus + [A100] * gpus)
        self.uuids = [f"GPU-n1-{index}" for index in range(2 * gpus)]

    def exit(self, job_ids: list[int], outcome: str, peak_mib: int) -> None:
        """Each job's latest attempt ended `outcome`, having used `peak_mib`."""
        reports = []
        for job_id in job_ids:
            attempt = self.client.get(f"/v1/jobs/{job_id}").json()["attempts"][-1]
            reports.append(
                {
                    "job_id": job_id,
                    "attempt": attempt["number"],
                    "state": "exited",
                    "exit_code": 0 if outcome == "succeeded" else 1,
                    "outcome": outcome,
                    "peak_mib_by_gpu": {gpu["uuid"]: peak_mib for gpu in attempt["gpus"]},
                }
            )
        body = {
            "gpus": [{"uuid": uuid, "memory_used_mib": 0} for uuid in self.uuids],
            "attempts": reports,
        }
        response = self.client.post(f"/v1/nodes/{self.node_id}/heartbeat", json=body)
        assert response.status_code == 200, response.text


def models(client: TestClient, job_id: int) -> list[str]:
    attempts = client.get(f"/v1/jobs/{job_id}").json()["attempts"]
    return [attempt["gpus"][0]["model"] for attempt in attempts]


def dies_on_a_t4(client: TestClient, node: Node, **spec: Any) -> dict[str, Any]:
    """A job claiming 4000 MiB, placed on a T4 and dying of an OOM there, as it is then."""
    job_id = int(submit(client, memory_mib=4000, **spec)["id"])
    cycle(client)
    assert models(client, job_id) == [T4[0]]
    node.exit([job_id], "oom", T4[1])
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job


def test_retries_take_the_step_the_cluster_s_jobs_showed_and_keep_it_after_a_restart(
    make_client: Any,
) -> None:
    assert min_conformal_points(RETRY_COVERAGE) == JOBS
    client = make_client(oom_backoff_s=0, max_jobs_per_gpu=1)
    node = Node(client, JOBS)
    # before the cluster showed anything, a retry asks the configured 1.2 x what the
    # job needed: the T4's 15360 MiB it filled
    first = dies_on_a_t4(client, node)
    assert first["state"] == "pending" and "at least 18432 MiB" in first["reason"]
    cycle(client)
    node.exit([first["id"]], "succeeded", 2 * T4[1])  # it needed twice as much
    assert models(client, first["id"]) == [T4[0], A100[0]]

    # 18 more jobs die on T4s and go on to need twice as much on A100s
    jobs = [int(submit(client, memory_mib=4000)["id"]) for _ in range(JOBS - 1)]
    cycle(client)
    node.exit(jobs, "oom", T4[1])
    cycle(client)
    assert {tuple(models(client, job_id)) for job_id in jobs} == {(T4[0], A100[0])}
    node.exit(jobs, "succeeded", 2 * T4[1])

    # 19 jobs showed 2x: the next job's retry asks that, on the service that saw them
    # and on one started afresh on the same database
    learned = dies_on_a_t4(client, node)
    assert "at least 30720 MiB" in learned["reason"], learned["reason"]
    restarted = make_client(oom_backoff_s=0, max_jobs_per_gpu=1)
    again = dies_on_a_t4(restarted, Node(restarted, JOBS), name="after-a-restart")
    assert "at least 30720 MiB" in again["reason"], again["reason"]
