"""The step a retry after an OOM takes is learned from the cluster's own jobs: how far
those that died went on to need, kept with their attempts in the database; a user's
retries learn from their own jobs and from trusted ones."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from estimator.learned.calibration import min_conformal_points
from service.config import Settings
from service.db import transaction
from service.jobs import lifecycle as service_lifecycle
from service.jobs.models import Attempt
from service.scheduler.lifecycle import RETRY_COVERAGE
from tests.conftest import bearer, make_token, submit
from tests.service.test_late_reports import lose
from tests.service.test_lifecycle import cycle, running
from tests.service.test_lifecycle_parity import Agent

T4, A100 = ("Tesla T4", 15360), ("NVIDIA A100-SXM4-40GB", 40960)
JOBS = 19  # the fewest for a bound at RETRY_COVERAGE


class Node(Agent):
    """One node of as many T4s as A100s, one job a GPU."""

    def __init__(self, client: TestClient, gpus: int) -> None:
        super().__init__(client, "n1", [T4] * gpus + [A100] * gpus)

    def exit_latest(self, job_ids: list[int], outcome: str, peak_mib: int) -> None:
        """Each job's latest attempt ended `outcome`, having used `peak_mib`."""
        for job_id in job_ids:
            attempts = self.client.get(f"/v1/jobs/{job_id}").json()["attempts"]
            self.exit(job_id, len(attempts), outcome, peak_mib)


def models(client: TestClient, job_id: int) -> list[str]:
    attempts = client.get(f"/v1/jobs/{job_id}").json()["attempts"]
    return [attempt["gpus"][0]["model"] for attempt in attempts]


def submit_as(client: TestClient, user: dict[str, str] | None, **spec: Any) -> int:
    """A job claiming 4000 MiB, submitted by `user` (None: the admin)."""
    if user is None:
        return int(submit(client, memory_mib=4000, **spec)["id"])
    body = {"name": "job", "command": ["true"], "memory_mib": 4000, **spec}
    response = client.post("/v1/jobs", json=body, headers=user)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def grow_after_dying(
    client: TestClient, node: Node, user: dict[str, str] | None, times: float
) -> None:
    """JOBS jobs of `user` die filling T4s and succeed on A100s using `times` a T4."""
    jobs = [submit_as(client, user) for _ in range(JOBS)]
    cycle(client)
    node.exit_latest(jobs, "oom", T4[1])
    cycle(client)
    assert {tuple(models(client, job_id)) for job_id in jobs} == {(T4[0], A100[0])}
    node.exit_latest(jobs, "succeeded", round(times * T4[1]))


def dies_on_a_t4(
    client: TestClient, node: Node, user: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A job claiming 4000 MiB, placed on a T4 and dying of an OOM there, as it is then."""
    job_id = submit_as(client, user, **spec)
    cycle(client)
    assert models(client, job_id) == [T4[0]]
    node.exit_latest([job_id], "oom", T4[1])
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
    node.exit_latest([first["id"]], "succeeded", 2 * T4[1])  # it needed twice as much
    assert models(client, first["id"]) == [T4[0], A100[0]]

    # more jobs die on T4s and go on to need twice as much on A100s
    grow_after_dying(client, node, None, 2.0)

    # 19 jobs showed 2x: the next job's retry asks that, on the service that saw them
    # and on one started afresh on the same database
    learned = dies_on_a_t4(client, node)
    assert "at least 30720 MiB" in learned["reason"], learned["reason"]
    restarted = make_client(oom_backoff_s=0, max_jobs_per_gpu=1)
    again = dies_on_a_t4(restarted, Node(restarted, JOBS), name="after-a-restart")
    assert "at least 30720 MiB" in again["reason"], again["reason"]


def test_a_user_s_retries_learn_from_their_own_jobs_and_trusted_ones_the_latest_first(
    make_client: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_lifecycle, "RETRY_RATIOS_KEPT", JOBS)
    client = make_client(oom_backoff_s=0, max_jobs_per_gpu=1)
    node = Node(client, JOBS)
    mallory = bearer(make_token(database_url, "user", "mallory"))
    bob = bearer(make_token(database_url, "user", "bob"))
    grow_after_dying(client, node, None, 2.5)  # the admin's: trusted, then outnumbered
    grow_after_dying(client, node, None, 2.0)
    grow_after_dying(client, node, mallory, 2.6)
    # bob learns from the admin's latest 19 only; mallory's own count for her alone
    assert "at least 30720 MiB" in dies_on_a_t4(client, node, bob)["reason"]
    assert "at least 39936 MiB" in dies_on_a_t4(client, node, mallory)["reason"]


def test_a_success_reported_late_teaches_as_one_reported_in_time(
    make_client: Any, settings: Settings
) -> None:
    client = make_client(oom_backoff_s=0, max_jobs_per_gpu=1)
    node = Node(client, 1)
    job_id = dies_on_a_t4(client, node)["id"]
    cycle(client)
    body = {
        "gpus": [{"uuid": uuid, "memory_used_mib": 0} for uuid in node.uuids],
        "attempts": [running(job_id, attempt=2)],
    }
    assert client.post(f"/v1/nodes/{node.node_id}/heartbeat", json=body).status_code == 200
    lose(client, settings, "n1")  # the retry ends lost: no success, no ratio
    node.exit_latest([job_id], "succeeded", 2 * T4[1])  # it had succeeded meanwhile
    ratios = select(Attempt.retry_ratio).where(Attempt.job_id == job_id).order_by(Attempt.number)
    with transaction(client.app.state.sessions) as session:
        assert list(session.scalars(ratios)) == [None, 2.0]
