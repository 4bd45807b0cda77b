"""The read-only view of the cluster that placement decides on, and the plan it returns."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property


@dataclass(frozen=True)
class GpuView:
    id: int
    node_id: int
    index: int
    model: str
    memory_total_mib: int
    reserved_mib: int  # sum of the reservations of jobs placed here
    used_mib: int  # what Colloc's jobs here were last seen using
    foreign_mib: int  # memory of processes Colloc did not start
    utilization_pct: float
    healthy: bool
    jobs: int
    uuid: str = ""

    def free_mib(self, headroom_mib: int) -> int:
        """capacity - max(reserved, observed) - foreign - headroom (issue 4's accounting)."""
        taken = max(self.reserved_mib, self.used_mib)
        return self.memory_total_mib - taken - self.foreign_mib - headroom_mib


@dataclass(frozen=True)
class NodeView:
    id: int
    name: str
    ready: bool


@dataclass(frozen=True)
class PendingJob:
    """A job waiting for GPUs.

    `demand_mib` holds what one GPU of each model must have free (the estimate's
    upper bound or the user's claim). `exclusive` jobs (nothing known of their memory)
    need idle GPUs and reserve them whole; their `demand_mib` is the least capacity.
    """

    id: int
    priority: int
    gpus: int
    demand_mib: Mapping[str, int]
    exclusive: bool = False
    owner: str = "anonymous"
    queue: str = "default"
    gpu_models: frozenset[str] | None = None
    multi_node: bool = False  # may span nodes (the service launches gangs on one node)
    not_before: datetime | None = None
    default_demand_mib: int | None = None  # for models with no per-model figure

    def demand_for(self, model: str) -> int | None:
        return self.demand_mib.get(model, self.default_demand_mib)

    @cached_property
    def shape(self) -> Hashable:
        """All that placement reads of the job but who it is and where it queues: jobs of
        one shape fit or fail alike (worked out once per view: a long queue is walked
        every cycle)."""
        demand = tuple(sorted(self.demand_mib.items()))
        return (
            self.gpus,
            self.exclusive,
            self.multi_node,
            self.gpu_models,
            self.default_demand_mib,
            demand,
        )


def pending_job(
    *,
    id: int,
    priority: int,
    gpus: int,
    memory_mib: int | None,
    upper_mib: Mapping[str, int],
    floor_mib: int,
    gpu_models: frozenset[str] | None = None,
    owner: str = "anonymous",
    queue: str = "default",
    not_before: datetime | None = None,
    proven_mib: Mapping[str, int] | None = None,
    room_mib: Mapping[str, int] | None = None,
    peak_mib: Mapping[str, int] | None = None,
) -> PendingJob:
    """A waiting job's demand: the user's claim, else the estimator's calibrated bound
    per GPU model, else a whole GPU; never below the floor an OOM set.

    `proven_mib` holds the peaks the job's spec reached before, by GPU model, and
    `room_mib` the most one GPU of each model can give a job. A proven peak that fits
    the room while its bound (the peak plus a margin for run-to-run variance) does not
    asks for the whole room: the job ran on such a GPU, so it may run alone on one
    rather than wait for a larger model.

    `peak_mib` holds the estimator's point estimates. Where the bound fits no GPU
    model's room but the estimate fits some, the job asks for the whole room of those:
    refused, it would surely be lost; alone on a GPU, it harms no neighbour, and if it
    does need more, its OOM sets the floor the service retries or fails it with."""
    proven, room = proven_mib or {}, room_mib or {}
    if memory_mib is not None:
        demand: dict[str, int] = {}
        default: int | None = max(memory_mib, floor_mib)
        exclusive = False
    elif upper_mib:
        demand = {
            model: max(_fitted(upper, proven.get(model), room.get(model)), floor_mib)
            for model, upper in upper_mib.items()
        }
        usable = {m: mib for m, mib in demand.items() if gpu_models is None or m in gpu_models}
        if room and not any(mib <= room.get(model, 0) for model, mib in usable.items()):
            peaks = {m: mib for m, mib in (peak_mib or {}).items() if m in usable}
            demand |= _alone(peaks, room, floor_mib)
        default, exclusive = None, False
    else:
        demand, default, exclusive = {}, floor_mib, True
    return PendingJob(
        id=id,
        priority=priority,
        gpus=gpus,
        demand_mib=demand,
        exclusive=exclusive,
        owner=owner,
        queue=queue,
        gpu_models=gpu_models,
        not_before=not_before,
        default_demand_mib=default,
    )


def room_by_model(gpus: Iterable[tuple[str, int]], headroom_mib: int) -> dict[str, int]:
    """The most one GPU of each model can give a job, from (model, memory MiB) pairs."""
    room: dict[str, int] = {}
    for model, memory_mib in gpus:
        room[model] = max(room.get(model, 0), memory_mib - headroom_mib)
    return room


def _alone(peak_mib: Mapping[str, int], room: Mapping[str, int], floor_mib: int) -> dict[str, int]:
    """The whole room of each GPU model whose room holds the estimate (and the floor);
    the other models keep their bound, which fits none of them."""
    return {
        model: room[model]
        for model, peak in peak_mib.items()
        if model in room and max(peak, floor_mib) <= room[model]
    }


def _fitted(upper: int, proven: int | None, room: int | None) -> int:
    """`upper`, or the whole room where the proven peak fits it and `upper` does not."""
    if proven is not None and room is not None and proven <= room < upper:
        return room
    return upper


@dataclass(frozen=True)
class RunningJob:
    """An active job, as quotas and preemption see it."""

    id: int
    priority: int
    owner: str
    queue: str
    gpu_ids: tuple[int, ...]
    reserved_mib: int
    preemptible: bool = False


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeView, ...]
    gpus: tuple[GpuView, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    now: datetime | None = None


@dataclass(frozen=True)
class Placement:
    job_id: int
    node_id: int
    gpu_ids: tuple[int, ...]
    reserved_mib: tuple[int, ...]  # per GPU, in gpu_ids order
    score: float = 0.0


@dataclass(frozen=True)
class Parked:
    """Jobs a cycle found no room for, each with the shape it failed in and why, and
    every GPU's room as that cycle left it (free MiB, jobs, whether the job-blind filters
    pass it). Handed to the next `Scheduler.place`, it answers those jobs at once while
    no GPU they may use has gained room enough for them: kube-scheduler's unschedulable queue,
    kept pure by travelling in the Plan rather than in the scheduler."""

    jobs: Mapping[int, tuple[Hashable, str]] = field(default_factory=dict)
    gpus: Mapping[int, tuple[int, int, bool]] = field(default_factory=dict)


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)  # job id -> why it waits
    preemptions: dict[int, int] = field(default_factory=dict)  # victim job -> for job
    held: dict[int, int] = field(default_factory=dict)  # GPU id -> job it is held for
    parked: Parked = field(default_factory=Parked)  # for the next cycle's `place`
