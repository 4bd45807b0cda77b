"""The scheduler's extension points, in the manner of the Kubernetes scheduling
framework (pkg/scheduler/framework/interface.go): a queue order, filters that answer
with a status and a reason a person can read, and scorers whose 0-100 answers are
weighted and summed. Plugins are chosen by name from the registries below, so which
ones run and their weights are configuration, not code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from service.scheduler.snapshot import GpuView, NodeView, PendingJob


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
    # GPUs (or, for gang jobs, nodes) looked at per model and job: the "limit" stage
    # (Nomad's LimitIterator; Kubernetes' percentageOfNodesToScore)
    candidates_per_model: int = 2
    backfill: bool = True
    preemption: bool = False
    quotas: Quotas = Quotas()


@dataclass(frozen=True)
class Context:
    """What plugins may read besides the job and the GPU."""

    config: SchedulerConfig
    nodes: dict[int, NodeView]
    kept_gpus: frozenset[int] = frozenset()  # for waiting jobs that fit one GPU model only
    one_model_jobs: frozenset[int] = frozenset()  # those jobs (and jobs that fit none)


class QueueSort(Protocol):
    def key(self, job: PendingJob) -> tuple[float, ...]: ...


class Filter(Protocol):
    def check(self, job: PendingJob, gpu: GpuView, ctx: Context) -> Status: ...


class Scorer(Protocol):
    def scores(self, job: PendingJob, gpus: Sequence[GpuView], ctx: Context) -> list[float]:
        """0-100 for each of the GPUs that passed every filter, in order."""
        ...


QUEUE_SORTS: dict[str, Callable[[], QueueSort]] = {}
FILTERS: dict[str, Callable[[], Filter]] = {}
SCORERS: dict[str, Callable[[], Scorer]] = {}


class UnknownPluginError(ValueError):
    pass


T = TypeVar("T")


def _pick(registry: dict[str, Callable[[], T]], kind: str, name: str) -> T:
    if name not in registry:
        raise UnknownPluginError(f"unknown {kind} plugin {name!r}; known: {sorted(registry)}")
    return registry[name]()


def build_plugins(
    config: SchedulerConfig,
) -> tuple[QueueSort, list[tuple[str, Filter]], list[tuple[Scorer, float]]]:
    """The configured plugins, from the registries (UnknownPluginError names the bad one)."""
    queue_sort = _pick(QUEUE_SORTS, "queue sort", config.queue_sort)
    filters = [(name, _pick(FILTERS, "filter", name)) for name in config.filters]
    scorers = [(_pick(SCORERS, "scorer", name), weight) for name, weight in config.scorers.items()]
    return queue_sort, filters, scorers
