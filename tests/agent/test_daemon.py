"""The agent's loop on simulated GPUs against an in-process stand-in for the server:
memory watch, enforcement, log shipping, restarts and outages."""

from __future__ import annotations

import base64
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.accounts import Identity
from agent.backends.simulated import SimulatedBackend
from agent.cluster import parse_cluster
from agent.daemon import Agent, AgentConfig
from agent.enforcement import Enforcement
from agent.instance_lock import DirectoryInUse

SIMJOB = [sys.executable, "-m", "service.cli", "simjob"]


class FakeServer:
    """Speaks the heartbeat protocol: hands out assignments, keeps logs and exits."""

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []
        self.logs: dict[tuple[int, int, str], bytes] = {}
        self.reports: list[dict[str, Any]] = []
        self.notices: list[dict[str, Any]] = []
        self.down = False
        self.gpus: list[dict[str, Any]] = []

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"node_id": 1, "heartbeat_interval_s": 0.1}

    def heartbeat(
        self, node_id: int, body: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        if self.down:
            raise httpx.ConnectError("connection refused")
        offsets, acked = [], []
        self.gpus = body["gpus"]
        for report in body["attempts"]:
            key = (report["job_id"], report["attempt"])
            self.reports.append(report)
            self.notices += report["notices"]
            for chunk in report["logs"]:
                held = self.logs.get((*key, chunk["stream"]), b"")
                data = base64.b64decode(chunk["data"])
                self.logs[(*key, chunk["stream"])] = held[: chunk["offset"]] + data
            offsets.append(
                {
                    "job_id": key[0],
                    "attempt": key[1],
                    **{s: len(self.logs.get((*key, s), b"")) for s in ("stdout", "stderr")},
                }
            )
            if report["state"] == "exited":
                acked.append({"job_id": key[0], "attempt": key[1]})
        assignments, self.pending = self.pending, []
        return {
            "assignments": assignments,
            "cancellations": [],
            "acknowledged": acked,
            "log_offsets": offsets,
            "log_keep_bytes": 1 << 20,
            "heartbeat_interval_s": 0.1,
        }

    def last(self, job_id: int) -> dict[str, Any]:
        return [r for r in self.reports if r["job_id"] == job_id][-1]

    def close(self) -> None:
        pass


def make_agent(tmp_path: Path, server: FakeServer, **config: Any) -> Agent:
    (node,) = parse_cluster({"nodes": [{"name": "n", "gpus": [{"model": "T4", "count": 1}]}]})
    backend = SimulatedBackend(node, tmp_path / "sim")
    config.setdefault("identity", Identity("agent", allow_root_jobs=True))  # CI runs as root
    settings = AgentConfig(
        name="n",
        state_dir=tmp_path / "state",
        logs_dir=tmp_path / "logs",
        kill_grace_s=1,
        **config,
    )
    return Agent(server, backend, settings)  # type: ignore[arg-type]


def assign(agent: Agent, server: FakeServer, job_id: int, command: list[str], mib: int) -> None:
    uuid = agent.backend.devices()[0].uuid
    server.pending.append(
        {
            "job_id": job_id,
            "attempt": 1,
            "command": command,
            "env": {},
            "workdir": None,
            "gpu_uuids": [uuid],
            "account": "nobody",  # the agent runs jobs as itself here (run_jobs_as agent)
            "reserved_mib": mib,
            "reserved_mib_by_gpu": {uuid: mib},
        }
    )


def step_until(agent: Agent, server: FakeServer, done: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, server.reports[-3:]
        agent.sample()
        agent._heartbeat_once()
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def _scripts_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join([scripts, os.environ.get("PATH", "")]))


def test_peak_current_use_and_logs_reach_the_server(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server)
    assign(agent, server, 1, [*SIMJOB, "--peak-mib", "3000", "--seconds", "1.5"], 4000)
    step_until(agent, server, lambda: not agent.jobs and server.reports)
    running = [r for r in server.reports if r["state"] == "running"]
    assert max(max(r["current_mib_by_gpu"].values(), default=0) for r in running) == 3000
    final = server.last(1)
    assert final["outcome"] == "succeeded" and max(final["peak_mib_by_gpu"].values()) == 3000
    assert b"simjob: done" in server.logs[(1, 1, "stdout")]
    assert not (tmp_path / "state" / "runs" / "job-1-attempt-1").exists()  # all delivered


def test_warn_reports_a_job_over_its_reservation_once(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server)
    assign(agent, server, 2, [*SIMJOB, "--peak-mib", "3000", "--seconds", "1"], 2000)
    step_until(agent, server, lambda: not agent.jobs and server.reports)
    (notice,) = server.notices
    assert notice["action"] == "warn" and notice["used_mib"] == 3000
    assert notice["reserved_mib"] == 2000 and "limit 2256 MiB" in notice["message"]
    assert server.last(2)["outcome"] == "succeeded"


def test_kill_stops_a_job_over_its_reservation_as_an_oom(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server, enforcement=Enforcement("kill", 0.1))
    assign(agent, server, 3, [*SIMJOB, "--peak-mib", "6000", "--seconds", "30"], 2000)
    started = time.monotonic()
    step_until(agent, server, lambda: not agent.jobs and server.reports)
    assert time.monotonic() - started < 20
    final = server.last(3)
    assert final["outcome"] == "oom" and "killed by the agent" in final["reason"]
    assert server.notices[0]["action"] == "kill"


def test_reports_wait_out_an_outage_and_jobs_keep_running(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server)
    assign(agent, server, 4, [*SIMJOB, "--peak-mib", "1000", "--seconds", "1"], 2000)
    step_until(agent, server, lambda: bool(agent.jobs))
    server.down = True
    seen = len(server.reports)
    step_until(agent, server, lambda: all(j.outcome for j in agent.jobs.values()))
    assert len(server.reports) == seen  # nothing got through, the job ended anyway
    server.down = False
    step_until(agent, server, lambda: not agent.jobs)
    assert server.last(4)["outcome"] == "succeeded"
    assert b"simjob: done" in server.logs[(4, 1, "stdout")]


def test_a_new_agent_process_takes_up_the_running_job(tmp_path: Path) -> None:
    server = FakeServer()
    first = make_agent(tmp_path, server)
    assign(first, server, 5, [*SIMJOB, "--peak-mib", "1500", "--seconds", "3"], 2000)
    step_until(first, server, lambda: bool(server.reports))
    pid = first.jobs[(5, 1)].pid
    first.lock.release()  # as if killed: the kernel drops its lock, nothing is shut down
    second = make_agent(tmp_path, server)
    assert list(second.jobs) == [(5, 1)] and second.jobs[(5, 1)].pid == pid
    step_until(second, server, lambda: not second.jobs)
    final = server.last(5)
    assert final["outcome"] == "succeeded" and max(final["peak_mib_by_gpu"].values()) == 1500


def test_a_second_agent_on_one_state_directory_is_refused(tmp_path: Path) -> None:
    server = FakeServer()
    first = make_agent(tmp_path, server)
    with pytest.raises(DirectoryInUse, match=rf"colloc agent \(pid {os.getpid()}\).*--state-dir"):
        make_agent(tmp_path, server)
    first.shutdown()  # lets go of the directory
    make_agent(tmp_path, server).shutdown()


def test_shutdown_stops_only_the_jobs_it_is_told_to_and_they_are_run_again(
    tmp_path: Path,
) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server)
    assign(agent, server, 6, [*SIMJOB, "--peak-mib", "100", "--seconds", "30"], 200)
    step_until(agent, server, lambda: bool(server.reports))
    job = agent.jobs[(6, 1)]
    agent.shutdown()
    assert job.outcome is None and job.pid is not None
    os.kill(job.pid, 0)  # still there
    # stop_jobs_on_exit is about the jobs an agent launched, not those it took over
    adopter = make_agent(tmp_path, server, stop_jobs_on_exit=True)
    adopter.shutdown()
    assert adopter.jobs[(6, 1)].outcome is None
    os.kill(job.pid, 0)
    stopper = make_agent(tmp_path, server, stop_adopted_jobs_on_exit=True)
    stopper.shutdown()
    assert stopper.jobs[(6, 1)].outcome == "lost"


