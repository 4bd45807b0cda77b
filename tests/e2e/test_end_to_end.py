"""Colloc end to end: real server and agents as processes, jobs through CLI and HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import FINAL, LocalColloc, running, simjob


@pytest.fixture
def colloc(tmp_path: Path, database_url: str) -> Iterator[LocalColloc]:
    with running(tmp_path, database_url) as local:
        yield local


def submit_file(colloc: LocalColloc, spec: dict[str, Any]) -> int:
    path = colloc.root / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = colloc.cli("submit", str(path), "--json")
    assert result.returncode == 0, result.stderr
    return int(json.loads(result.stdout)["id"])


def submit_http(colloc: LocalColloc, spec: dict[str, Any]) -> int:
    response = colloc.http.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def test_jobs_run_collocate_oom_cancel_and_survive_a_server_restart(
    colloc: LocalColloc,
) -> None:
    env_probe = submit_file(
        colloc,
        {
            "name": "env-probe",
            "memory_mib": 1000,
            "workdir": str(colloc.root),
            "command": ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES > visible.txt"],
        },
    )
    small = [
        submit_file(
            colloc,
            {
                "name": f"small-{i}",
                "memory_mib": 5000,
                "gpu_models": ["A100-40GB"],
                "command": simjob("4000", 3, ramp=0.5),
            },
        )
        for i in range(2)
    ]
    gang = submit_http(
        colloc,
        {"name": "gang", "gpus": 2, "memory_mib": 3000, "command": simjob("T4=2500", 2, ramp=0.5)},
    )
    probe = colloc.wait_for(env_probe, FINAL)
    assert probe["state"] == "succeeded"
    visible = (colloc.root / "visible.txt").read_text().strip()
    assert visible == ",".join(g["uuid"] for g in probe["attempts"][0]["gpus"])

    # two jobs share the A100 at once: both running, one GPU, both reservations on it
    both = [colloc.wait_for(job_id, {"running"}) for job_id in small]
    assert {j["attempts"][0]["gpus"][0]["uuid"] for j in both} == {
        both[0]["attempts"][0]["gpus"][0]["uuid"]
    }
    for job_id in small:
        done = colloc.wait_for(job_id, FINAL)
        attempt = done["attempts"][0]
        assert done["state"] == "succeeded" and done["exit_code"] == 0
        assert attempt["peak_mib"] == 4000 and attempt["reserved_mib"] == 5000
        assert attempt["started_at"] and attempt["finished_at"]

    whole = colloc.wait_for(gang, FINAL)
    assert whole["state"] == "succeeded"
    gpus = whole["attempts"][0]["gpus"]
    assert len(gpus) == 2 and {g["model"] for g in gpus} == {"Tesla T4"}

    # a job that claims far less than it takes; submitted once the gang is done, since
    # on the T4 it shares it would take the gang's memory too, and which of the two
    # dies first is then a matter of timing
    oom = submit_http(
        colloc,
        {
            "name": "underclaimed",
            "memory_mib": 8000,
            "max_attempts": 1,
            "gpu_models": ["T4"],
            "command": simjob("20000", 5, ramp=1),
        },
    )

    failed = colloc.wait_for(oom, FINAL)
    assert failed["state"] == "oom" and failed["exit_code"] == 1
    assert "CUDA out of memory" in failed["attempts"][0]["reason"]

    # cancel a running job: its process group is stopped and its memory freed
    doomed = submit_http(
        colloc, {"name": "doomed", "memory_mib": 2000, "command": simjob("1500", 120, ramp=0.5)}
    )
    colloc.wait_for(doomed, {"running"})
    result = colloc.cli("cancel", str(doomed))
    assert result.returncode == 0 and "cancel" in result.stdout
    assert colloc.wait_for(doomed, FINAL)["state"] == "cancelled"

    # the server dies while a job runs; the job finishes and nothing is lost
    survivor = submit_http(
        colloc, {"name": "survivor", "memory_mib": 2000, "command": simjob("1000", 4, ramp=0.5)}
    )
    colloc.wait_for(survivor, {"running"})
    before = colloc.http.get("/v1/jobs").json()["total"]
    colloc.kill_server()
    time.sleep(2)
    colloc.start_server()
    assert colloc.wait_for(survivor, FINAL)["state"] == "succeeded"
    after = colloc.http.get("/v1/jobs").json()
    assert after["total"] == before
    assert {j["state"] for j in after["jobs"]} <= FINAL
    assert set(colloc.gpu_used_mib().values()) == {0}
    nodes = colloc.http.get("/v1/admin/cluster").json()["nodes"]
    assert all(gpu["memory_reserved_mib"] == 0 for node in nodes for gpu in node["gpus"])

    listing = colloc.cli("jobs")
    assert listing.returncode == 0 and "survivor" in listing.stdout and "oom" in listing.stdout
    shown = colloc.cli("show", str(oom))
    assert shown.returncode == 0 and "state: oom" in shown.stdout and "peak" in shown.stdout


def test_cli_reports_bad_input_without_tracebacks(colloc: LocalColloc) -> None:
    bad_yaml = colloc.root / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    not_a_job = colloc.root / "list.yaml"
    not_a_job.write_text("- 1\n- 2\n")
    unknown_model = colloc.root / "unknown.yaml"
    unknown_model.write_text("name: x\ncommand: [echo]\ngpu_models: [Z900]\n")
    never_fits = colloc.root / "huge.yaml"
    never_fits.write_text("name: x\ncommand: [echo]\nmemory_mib: 900000\n")
    cases = [
        (["submit", str(bad_yaml)], 2, "not valid YAML"),
        (["submit", str(not_a_job)], 2, "must hold one job"),
        (["submit", str(colloc.root / "missing.yaml")], 2, "cannot read"),
        (["submit", str(unknown_model)], 1, "unknown GPU model(s): Z900"),
        (["submit", str(never_fits)], 1, "can ever hold"),
        (["show", "9999"], 1, "job 9999 does not exist"),
        (["jobs", "--server", "http://127.0.0.1:9"], 1, "cannot reach Colloc"),
    ]
    for args, status, message in cases:
        result = colloc.cli(*args)
        assert result.returncode == status, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
