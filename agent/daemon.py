"""The agent's main loop: sample GPUs, watch jobs, heartbeat, act on the reply.

Samples are taken every `sample_interval_s` (2 Hz by default) so a job's peak is seen
between heartbeats. Jobs do not depend on the agent: while the server is unreachable
they keep running and what happens to them (exits, peaks, logs, notices) is kept and
reported once it answers again; when the agent itself stops or dies, its successor
finds the jobs in the state directory and goes on watching them. An outage as long as
the node's lease is the exception: the server then gives the jobs to other nodes, so
the agent stops them itself shortly before (self-fencing) and they end `lost`.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import ValidationError

from agent import __version__, bounds, confinement, logkeep, proctree
from agent.accounts import AccountError, Identity
from agent.backends.base import DeviceBackend, GpuSample
from agent.client import SchedulerClient, ServerError
from agent.dirs import PRIVATE, TRAVERSE_ONLY, own_dir
from agent.enforcement import Enforcement
from agent.health import HealthTracker
from agent.instance_lock import DirectoryLock
from agent.job import STREAMS, JobProcess, RunStore
from agent.launcher import adopt, fail_at_start, kill, kill_if_overdue, launch, poll, terminate
from agent.logship import HEARTBEAT_BYTES, chunks, drained
from agent.protocol import (
    FENCE_MARGIN_HEARTBEATS,
    Assignment,
    GpuState,
    Heartbeat,
    HeartbeatReply,
    NodeRegister,
    NodeRegistered,
    sum_known,
    wire,
)
from agent.shim import write_json

log = logging.getLogger(__name__)

DEFAULT_LOG_KEEP_BYTES = 8 * 1024 * 1024
# How far lease.json's answer may lag the last answered heartbeat, as a share of the time
# a lease leaves before fencing: an agent restarted from it while cut off fences at most
# this much sooner than needed (a quarter: 6.5 s of the server defaults' 26 s), and an
# unchanged lease is fsynced every 4th heartbeat at those defaults instead of each one.
LEASE_RECORD_LAG = 0.25
# How often ended jobs' files are looked over (agent/logkeep.py): they are kept for days
# by default, so a minute late is nothing, and one directory listing a minute is cheap.
ENDED_LOGS_SWEEP_S = 60.0


def near_full_mib(total_mib: int) -> int:
    """Free memory below which a GPU counts as full: 3% of it, at least 512 MiB."""
    return max(512, total_mib * 3 // 100)


@dataclass(frozen=True)
class AgentConfig:
    name: str
    state_dir: Path
    logs_dir: Path
    sample_interval_s: float = 0.5
    kill_grace_s: float = 10.0
    max_backoff_s: float = 30.0
    enforcement: Enforcement = field(default_factory=Enforcement)
    xid_quarantine_s: float = 600.0
    stop_jobs_on_exit: bool = False  # the jobs this agent process launched
    stop_adopted_jobs_on_exit: bool = False  # those it took over from an earlier one
    identity: Identity = field(default_factory=Identity)  # whose account jobs run as
    work_dir: Path | None = None  # jobs' own directories; default: next to state_dir
    gpu_confinement: confinement.Policy = "stop"
    self_fencing: bool = True
    ended_logs_keep_s: float = logkeep.DEFAULT_KEEP_S
    ended_logs_max_bytes: int = logkeep.DEFAULT_MAX_BYTES

    def work_path(self) -> Path:
        return self.work_dir or self.state_dir.with_name(f"{self.state_dir.name}-work")


class Agent:
    def __init__(
        self, client: SchedulerClient, backend: DeviceBackend, config: AgentConfig
    ) -> None:
        self.client = client
        self.backend = backend
        self.config = config
        # closed to jobs: run records hold every job's spec, logs every job's output
        own_dir(config.state_dir, PRIVATE)
        # before adopting anything: one agent per state directory
        self.lock = DirectoryLock(config.state_dir, "colloc agent", "--state-dir")
        own_dir(config.logs_dir, PRIVATE)
        self._ended_logs = own_dir(config.logs_dir / logkeep.ENDED, PRIVATE)
        self.work_dir = own_dir(config.work_path(), TRAVERSE_ONLY)
        self.store = RunStore(config.state_dir)
        self.health = HealthTracker(config.xid_quarantine_s)
        self.node_id: int | None = None
        self.heartbeat_interval_s = 2.0
        self.lease_s: float | None = None  # the server's last word, or a kept one
        self._answered_at = time.monotonic()  # when the last answered heartbeat was sent
        self._answered_wall: float | None = None  # the same, by the wall clock
        self._lease_path = config.state_dir / "lease.json"
        # what lease.json holds: the lease, the interval, when the answer was sent (wall)
        self._lease_kept: tuple[float | None, float, float] | None = None
        self._load_lease()
        self._log_keep_bytes = DEFAULT_LOG_KEEP_BYTES
        self._totals = {d.uuid: d.memory_total_mib for d in backend.devices()}
        self._samples: list[GpuSample] = []
        self._foreign: dict[str, int | None] = {}  # None: some of it is unattributed
        self._unhealthy: dict[str, str | None] = {}
        self._failures = 0
        self.jobs: dict[tuple[int, int], JobProcess] = {}
        self._adopted: set[tuple[int, int]] = set()
        self._recover()

    def _recover(self) -> None:
        """Take up the jobs an earlier agent process left running (or ended)."""
        for job in self.store.load_all():
            if not adopt(job):
                log.info("job %s attempt %s was never started; dropping it", *job.key)
                self.store.remove(job)
                continue
            self.jobs[job.key] = job
            self._adopted.add(job.key)
        if self.jobs:
            log.info("found %d job(s) from an earlier agent: %s", len(self.jobs), list(self.jobs))

    # -- registration and heartbeats ------------------------------------------------

    def register(self) -> None:
        body = NodeRegister(
            name=self.config.name, agent_version=__version__, gpus=self.backend.devices()
        )
        reply = NodeRegistered.model_validate(self.client.register(wire(body)))
        self.node_id = reply.node_id
        self.heartbeat_interval_s = reply.heartbeat_interval_s
        if reply.lease_s is not None:
            self.lease_s = reply.lease_s
        log.info("registered as node %s (id %s)", self.config.name, self.node_id)

    def heartbeat(self) -> None:
        if self.node_id is None:
            self.register()
        assert self.node_id is not None
        budget = HEARTBEAT_BYTES
        reports = []
        for job in self.jobs.values():
            logs = chunks(job, budget, self._log_keep_bytes)
            budget -= sum(len(chunk.data) for chunk in logs)
            reports.append(job.report(logs))
        body = Heartbeat(gpus=[self._gpu_state(s) for s in self._samples], attempts=reports)
        sent = time.monotonic()  # the server heard it later: the lease runs from after this
        sent_wall = time.time()
        try:
            answer = self.client.heartbeat(self.node_id, wire(body), self._wait_limit_s(sent))
            reply = HeartbeatReply.model_validate(answer)
        except ServerError as exc:
            if exc.status == 404:  # the server no longer knows this node
                self.node_id = None
            raise
        self._answered_at, self._answered_wall = sent, sent_wall
        for report in reports:  # the server has these notices now
            job = self.jobs[(report.job_id, report.attempt)]
            delivered = {notice.seq for notice in report.notices}
            job.notices = [n for n in job.notices if n.seq not in delivered]
        self._apply(reply)
        self._save_lease()

    def _save_lease(self, exact: bool = False) -> None:
        """Keep the lease, and when (wall clock) the last answered heartbeat was sent,
        so that an agent restarted while its node is cut off still fences in time.

        Written (and fsynced) only when that matters, not on every heartbeat. Skipping
        is safe: with the lease and interval unchanged, the kept answer is only ever an
        earlier one, so a restarted agent fences sooner than needed, never after the
        server gives its jobs away, and LEASE_RECORD_LAG bounds how much sooner; an
        `exact` write (a clean shutdown) makes a restart after it lose nothing. A kept
        lease or interval other than the server's last word, or a kept answer in the
        wall clock's future (set back), could fence late: those are written at once."""
        if self._answered_wall is None:
            return  # nothing answered in this process: the kept record is still its word
        record = (self.lease_s, self.heartbeat_interval_s, self._answered_wall)
        kept = self._lease_kept
        if kept == record:
            return
        if kept is not None and not exact and kept[:2] == record[:2]:
            lag_s = self._answered_wall - kept[2]
            if 0 <= lag_s < self._lease_lag_allowed_s():
                return
        lease_s, interval_s, answered_wall = record
        write_json(
            self._lease_path,
            {"lease_s": lease_s, "heartbeat_interval_s": interval_s, "answered_at": answered_wall},
        )
        self._lease_kept = record

    def _lease_lag_allowed_s(self) -> float:
        """How far the kept answer may lag the last one (LEASE_RECORD_LAG)."""
        if self.lease_s is None:
            return float("inf")  # no lease: nothing is fenced by when it was answered
        before_fence_s = self.lease_s - FENCE_MARGIN_HEARTBEATS * self.heartbeat_interval_s
        return LEASE_RECORD_LAG * max(0.0, before_fence_s)

    def _load_lease(self) -> None:
        """Fence from what an earlier agent process last heard: its jobs, adopted here,
        are given away when that lease ends, whether or not this process ever reaches
        the server. A missing or unreadable record leaves fencing to the first answer."""
        try:
            record = json.loads(self._lease_path.read_text(encoding="utf-8"))
            lease_s = record["lease_s"]
            interval_s = float(record["heartbeat_interval_s"])
            answered_wall = float(record["answered_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        self.lease_s = None if lease_s is None else float(lease_s)
        self.heartbeat_interval_s = interval_s
        self._lease_kept = (self.lease_s, interval_s, answered_wall)
        # a wall clock set back cannot make the silence shorter than none
        self._answered_at = time.monotonic() - max(0.0, time.time() - answered_wall)

    def _gpu_state(self, sample: GpuSample) -> GpuState:
        """The GPU's reading within the bounds the server accepts; what could not be
        read stays unknown (None), so the server never takes it for free memory."""
        reason = self._unhealthy.get(sample.uuid)
        return GpuState(
            uuid=sample.uuid,
            memory_used_mib=bounds.optional_mib(sample.memory_used_mib),
            memory_foreign_mib=bounds.optional_mib(self._foreign.get(sample.uuid)),
            utilization_pct=bounds.number(sample.utilization_pct, 0, 100),
            memory_utilization_pct=bounds.number(sample.memory_utilization_pct, 0, 100),
            temperature_c=bounds.number(sample.temperature_c, -100, 250),
            power_w=bounds.number(sample.power_w, 0, 100_000),
            mig_enabled=sample.mig_enabled,
            healthy=reason is None,
            health_reason=bounds.optional_text(reason),
        )

    def _apply(self, reply: HeartbeatReply) -> None:
        self.heartbeat_interval_s = reply.heartbeat_interval_s
        self.lease_s = reply.lease_s
        self._log_keep_bytes = reply.log_keep_bytes
        held = {(o.job_id, o.attempt): o for o in reply.log_offsets}
        for key, offsets in held.items():
            if key in self.jobs:
                self.jobs[key].log_sent = {"stdout": offsets.stdout, "stderr": offsets.stderr}
        for ref in reply.acknowledged:
            key = (ref.job_id, ref.attempt)
            job = self.jobs.get(key)
            if job is not None and job.outcome is not None and (key not in held or drained(job)):
                del self.jobs[key]
                self.store.remove(job)
                logkeep.retire(
                    (job.log_path(stream) for stream in STREAMS), self._ended_logs, time.time()
                )
        for ref in reply.cancellations:
            job = self.jobs.get((ref.job_id, ref.attempt))
            if job is not None:
                log.info("cancelling job %s attempt %s", job.job_id, job.attempt)
                terminate(job)
        for assignment in reply.assignments:
            key = (assignment.job_id, assignment.attempt)
            if key not in self.jobs:
                self._launch(assignment)
        for job in self.jobs.values():
            self.store.save(job)

    def _launch(self, assignment: Assignment) -> None:
        job_id, attempt, uuids = assignment.job_id, assignment.attempt, assignment.gpu_uuids
        log.info("launching job %s attempt %s: %s", job_id, attempt, assignment.command)
        stem = self.config.logs_dir / f"job-{job_id}-attempt-{attempt}"
        job = JobProcess(
            job_id=job_id,
            attempt=attempt,
            gpu_uuids=uuids,
            run_dir=self.store.run_dir(job_id, attempt),
            stdout_path=stem.with_suffix(".out"),
            stderr_path=stem.with_suffix(".err"),
            limit_mib_by_gpu=assignment.reserved_mib_by_gpu
            or dict.fromkeys(uuids, assignment.reserved_mib),
        )
        self.jobs[job.key] = job
        try:
            account = self.config.identity.resolve(assignment.account)
        except AccountError as exc:
            log.warning("job %s attempt %s not started: %s", job_id, attempt, exc)
            fail_at_start(job, str(exc))
            self.store.save(job)
            return
        launch(
            store=self.store,
            job=job,
            command=assignment.command,
            env=assignment.env,
            workdir=assignment.workdir,
            extra_env=self.backend.job_environment(),
            account=account,
            work_root=self.work_dir,
        )

    # -- watching jobs --------------------------------------------------------------

    def sample(self) -> None:
        """Notice exits, then read the GPUs: each job's use, peaks, limits, health."""
        for job in self.jobs.values():
            if not poll(job):  # an exit is judged on the sample before it
                # a fenced job must be dead before the lease ends: one interval's grace
                grace_s = self.config.kill_grace_s
                if job.fenced is not None:
                    grace_s = min(grace_s, self.heartbeat_interval_s)
                kill_if_overdue(job, grace_s)
        self._samples = self.backend.sample()
        running = {job.pid: job for job in self.jobs.values() if job.outcome is None and job.pid}
        full: dict[str, str] = {}
        # use of GPUs a job was not given; None where the driver cannot attribute it
        stray: dict[tuple[int, int], dict[str, int | None]] = {}
        for sample in self._samples:
            self._unhealthy[sample.uuid] = self.health.assess(sample)
            used: dict[tuple[int, int], int | None] = {}
            foreign: int | None = None if sample.lost else 0
            for process in sample.processes:
                owner = proctree.owner(process.pid, running)
                if owner is None:
                    foreign = sum_known(foreign, process.used_mib)
                elif sample.uuid not in owner.gpu_uuids:
                    on_gpu = stray.setdefault(owner.key, {})
                    on_gpu[sample.uuid] = sum_known(on_gpu.get(sample.uuid, 0), process.used_mib)
                else:
                    used[owner.key] = sum_known(used.get(owner.key, 0), process.used_mib)
            self._foreign[sample.uuid] = foreign
            total = self._totals.get(sample.uuid, 0)
            in_use = sample.memory_used_mib
            if in_use is not None and total - in_use <= near_full_mib(total):
                full[sample.uuid] = f"{in_use} of {total} MiB in use"
            for job in running.values():
                if sample.uuid in job.gpu_uuids:
                    held = None if sample.lost else used.get(job.key, 0)
                    self._account(job, sample.uuid, held)
        for job in running.values():
            job.gpu_full = next((full[u] for u in job.gpu_uuids if u in full), None)
            self._confine(job, stray.get(job.key, {}))
        for job in self.jobs.values():
            self.store.save(job)

    def _account(self, job: JobProcess, uuid: str, used_mib: int | None) -> None:
        if used_mib is None:  # nothing to measure the job by, or hold it to, this time
            job.used_mib_by_gpu.pop(uuid, None)
            return
        job.used_mib_by_gpu[uuid] = used_mib
        job.peak_mib_by_gpu[uuid] = max(job.peak_mib_by_gpu.get(uuid, 0), used_mib)
        enforcement = self.config.enforcement
        reserved = job.limit_mib_by_gpu.get(uuid)
        if reserved is None or used_mib <= enforcement.limit_mib(reserved):
            return
        if uuid in job.over_limit:
            return  # reported once per GPU and attempt
        job.over_limit.append(uuid)
        message = enforcement.describe(uuid, used_mib, reserved)
        log.warning("job %s attempt %s %s", job.job_id, job.attempt, message)
        job.notify(
            kind="over_reservation",
            gpu_uuid=uuid,
            used_mib=used_mib,
            reserved_mib=reserved,
            action=enforcement.policy,
            message=message,
        )
        if enforcement.policy == "kill":
            job.enforced = message
            kill(job)

    def _confine(self, job: JobProcess, stray: dict[str, int | None]) -> None:
        """Report (once per GPU) and, under policy `stop`, kill a job using GPUs it was
        not given; what it holds there is reported as long as it holds it. It is acted on
        when two samples in a row see it: the GPU's process list and /proc are read
        apart, so a pid that ended and was reused by the job in between, or a process
        the driver still listed after its exit, cannot get an innocent job killed."""
        seen_before, job.stray_mib_by_gpu = job.stray_mib_by_gpu, stray
        policy = self.config.gpu_confinement
        for uuid, used_mib in stray.items():
            if uuid in job.strayed_on or uuid not in seen_before:
                continue
            job.strayed_on.append(uuid)
            message = confinement.describe(uuid, used_mib, job.gpu_uuids, policy)
            log.warning("job %s attempt %s %s", job.job_id, job.attempt, message)
            job.notify(
                kind="unassigned_gpu",
                gpu_uuid=uuid,
                used_mib=used_mib,
                reserved_mib=0,
                action=policy,
                message=message,
            )
            if policy == "stop" and job.confined is None:
                job.confined = message
                kill(job)

    def _fence_at(self) -> float | None:
        """When (monotonic) the jobs are to be fenced, unless a heartbeat is answered."""
        if not self.config.self_fencing or self.lease_s is None:
            return None
        margin_s = FENCE_MARGIN_HEARTBEATS * self.heartbeat_interval_s
        return self._answered_at + self.lease_s - margin_s

    def _wait_limit_s(self, now: float) -> float | None:
        """How long a heartbeat may wait for its answer: a server that holds it (or a
        network that drops it) must not keep the loop from fencing in time."""
        fence_at = self._fence_at()
        if fence_at is None or fence_at <= now:
            return None  # the client's own timeout
        return max(0.1, fence_at - now)

    def fence(self) -> None:
        """Stop every running job once no heartbeat has been answered for the server's
        lease less FENCE_MARGIN_HEARTBEATS intervals (agent/protocol.py says why that
        margin): the server is about to give them to other nodes, and no job may run
        twice at once. They end `lost`, which the server reruns; SIGKILL follows SIGTERM
        within one interval. A job that exits 0 before it is stopped stays a success."""
        fence_at = self._fence_at()
        if fence_at is None or time.monotonic() < fence_at:
            return
        silent_s = time.monotonic() - self._answered_at
        for job in self.jobs.values():
            if job.outcome is not None or job.fenced is not None:
                continue
            job.fenced = (
                f"fenced: no heartbeat answered for {silent_s:.1f} s of the server's "
                f"{self.lease_s:g} s lease, so the agent stopped it before the server "
                "gave it to another node"
            )
            log.warning("job %s attempt %s %s", job.job_id, job.attempt, job.fenced)
            terminate(job)
            self.store.save(job)

    # -- the loop -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sample and heartbeat until `stop` is set; server outages only delay reports."""
        next_heartbeat = next_sweep = time.monotonic()
        while not stop.is_set():
            self.sample()
            self.fence()
            if time.monotonic() >= next_heartbeat:
                next_heartbeat = time.monotonic() + self._heartbeat_once()
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + ENDED_LOGS_SWEEP_S
                self.sweep_ended_logs()
            stop.wait(self.config.sample_interval_s)

    def sweep_ended_logs(self) -> int:
        """Remove ended jobs' files past the age or size limit; how many went."""
        try:
            removed = logkeep.sweep(
                self._ended_logs,
                self.config.ended_logs_keep_s,
                self.config.ended_logs_max_bytes,
                time.time(),
            )
        except OSError as exc:  # the next sweep tries again
            log.warning("could not look over %s: %s", self._ended_logs, exc)
            return 0
        if removed:
            log.info("removed %d ended job output file(s) from %s", removed, self._ended_logs)
        return removed

    def shutdown(self) -> None:
        """Stop the jobs `stop_jobs_on_exit` (launched here) and `stop_adopted_jobs_on_exit`
        (taken over from an earlier agent process) say to stop, leave the others running
        for the next agent process, and let go of the state directory.

        A job stopped here ends `lost`, so the server runs it again: nothing went wrong
        with the job itself. The next agent process (or the node's lease) reports it."""
        stopping = [job for job in self.jobs.values() if self._stops_on_exit(job)]
        running = sum(1 for job in self.jobs.values() if job.outcome is None) - len(stopping)
        log.info("agent stopping; %d job(s) stopped, %d keep running", len(stopping), running)
        for job in stopping:
            terminate(job)
        deadline = time.monotonic() + self.config.kill_grace_s
        while not all(poll(job) for job in stopping):
            if time.monotonic() >= deadline:
                for job in stopping:
                    kill(job)
            time.sleep(0.1)
        for job in stopping:
            if job.outcome != "succeeded":
                job.outcome, job.reason = "lost", "stopped as its agent shut down"
            self.store.save(job)
        self._save_lease(exact=True)
        self.lock.release()

    def _stops_on_exit(self, job: JobProcess) -> bool:
        if job.outcome is not None or job.term_sent_at is not None or job.kill_sent:
            return False  # ended, or already being stopped for a reason of its own
        if job.key in self._adopted:
            return self.config.stop_adopted_jobs_on_exit
        return self.config.stop_jobs_on_exit

    def _heartbeat_once(self) -> float:
        """One heartbeat; the delay until the next one (backing off while failing)."""
        try:
            self.heartbeat()
        except (httpx.TransportError, ServerError, ValidationError) as exc:
            self._failures += 1
            delay = self._retry_delay_s(exc)
            log.warning("heartbeat failed (%s); retrying in %.1f s", exc, delay)
            return delay
        if self._failures:
            log.info("server reachable again after %d failed heartbeat(s)", self._failures)
        self._failures = 0
        return self.heartbeat_interval_s

    def _retry_delay_s(self, exc: Exception) -> float:
        """After a failed heartbeat: what a server shedding load asks (Retry-After, with
        jitter above it so the refused nodes do not all come back at once), else an
        exponential back-off with jitter. Before the fence point it is cut so that a
        try lands an interval before it, then one each sample until it: a server back
        in time is heard and the jobs ride through, however many tries failed before."""
        retry_after_s = exc.retry_after_s if isinstance(exc, ServerError) else None
        if retry_after_s is not None:
            delay = min(self.config.max_backoff_s, retry_after_s) * random.uniform(1.0, 1.5)
        else:
            backoff = self.heartbeat_interval_s * 2.0 ** (self._failures - 1)
            delay = min(self.config.max_backoff_s, backoff) * random.uniform(0.5, 1.0)
        fence_at = self._fence_at()
        now = time.monotonic()
        if fence_at is not None and now < fence_at:
            # the loop looks once a sample interval: no sooner than that
            last_try = fence_at - self.heartbeat_interval_s - now
            delay = min(delay, max(self.config.sample_interval_s, last_try))
        return delay
