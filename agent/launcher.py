"""Starting and stopping job processes, each in its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.outcome import classify, stderr_tail


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class JobProcess:
    """One attempt this agent runs, from launch until the server acknowledges its exit."""

    job_id: int
    attempt: int
    gpu_uuids: list[str]
    stdout_path: Path
    stderr_path: Path
    popen: subprocess.Popen[bytes] | None
    started_at: datetime = field(default_factory=_now)
    peak_mib_by_gpu: dict[str, int] = field(default_factory=dict)
    term_sent_at: float | None = None
    exit_code: int | None = None
    finished_at: datetime | None = None
    outcome: str | None = None
    reason: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.attempt)

    @property
    def pgid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def report(self) -> dict[str, Any]:
        """This attempt as a heartbeat carries it."""
        body: dict[str, Any] = {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "state": "running" if self.outcome is None else "exited",
            "started_at": self.started_at.isoformat(),
            "peak_mib_by_gpu": dict(self.peak_mib_by_gpu),
        }
        if self.outcome is not None:
            assert self.finished_at is not None
            body.update(
                finished_at=self.finished_at.isoformat(),
                exit_code=self.exit_code,
                outcome=self.outcome,
                reason=self.reason,
            )
        return body


def launch(
    *,
    job_id: int,
    attempt: int,
    command: list[str],
    env: dict[str, str],
    workdir: str | None,
    gpu_uuids: list[str],
    logs_dir: Path,
    extra_env: dict[str, str],
) -> JobProcess:
    """Start the command with only its GPUs visible; a start failure is a failed exit."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    stem = logs_dir / f"job-{job_id}-attempt-{attempt}"
    job = JobProcess(
        job_id, attempt, gpu_uuids, stem.with_suffix(".out"), stem.with_suffix(".err"), None
    )
    full_env = {
        **os.environ,
        **env,
        **extra_env,
        "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids),
        "COLLOC_JOB_ID": str(job_id),
        "COLLOC_ATTEMPT": str(attempt),
    }
    with open(job.stdout_path, "ab") as out, open(job.stderr_path, "ab") as err:
        try:
            job.popen = subprocess.Popen(
                command,
                env=full_env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            message = f"cannot start {command[0]!r}: {exc.strerror or exc}"
            err.write((message + "\n").encode())
            job.exit_code, job.outcome, job.reason = 127, "failed", message
            job.finished_at = _now()
    return job


def poll(job: JobProcess) -> bool:
    """Record the exit if the process has ended; whether it has."""
    if job.outcome is not None:
        return True
    assert job.popen is not None
    exit_code = job.popen.poll()
    if exit_code is None:
        return False
    job.exit_code = exit_code
    job.finished_at = _now()
    _signal_group(job, signal.SIGKILL)  # stragglers left in the group die with the job
    cancelled = job.term_sent_at is not None
    job.outcome, job.reason = classify(exit_code, stderr_tail(job.stderr_path), cancelled)
    return True


def _signal_group(job: JobProcess, signum: int) -> None:
    if job.pgid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pgid, signum)


def terminate(job: JobProcess) -> None:
    """Ask the job's whole process group to stop (SIGTERM)."""
    if job.outcome is None and job.term_sent_at is None:
        job.term_sent_at = time.monotonic()
        _signal_group(job, signal.SIGTERM)


def kill_if_overdue(job: JobProcess, grace_s: float) -> None:
    """SIGKILL a process group that has ignored SIGTERM for `grace_s`."""
    overdue = job.term_sent_at is not None and time.monotonic() - job.term_sent_at >= grace_s
    if job.outcome is None and overdue:
        _signal_group(job, signal.SIGKILL)
