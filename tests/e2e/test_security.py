"""Hostile jobs against a real server and agents: a job of an ordinary account looks
everywhere for a secret (tokens, other users' specs, output and files) and finds none;
a job whose command path overflows the report's reason fails cleanly while its node
keeps heartbeating and runs the next job."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.unix_accounts import needs_root, open_directory, unix_account
from tests.conftest import bearer, make_token
from tests.e2e.harness import FINAL, LocalColloc, running

HUNTER = Path(__file__).with_name("hunt_secrets.py")
PYTHON = shutil.which("python3", path="/usr/bin:/bin")  # one every account may run


def _submit(colloc: LocalColloc, token: str, **spec: object) -> int:
    body = {"name": "job", "memory_mib": 1000, **spec}
    response = colloc.http.post("/v1/jobs", json=body, headers=bearer(token))
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def _wait_for_output(colloc: LocalColloc, job_id: int, text: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = colloc.http.get(f"/v1/jobs/{job_id}/logs").json()
        if text in logs.get("text", ""):
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never wrote {text!r}: {colloc.job(job_id)}")


@pytest.fixture
def deployment(database_url: str) -> Iterator[LocalColloc]:
    """Server and agents in a directory every account can pass through, the agents
    root and running jobs as their owners, the admin token beside them as `colloc up`
    keeps it."""
    with open_directory() as root:
        colloc = LocalColloc(root, database_url)
        (root / "admin.token").touch(mode=0o600)
        (root / "admin.token").write_text(colloc.admin_token)
        colloc.start_server()
        try:
            for name in colloc.agent_tokens:
                colloc.start_agent(name, run_jobs_as="owner")
            yield colloc
        finally:
            colloc.stop()


@needs_root
@pytest.mark.skipif(PYTHON is None, reason="needs a system python3 every account can run")
def test_a_job_finds_no_secret_anywhere(deployment: LocalColloc, database_url: str) -> None:
    colloc = deployment
    assert PYTHON is not None
    with unix_account() as victim, unix_account() as hunter:
        victim_token = make_token(database_url, "user", victim.name)
        hunter_token = make_token(database_url, "user", hunter.name)
        victim_job = _submit(
            colloc,
            victim_token,
            # in its environment, not its command line: every process on a node can read
            # every command line (/proc/PID/cmdline), Colloc or not
            env={
                "VICTIM_SECRET": "victim-env-8c1f",
                "FILE_TEXT": "victim-file-5d2a",
                "LOG_TEXT": "victim-log-93be",
            },
            command=[
                "/bin/sh",
                "-c",
                'echo "$FILE_TEXT" > secret.txt; echo "$LOG_TEXT"; sleep 120',
            ],
        )
        _wait_for_output(colloc, victim_job, "victim-log-93be")
        hunter_job = _submit(
            colloc,
            hunter_token,
            command=[PYTHON, str(HUNTER), str(colloc.root)],
        )
        found = colloc.wait_for(hunter_job, FINAL, timeout_s=120)
        assert found["state"] == "succeeded", found
        logs, name = colloc.root / "logs", f"job-{hunter_job}-attempt-1.out"
        try:
            loot = (logs / name).read_bytes()
        except FileNotFoundError:  # the agent moved it once the server held all of it
            loot = (logs / "ended" / name).read_bytes()
        secrets = {
            "the admin token": colloc.admin_token,
            **{f"node {n}'s agent token": t for n, t in colloc.agent_tokens.items()},
            "the victim's token": victim_token,
            "the victim's environment": "victim-env-8c1f",
            "the victim's output": "victim-log-93be",
            "the victim's files": "victim-file-5d2a",
        }
        leaked = [what for what, secret in secrets.items() if secret.encode() in loot]
        assert leaked == [], f"the job found {leaked}"
        # it did look: its own environment, and the agents' command lines
        assert b"== own environment" in loot and b"--token-file" in loot
        assert f"'USER': '{hunter.name}'".encode() in loot
        # the same hunt as the agent's own account (root) finds them: the test can fail
        as_root = subprocess.run(
            [PYTHON, str(HUNTER), str(colloc.root)], capture_output=True, timeout=300
        ).stdout
        assert colloc.admin_token.encode() in as_root and b"victim-file-5d2a" in as_root
        colloc.http.post(f"/v1/jobs/{victim_job}/cancel")
        colloc.wait_for(victim_job, FINAL)


def test_an_overlong_command_path_fails_cleanly_and_the_node_goes_on(
    tmp_path: Path, database_url: str
) -> None:
    with running(tmp_path, database_url) as colloc:
        path = "/" + "x" * 4095  # the longest argument a spec may hold
        bad = colloc.http.post(
            "/v1/jobs",
            json={"name": "long", "memory_mib": 1000, "gpu_models": ["T4"], "command": [path]},
        ).json()["id"]
        failed = colloc.wait_for(bad, FINAL)
        assert failed["state"] == "failed", failed
        reason = failed["attempts"][0]["reason"]
        assert reason.startswith(f"cannot start '{path[:100]}") and len(reason) <= 4096
        assert reason.endswith(" [... truncated]")  # cut by the agent, with a marker
        node = failed["attempts"][0]["node"]
        time.sleep(2)  # a few heartbeats later the node still reports and takes jobs
        nodes = {n["name"]: n for n in colloc.http.get("/v1/admin/cluster").json()["nodes"]}
        assert nodes[node]["state"] == "ready"
        good = colloc.http.post(
            "/v1/jobs",
            json={"name": "next", "memory_mib": 1000, "gpu_models": ["T4"], "command": ["true"]},
        ).json()["id"]
        done = colloc.wait_for(good, FINAL)
        assert done["state"] == "succeeded" and done["attempts"][0]["node"] == node