def test_a_job_its_agent_stops_on_exit_is_reported_lost(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server, stop_jobs_on_exit=True)
    assign(agent, server, 7, [*SIMJOB, "--peak-mib", "100", "--seconds", "30"], 200)
    step_until(agent, server, lambda: bool(server.reports))
    agent.shutdown()
    successor = make_agent(tmp_path, server)  # reports what ended meanwhile
    step_until(successor, server, lambda: not successor.jobs)
    final = server.last(7)
    assert final["outcome"] == "lost" and final["reason"] == "stopped as its agent shut down"


def test_injected_gpu_faults_make_the_gpu_unhealthy_until_quarantine_ends(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(tmp_path, server, xid_quarantine_s=1.0)
    uuid = agent.backend.devices()[0].uuid
    store = agent.backend.store  # type: ignore[attr-defined]
    step_until(agent, server, lambda: bool(server.gpus))
    assert server.gpus[0]["healthy"] is True
    store.inject_xid(uuid, 79)
    step_until(agent, server, lambda: not server.gpus[0]["healthy"])
    assert "XID 79" in server.gpus[0]["health_reason"]
    step_until(agent, server, lambda: server.gpus[0]["healthy"])  # quarantine over
    store.set_lost(uuid, True)
    step_until(agent, server, lambda: not server.gpus[0]["healthy"])
    assert "lost" in server.gpus[0]["health_reason"]
    store.set_lost(uuid, False)
    store.add_ecc_errors(uuid, 3)
    step_until(agent, server, lambda: "3 new uncorrected ECC" in str(server.gpus[0]))
