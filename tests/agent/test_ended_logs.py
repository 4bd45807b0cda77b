"""Ended jobs' output files on the node: once the server holds a job's exit and all of
its output, its files move to `logs_dir/ended`, and only files there are removed, past
their age or, oldest first, past the size limit; a running job's files never are."""

from __future__ import annotations

import os
from pathlib import Path

from agent import logkeep
from tests.agent.test_daemon import SIMJOB, FakeServer, assign, make_agent, step_until

NOW = 1_000_000.0
DAY = 86_400.0


def _ended_file(ended: Path, name: str, age_s: float, size: int) -> int:
    """A file in `ended` moved there `age_s` ago; returns the bytes it holds on disk."""
    path = ended / name
    path.write_bytes(b"x" * size)
    os.utime(path, (NOW - age_s, NOW - age_s))
    return path.stat().st_blocks * 512


def test_files_past_their_age_go_then_the_oldest_past_the_size_limit(tmp_path: Path) -> None:
    ended = tmp_path / "ended"
    ended.mkdir()
    ages = {"job-1-attempt-1.out": 9 * DAY, "job-2-attempt-1.out": 3 * DAY,
            "job-3-attempt-1.out": 2 * DAY, "job-4-attempt-1.out": DAY}  # fmt: skip
    held = {name: _ended_file(ended, name, age, 64 * 1024) for name, age in ages.items()}
    assert logkeep.sweep(ended, keep_s=7 * DAY, max_bytes=10**9, now=NOW) == 1
    assert sorted(p.name for p in ended.iterdir()) == sorted(ages)[1:]
    # room for the newest two: the older of the three left goes
    room = held["job-3-attempt-1.out"] + held["job-4-attempt-1.out"]
    assert logkeep.sweep(ended, keep_s=7 * DAY, max_bytes=room, now=NOW) == 1
    assert sorted(p.name for p in ended.iterdir()) == sorted(ages)[2:]
    assert logkeep.sweep(ended, keep_s=7 * DAY, max_bytes=room, now=NOW) == 0


def test_a_shipped_jobs_files_move_and_go_and_a_running_jobs_stay(tmp_path: Path) -> None:
    server = FakeServer()
    agent = make_agent(
        tmp_path, server, ended_logs_keep_s=0.0, ended_logs_max_bytes=0, stop_jobs_on_exit=True
    )
    logs = tmp_path / "logs"
    assign(agent, server, 1, [*SIMJOB, "--peak-mib", "1000", "--seconds", "600"], 2000)
    assign(agent, server, 2, [*SIMJOB, "--peak-mib", "1000", "--seconds", "0.5"], 2000)
    step_until(agent, server, lambda: list(agent.jobs) == [(1, 1)])  # 2 ended, all shipped
    assert b"simjob: done" in server.logs[(2, 1, "stdout")]
    moved = sorted(p.name for p in (logs / "ended").iterdir())
    assert moved == ["job-2-attempt-1.err", "job-2-attempt-1.out"]
    assert agent.sweep_ended_logs() == 2  # nothing is kept (keep 0 s, 0 bytes)...
    assert not list((logs / "ended").iterdir())
    # ...but the running job's files, outside `ended`, are never looked at
    assert {p.name for p in logs.glob("job-1-*")} == {"job-1-attempt-1.out", "job-1-attempt-1.err"}
    agent.shutdown()  # stops it
