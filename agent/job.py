"""One attempt the agent runs, and its record on disk that outlives the agent.

Each attempt has a run directory (`STATE_DIR/runs/job-J-attempt-A/`) holding
`job.json` (this record, rewritten whole whenever it changes), the supervisor's
`spec.json`, `lock`, `pid` and, once the job ended, `exit.json`. A restarted agent
rebuilds its jobs from these directories and goes on watching them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent import bounds
from agent.protocol import (
    AttemptReport,
    LogChunk,
    Notice,
    NoticeAction,
    NoticeKind,
    Outcome,
    Stream,
)
from agent.shim import write_json

STREAMS: tuple[Stream, ...] = ("stdout", "stderr")


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class JobProcess:
    """An attempt from launch until the server has its exit and all of its logs."""

    job_id: int
    attempt: int
    gpu_uuids: list[str]
    run_dir: Path
    stdout_path: Path
    stderr_path: Path
    # the reservation the attempt was placed with, per GPU: what enforcement holds it to
    limit_mib_by_gpu: dict[str, int] = field(default_factory=dict)
    started_at: datetime = field(default_factory=now)
    pid: int | None = None  # the supervisor's: also the job's process group and session
    peak_mib_by_gpu: dict[str, int] = field(default_factory=dict)
    used_mib_by_gpu: dict[str, int] = field(default_factory=dict)
    term_sent_at: float | None = None  # wall clock, so it survives a restart
    kill_sent: bool = False
    enforced: str | None = None  # why the agent killed it for its memory
    gpu_full: str | None = None  # a GPU of the job was full at the last sample
    over_limit: list[str] = field(default_factory=list)  # GPUs it was reported over on
    # GPUs it was not given but used, and what it holds there now; why it was stopped
    strayed_on: list[str] = field(default_factory=list)
    stray_mib_by_gpu: dict[str, int | None] = field(default_factory=dict)  # None: unknown
    confined: str | None = None
    fenced: str | None = None  # why the agent stopped it itself: the server went silent
    notices: list[Notice] = field(default_factory=list)  # not yet delivered
    notice_seq: int = 0  # the last notice's number
    log_sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    exit_code: int | None = None
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[int, int]:
        return (self.job_id, self.attempt)

    def log_path(self, stream: str) -> Path:
        return self.stdout_path if stream == "stdout" else self.stderr_path

    def notify(
        self,
        *,
        kind: NoticeKind,
        gpu_uuid: str,
        used_mib: int | None,
        reserved_mib: int,
        action: NoticeAction,
        message: str,
    ) -> None:
        """Queue a notice for the server, numbered so that it is recorded once."""
        self.notice_seq += 1
        notice = Notice(
            seq=self.notice_seq,
            kind=kind,
            gpu_uuid=gpu_uuid,
            used_mib=bounds.optional_mib(used_mib),
            reserved_mib=bounds.mib(reserved_mib),
            action=action,
            message=bounds.text(message),
        )
        self.notices.append(notice)

    def report(self, logs: list[LogChunk]) -> AttemptReport:
        """This attempt as a heartbeat carries it, within the bounds the server accepts."""
        running = self.outcome is None
        fields: dict[str, Any] = {}
        if running and self.stray_mib_by_gpu:  # left out when empty: older servers
            fields["unassigned_mib_by_gpu"] = {
                uuid: bounds.optional_mib(used) for uuid, used in self.stray_mib_by_gpu.items()
            }
        if not running:
            fields.update(
                finished_at=self.finished_at,
                exit_code=bounds.exit_code(self.exit_code),
                outcome=self.outcome,
                reason=bounds.optional_text(self.reason),
            )
        return AttemptReport(
            job_id=self.job_id,
            attempt=self.attempt,
            state="running" if running else "exited",
            started_at=self.started_at,
            peak_mib_by_gpu=bounds.mib_by_gpu(self.peak_mib_by_gpu),
            current_mib_by_gpu=bounds.mib_by_gpu(self.used_mib_by_gpu) if running else {},
            notices=list(self.notices),
            logs=logs,
            **fields,
        )

    # -- the record on disk ---------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "gpu_uuids": self.gpu_uuids,
            "stdout_path": str(self.stdout_path),
            "stderr_path": str(self.stderr_path),
            "limit_mib_by_gpu": self.limit_mib_by_gpu,
            "started_at": self.started_at.isoformat(),
            "pid": self.pid,
            "peak_mib_by_gpu": self.peak_mib_by_gpu,
            "term_sent_at": self.term_sent_at,
            "kill_sent": self.kill_sent,
            "enforced": self.enforced,
            "over_limit": self.over_limit,
            "strayed_on": self.strayed_on,
            "confined": self.confined,
            "fenced": self.fenced,
            "notices": [notice.model_dump(mode="json") for notice in self.notices],
            "notice_seq": self.notice_seq,
            "log_sent": self.log_sent,
            "exit_code": self.exit_code,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "outcome": self.outcome,
            "reason": self.reason,
        }

    @classmethod
    def from_record(cls, run_dir: Path, record: dict[str, Any]) -> JobProcess:
        finished = record["finished_at"]
        return cls(
            job_id=record["job_id"],
            attempt=record["attempt"],
            gpu_uuids=record["gpu_uuids"],
            run_dir=run_dir,
            stdout_path=Path(record["stdout_path"]),
            stderr_path=Path(record["stderr_path"]),
            limit_mib_by_gpu=record["limit_mib_by_gpu"],
            started_at=datetime.fromisoformat(record["started_at"]),
            pid=record["pid"],
            peak_mib_by_gpu=record["peak_mib_by_gpu"],
            term_sent_at=record["term_sent_at"],
            kill_sent=record["kill_sent"],
            enforced=record["enforced"],
            over_limit=record["over_limit"],
            # records an agent wrote before GPU confinement existed lack these keys
            strayed_on=record.get("strayed_on", []),
            confined=record.get("confined"),
            fenced=record.get("fenced"),  # not in records written before self-fencing
            notices=[Notice.model_validate(notice) for notice in record["notices"]],
            notice_seq=record.get("notice_seq", len(record["over_limit"])),
            log_sent=record["log_sent"],
            exit_code=record["exit_code"],
            finished_at=datetime.fromisoformat(finished) if finished else None,
            outcome=record["outcome"],
            reason=record["reason"],
        )


class RunStore:
    """The run directories of one agent; writes only what changed."""

    def __init__(self, state_dir: Path) -> None:
        self.runs = state_dir / "runs"
        self._written: dict[Path, dict[str, Any]] = {}

    def run_dir(self, job_id: int, attempt: int) -> Path:
        return self.runs / f"job-{job_id}-attempt-{attempt}"

    def save(self, job: JobProcess) -> None:
        record = job.to_record()
        if self._written.get(job.run_dir) == record:
            return
        job.run_dir.mkdir(parents=True, exist_ok=True)
        write_json(job.run_dir / "job.json", record)
        self._written[job.run_dir] = record

    def load_all(self) -> list[JobProcess]:
        """Every attempt recorded here, oldest first; unreadable records are skipped."""
        jobs = []
        for path in sorted(self.runs.glob("job-*-attempt-*/job.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                job = JobProcess.from_record(path.parent, record)
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a run directory left half-made: nothing was started from it
            self._written[job.run_dir] = record
            jobs.append(job)
        return jobs

    def remove(self, job: JobProcess) -> None:
        self._written.pop(job.run_dir, None)
        shutil.rmtree(job.run_dir, ignore_errors=True)
