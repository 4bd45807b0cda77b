"""The discrete-event simulation: a virtual clock, and Colloc's scheduler placing jobs.

Each scheduling cycle hands `Scheduler.place` (the service's own pure core) a Snapshot
of the simulated cluster, as the service does from its database, and starts what the
plan places. Running jobs reserve, grow and shrink, and a job whose attempt ends is
done, failed or retried, by the service's own rules (`service/scheduler/lifecycle.py`).

The physics, and where each part comes from:
- a job reaches its true peak memory `ramp_s` after it starts (half its run, if
  shorter); if the GPU's memory in use cannot hold it then, that job dies of an OOM:
  the attempt's GPU time is lost and the job is requeued (or fails, its retries spent);
- a job's speed is its GPU model's (`cluster.gpu_speed`), times, for each job sharing
  one of its GPUs, Lucid's measured median speed for its class beside that job's class
  (`traces.Sharing`; Lucid measured pairs, so a third neighbour multiplies in again);
- a GPU is as busy as the sum of its jobs' classes' mean `utilization.gpu` (Lucid),
  at most 100%.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from service.scheduler.admission import could_run, distinct_nodes
from service.scheduler.framework import SchedulerConfig
from service.scheduler.lifecycle import (
    RETRY_RATIOS_KEPT,
    AttemptEnd,
    Ending,
    GpuHeld,
    JobHistory,
    ReservationRules,
    followed_reservation,
    oom_needed_mib,
    retry_ratio,
    settle,
)
from service.scheduler.placement import Scheduler
from service.scheduler.snapshot import (
    GpuView,
    NodeView,
    Parked,
    PendingJob,
    RunningJob,
    Snapshot,
    pending_job,
    room_by_model,
)
from service.scheduler.states import AttemptState, JobState
from service.simulator.cluster import SimNode
from service.simulator.policies import Demand, Policy
from service.simulator.traces import Sharing
from service.simulator.workload import SimJob

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Jobs a cluster of an unfamiliar stack may take to teach Colloc its fixed cost: the
# issue's `foreign-stack` target counts reservations over true peaks after these.
LEARNING_JOBS = 200

# Event kinds, in the order they are handled at one instant: the cycle comes last, so
# it sees every arrival, exit and peak of that instant.
ARRIVAL, PEAK, FINISH, STEADY, WAKE, CYCLE = range(6)


@dataclass(frozen=True)
class SimSettings:
    cycle_s: float = 10.0  # scheduling interval; 0: a cycle after every instant with news
    ramp_s: float = 60.0  # from start to the peak
    max_attempts: int = 3
    sample_s: float = 300.0  # timeline resolution (plots)
    rules: ReservationRules = field(default_factory=ReservationRules)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)


@dataclass
class _Attempt:
    job: SimJob
    gpu_ids: tuple[int, ...]
    reserved_mib: dict[int, int]
    started_s: float
    remaining_s: float  # work left, in seconds alone on a V100
    rate: float = 0.0
    updated_s: float = 0.0
    version: int = 0
    peaked: bool = False
    view: RunningJob | None = None  # as the last snapshot saw it (until reservations move)
    placed: int = 0  # placements before it and it: the service's attempt id


@dataclass
class _Gpu:
    id: int
    node_id: int
    index: int
    model: str
    memory_mib: int
    speed: float
    attempts: dict[int, _Attempt] = field(default_factory=dict)
    reserved_mib: int = 0
    used_mib: int = 0  # physically held by jobs that reached their peak
    util_pct: float = 0.0


@dataclass
class _Job:
    job: SimJob
    demand: Demand
    pending_since: float
    tries: int = 0
    ended: list[AttemptEnd] = field(default_factory=list)  # how its attempts ended
    floor_mib: int = 0
    not_before_s: float | None = None
    queued_s: float = 0.0
    view: PendingJob | None = None


@dataclass
class SimResult:
    """What one policy did with one workload."""

    oom_events: int
    gpu_hours_lost_to_oom: float
    makespan_s: float
    drained_s: float  # from the first arrival to the last start: the queue's drain
    mean_jct_s: float
    p95_jct_s: float
    mean_queue_s: float
    p95_queue_s: float
    oom_lost_share: float  # GPU time lost to OOMs over the workload's (V100 seconds)
    gpu_memory_utilization: float
    sm_busy_share: float
    jobs_completed: int
    jobs_failed: int
    jobs_rejected: int  # their demand fits no GPU: the service refuses them at submission
    placements: int
    cycles: int
    jct_s: list[float]
    # per completed job, the reservation its last attempt started with over its true peak
    # (the mean over its GPUs), by job id
    reserved_over_true: dict[int, float]
    # (t, memory in use, SM-busy share, jobs waiting), every sample_s
    timeline: list[tuple[float, float, float, int]]

    def summary(self) -> dict[str, float | int]:
        """The contract's figures per policy (DESIGN.md), and a few more."""
        return {
            "oom_events": self.oom_events,
            "gpu_hours_lost_to_oom": round(self.gpu_hours_lost_to_oom, 3),
            "makespan_s": round(self.makespan_s, 1),
            "queue_drained_s": round(self.drained_s, 1),
            "mean_jct_s": round(self.mean_jct_s, 1),
            "p95_jct_s": round(self.p95_jct_s, 1),
            "mean_queue_s": round(self.mean_queue_s, 1),
            "p95_queue_s": round(self.p95_queue_s, 1),
            "oom_lost_share": round(self.oom_lost_share, 6),
            "reserved_over_true_peak": round(self.mean_reserved_over_true(), 4),
            f"reserved_over_true_peak_after_{LEARNING_JOBS}": round(
                self.mean_reserved_over_true(after=LEARNING_JOBS), 4
            ),
            "gpu_memory_utilization": round(self.gpu_memory_utilization, 4),
            "sm_busy_share": round(self.sm_busy_share, 4),
            "jobs_completed": self.jobs_completed,
            "jobs_failed": self.jobs_failed,
            "jobs_rejected": self.jobs_rejected,
            "placements": self.placements,
            "cycles": self.cycles,
        }

    def mean_reserved_over_true(self, after: int = 0) -> float:
        """The mean reservation over true peak of the completed jobs with an id above
        `after` (ids count arrivals), 0.0 if there are none."""
        ratios = [r for job_id, r in self.reserved_over_true.items() if job_id > after]
        return float(np.mean(ratios)) if ratios else 0.0


