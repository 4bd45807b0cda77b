"""Starting, watching and stopping job processes, each under a supervisor of its own.

The agent starts `agent.shim` in a new session (so the supervisor's pid is the job's
process group and session id); the supervisor starts the command and records its exit.
Whether a supervisor is alive is read from its run directory's lock, which works the
same for jobs this agent started and for jobs a previous agent process started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from agent import proctree
from agent.accounts import JobAccount
from agent.dirs import UnsafeDirectory, attempt_workdir
from agent.job import JobProcess, RunStore, now
from agent.outcome import classify, stderr_tail
from agent.shim import write_json

# the agent's own credentials: a job (anyone's code) must not be able to act as its node
AGENT_SECRETS = frozenset({"COLLOC_TOKEN"})


def fail_at_start(job: JobProcess, reason: str, exit_code: int | None = None) -> None:
    """End an attempt that could not be started, with why."""
    job.exit_code, job.outcome, job.reason = exit_code, "failed", reason
    job.finished_at = now()


def _log_file(path: Path) -> int:
    """The job's output file, readable by the agent only (the job writes to its fd)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def launch(
    *,
    store: RunStore,
    job: JobProcess,
    command: list[str],
    env: dict[str, str],
    workdir: str | None,
    extra_env: dict[str, str],
    account: JobAccount,
    work_root: Path,
) -> None:
    """Start the command as `account` with only its GPUs visible, in a clean environment
    (the account's login variables, the spec's, Colloc's); a start failure is a failed
    exit. Without a `workdir` the job gets a fresh directory of its own in `work_root`."""
    job.stdout_path.parent.mkdir(parents=True, exist_ok=True)
    job.run_dir.mkdir(parents=True, exist_ok=True)
    job_env = {
        **account.environment(),
        **env,
        **extra_env,
        "CUDA_VISIBLE_DEVICES": ",".join(job.gpu_uuids),
        "COLLOC_JOB_ID": str(job.job_id),
        "COLLOC_ATTEMPT": str(job.attempt),
    }
    try:
        cwd = workdir or str(attempt_workdir(work_root, job.run_dir.name, account))
    except (OSError, UnsafeDirectory) as exc:
        fail_at_start(job, f"cannot make the job's working directory: {exc}")
        store.save(job)
        return
    write_json(
        job.run_dir / "spec.json",
        {
            "command": command,
            "env": job_env,
            "workdir": cwd,
            "account": {
                "name": account.name,
                "uid": account.uid,
                "gid": account.gid,
                "groups": list(account.groups),
                "switch": account.switch,
            },
        },
    )
    store.save(job)  # first the record, so a restart knows of the attempt
    lock = os.open(job.run_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    out, err = _log_file(job.stdout_path), _log_file(job.stderr_path)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # handed to the supervisor, held while it lives
        job.popen = subprocess.Popen(
            [sys.executable, "-m", "agent.shim", str(job.run_dir)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            pass_fds=(lock,),
            env={k: v for k, v in os.environ.items() if k not in AGENT_SECRETS},
            cwd=job.run_dir,  # never the agent's own directory
        )
        job.pid = job.popen.pid
    except OSError as exc:
        fail_at_start(job, f"cannot start the job's supervisor: {exc.strerror or exc}", 127)
    finally:
        for fd in (lock, out, err):
            os.close(fd)
    store.save(job)


def supervisor_alive(run_dir: Path) -> bool:
    """Whether the run's supervisor still holds its lock."""
    try:
        probe = os.open(run_dir / "lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(probe)  # also releases the probe's own lock
    return False


def adopt(job: JobProcess, wait_s: float = 5.0) -> bool:
    """Take up a job recorded by an earlier agent; False if it never started.

    A record without a pid was written just before a launch that the earlier agent
    may not have finished: a live supervisor then says so in its pid file.
    """
    if job.pid is not None or job.outcome is not None:
        return True
    pid_file = job.run_dir / "pid"
    deadline = time.monotonic() + wait_s
    while supervisor_alive(job.run_dir) and not pid_file.exists():
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if pid_file.exists():
        job.pid = int(pid_file.read_text(encoding="utf-8") or 0) or None
    return job.pid is not None or (job.run_dir / "exit.json").exists()


def poll(job: JobProcess) -> bool:
    """Record the exit if the job has ended; whether it has."""
    if job.outcome is not None:
        return True
    if supervisor_alive(job.run_dir):
        return False
    if job.popen is not None:
        job.popen.wait()  # reap our own child
    exit_code: int | None = None
    error = None
    finished_at = now()
    with contextlib.suppress(OSError, ValueError, KeyError):
        status = json.loads((job.run_dir / "exit.json").read_text(encoding="utf-8"))
        exit_code, error = status["exit_code"], status["error"]
        finished_at = datetime.fromisoformat(status["finished_at"])
    if exit_code is None and job.kill_sent:
        exit_code = -signal.SIGKILL  # the supervisor died with the job
    _signal_group(job, signal.SIGKILL)  # stragglers left in the group die with the job
    job.exit_code, job.finished_at = exit_code, finished_at
    job.outcome, job.reason = classify(
        exit_code,
        stderr_tail(job.stderr_path),
        cancelled=job.term_sent_at is not None and job.enforced is None,
        gpu_full=job.gpu_full,
    )
    if error is not None and job.outcome == "failed":
        job.reason = error
    if job.enforced is not None and job.outcome != "succeeded":
        job.outcome, job.reason = "oom", job.enforced
    if job.confined is not None and job.outcome != "succeeded":
        job.outcome, job.reason = "failed", job.confined
    if job.fenced is not None and job.outcome != "succeeded":  # the server reruns it
        job.outcome, job.reason = "lost", job.fenced
    return True


def _signal_group(job: JobProcess, signum: int) -> None:
    """Signal the job's process group, and whatever of its tree has left the group."""
    if job.pid is None:
        return
    tree = proctree.members(job.pid)  # before any of it dies and its children are orphaned
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signum)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def terminate(job: JobProcess) -> None:
    """Ask the job's whole process group to stop (SIGTERM)."""
    if job.outcome is None and job.term_sent_at is None:
        job.term_sent_at = time.time()
        _signal_group(job, signal.SIGTERM)


def kill(job: JobProcess) -> None:
    """SIGKILL the job's whole process group, supervisor included."""
    if job.outcome is None:
        job.kill_sent = True
        _signal_group(job, signal.SIGKILL)


def kill_if_overdue(job: JobProcess, grace_s: float) -> None:
    """SIGKILL a process group that has ignored SIGTERM for `grace_s`."""
    overdue = job.term_sent_at is not None and time.time() - job.term_sent_at >= grace_s
    if overdue and not job.kill_sent:
        kill(job)
