"""The agent as an operator runs it: killed with -9 and restarted while its jobs run,
and a server outage of tens of seconds; nothing is lost, launched twice or orphaned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import LocalColloc, running, simjob


@pytest.fixture
def colloc(tmp_path: Path, database_url: str) -> Iterator[LocalColloc]:
    # the outage below must be shorter than the lease less 2 heartbeats, or the agent
    # fences (stops) its jobs: it cannot tell a server outage from a partition
    with running(tmp_path, database_url, {"COLLOC_NODE_LEASE_S": "60"}) as local:
        yield local


def submit(colloc: LocalColloc, name: str, command: list[str], mib: int) -> int:
    spec = {"name": name, "command": command, "memory_mib": mib, "gpu_models": ["T4"]}
    response = colloc.http.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def peak_seen(peak: int, job: dict[str, Any]) -> bool:
    return bool(job["attempts"]) and job["attempts"][-1]["peak_mib"] == peak


def test_agent_kill_9_and_server_outage(colloc: LocalColloc) -> None:
    long = submit(colloc, "long", simjob(2000, 60), 3000)  # outlives the next ~40 s
    short = submit(colloc, "short", [*simjob(1000, 4), "--sm-pct", "10"], 2000)
    for job_id, peak in ((long, 2000), (short, 1000)):
        colloc.wait_until(job_id, partial(peak_seen, peak), f"showed its {peak} MiB peak")
    # the agent dies hard: the jobs go on holding their GPU memory
    colloc.kill_agent("node-b")
    time.sleep(6)  # the short job ends while no agent watches it
    assert sorted(colloc.gpu_used_mib().values())[-1] >= 2000
    colloc.start_agent("node-b")
    done = colloc.wait_for(short, {"succeeded", "failed", "oom", "lost"}, timeout_s=60)
    assert done["state"] == "succeeded" and len(done["attempts"]) == 1
    assert done["attempts"][0]["peak_mib"] == 1000
    # the server goes away for tens of seconds; the long job keeps running
    colloc.kill_server()
    time.sleep(25)
    assert sorted(colloc.gpu_used_mib().values())[-1] >= 2000
    colloc.start_server()
    job = colloc.wait_for(long, {"succeeded", "failed", "oom", "lost"}, timeout_s=90)
    assert job["state"] == "succeeded" and len(job["attempts"]) == 1
    assert job["attempts"][0]["peak_mib"] == 2000
    logs = colloc.cli("logs", str(long), "--follow")
    assert logs.returncode == 0 and "simjob: done" in logs.stdout, logs.stderr