class Simulation:
    """One policy, one cluster, one workload; `run()` plays it to the end."""

    def __init__(
        self,
        nodes: list[SimNode],
        jobs: list[SimJob],
        policy: Policy,
        sharing: Sharing,
        speeds: dict[str, float],
        settings: SimSettings = SimSettings(),
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.sharing = sharing
        self.scheduler = Scheduler(settings.scheduler)
        self.jobs = {job.id: job for job in jobs}
        self.node_views = tuple(NodeView(i, node.name, True) for i, node in enumerate(nodes, 1))
        self.gpus: dict[int, _Gpu] = {}
        for node_id, node in enumerate(nodes, start=1):
            for index, spec in enumerate(node.gpus):
                gpu_id = len(self.gpus) + 1
                self.gpus[gpu_id] = _Gpu(
                    gpu_id, node_id, index, spec.model, spec.memory_mib, speeds[spec.model]
                )
        self.models = {gpu.model: gpu.memory_mib for gpu in self.gpus.values()}
        self.room_mib = room_by_model(self.models.items(), settings.scheduler.headroom_mib)
        self.cluster = distinct_nodes(
            (node_id, gpu.model, gpu.memory_mib)
            for node_id, node in enumerate(nodes, start=1)
            for gpu in node.gpus
        )
        self.memory_total_mib = sum(gpu.memory_mib for gpu in self.gpus.values())
        self.views = {gpu.id: self._view(gpu) for gpu in self.gpus.values()}
        self.pending: dict[int, _Job] = {}
        # models (architectures) a run of which ended since the last cycle: waiting jobs
        # of theirs are estimated again (`_reestimate`)
        self.ran: set[str] = set()
        # `retry_ratio`s of jobs that succeeded after an OOM, by when their successful
        # attempt was placed: the retry step learns from the latest (`_retry_ratios`)
        self.retry_ratios: dict[int, float] = {}
        self.running: dict[int, _Attempt] = {}
        self.states: dict[int, _Job] = {}
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.now = 0.0
        self.cycle_at: float | None = None
        # accounting
        self.finished_s: dict[int, float] = {}
        self.failed: set[int] = set()
        self.rejected: set[int] = set()
        self.ooms = 0
        self.lost_gpu_s = 0.0
        self.placements = 0
        self.reserved_over_true: dict[int, float] = {}
        self.last_start_s = 0.0
        self.cycles = 0
        self.parked = Parked()
        self.used_mib = 0  # physically held, cluster-wide
        self.busy = 0.0  # sum over GPUs of min(1, utilisation)
        self.used_area = 0.0
        self.busy_area = 0.0
        self.last_s = 0.0
        self.timeline: list[tuple[float, float, float, int]] = []
        self.next_sample_s = 0.0

    # events

    def _push(self, at_s: float, kind: int, job_id: int, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at_s, kind, self.seq, job_id, version))

    def _want_cycle(self) -> None:
        step = self.settings.cycle_s
        at = self.now if step <= 0 else math.ceil(self.now / step - 1e-9) * step
        if self.cycle_at is None or at < self.cycle_at:
            self.cycle_at = at
            self._push(at, CYCLE, 0)

    def run(self) -> SimResult:
        for job in self.jobs.values():
            self._push(job.arrival_s, ARRIVAL, job.id)
        while self.events:
            at_s, kind, _seq, job_id, version = heapq.heappop(self.events)
            self._advance(at_s)
            if kind == ARRIVAL:
                self._arrive(self.jobs[job_id])
            elif kind == PEAK:
                self._peak(job_id, version)
            elif kind == FINISH:
                self._finish(job_id, version)
            elif kind == STEADY:
                self._steady(job_id, version)
            elif kind == WAKE:
                self._want_cycle()
            elif kind == CYCLE and self.cycle_at == at_s:
                self.cycle_at = None
                self._cycle()
        return self._result()

    def _advance(self, to_s: float) -> None:
        """Integrate memory in use and busy GPUs up to `to_s`, sampling the timeline."""
        while self.next_sample_s <= to_s:
            self.timeline.append(
                (
                    self.next_sample_s,
                    self.used_mib / self.memory_total_mib,
                    self.busy / len(self.gpus),
                    len(self.pending),
                )
            )
            self.next_sample_s += self.settings.sample_s
        span = to_s - self.last_s
        self.used_area += self.used_mib * span
        self.busy_area += self.busy * span
        self.last_s = self.now = to_s

    # jobs

    def _arrive(self, job: SimJob) -> None:
        state = _Job(job, self.policy.demand(job, self.models), pending_since=self.now)
        self.states[job.id] = state
        if not self._could_run(state):  # the service refuses such a job at submission
            self.rejected.add(job.id)
            return
        self.pending[job.id] = state
        self._want_cycle()

    def _pending_view(self, state: _Job) -> PendingJob:
        if state.view is None:
            demand = state.demand
            state.view = pending_job(
                id=state.job.id,
                priority=0,
                gpus=state.job.gpus,
                memory_mib=demand.memory_mib,
                upper_mib=demand.upper_mib,
                floor_mib=state.floor_mib,
                gpu_models=demand.gpu_models,
                not_before=None
                if state.not_before_s is None
                else EPOCH + timedelta(seconds=state.not_before_s),
                proven_mib=demand.proven_mib,
                room_mib=self.room_mib,
                peak_mib=demand.peak_mib,
            )
        return state.view

    def _view(self, gpu: _Gpu) -> GpuView:
        return GpuView(
            id=gpu.id,
            node_id=gpu.node_id,
            index=gpu.index,
            model=gpu.model,
            memory_total_mib=gpu.memory_mib,
            reserved_mib=gpu.reserved_mib,
            used_mib=gpu.used_mib,
            foreign_mib=0,
            utilization_pct=min(100.0, gpu.util_pct),
            healthy=True,
            jobs=len(gpu.attempts),
        )

    def _could_run(self, state: _Job) -> bool:
        """Whether some node could ever hold the job as it now asks."""
        return could_run(
            self._pending_view(state), self.cluster, self.settings.scheduler.headroom_mib
        )

    def _reestimate(self) -> None:
        """As the service's snapshot reader remakes a waiting job's stale estimates: ask
        the policy again for the demand of waiting jobs that never ran and whose
        architecture ran since, and keep it where the job could still run by it."""
        for state in self.pending.values():
            if state.job.model not in self.ran or state.tries:
                continue  # a retry goes by the floor its attempt's end set
            demand = self.policy.demand(state.job, self.models)
            if demand == state.demand:
                continue
            was = state.demand, state.view
            state.demand, state.view = demand, None
            if not self._could_run(state):
                state.demand, state.view = was
        self.ran.clear()

    def _cycle(self) -> None:
        if not self.pending:
            return
        if self.ran:
            self._reestimate()
        self.cycles += 1
        snapshot = Snapshot(
            nodes=self.node_views,
            gpus=tuple(self.views.values()),
            pending=tuple(self._pending_view(state) for state in self.pending.values()),
            running=tuple(self._running_view(a) for a in self.running.values()),
            now=EPOCH + timedelta(seconds=self.now),
        )
        plan = self.scheduler.place(snapshot, self.parked)
        self.parked = plan.parked  # jobs that found no room wait unsearched till some frees
        for placement in plan.placements:
            self._start(
                self.pending.pop(placement.job_id), placement.gpu_ids, placement.reserved_mib
            )

    @staticmethod
    def _running_view(attempt: _Attempt) -> RunningJob:
        if attempt.view is None:
            attempt.view = RunningJob(
                id=attempt.job.id,
                priority=0,
                owner="anonymous",
                queue="default",
                gpu_ids=attempt.gpu_ids,
                reserved_mib=max(attempt.reserved_mib.values()),
            )
        return attempt.view

    def _start(self, state: _Job, gpu_ids: tuple[int, ...], reserved: tuple[int, ...]) -> None:
        job = state.job
        state.tries += 1
        state.queued_s += self.now - state.pending_since
        self.placements += 1
        self.last_start_s = self.now
        attempt = _Attempt(
            job,
            gpu_ids,
            dict(zip(gpu_ids, reserved, strict=True)),
            started_s=self.now,
            remaining_s=job.work_s,
            updated_s=self.now,
            placed=self.placements,
        )
        self.running[job.id] = attempt
        self.reserved_over_true[job.id] = float(
            np.mean(
                [
                    mib / job.true_peak_mib[self.gpus[g].model]
                    for g, mib in zip(gpu_ids, reserved, strict=True)
                ]
            )
        )
        util = self.sharing.gpu_util_pct[job.sharing_class]
        for gpu_id, mib in attempt.reserved_mib.items():
            gpu = self.gpus[gpu_id]
            gpu.attempts[job.id] = attempt
            gpu.reserved_mib += mib
            self._set_util(gpu, gpu.util_pct + util)
        self._rerate(gpu_ids)
        alone_s = job.work_s / max(attempt.rate, 1e-9)
        self._push(self.now + min(self.settings.ramp_s, alone_s / 2), PEAK, job.id, state.tries)

    def _set_util(self, gpu: _Gpu, util_pct: float) -> None:
        self.busy += min(100.0, util_pct) / 100 - min(100.0, gpu.util_pct) / 100
        gpu.util_pct = max(0.0, util_pct)

    def _rate(self, attempt: _Attempt) -> float:
        rates = []
        cls = attempt.job.sharing_class
        for gpu_id in attempt.gpu_ids:
            gpu = self.gpus[gpu_id]
            rate = gpu.speed
            for other_id, other in gpu.attempts.items():
                if other_id != attempt.job.id:
                    rate *= self.sharing.speed[(cls, other.job.sharing_class)]
            rates.append(rate)
        return min(rates)

    def _rerate(self, gpu_ids: tuple[int, ...]) -> None:
        """Bring the work of every job on these GPUs up to now, and re-time its finish."""
        touched = {job_id: a for g in gpu_ids for job_id, a in self.gpus[g].attempts.items()}
        for attempt in touched.values():
            attempt.remaining_s = max(
                0.0, attempt.remaining_s - attempt.rate * (self.now - attempt.updated_s)
            )
            attempt.updated_s = self.now
            attempt.rate = self._rate(attempt)
            attempt.version += 1
            self._push(
                self.now + attempt.remaining_s / attempt.rate,
                FINISH,
                attempt.job.id,
                attempt.version,
            )
        for gpu_id in gpu_ids:
            self.views[gpu_id] = self._view(self.gpus[gpu_id])

    def _release(self, attempt: _Attempt) -> None:
        del self.running[attempt.job.id]
        util = self.sharing.gpu_util_pct[attempt.job.sharing_class]
        for gpu_id, mib in attempt.reserved_mib.items():
            gpu = self.gpus[gpu_id]
            del gpu.attempts[attempt.job.id]
            gpu.reserved_mib -= mib
            if attempt.peaked:
                held = attempt.job.true_peak_mib[gpu.model]
                gpu.used_mib -= held
                self.used_mib -= held
            self._set_util(gpu, gpu.util_pct - util if gpu.attempts else 0.0)
        self._rerate(attempt.gpu_ids)
        self._want_cycle()

    def _peak(self, job_id: int, number: int) -> None:
        attempt = self.running.get(job_id)
        if attempt is None or self.states[job_id].tries != number:
            return
        gpus = [self.gpus[g] for g in attempt.gpu_ids]
        need = {gpu.id: attempt.job.true_peak_mib[gpu.model] for gpu in gpus}
        short = [gpu for gpu in gpus if gpu.used_mib + need[gpu.id] > gpu.memory_mib]
        if short:
            self._oom(attempt, short[0])
            return
        attempt.peaked = True
        for gpu in gpus:
            gpu.used_mib += need[gpu.id]
            self.used_mib += need[gpu.id]
            self._follow(attempt, gpu, need[gpu.id], steady_s=0.0)
            self.views[gpu.id] = self._view(gpu)
        self._push(self.now + self.settings.rules.stable_s, STEADY, job_id, number)

    def _follow(self, attempt: _Attempt, gpu: _Gpu, used_mib: int, steady_s: float) -> bool:
        """Apply the service's rule to the attempt's reservation; whether it moved."""
        target = followed_reservation(
            self.settings.rules,
            used_mib=used_mib,
            reserved_mib=attempt.reserved_mib[gpu.id],
            steady_s=steady_s,
        )
        if target is not None:
            gpu.reserved_mib += target - attempt.reserved_mib[gpu.id]
            attempt.reserved_mib[gpu.id] = target
            attempt.view = None
        return target is not None

    def _steady(self, job_id: int, number: int) -> None:
        attempt = self.running.get(job_id)
        if attempt is None or self.states[job_id].tries != number:
            return
        shrunk = False
        for gpu_id in attempt.gpu_ids:
            gpu = self.gpus[gpu_id]
            used = attempt.job.true_peak_mib[gpu.model]
            if self._follow(attempt, gpu, used, self.settings.rules.stable_s):
                self.views[gpu_id] = self._view(gpu)
                shrunk = True
        if shrunk:  # room opened up
            self._want_cycle()

    def _oom(self, attempt: _Attempt, gpu: _Gpu) -> None:
        """The attempt dies of an OOM on `gpu`, its GPU time lost; the service's rules
        decide whether the job retries."""
        self.ooms += 1
        self.lost_gpu_s += (self.now - attempt.started_s) * len(attempt.gpu_ids)
        held = gpu.memory_mib - gpu.used_mib  # what the agent saw it hold as it died
        ending = self._ending(attempt, AttemptState.OOM, held)
        self._release(attempt)
        self.policy.observe_oom(attempt.job, gpu.model, held)
        self.ran.add(attempt.job.model)
        self._settle(self.states[attempt.job.id], ending, attempt.placed)

    def _ending(self, attempt: _Attempt, outcome: AttemptState, peak_mib: int) -> Ending:
        """The attempt's end as an agent reports it, and its GPUs as the service sees them
        then (before its reservations are released)."""
        gpus = [self.gpus[gpu_id] for gpu_id in attempt.gpu_ids]
        return Ending(
            outcome,
            reason=None,
            reserved_mib=max(attempt.reserved_mib.values()),
            peak_mib=peak_mib,
            gpus=[
                GpuHeld(gpu.memory_mib, 0, gpu.reserved_mib - attempt.reserved_mib[gpu.id])
                for gpu in gpus
            ],
        )

    def _finish(self, job_id: int, version: int) -> None:
        attempt = self.running.get(job_id)
        if attempt is None or attempt.version != version:
            return
        if not attempt.peaked:  # it ended before its peak: it never needed more
            self._push(self.now, PEAK, job_id, self.states[job_id].tries)
            self._push(self.now, FINISH, job_id, version)
            return
        gpu = self.gpus[attempt.gpu_ids[0]]
        peak = attempt.job.true_peak_mib[gpu.model]
        ending = self._ending(attempt, AttemptState.SUCCEEDED, peak)
        self._release(attempt)
        self.policy.observe(attempt.job, gpu.model, peak)
        self.ran.add(attempt.job.model)
        self._settle(self.states[job_id], ending, attempt.placed)

    def _settle(self, state: _Job, ending: Ending, placed: int) -> None:
        """What the service decides for a job whose attempt (the `placed`-th placement)
        ended: done, failed, or pending again with a floor after a back-off."""
        job = state.job
        oom = ending.outcome == AttemptState.OOM
        needed = oom_needed_mib(ending) if oom else None
        state.ended.append(AttemptEnd(ending.outcome, ending.peak_mib, needed))
        ratio = retry_ratio(state.ended)
        if ratio is not None:
            self.retry_ratios[placed] = ratio
        decision = settle(
            self.settings.rules,
            ending=ending,
            job=JobHistory(
                gpus=job.gpus,
                gpu_models=state.demand.gpu_models,
                max_attempts=self.settings.max_attempts,
                floor_mib=state.floor_mib or None,
                earlier=tuple(end.outcome for end in state.ended[:-1]),
            ),
            cluster=self.cluster,
            headroom_mib=self.settings.scheduler.headroom_mib,
            retry_ratios=self._retry_ratios() if oom else (),
        )
        state.floor_mib = decision.floor_mib or 0
        if decision.job_state == JobState.SUCCEEDED:
            self.finished_s[job.id] = self.now
        elif decision.job_state != JobState.PENDING:
            self.failed.add(job.id)
        else:
            state.not_before_s = self.now + (decision.backoff_s or 0.0)
            state.view = None
            state.pending_since = self.now
            self.pending[job.id] = state
            self._push(state.not_before_s, WAKE, job.id)

    def _retry_ratios(self) -> list[float]:
        """As the service's `_retry_ratios` (every job here has one owner): the
        RETRY_RATIOS_KEPT latest `retry_ratio`s, by when their attempt was placed."""
        latest = sorted(self.retry_ratios)[-RETRY_RATIOS_KEPT:]
        return [self.retry_ratios[placed] for placed in latest]

    # results

    def _result(self) -> SimResult:
        first = min((job.arrival_s for job in self.jobs.values()), default=0.0)
        end = max([*self.finished_s.values(), first])
        makespan = end - first
        jct = sorted(self.finished_s[j] - self.jobs[j].arrival_s for j in self.finished_s)
        queued = sorted(self.states[j].queued_s for j in self.finished_s)
        offered_gpu_s = sum(job.work_s * job.gpus for job in self.jobs.values())
        window = makespan * self.memory_total_mib
        return SimResult(
            oom_events=self.ooms,
            gpu_hours_lost_to_oom=self.lost_gpu_s / 3600,
            makespan_s=makespan,
            drained_s=max(0.0, self.last_start_s - first),
            mean_jct_s=float(np.mean(jct)) if jct else 0.0,
            p95_jct_s=float(np.percentile(jct, 95)) if jct else 0.0,
            mean_queue_s=float(np.mean(queued)) if queued else 0.0,
            p95_queue_s=float(np.percentile(queued, 95)) if queued else 0.0,
            oom_lost_share=self.lost_gpu_s / offered_gpu_s if offered_gpu_s else 0.0,
            gpu_memory_utilization=self.used_area / window if window else 0.0,
            sm_busy_share=self.busy_area / (makespan * len(self.gpus)) if makespan else 0.0,
            jobs_completed=len(self.finished_s),
            jobs_failed=len(self.failed),
            jobs_rejected=len(self.rejected),
            placements=self.placements,
            cycles=self.cycles,
            jct_s=jct,
            reserved_over_true={j: self.reserved_over_true[j] for j in self.finished_s},
            timeline=self.timeline,
        )
