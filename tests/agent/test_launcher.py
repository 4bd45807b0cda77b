"""Launching jobs under their supervisor, stopping their process groups, classifying
exits, and taking jobs up again from their run records after the agent is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import proctree
from agent.accounts import Identity
from agent.job import JobProcess, RunStore
from agent.launcher import adopt, kill_if_overdue, launch, poll, supervisor_alive, terminate
from agent.outcome import classify

# the test's own account, root included (CI runs as root)
OWN_ACCOUNT = Identity("agent", allow_root_jobs=True).resolve(None)


def new_job(tmp_path: Path, job_id: int = 7, attempt: int = 2) -> tuple[RunStore, JobProcess]:
    store = RunStore(tmp_path / "state")
    stem = tmp_path / "logs" / f"job-{job_id}-attempt-{attempt}"
    job = JobProcess(
        job_id=job_id,
        attempt=attempt,
        gpu_uuids=["GPU-a", "GPU-b"],
        run_dir=store.run_dir(job_id, attempt),
        stdout_path=stem.with_suffix(".out"),
        stderr_path=stem.with_suffix(".err"),
    )
    return store, job


def start(tmp_path: Path, code: str, **env: str) -> tuple[RunStore, JobProcess]:
    store, job = new_job(tmp_path)
    launch(
        store=store,
        job=job,
        command=[sys.executable, "-c", code],
        env=env,
        workdir=str(tmp_path),
        extra_env={"SIM": "1"},
        account=OWN_ACCOUNT,
        work_root=tmp_path / "work",
    )
    return store, job


def wait(job: JobProcess, timeout_s: float = 20, grace_s: float = 10) -> None:
    """Poll until `job` ends, SIGKILLing it `grace_s` after a SIGTERM it ignores (the
    default leaves a slow machine time to act on a SIGTERM it honours)."""
    deadline = time.monotonic() + timeout_s
    while not poll(job):
        assert time.monotonic() < deadline, "job did not end"
        kill_if_overdue(job, grace_s)
        time.sleep(0.05)


def wait_for_file(path: Path) -> str:
    for _ in range(400):
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_job_sees_its_gpus_env_and_workdir_but_not_the_agent_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLLOC_TOKEN", "colloc_the-node-token")
    code = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['MINE'], "
        "os.environ['SIM'], os.environ['COLLOC_JOB_ID'], os.getcwd(), "
        "os.environ.get('COLLOC_TOKEN', 'no-token'))"
    )
    _store, job = start(tmp_path, code, MINE="yes")
    wait(job)
    assert job.outcome == "succeeded" and job.exit_code == 0
    assert job.stdout_path.read_text().split() == [
        "GPU-a,GPU-b",
        "yes",
        "1",
        "7",
        str(tmp_path),
        "no-token",
    ]
    report = job.report(logs=[])
    assert report.state == "exited" and report.outcome == "succeeded"


def start_command(tmp_path: Path, command: list[str], env: dict[str, str]) -> JobProcess:
    """`command` launched as-is, in a fresh directory of its own; ended."""
    store, job = new_job(tmp_path)
    launch(
        store=store,
        job=job,
        command=command,
        env=env,
        workdir=None,
        extra_env={},
        account=OWN_ACCOUNT,
        work_root=tmp_path,
    )
    wait(job)
    return job


def test_missing_command_is_a_failed_exit(tmp_path: Path) -> None:
    job = start_command(tmp_path, ["/no/such/binary"], {})
    assert job.outcome == "failed" and job.exit_code == 127
    assert "cannot start '/no/such/binary'" in (job.reason or "")
    assert "cannot start" in job.stderr_path.read_text()


def test_cancel_escalates_to_sigkill_for_the_whole_group(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    _store, job = start(tmp_path, code)
    child = int(wait_for_file(tmp_path / "child.pid"))
    terminate(job)
    started = time.monotonic()
    wait(job, grace_s=0.5)
    assert time.monotonic() - started >= 0.4  # SIGTERM was ignored until the grace ran out
    assert job.outcome == "cancelled" and job.exit_code == -9
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text()


def test_sigterm_reaches_the_job_and_its_supervisor_records_the_exit(tmp_path: Path) -> None:
    code = "import time, sys; print('up', flush=True); time.sleep(60)"
    _store, job = start(tmp_path, code)
    wait_for_file(job.stdout_path)
    terminate(job)
    wait(job)
    assert job.outcome == "cancelled" and job.exit_code == -15  # the job's own status


def test_a_restarted_agent_takes_up_a_running_job_and_reads_its_exit(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path\n"
        "while not Path('go').exists(): time.sleep(0.05)\n"
        "sys.exit(3)\n"
    )
    _store, job = start(tmp_path, code)
    assert job.popen is not None
    # a new agent process: only the run records are left
    (found,) = RunStore(tmp_path / "state").load_all()
    assert found.key == job.key and found.pid == job.pid and found.popen is None
    assert adopt(found) and supervisor_alive(found.run_dir) and not poll(found)
    (tmp_path / "go").write_text("")
    wait(found)
    assert found.outcome == "failed" and found.exit_code == 3
    assert found.reason == "exited with status 3"
    job.popen.wait()


def test_a_record_whose_launch_never_happened_is_dropped(tmp_path: Path) -> None:
    store, job = new_job(tmp_path)
    store.save(job)  # the record is written before the launch; the agent died in between
    (found,) = RunStore(tmp_path / "state").load_all()
    assert not adopt(found, wait_s=0.2)


def test_gpu_processes_are_matched_to_jobs_through_the_process_tree(tmp_path: Path) -> None:
    code = (
        "import os, subprocess, sys, time\n"
        'inner = \'import os, time; os.setsid(); open("deep.pid", "w").write(str(os.getpid()));'
        " time.sleep(60)'\n"
        "subprocess.Popen([sys.executable, '-c', inner])\n"
        "time.sleep(60)\n"
    )
    _store, job = start(tmp_path, code)
    deep = int(wait_for_file(tmp_path / "deep.pid"))  # a grandchild in a session of its own
    assert job.pid is not None
    roots = {job.pid: job.key}
    assert proctree.owner(deep, roots) == job.key
    assert proctree.owner(os.getpid(), roots) is None
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert proctree.owner(stranger.pid, roots) is None
    finally:
        stranger.kill()
        stranger.wait()
    terminate(job)
    wait(job)
    time.sleep(0.2)
    assert not Path(f"/proc/{deep}").exists() or "Z" in Path(f"/proc/{deep}/stat").read_text()


@pytest.mark.parametrize(
    "code, stderr, cancelled, gpu_full, outcome",
    [
        (0, "", False, None, "succeeded"),
        (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", False, None, "oom"),
        (1, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", False, None, "oom"),
        (1, "tensorflow...ResourceExhaustedError: OOM when allocating tensor", False, None, "oom"),
        (
            1,
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory",
            False,
            None,
            "oom",
        ),
        (1, "ValueError: bad config", False, None, "failed"),
        (-9, "", False, None, "failed"),
        (-6, "", False, "15100 of 15360 MiB in use", "oom"),  # died at the GPU's limit
        (None, "", False, None, "failed"),  # supervisor killed too: status unknown
        (-15, "", True, None, "cancelled"),
    ],
)
def test_exit_classification(
    code: int | None, stderr: str, cancelled: bool, gpu_full: str | None, outcome: str
) -> None:
    assert classify(code, stderr, cancelled=cancelled, gpu_full=gpu_full)[0] == outcome


@pytest.mark.parametrize(
    ("command", "env"),
    [(["/bin/echo", "a\x00b"], {}), (["/bin/echo"], {"MINE": "x\x00y"})],
)
def test_a_nul_in_a_command_or_its_environment_is_a_failed_start(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> None:
    """The API takes any string (SQLite stores a NUL); the supervisor must still record
    the exit instead of dying with a traceback in the job's output."""
    job = start_command(tmp_path, command, env)
    assert job.outcome == "failed" and job.exit_code == 127
    assert "holds embedded null byte" in (job.reason or "")
    assert "Traceback" not in job.stderr_path.read_text()


def test_a_job_holds_no_descriptor_of_the_agent_or_its_supervisor(tmp_path: Path) -> None:
    """The supervisor holds the run's lock and the log files; the job gets its output
    streams as 1 and 2 and nothing else (a lock it held would outlive the supervisor)."""
    code = (
        "import os\n"
        "def is_open(fd):\n"
        "    try:\n"
        "        os.fstat(fd)\n"
        "    except OSError:\n"
        "        return False\n"
        "    return True\n"
        "print([fd for fd in range(3, 4096) if is_open(fd)])\n"
    )
    _store, job = start(tmp_path, code)
    wait(job)
    assert job.outcome == "succeeded", job.stderr_path.read_text()
    assert job.stdout_path.read_text().strip() == "[]"
