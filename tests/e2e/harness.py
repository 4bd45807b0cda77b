"""A real Colloc on this machine for end-to-end tests: server and agents as processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import bearer, make_token

FINAL = {"succeeded", "failed", "oom", "cancelled", "lost"}

FAST = {"COLLOC_HEARTBEAT_INTERVAL_S": "0.5", "COLLOC_SCHEDULE_INTERVAL_S": "0.3"}

CLUSTER = {
    "nodes": [
        {"name": "node-a", "gpus": [{"model": "NVIDIA A100-SXM4-40GB", "count": 1}]},
        {"name": "node-b", "gpus": [{"model": "Tesla T4", "count": 2}]},
    ]
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LocalColloc:
    """Starts, restarts and stops one server and one simulated agent per node."""

    def __init__(self, root: Path, database_url: str, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.database_url = database_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cluster_file = root / "cluster.yaml"
        self.cluster_file.write_text(yaml.safe_dump(CLUSTER))
        self.server: subprocess.Popen[bytes] | None = None
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.admin_token = make_token(database_url, "admin", "admin")
        self.agent_tokens = {
            str(node["name"]): make_token(database_url, "agent", str(node["name"]))
            for node in CLUSTER["nodes"]
        }
        self.http = httpx.Client(base_url=self.url, timeout=10, headers=bearer(self.admin_token))
        scripts = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            **FAST,
            **(env or {}),
            "COLLOC_SERVER": self.url,
            "COLLOC_TOKEN": self.admin_token,
            "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")]),
        }

    def _spawn(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (owned by the process)
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args],
            env=env or self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def start_server(self) -> None:
        self.server = self._spawn(
            "server", "server", "--port", str(self.port), "--db", self.database_url
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.server.poll() is None, self.log("server")
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("server did not start:\n" + self.log("server"))

    def kill_server(self) -> None:
        assert self.server is not None
        self.server.send_signal(signal.SIGKILL)
        self.server.wait(timeout=30)

    def start_agents(self) -> None:
        """Every node's agent, returning once each has registered (a job submitted
        before its GPUs are known is refused as one no node can ever hold)."""
        for node in CLUSTER["nodes"]:
            self.start_agent(str(node["name"]))
        names = {str(node["name"]) for node in CLUSTER["nodes"]}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                nodes = self.http.get("/v1/admin/cluster").json()["nodes"]
                if names <= {node["name"] for node in nodes}:
                    return
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.2)
        raise AssertionError(
            "agents never registered\n"
            + "".join(self.log(f"agent-{name}") for name in sorted(names))
        )

    def start_agent(self, name: str, *extra: str, run_jobs_as: str = "agent") -> None:
        """The node's agent; tests' agents stop their jobs when stopped (not when killed).

        Its token comes from a file of its own (never the admin's, never a flag). Jobs
        run as the test's own account, as in `colloc up` (root in CI), or with
        `run_jobs_as="owner"` as their owners' accounts (root refused)."""
        token_file = self.root / f"agent-{name}.token"
        token_file.touch(mode=0o600)
        token_file.write_text(self.agent_tokens[name])
        self.agents[name] = self._spawn(
            f"agent-{name}",
            "agent",
            "--simulate",
            str(self.cluster_file),
            "--node",
            name,
            "--sim-state",
            str(self.root / "sim"),
            "--state-dir",
            str(self.root / "state" / name),
            "--logs-dir",
            str(self.root / "logs"),
            "--kill-grace",
            "2",
            "--max-backoff",
            "2",
            "--work-dir",
            str(self.root / "work" / name),
            "--stop-jobs-on-exit",
            "--stop-adopted-jobs-on-exit",  # those an agent killed earlier left too
            "--token-file",
            str(token_file),
            "--run-jobs-as",
            run_jobs_as,
            *(["--allow-root-jobs"] if run_jobs_as == "agent" else []),
            *extra,
            env={k: v for k, v in self.env.items() if k != "COLLOC_TOKEN"},
        )

    def kill_agent(self, name: str) -> None:
        """kill -9 the node's agent: its jobs live on."""
        agent = self.agents.pop(name)
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)

    def stop(self) -> None:
        for process in [*self.agents.values(), self.server]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [*self.agents.values(), self.server]:
            if process is not None:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        self.http.close()

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-5000:] if path.exists() else ""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def job(self, job_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.http.get(f"/v1/jobs/{job_id}").json()
        return result

    def wait_until(
        self, job_id: int, done: Callable[[dict[str, Any]], bool], what: str, timeout_s: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                job = self.job(job_id)
                if done(job):
                    return job
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(
            f"job {job_id} never {what}: {self.job(job_id)}\n"
            + self.log("server")
            + "".join(self.log(f"agent-{n['name']}") for n in CLUSTER["nodes"])
        )

    def wait_for(self, job_id: int, states: set[str], timeout_s: float = 60) -> dict[str, Any]:
        return self.wait_until(
            job_id, lambda job: job["state"] in states, f"reached {states}", timeout_s
        )

    def gpu_used_mib(self) -> dict[str, int]:
        """What the simulated GPUs hold right now, from their shared state files."""
        used = {}
        for path in (self.root / "sim").glob("GPU-*.json"):
            state = yaml.safe_load(path.read_text())
            used[state["uuid"]] = sum(p["mib"] for p in state["processes"].values())
        return used


@contextmanager
def running(
    root: Path, database_url: str, env: dict[str, str] | None = None
) -> Iterator[LocalColloc]:
    """A started server and agents, stopped afterwards."""
    local = LocalColloc(root, database_url, env)
    local.start_server()
    local.start_agents()
    try:
        yield local
    finally:
        local.stop()


def simjob(peak: int | str, seconds: float, ramp: float = 1.0) -> list[str]:
    """The command of a simulated training job."""
    return [
        "colloc",
        "simjob",
        "--peak-mib",
        str(peak),
        "--seconds",
        str(seconds),
        "--ramp-seconds",
        str(ramp),
    ]
