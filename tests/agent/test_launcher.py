"""Launching job processes, stopping their process groups, classifying exits."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agent.launcher import JobProcess, kill_if_overdue, launch, poll, terminate
from agent.outcome import classify


def start(tmp_path: Path, code: str, **env: str) -> JobProcess:
    return launch(
        job_id=7,
        attempt=2,
        command=[sys.executable, "-c", code],
        env=env,
        workdir=str(tmp_path),
        gpu_uuids=["GPU-a", "GPU-b"],
        logs_dir=tmp_path / "logs",
        extra_env={"SIM": "1"},
    )


def wait(job: JobProcess, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not poll(job):
        assert time.monotonic() < deadline, "job did not end"
        kill_if_overdue(job, 0.5)
        time.sleep(0.05)


def test_job_sees_its_gpus_env_and_workdir(tmp_path: Path) -> None:
    code = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['MINE'], "
        "os.environ['SIM'], os.environ['COLLOC_JOB_ID'], os.getcwd())"
    )
    job = start(tmp_path, code, MINE="yes")
    wait(job)
    assert job.outcome == "succeeded" and job.exit_code == 0
    assert job.stdout_path.read_text().split() == ["GPU-a,GPU-b", "yes", "1", "7", str(tmp_path)]
    report = job.report()
    assert report["state"] == "exited" and report["outcome"] == "succeeded"


def test_missing_command_is_a_failed_exit(tmp_path: Path) -> None:
    job = launch(
        job_id=1,
        attempt=1,
        command=["/no/such/binary"],
        env={},
        workdir=None,
        gpu_uuids=["GPU-a"],
        logs_dir=tmp_path,
        extra_env={},
    )
    assert poll(job) and job.outcome == "failed" and job.exit_code == 127
    assert "cannot start" in (job.reason or "")


def test_cancel_escalates_to_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    job = start(tmp_path, code)
    pid_file = tmp_path / "child.pid"
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    terminate(job)
    started = time.monotonic()
    wait(job)
    assert time.monotonic() - started >= 0.4  # SIGTERM was ignored until the grace ran out
    assert job.outcome == "cancelled" and job.exit_code == -9
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()


@pytest.mark.parametrize(
    "code, stderr, cancelled, outcome",
    [
        (0, "", False, "succeeded"),
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", False, "oom"),
        (1, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", False, "oom"),
        (1, "tensorflow...ResourceExhaustedError: OOM when allocating tensor", False, "oom"),
        (
            1,
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory",
            False,
            "oom",
        ),
        (1, "ValueError: bad config", False, "failed"),
        (-9, "", False, "failed"),
        (-15, "", True, "cancelled"),
    ],
)
def test_exit_classification(code: int, stderr: str, cancelled: bool, outcome: str) -> None:
    assert classify(code, stderr, cancelled)[0] == outcome
