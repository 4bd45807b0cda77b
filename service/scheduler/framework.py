"""The scheduler's extension points, in the manner of the Kubernetes scheduling
framework (pkg/scheduler/framework/interface.go): a queue order, filters that answer
with a status and a reason a person can read, and scorers whose 0-100 answers are
weighted and summed. A plugin that needs to know the whole cycle (the waiting queue,
every GPU) prepares itself once per cycle (`Prepares`: Kubernetes' PreFilter and
PreScore), so it holds its own state. A filter may also declare that the core's
candidate index can enforce it (`GpuFilter`, `ModelIndex`, `MemoryIndex`): that is
how the core prunes thousands of GPUs without knowing any plugin. Which plugins run,
and their weights, is configuration: names looked up in a `Registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self, runtime_checkable

from service.scheduler.snapshot import GpuView, NodeView, PendingJob, Snapshot


@dataclass(frozen=True)
class Status:
    ok: bool
    reason: str = ""


OK = Status(True)


@dataclass(frozen=True)
class Limit:
    gpus: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class Quotas:
    users: dict[str, Limit] = field(default_factory=dict)
    queues: dict[str, Limit] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulerConfig:
    queue_sort: str = "priority_fifo"
    filters: tuple[str, ...] = (
        "node_ready",
        "gpu_health",
        "gpu_model",
        "job_cap",
        "utilization_cap",
        "memory_fit",
        "scarce_model",
    )
    scorers: dict[str, float] = field(default_factory=lambda: {"binpack": 1.0, "model_fit": 1.0})
    headroom_mib: int = 256
    max_jobs_per_gpu: int = 4
    max_utilization_pct: float = 90.0
    # GPUs (gang jobs: nodes) scored per model and job, from each end of the model's
    # GPUs with room for it, found feasible before any is scored: the "limit" stage.
    # Nomad's LimitIterator stops at 2 feasible nodes for service jobs (scheduler/
    # stack.go; ceil(log2(nodes)) for batch); kube-scheduler stops filtering once it has
    # found max(100 nodes, percentageOfNodesToScore) feasible ones, 50% - nodes/125
    # (at least 5%) by default (kubernetes.io, "Scheduler Performance Tuning"). Both
    # trade the best-scoring node for a cycle that does not grow with the cluster; here
    # the index already orders GPUs by room, so the few at each end are binpack's and
    # spread's best.
    candidates_per_model: int = 2
    # Jobs sent through the search per cycle (answers already known this cycle, or
    # parked, cost nothing and do not count); the rest, in queue order, wait for the
    # next cycle. Slurm bounds its scheduling passes alike: default_queue_depth, 100
    # jobs per event-triggered pass (slurm.schedmd.com/sched_config.html). A Colloc
    # cycle is the main pass, every schedule_interval_s, so ten times that: at the
    # ~0.1 ms a search takes on 8,000 GPUs (bench/scheduler_cycle.py) about 0.1 s of
    # searching, while more jobs than a cycle's 1,000 rarely find room at once outside
    # a cluster's first cycle. None: no bound.
    max_attempts_per_cycle: int | None = 1000
    backfill: bool = True
    preemption: bool = False
    quotas: Quotas = Quotas()


@dataclass(frozen=True)
class Context:
    """What plugins may read besides the job and the GPU."""

    config: SchedulerConfig
    nodes: dict[int, NodeView]


class QueueSort(Protocol):
    def key(self, job: PendingJob) -> tuple[float, ...]: ...


class Filter(Protocol):
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status: ...


class Scorer(Protocol):
    def scores(self, job: PendingJob, gpus: Sequence[GpuView], ctx: Context) -> list[float]:
        """0-100 for each of the GPUs that passed every filter, in order."""
        ...


@runtime_checkable
class Prepares(Protocol):
    """A filter or scorer with state of its own for one cycle."""

    def prepare(self, snapshot: Snapshot, ctx: Context) -> Self:
        """This plugin as it judges every job of the cycle on `snapshot`."""
        ...


class GpuFilter:
    """A filter that reads the GPU alone, never the job: the core's candidate index
    holds only the GPUs that pass it, and asks again when a placement changes one."""

    def check_gpu(self, gpu: GpuView, ctx: Context) -> Status:
        raise NotImplementedError

    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status:
        return self.check_gpu(gpu, ctx)


@runtime_checkable
class ModelIndex(Protocol):
    """A filter that only a job's GPU models pass: the core looks at no other model."""

    def models(self, job: PendingJob) -> Collection[str] | None:
        """The models `job` may run on (None: any)."""
        ...


@dataclass(frozen=True)
class MemoryBound:
    """What a GPU needs to pass a memory filter for a job: this much free memory (as
    `GpuView.free_mib` counts it), and, when `idle`, no job and no reservation on it."""

    free_mib: int
    idle: bool = False

    def admits(self, gpu: GpuView, headroom_mib: int) -> bool:
        """Whether `gpu` meets the bound, as the core's index selects GPUs for it."""
        return gpu.free_mib(headroom_mib) >= self.free_mib and (not self.idle or is_idle(gpu))


def is_idle(gpu: GpuView) -> bool:
    return gpu.jobs == 0 and gpu.reserved_mib == 0


@runtime_checkable
class MemoryIndex(Protocol):
    """A filter that a GPU passes exactly when it meets a `MemoryBound`: the core takes
    candidates from its GPUs sorted by free memory, from that bound up. The bound may
    read only the job's shape (`PendingJob.shape`) and the configuration: the core
    keeps it per shape, and from cycle to cycle for parked jobs."""

    def bound(self, job: PendingJob, model: str, ctx: Context) -> MemoryBound | None:
        """What a GPU of `model` needs to pass for `job` (None: none passes)."""
        ...


class UnknownPluginError(ValueError):
    pass


@dataclass(frozen=True)
class Registry:
    """The plugins that can be configured, by name."""

    queue_sorts: Mapping[str, Callable[[], QueueSort]]
    filters: Mapping[str, Callable[[], Filter]]
    scorers: Mapping[str, Callable[[], Scorer]]

    def unknown(self, config: SchedulerConfig) -> list[str]:
        """The plugins `config` names that this registry lacks, each with what it has."""
        return [
            f"{kind} {name!r} (known: {', '.join(sorted(registry))})"
            for kind, names, registry in (
                ("queue sort", [config.queue_sort], self.queue_sorts),
                ("filter", config.filters, self.filters),
                ("scorer", list(config.scorers), self.scorers),
            )
            for name in names
            if name not in registry
        ]

    def build(
        self, config: SchedulerConfig
    ) -> tuple[QueueSort, list[tuple[str, Filter]], list[tuple[Scorer, float]]]:
        """The configured plugins (UnknownPluginError names the bad ones)."""
        if unknown := self.unknown(config):
            raise UnknownPluginError("unknown scheduler plugin(s): " + "; ".join(unknown))
        queue_sort = self.queue_sorts[config.queue_sort]()
        filters = [(name, self.filters[name]()) for name in config.filters]
        scorers = [(self.scorers[name](), weight) for name, weight in config.scorers.items()]
        return queue_sort, filters, scorers
