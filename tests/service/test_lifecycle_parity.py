"""The service and the simulator decide alike once an attempt ends.

The same scripted runs go through the service (its database, one agent's heartbeats)
and through the simulator (whose physics makes the same attempt run out of memory on
the same GPU, seeing what the agent would report); every decision the lifecycle rules
make on either side is recorded, and the two lists must be equal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.config import Settings
from service.db import transaction, utcnow
from service.jobs import lifecycle as service_lifecycle
from service.jobs.models import Job
from service.scheduler import lifecycle
from service.scheduler.lifecycle import Decision
from service.scheduler.states import JobState
from service.simulator import engine
from service.simulator.cluster import SimGpuSpec, SimNode
from service.simulator.engine import SimResult, SimSettings, Simulation
from service.simulator.policies import Request
from tests.conftest import register_node, submit
from tests.service.simulator.test_engine import NO_SLOWDOWN
from tests.service.simulator.test_engine import job as sim_job
from tests.service.test_lifecycle import cycle

T4 = ("Tesla T4", 15360)
A100 = ("NVIDIA A100-SXM4-40GB", 40960)
CLAIM_MIB = 4000  # what the job asks for: placement picks a T4
PEAK_MIB = 16000  # what it really needs: more than a T4 has, well within an A100
BACKOFF_S = 10.0


def recorded(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Decision]:
    """Every decision `module` takes from the lifecycle rules, in order."""
    decisions: list[Decision] = []

    def settle(*args: Any, **kwargs: Any) -> Decision:
        decision = lifecycle.settle(*args, **kwargs)
        decisions.append(decision)
        return decision

    monkeypatch.setattr(module, "settle", settle)
    return decisions


@pytest.fixture
def parity_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"oom_backoff_s": BACKOFF_S})


def simulate(
    nodes: list[tuple[str, list[tuple[str, int]]]], gpus: int, max_attempts: int, settings: Settings
) -> SimResult:
    """One job of `gpus` GPUs claiming CLAIM_MIB and needing PEAK_MIB, on `nodes`."""
    sim_nodes = [
        SimNode(name, tuple(SimGpuSpec(model, mib) for model, mib in node_gpus))
        for name, node_gpus in nodes
    ]
    models = {model for _name, node_gpus in nodes for model, _mib in node_gpus}
    job = dataclasses.replace(
        sim_job(1, 0, 600, PEAK_MIB, CLAIM_MIB),
        gpus=gpus,
        true_peak_mib=dict.fromkeys(models, PEAK_MIB),
    )
    sim_settings = SimSettings(
        cycle_s=0,
        max_attempts=max_attempts,
        rules=settings.reservation_rules(),
        scheduler=settings.scheduler(),
    )
    speeds = dict.fromkeys(models, 1.0)
    return Simulation(sim_nodes, [job], Request(), NO_SLOWDOWN, speeds, sim_settings).run()


class Agent:
    """One node's agent, reporting the ends of the job's attempts."""

    def __init__(self, client: TestClient, name: str, gpus: list[tuple[str, int]]) -> None:
        self.client = client
        self.node_id = register_node(client, name, gpus)
        self.uuids = [f"GPU-{name}-{index}" for index in range(len(gpus))]

    def exit(self, job_id: int, attempt: int, outcome: str, peak_mib: int) -> None:
        """The attempt ended `outcome` having used `peak_mib` on each of its GPUs."""
        shown = self.client.get(f"/v1/jobs/{job_id}").json()["attempts"][attempt - 1]
        report = {
            "job_id": job_id,
            "attempt": attempt,
            "state": "exited",
            "exit_code": 0 if outcome == "succeeded" else 1,
            "outcome": outcome,
            "peak_mib_by_gpu": {gpu["uuid"]: peak_mib for gpu in shown["gpus"]},
        }
        body = {
            "gpus": [{"uuid": uuid, "memory_used_mib": 0} for uuid in self.uuids],
            "attempts": [report],
        }
        response = self.client.post(f"/v1/nodes/{self.node_id}/heartbeat", json=body)
        assert response.status_code == 200, response.text


def attempt_models(client: TestClient, job_id: int) -> list[list[str]]:
    return [
        [gpu["model"] for gpu in attempt["gpus"]]
        for attempt in client.get(f"/v1/jobs/{job_id}").json()["attempts"]
    ]


def placed(
    make_client: Any, nodes: list[tuple[str, list[tuple[str, int]]]], **job: Any
) -> tuple[TestClient, Agent, int]:
    """The service on `nodes` with a job claiming CLAIM_MIB placed: the client, the
    first node's agent and the job's id."""
    client = make_client(oom_backoff_s=BACKOFF_S)
    first, *_others = [Agent(client, name, gpus) for name, gpus in nodes]
    job_id = submit(client, memory_mib=CLAIM_MIB, **job)["id"]
    cycle(client)
    return client, first, int(job_id)


def back_off_passed(client: TestClient, job_id: int) -> None:
    """Let the job's back-off end now (the simulator's clock jumps there by itself)."""
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:
        session.execute(update(Job).where(Job.id == job_id).values(not_before=utcnow()))


def test_an_oom_on_a_t4_is_retried_on_the_a100_alike(
    make_client: Any, parity_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [("n1", [T4, A100])]
    in_service = recorded(monkeypatch, service_lifecycle)
    client, agent, job_id = placed(make_client, nodes, max_attempts=3)
    agent.exit(job_id, 1, "oom", T4[1])  # it filled the T4 as it died
    back_off_passed(client, job_id)
    cycle(client)
    agent.exit(job_id, 2, "succeeded", PEAK_MIB)
    assert attempt_models(client, job_id) == [[T4[0]], [A100[0]]]

    in_simulator = recorded(monkeypatch, engine)
    result = simulate(nodes, gpus=1, max_attempts=3, settings=parity_settings)

    floor = 18432  # 1.2 x the T4's 15360 MiB it could have had
    retry = f"requeued with at least {floor} MiB per GPU, not before 10 s (attempt 2 of 3)"
    expected = [
        Decision(JobState.PENDING, retry, floor, BACKOFF_S),
        Decision(JobState.SUCCEEDED, None, floor, None),
    ]
    assert in_service == in_simulator == expected
    assert (result.oom_events, result.jobs_completed, result.placements) == (1, 1, 2)


def test_a_gang_whose_floor_no_node_holds_fails_alike(
    make_client: Any, parity_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The 2-GPU job dies on n1's two T4s; its new floor fits the A100, but no node has
    # two GPUs that hold it, so it can never run again: it fails (the simulator once
    # kept it pending for ever).
    nodes = [("n1", [T4, T4]), ("n2", [A100])]
    in_service = recorded(monkeypatch, service_lifecycle)
    client, n1, job_id = placed(make_client, nodes, gpus=2, max_attempts=3)
    n1.exit(job_id, 1, "oom", T4[1])
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == JobState.OOM

    in_simulator = recorded(monkeypatch, engine)
    result = simulate(nodes, gpus=2, max_attempts=3, settings=parity_settings)

    never = (
        "needs at least 18432 MiB on each of 2 GPU(s) of one node, more than any "
        "eligible GPU has on a node with that many"
    )
    assert in_service == in_simulator == [Decision(JobState.OOM, never, 18432, None)]
    assert (result.jobs_failed, result.jobs_completed, result.placements) == (1, 0, 1)


def test_an_oom_with_its_attempts_spent_ends_the_job_alike(
    make_client: Any, parity_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [("n1", [T4, A100])]
    in_service = recorded(monkeypatch, service_lifecycle)
    _client, agent, job_id = placed(make_client, nodes, max_attempts=1)
    agent.exit(job_id, 1, "oom", T4[1])

    in_simulator = recorded(monkeypatch, engine)
    result = simulate(nodes, gpus=1, max_attempts=1, settings=parity_settings)

    assert in_service == in_simulator == [Decision(JobState.OOM, None, None, None)]
    assert (result.jobs_failed, result.placements) == (1, 1)
