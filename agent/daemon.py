"""The agent's main loop: sample GPUs, watch jobs, heartbeat, act on the reply.

Samples are taken every `sample_interval_s` (2 Hz by default) so a job's peak is seen
between heartbeats; jobs keep running and their exits are kept while the server is
unreachable, and are reported once it answers again.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agent import __version__
from agent.backends.base import DeviceBackend, GpuSample
from agent.client import SchedulerClient, ServerError
from agent.launcher import JobProcess, kill_if_overdue, launch, poll, terminate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    name: str
    logs_dir: Path
    sample_interval_s: float = 0.5
    kill_grace_s: float = 10.0
    max_backoff_s: float = 30.0


class Agent:
    def __init__(
        self, client: SchedulerClient, backend: DeviceBackend, config: AgentConfig
    ) -> None:
        self.client = client
        self.backend = backend
        self.config = config
        self.jobs: dict[tuple[int, int], JobProcess] = {}
        self.node_id: int | None = None
        self.heartbeat_interval_s = 2.0
        self._samples: list[GpuSample] = []
        self._failures = 0

    # -- registration and heartbeats ------------------------------------------------

    def register(self) -> None:
        body = {
            "name": self.config.name,
            "agent_version": __version__,
            "gpus": [
                {
                    "uuid": d.uuid,
                    "index": d.index,
                    "model": d.model,
                    "memory_total_mib": d.memory_total_mib,
                }
                for d in self.backend.devices()
            ],
        }
        reply = self.client.register(body)
        self.node_id = int(reply["node_id"])
        self.heartbeat_interval_s = float(reply["heartbeat_interval_s"])
        log.info("registered as node %s (id %s)", self.config.name, self.node_id)

    def heartbeat(self) -> None:
        if self.node_id is None:
            self.register()
        assert self.node_id is not None
        body = {
            "gpus": [self._gpu_state(sample) for sample in self._samples],
            "attempts": [job.report() for job in self.jobs.values()],
        }
        try:
            reply = self.client.heartbeat(self.node_id, body)
        except ServerError as exc:
            if exc.status == 404:  # the server no longer knows this node
                self.node_id = None
            raise
        self._apply(reply)

    def _gpu_state(self, sample: GpuSample) -> dict[str, Any]:
        ours = {job.pgid for job in self.jobs.values() if job.pgid is not None}
        foreign = sum(p.used_mib for p in sample.processes if _process_group(p.pid) not in ours)
        return {
            "uuid": sample.uuid,
            "memory_used_mib": sample.memory_used_mib,
            "memory_foreign_mib": foreign,
            "utilization_pct": sample.utilization_pct,
            "healthy": sample.healthy,
        }

    def _apply(self, reply: dict[str, Any]) -> None:
        self.heartbeat_interval_s = float(reply["heartbeat_interval_s"])
        for ref in reply["acknowledged"]:
            key = (ref["job_id"], ref["attempt"])
            job = self.jobs.get(key)
            if job is not None and job.outcome is not None:
                del self.jobs[key]
        for ref in reply["cancellations"]:
            job = self.jobs.get((ref["job_id"], ref["attempt"]))
            if job is not None:
                log.info("cancelling job %s attempt %s", job.job_id, job.attempt)
                terminate(job)
        for assignment in reply["assignments"]:
            key = (assignment["job_id"], assignment["attempt"])
            if key in self.jobs:
                continue
            log.info("launching job %s attempt %s: %s", *key, assignment["command"])
            self.jobs[key] = launch(
                job_id=assignment["job_id"],
                attempt=assignment["attempt"],
                command=assignment["command"],
                env=assignment["env"],
                workdir=assignment["workdir"],
                gpu_uuids=assignment["gpu_uuids"],
                logs_dir=self.config.logs_dir,
                extra_env=self.backend.job_environment(),
            )

    # -- watching jobs --------------------------------------------------------------

    def sample(self) -> None:
        """Read the GPUs, raise each job's peaks, and notice exits."""
        self._samples = self.backend.sample()
        by_group: dict[int, JobProcess] = {
            job.pgid: job for job in self.jobs.values() if job.pgid is not None and not job.outcome
        }
        for sample in self._samples:
            used: dict[int, int] = {}
            for process in sample.processes:
                pgid = _process_group(process.pid)
                if pgid in by_group:
                    used[pgid] = used.get(pgid, 0) + process.used_mib
            for pgid, mib in used.items():
                peaks = by_group[pgid].peak_mib_by_gpu
                peaks[sample.uuid] = max(peaks.get(sample.uuid, 0), mib)
        for job in self.jobs.values():
            if poll(job):
                continue
            kill_if_overdue(job, self.config.kill_grace_s)

    # -- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sample and heartbeat until `stop` is set; server outages only delay reports."""
        next_heartbeat = time.monotonic()
        while not stop.is_set():
            self.sample()
            if time.monotonic() >= next_heartbeat:
                next_heartbeat = time.monotonic() + self._heartbeat_once()
            stop.wait(self.config.sample_interval_s)

    def shutdown(self) -> None:
        """Stop every job: the agent keeps no state file yet, so none may outlive it."""
        for job in self.jobs.values():
            terminate(job)
        deadline = time.monotonic() + self.config.kill_grace_s
        while any(not poll(job) for job in self.jobs.values()):
            if time.monotonic() >= deadline:
                for job in self.jobs.values():
                    kill_if_overdue(job, 0)
            time.sleep(0.1)

    def _heartbeat_once(self) -> float:
        """One heartbeat; the delay until the next one (backing off while failing)."""
        try:
            self.heartbeat()
        except (httpx.TransportError, ServerError) as exc:
            self._failures += 1
            backoff = min(
                self.config.max_backoff_s, self.heartbeat_interval_s * 2.0 ** (self._failures - 1)
            )
            delay = backoff * random.uniform(0.5, 1.0)
            log.warning("heartbeat failed (%s); retrying in %.1f s", exc, delay)
            return delay
        if self._failures:
            log.info("server reachable again after %d failed heartbeat(s)", self._failures)
        self._failures = 0
        return self.heartbeat_interval_s


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None
