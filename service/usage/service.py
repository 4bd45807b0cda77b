"""Taking usage samples and reading them back as time series."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from service.jobs.models import Allocation, Attempt, Job
from service.nodes.models import Gpu, Node
from service.scheduling.views import gpu_views
from service.usage.models import UsageSample

MEMORY_FIELDS = ("gpus", "capacity_mib", "reserved_mib", "used_mib", "foreign_mib")


def take_sample(session: Session, now: datetime) -> int:
    """Record memory per GPU model (GPUs of nodes that are up) and per user; returns
    the number of rows written."""
    views = gpu_views(session)
    up = set(session.scalars(select(Node.id).where(Node.state == "ready")))
    totals: dict[str, UsageSample] = {}
    for view in views.values():
        if view.node_id not in up:
            continue
        row = totals.get(view.model)
        if row is None:
            row = totals[view.model] = UsageSample(at=now, gpu_model=view.model, owner=None)
            for name in MEMORY_FIELDS:
                setattr(row, name, 0)
        row.gpus += 1
        row.capacity_mib += view.memory_total_mib
        row.reserved_mib += view.reserved_mib
        row.used_mib += view.used_mib
        row.foreign_mib += view.foreign_mib
    per_owner = session.execute(
        select(
            Job.owner,
            Gpu.model,
            func.sum(Allocation.reserved_mib),
            func.sum(func.coalesce(Allocation.used_mib, 0)),
        )
        .join(Attempt, Attempt.id == Allocation.attempt_id)
        .join(Job, Job.id == Attempt.job_id)
        .join(Gpu, Gpu.id == Allocation.gpu_id)
        .where(Allocation.active.is_(True))
        .group_by(Job.owner, Gpu.model)
    )
    rows = list(totals.values()) + [
        UsageSample(at=now, gpu_model=model, owner=owner, reserved_mib=reserved, used_mib=used)
        for owner, model, reserved, used in per_owner
    ]
    session.add_all(rows)
    return len(rows)


def prune(session: Session, before: datetime) -> None:
    """Drop samples older than the retention window."""
    session.execute(delete(UsageSample).where(UsageSample.at < before))


@dataclass
class Point:
    at: datetime
    values: dict[str, float] = field(default_factory=dict)


def series(
    session: Session,
    *,
    group_by: str,
    since: datetime,
    until: datetime,
    step_s: float,
    gpu_model: str | None = None,
    owner: str | None = None,
) -> dict[str, list[Point]]:
    """Memory over time, one series per GPU model (`group_by="gpu_model"`) or per user
    (`"owner"`), summed over what is not grouped and averaged over `step_s` buckets.

    Per GPU model the whole model's samples are read, or only `owner`'s share when one
    is named; per user, each user's share, of one GPU model when one is named.
    """
    query = select(UsageSample).where(UsageSample.at >= since, UsageSample.at < until)
    if gpu_model is not None:
        query = query.where(UsageSample.gpu_model == gpu_model)
    if owner is not None:
        query = query.where(UsageSample.owner == owner)
    elif group_by == "gpu_model":
        query = query.where(UsageSample.owner.is_(None))
    else:
        query = query.where(UsageSample.owner.is_not(None))
    # sum what one instant holds for a series, then average the instants of a bucket;
    # a series has zeros at the instants sampled without it (a user with nothing placed)
    instants: dict[tuple[str, datetime], dict[str, float]] = {}
    for sample in session.scalars(query):
        key = sample.gpu_model if group_by == "gpu_model" else sample.owner or ""
        summed = instants.setdefault((key, sample.at), dict.fromkeys(MEMORY_FIELDS, 0.0))
        for name in MEMORY_FIELDS:
            summed[name] += getattr(sample, name)
    sampled = (
        select(UsageSample.at)
        .distinct()
        .where(UsageSample.owner.is_(None), UsageSample.at >= since, UsageSample.at < until)
    )
    keys = {key for key, _at in instants}
    for at in session.scalars(sampled):
        for key in keys:
            instants.setdefault((key, at), dict.fromkeys(MEMORY_FIELDS, 0.0))
    buckets: dict[tuple[str, datetime], list[dict[str, float]]] = defaultdict(list)
    for (key, at), values in instants.items():
        offset = (at - since).total_seconds() // step_s * step_s
        buckets[(key, since + timedelta(seconds=offset))].append(values)
    result: dict[str, list[Point]] = defaultdict(list)
    for (key, start), members in sorted(buckets.items()):
        mean = {name: sum(m[name] for m in members) / len(members) for name in MEMORY_FIELDS}
        result[key].append(Point(start, mean))
    return dict(sorted(result.items()))
