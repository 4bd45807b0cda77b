"""The README's walk-through, command by command, against `colloc up`: what each prints."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.harness import FAST, FINAL, free_port


class Up:
    """A running `colloc up` and the client environment its banner gives."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.log = root / "up.log"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service.cli",
                "up",
                "--port",
                str(self.port),
                "--data-dir",
                str(root / "data"),
            ],
            env={**os.environ, **FAST},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while "Press Ctrl-C" not in self.output():
            assert self.process.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.2)
        token = (root / "data" / "admin.token").read_text().strip()
        self.env = {
            **os.environ,
            "COLLOC_SERVER": f"http://127.0.0.1:{self.port}",
            "COLLOC_TOKEN": token,
        }
        while len(json.loads(self.ok("nodes", "-o", "json"))["nodes"]) < 3:
            assert time.monotonic() < deadline, "the agents did not register"
            time.sleep(0.2)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str) -> str:
        result = self.cli(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        return result.stdout

    def submit(self, spec: dict[str, Any]) -> int:
        path = self.root / f"{spec['name']}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return int(self.ok("submit", str(path), "-o", "name"))

    def job(self, job_id: int) -> dict[str, Any]:
        """The job from the API directly: polling through the CLI costs a process a poll."""
        response = httpx.get(
            f"{self.env['COLLOC_SERVER']}/v1/jobs/{job_id}",
            headers={"Authorization": f"Bearer {self.env['COLLOC_TOKEN']}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job

    def wait(self, job_id: int, states: set[str], timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while (job := self.job(job_id))["state"] not in states:
            assert time.monotonic() < deadline, job
            time.sleep(0.3)
        return job

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)  # what `colloc up` stops on, like Ctrl-C
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    running = Up(tmp_path_factory.mktemp("walkthrough"))
    try:
        yield running
    finally:
        running.stop()


def test_the_banner_names_paths_that_exist_and_the_terminal_stays_quiet(up: Up) -> None:
    banner = up.output().split("Colloc is up")[1].split("Press Ctrl-C")[0]
    paths = re.findall(r"(/[\w./-]+)", re.sub(r"http://\S+", "", banner))
    assert any(p.endswith("admin.token") for p in paths)
    assert any(p.endswith("colloc") for p in paths)
    assert any(p.endswith("example-job.yaml") for p in paths)
    for path in paths:
        assert Path(path).exists(), path
    example = next(p for p in paths if p.endswith("example-job.yaml"))
    assert (
        Path(example).read_text() == (Path(__file__).parents[2] / "examples/job.yaml").read_text()
    )
    time.sleep(2)  # several heartbeats
    log = up.output()
    assert "POST /v1/nodes" not in log and "GET /v1/" not in log  # no access log
    assert "alembic" not in log  # no migration steps
    agent_lines = [line for line in log.splitlines() if "agent.daemon" in line]
    assert agent_lines and all(re.match(r"\[node-[abc]\] ", line) for line in agent_lines)


def test_submit_jobs_show_nodes_and_logs(up: Up) -> None:
    job_id = int(up.ok("submit", str(up.root / "data" / "example-job.yaml"), "-o", "name"))
    up.wait(job_id, {"running", *FINAL})  # RESERVED reads "-" until the job is placed
    listing = up.ok("jobs")
    header = listing.splitlines()[0].split()
    assert header == ["ID", "NAME", "OWNER", "STATE", "GPUS", "RESERVED", "AGE", "REASON"]
    row = next(line for line in listing.splitlines() if line.startswith(f"{job_id} "))
    assert "simulated-bert" in row and "admin" in row and "6.8 GiB" in row
    shown = up.ok("show", str(job_id))
    assert "command: colloc simjob --peak-mib 6144 --seconds 30 --ramp-seconds 5" in shown
    assert "memory: 6.8 GiB" in shown and "MiB" not in shown

    nodes = up.ok("nodes").splitlines()
    assert nodes[0].split() == ["NODE", "STATE", "GPUS", "FREE", "RESERVED", "TOTAL", "JOBS"]
    assert any(line.split()[:3] == ["node-b", "ready", "2xT4"] for line in nodes)
    assert any(line.split()[:3] == ["node-a", "ready", "1xA100-40GB"] for line in nodes)
    assert up.ok("nodes", "-o", "name").split() == ["node-a", "node-b", "node-c"]

    quiet = up.submit(
        {"name": "stderr-only", "memory_mib": 500, "command": ["sh", "-c", "echo oops >&2"]}
    )
    assert up.wait(quiet, FINAL)["state"] == "succeeded"
    deadline = time.monotonic() + 30
    while not (logs := up.cli("logs", str(quiet))).stderr.startswith("(no stdout"):
        assert time.monotonic() < deadline, logs.stderr  # the output arrives with a heartbeat
        time.sleep(0.5)
    assert logs.stdout == "" and f"colloc logs {quiet} --stream stderr" in logs.stderr
    assert up.ok("logs", str(quiet), "--stream", "stderr") == "oops\n"
    assert up.cli("logs", str(quiet), "--json").returncode == 2  # not an option of logs


def test_a_gang_job_waits_for_gpus_on_one_node_and_says_so(up: Up) -> None:
    sleeper = ["colloc", "simjob", "--peak-mib", "8000", "--seconds", "120"]
    blocker = up.submit(
        {"name": "blocker", "memory_mib": 9000, "gpu_models": ["T4"], "command": sleeper}
    )
    up.wait(blocker, {"running"})
    gang = up.submit({"name": "gang", "gpus": 2, "memory_mib": 9000, "command": ["sleep", "1"]})
    deadline = time.monotonic() + 30
    while not (reason := up.job(gang)["reason"]):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert reason.startswith("needs 2 GPUs on one node"), reason
    assert "GiB free" not in reason and "the most free" not in reason
    explained = up.ok("show", str(gang), "--explain")
    assert f"why: {reason}" in explained or "why: needs 2 GPUs on one node" in explained
    wide = up.ok("jobs", "-o", "wide", "--state", "pending")
    assert "QUEUE" in wide.splitlines()[0] and "needs 2 GPUs on one node" in wide

    cancelled = up.ok("cancel", str(blocker), str(gang)).splitlines()
    assert cancelled == [f"job {blocker}: cancellation requested", f"job {gang}: cancelled"]
    assert up.wait(blocker, FINAL)["state"] == "cancelled"
    twice = up.cli("cancel", str(gang))
    assert twice.returncode == 1 and "already ended" in twice.stderr


def test_filters_totals_formats_and_watch(up: Up) -> None:
    quick = [
        up.submit({"name": f"quick-{i}", "memory_mib": 500, "command": ["true"]}) for i in range(3)
    ]
    held = up.submit({"name": "held", "memory_mib": 500, "command": ["sleep", "600"]})
    up.ok("cancel", str(held))  # a cancelled job of this test's own, whatever ran before
    assert up.wait(quick[0], FINAL)["state"] == "succeeded"
    assert up.wait(held, FINAL)["state"] == "cancelled"
    total = json.loads(up.ok("jobs", "-o", "json"))["total"]
    assert up.ok("jobs", "--limit", "2").splitlines()[-1] == (
        f"showing 2 of {total} jobs (--limit N shows more)"
    )
    names = up.ok("jobs", "--state", "cancelled,succeeded", "--user", "admin", "-o", "name")
    every = json.loads(up.ok("jobs", "-o", "json", "--limit", "1000"))["jobs"]
    states = {j["state"] for j in every if str(j["id"]) in names.split()}
    assert states == {"cancelled", "succeeded"}
    assert (
        up.ok("jobs", "--queue", "nowhere")
        == "ID  NAME  OWNER  STATE  GPUS  RESERVED  AGE  REASON\nno jobs match\n"
    )

    watch = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "jobs", "--watch", "--interval", "0.5"],
        env=up.env,
        stdout=subprocess.PIPE,
        text=True,
        # Ctrl-C reaches it even when these tests run in the background (SIGINT ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert watch.stdout is not None
    frames = 0
    while frames < 2:
        line = watch.stdout.readline()
        assert line, "the watch ended"
        frames += line.startswith("ID ")
    watch.send_signal(signal.SIGINT)
    assert watch.wait(timeout=30) == 0


def test_errors_speak_of_what_the_user_sets(up: Up) -> None:
    no_token = up.cli("jobs", env={**up.env, "COLLOC_TOKEN": ""})
    assert no_token.returncode == 1 and "COLLOC_TOKEN" in no_token.stderr
    assert "--token" in no_token.stderr and "Authorization" not in no_token.stderr
    shell_line = up.root / "line.yaml"
    shell_line.write_text("name: x\ncommand: python train.py --epochs 3\n")
    refused = up.cli("submit", str(shell_line))
    assert refused.returncode == 2 and 'command: ["python", "train.py"' in refused.stderr
    unknown = up.root / "unknown.yaml"
    unknown.write_text("name: x\ncommand: [echo]\ngpu_models: [Z900]\n")
    answer = up.cli("submit", str(unknown))
    assert "accepted names:" in answer.stderr and "Tesla T4" in answer.stderr
    created = up.cli(
        "token", "create", "--role", "user", "--name", "ana",
        "--db", f"sqlite:///{up.root / 'data' / 'colloc.db'}",
    )  # fmt: skip
    assert created.returncode == 0 and "alembic" not in created.stderr + created.stdout
    assert created.stdout.splitlines()[-1].startswith("colloc_")
