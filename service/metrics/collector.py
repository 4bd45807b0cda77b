"""Metrics read from the database at scrape time, so every replica reports the same
cluster and the numbers are the admin API's numbers."""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Mapped, Session, aliased, sessionmaker

from service.admin.service import cluster
from service.config import Settings
from service.estimates import accuracy
from service.estimates.accuracy import RATIO_BUCKETS, AccuracyFilters
from service.estimates.service import active_version, versions
from service.jobs.models import Attempt, Job
from service.scheduler.states import (
    ACTIVE_ATTEMPT_STATES,
    RETRIED_ATTEMPT_STATES,
    AttemptState,
    JobState,
)

MIB = 1024 * 1024
State = TypeVar("State", bound=StrEnum)
GPU_LABELS = ["node", "gpu", "uuid", "model"]


def _gpu_metrics(session: Session, settings: Settings) -> Iterator[Metric]:
    memory = {
        name: GaugeMetricFamily(f"colloc_gpu_memory_{name}_bytes", help_text, labels=GPU_LABELS)
        for name, help_text in (
            ("total", "GPU memory capacity."),
            ("reserved", "GPU memory reserved by the jobs placed on the GPU."),
            ("used", "GPU memory in use as the agent observed it (all processes)."),
            ("foreign", "GPU memory used by processes that are not Colloc jobs."),
        )
    }
    jobs = GaugeMetricFamily("colloc_gpu_jobs", "Jobs placed on the GPU.", labels=GPU_LABELS)
    healthy = GaugeMetricFamily("colloc_gpu_healthy", "1 if the GPU takes jobs.", labels=GPU_LABELS)
    busy = GaugeMetricFamily(
        "colloc_gpu_utilization_ratio", "GPU compute utilisation (0-1).", labels=GPU_LABELS
    )
    node_up = GaugeMetricFamily("colloc_node_up", "1 if the node's agent reports.", labels=["node"])
    for node in cluster(session=session, headroom_mib=settings.memory_headroom_mib).nodes:
        node_up.add_metric([node.name], 1.0 if node.state == "ready" else 0.0)
        for gpu in node.gpus:
            labels = [node.name, str(gpu.index), gpu.uuid, gpu.model]
            memory["total"].add_metric(labels, gpu.memory_total_mib * MIB)
            memory["reserved"].add_metric(labels, gpu.memory_reserved_mib * MIB)
            if gpu.memory_used_mib is not None:  # unreadable: no sample rather than 0
                memory["used"].add_metric(labels, gpu.memory_used_mib * MIB)
            memory["foreign"].add_metric(labels, gpu.memory_foreign_mib * MIB)
            jobs.add_metric(labels, len(gpu.allocations))
            healthy.add_metric(labels, 1.0 if gpu.healthy else 0.0)
            if gpu.utilization_pct is not None:
                busy.add_metric(labels, gpu.utilization_pct / 100)
    yield from (*memory.values(), jobs, healthy, busy, node_up)


def _count_by(session: Session, column: Mapped[State]) -> dict[State, int]:
    return {
        key: count for key, count in session.execute(select(column, func.count()).group_by(column))
    }


def _job_metrics(session: Session) -> Iterator[Metric]:
    by_state = _count_by(session, Job.state)
    queue = GaugeMetricFamily("colloc_jobs", "Jobs by state.", labels=["state"])
    for state in JobState:
        queue.add_metric([state], by_state.get(state, 0))
    attempts = _count_by(session, Attempt.state)
    yield queue
    yield CounterMetricFamily(
        "colloc_placements", "Attempts placed on GPUs.", value=sum(attempts.values())
    )
    ended = CounterMetricFamily("colloc_attempts_ended", "Attempts ended.", labels=["outcome"])
    for outcome, count in sorted(attempts.items()):
        if outcome not in ACTIVE_ATTEMPT_STATES:
            ended.add_metric([outcome], count)
    yield ended
    yield CounterMetricFamily(
        "colloc_ooms",
        "Attempts that ran out of GPU memory.",
        value=attempts.get(AttemptState.OOM, 0),
    )
    following = aliased(Attempt)
    retried = session.execute(
        select(Attempt.state, func.count())
        .join(
            following,
            (following.job_id == Attempt.job_id) & (following.number == Attempt.number + 1),
        )
        .where(Attempt.state.in_(RETRIED_ATTEMPT_STATES))
        .group_by(Attempt.state)
    )
    retries = CounterMetricFamily(
        "colloc_retries", "Attempts after an OOM or a lost attempt.", labels=["cause"]
    )
    for cause, count in retried:
        retries.add_metric([cause], count)
    yield retries


def _estimator_metrics(session: Session) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "colloc_estimator_model_info", "The active calibration version.", labels=["version"]
    )
    info.add_metric([active_version(versions(session))], 1.0)
    yield info
    ratio = HistogramMetricFamily(
        "colloc_estimator_peak_ratio",
        "Observed peak / estimated peak, per GPU model (1 is exact; above 1 is under).",
        labels=["gpu_model"],
    )
    under = CounterMetricFamily(
        "colloc_estimator_underestimates",
        "Observed peaks above the reserved bound (upper_mib).",
        labels=["gpu_model"],
    )
    for model in accuracy.by_model(session, AccuracyFilters()):
        buckets = [
            (str(bound), n) for bound, n in zip(RATIO_BUCKETS, model.ratio_buckets, strict=True)
        ]
        ratio.add_metric(
            [model.gpu_model], [*buckets, ("+Inf", model.observations)], sum_value=model.ratio_sum
        )
        under.add_metric([model.gpu_model], model.underestimates)
    yield ratio
    yield under


class ClusterCollector(Collector):
    """Cluster, queue, outcome and estimator metrics from one read of the database."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = sessions
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        with self._sessions() as session:
            metrics = [
                *_gpu_metrics(session, self._settings),
                *_job_metrics(session),
                *_estimator_metrics(session),
            ]
        yield from metrics
