"""The agent and the server hold each other to one protocol (`agent/protocol.py`): the
agent's real messages, built by its daemon from the simulated backend and from NVML
(a fake `pynvml`), go through the server's real endpoints, and the server's replies
are read by the agent's own models. Nothing here is hand-written JSON."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from agent.accounts import Identity
from agent.backends.base import DeviceBackend
from agent.backends.nvml import NvmlBackend
from agent.backends.simulated import SimulatedBackend
from agent.client import SchedulerClient
from agent.cluster import parse_cluster
from agent.daemon import Agent, AgentConfig
from service.config import Settings
from tests.agent.test_nvml import FakeNvml
from tests.conftest import submit
from tests.service.test_lifecycle import cycle, job_of

SIMJOB = [sys.executable, "-m", "service.cli", "simjob"]


def through(client: TestClient) -> SchedulerClient:
    """The agent's own HTTP client, speaking to the app in process."""
    scheduler = SchedulerClient("http://testserver", token=None)
    scheduler.close()
    scheduler._http = client  # a TestClient is an httpx.Client
    return scheduler


def agent_of(client: TestClient, backend: DeviceBackend, tmp_path: Path, name: str) -> Agent:
    config = AgentConfig(
        name=name,
        state_dir=tmp_path / "state",
        logs_dir=tmp_path / "logs",
        kill_grace_s=1,
        identity=Identity("agent", allow_root_jobs=True),  # CI runs as root
    )
    return Agent(through(client), backend, config)


def gpus_of(client: TestClient) -> dict[str, dict[str, Any]]:
    nodes = client.get("/v1/admin/cluster").json()["nodes"]
    return {gpu["uuid"]: gpu for node in nodes for gpu in node["gpus"]}


def test_a_simulated_agent_runs_a_job_through_the_real_server(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    cluster = {
        "nodes": [
            {
                "name": "sim",
                "gpus": [
                    {
                        "model": "T4",
                        "driver_version": "550.54.15",
                        "cuda_driver_version": 12040,
                        "context_mib": 300,
                    }
                ],
            }
        ]
    }
    (node,) = parse_cluster(cluster)
    agent = agent_of(client, SimulatedBackend(node, tmp_path / "sim"), tmp_path, "sim")
    agent.register()
    assert agent.lease_s == settings.node_lease_s  # known before any heartbeat is answered
    (gpu,) = gpus_of(client).values()
    device = agent.backend.devices()[0]
    assert gpu["uuid"] == device.uuid and gpu["memory_total_mib"] == 15360
    assert (gpu["compute_capability"], gpu["driver_version"]) == ("7.5", "550.54.15")
    assert (gpu["cuda_driver_version"], gpu["context_mib"]) == (12040, 300)
    # a job that grows past its reservation: a notice, output, a peak and an exit
    command = [*SIMJOB, "--peak-mib", "3000", "--seconds", "1.5"]
    job = submit(client, command=command, memory_mib=2000)
    cycle(client)
    deadline = time.monotonic() + 60  # a guard: the job takes 1.5 s
    while agent.jobs or job_of(client, job["id"])["state"] in ("placed", "running"):
        assert time.monotonic() < deadline
        agent.sample()
        agent.heartbeat()
        time.sleep(0.1)
    final = job_of(client, job["id"])
    assert final["state"] == "succeeded", final
    (attempt,) = final["attempts"]
    assert attempt["peak_mib"] == 3000
    output = client.get(f"/v1/jobs/{job['id']}/logs", params={"stream": "stdout"}).json()
    assert "simjob: done" in output["text"]
    events = client.get("/v1/admin/events").json()["events"]
    (notice,) = [e for e in events if e["kind"] == "job.over_reservation"]
    assert notice["data"]["used_mib"] == 3000 and notice["data"]["reserved_mib"] == 2000


def test_what_nvml_cannot_read_reaches_the_server_unknown_and_is_never_free(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeNvml()  # the A100 cannot tell its utilisation or one process's memory
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    agent = agent_of(client, NvmlBackend.open(), tmp_path, "gpu-host")
    agent.register()
    agent.sample()
    agent.heartbeat()
    a100, t4 = gpus_of(client).values()
    assert a100["utilization_pct"] is None and t4["utilization_pct"] == 37.0
    # neither process is a job: their use is foreign, the unattributed one included
    assert a100["memory_used_mib"] == 5000 and a100["memory_foreign_mib"] == 5000
    # the T4's memory can no longer be read: unknown, and the whole GPU taken
    readable = fake.nvmlDeviceGetMemoryInfo

    def unreadable(handle: int, version: Any = None) -> Any:
        if handle == 1:
            raise fake.NVMLError_NotSupported()
        return readable(handle, version)

    monkeypatch.setattr(fake, "nvmlDeviceGetMemoryInfo", unreadable)
    agent.sample()
    agent.heartbeat()
    t4 = gpus_of(client)[t4["uuid"]]
    assert t4["healthy"] and t4["memory_used_mib"] is None
    assert t4["memory_foreign_mib"] == 15360 and t4["memory_free_mib"] == 0
    job = submit(client, command=["true"], memory_mib=1000, gpu_models=["T4"])
    cycle(client)
    agent.heartbeat()
    assert job_of(client, job["id"])["state"] == "pending"
    monkeypatch.setattr(fake, "nvmlDeviceGetMemoryInfo", readable)  # it reads again
    agent.sample()
    agent.heartbeat()
    cycle(client)
    assert job_of(client, job["id"])["state"] == "placed"
