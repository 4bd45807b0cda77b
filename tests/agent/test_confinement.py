"""GPU confinement: a job's process that uses a GPU the job was not given is found
through the process tree, reported (with what it holds there) and, under policy
`stop`, killed, its attempt ending `failed` with the reason; on simulated GPUs and
through NVML (a fake `pynvml`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent import proctree
from agent.accounts import Identity
from agent.backends.nvml import MIB, NvmlBackend
from agent.backends.simulated import SimulatedBackend
from agent.cluster import parse_cluster
from agent.daemon import Agent, AgentConfig
from agent.job import JobProcess
from tests.agent.test_daemon import FakeServer, step_until
from tests.agent.test_nvml import FakeNvml, Process

# a process that takes memory on the GPU named in argv[1], whatever CUDA_VISIBLE_DEVICES says
STRAY = """
import os, sys, time
from pathlib import Path
from agent.backends.simulated_state import SimulatedGpuStore
store = SimulatedGpuStore(Path(os.environ["COLLOC_SIM_STATE"]))
store.set_usage(sys.argv[1], os.getpid(), 1500)
print("holding 1500 MiB on", sys.argv[1], flush=True)
time.sleep(float(sys.argv[2]))
"""


def _agent(tmp_path: Path, server: FakeServer, backend: Any, policy: str) -> Agent:
    config = AgentConfig(
        name="n",
        state_dir=tmp_path / "state",
        logs_dir=tmp_path / "logs",
        kill_grace_s=1,
        identity=Identity("agent", allow_root_jobs=True),  # CI runs as root
        gpu_confinement=policy,  # type: ignore[arg-type]
    )
    return Agent(server, backend, config)  # type: ignore[arg-type]


def _assign(server: FakeServer, uuid: str, command: list[str]) -> None:
    server.pending.append(
        {
            "job_id": 1,
            "attempt": 1,
            "command": command,
            "env": {},
            "workdir": None,
            "gpu_uuids": [uuid],
            "account": "ignored-in-agent-mode",
            "reserved_mib": 2000,
            "reserved_mib_by_gpu": {uuid: 2000},
        }
    )


def _simulated(tmp_path: Path) -> SimulatedBackend:
    (node,) = parse_cluster({"nodes": [{"name": "n", "gpus": [{"model": "T4", "count": 2}]}]})
    return SimulatedBackend(node, tmp_path / "sim")


@pytest.mark.parametrize("policy", ["stop", "report"])
def test_a_job_on_a_gpu_it_was_not_given_is_reported_and_stopped(
    tmp_path: Path, policy: str
) -> None:
    server = FakeServer()
    backend = _simulated(tmp_path)
    given, other = (d.uuid for d in backend.devices())
    agent = _agent(tmp_path, server, backend, policy)
    _assign(server, given, [sys.executable, "-c", STRAY, other, "4"])
    step_until(agent, server, lambda: not agent.jobs and server.reports)
    (notice,) = server.notices
    assert notice["kind"] == "unassigned_gpu" and notice["gpu_uuid"] == other
    assert notice["used_mib"] == 1500 and notice["action"] == policy
    assert f"which it was not given (its GPUs: {given})" in notice["message"]
    held = [r.get("unassigned_mib_by_gpu") for r in server.reports if r["state"] == "running"]
    assert {other: 1500} in held  # the server counts it as use of that GPU
    final = server.last(1)
    if policy == "stop":
        assert final["outcome"] == "failed"
        assert final["reason"].startswith(f"used 1500 MiB on GPU {other}, which it was not")
        assert final["reason"].endswith("stopped by the agent")
    else:
        assert final["outcome"] == "succeeded" and final["reason"] is None


def test_use_of_its_own_gpu_is_not_confined(tmp_path: Path) -> None:
    server = FakeServer()
    backend = _simulated(tmp_path)
    given = backend.devices()[0].uuid
    agent = _agent(tmp_path, server, backend, "stop")
    _assign(server, given, [sys.executable, "-c", STRAY, given, "1"])
    step_until(agent, server, lambda: not agent.jobs and server.reports)
    assert server.notices == [] and server.last(1)["outcome"] == "succeeded"
    assert max(r["current_mib_by_gpu"].get(given, 0) for r in server.reports) == 1500


def _sleeping_job_on_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[FakeNvml, FakeServer, Agent, JobProcess]:
    """An agent on a fake NVML (GPU-aaaa, GPU-bbbb) running one job given GPU-aaaa."""
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    server = FakeServer()
    agent = _agent(tmp_path, server, NvmlBackend.open(), "stop")
    _assign(server, "GPU-aaaa", [sys.executable, "-c", "import time; time.sleep(60)"])
    step_until(agent, server, lambda: any(job.pid for job in agent.jobs.values()))
    (job,) = agent.jobs.values()
    return fake, server, agent, job


def test_through_nvml_a_graphics_context_on_another_gpu_stops_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, server, agent, job = _sleeping_job_on_nvml(tmp_path, monkeypatch)
    assert job.pid is not None
    deadline = time.monotonic() + 20
    while not (children := proctree.members(job.pid) - {job.pid}):
        assert time.monotonic() < deadline, "the job's command never started"
        time.sleep(0.05)
    # the job's own process (not its supervisor) opens a context on the T4
    fake.graphics[1] = [Process(min(children), 900 * MIB)]
    step_until(agent, server, lambda: not agent.jobs)
    final = server.last(1)
    assert final["outcome"] == "failed" and "900 MiB on GPU GPU-bbbb" in final["reason"]
    assert [n["gpu_uuid"] for n in server.notices] == ["GPU-bbbb"]


def test_one_sample_alone_does_not_stop_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process the driver listed on another GPU in one sample only (a pid reused by
    the job between the driver's list and /proc, or a process already gone) is not
    the job using that GPU; seen in two samples in a row, it is."""
    fake, server, agent, job = _sleeping_job_on_nvml(tmp_path, monkeypatch)
    assert job.pid is not None
    fake.graphics[1] = [Process(job.pid, 700 * MIB)]
    agent.sample()
    fake.graphics[1] = []
    for _ in range(3):
        agent.sample()
    assert job.confined is None and not job.notices and not job.kill_sent
    fake.graphics[1] = [Process(job.pid, 700 * MIB)]
    agent.sample()
    agent.sample()
    assert job.kill_sent and job.confined is not None and "700 MiB on GPU GPU-bbbb" in job.confined
    step_until(agent, server, lambda: not agent.jobs)
