"""Rewriting the training specs stored with jobs, for migrations that change their form.

A stored spec keeps every field a submit had (its fingerprint and the idempotent replay
of its submission depend on them), so a new field with a default is written into the
stored specs as that default, and taken out again on a downgrade."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

PAGE = 1000
jobs = sa.table("jobs", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()))


def rewrite_training(change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Replace every job's stored `training` by `change(training)` where that differs,
    a page of jobs at a time by id (no cursor stays open across the updates)."""
    bind = op.get_bind()
    update = (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("job_id"))
        .values(spec=sa.bindparam("new_spec", type_=sa.JSON()))
    )
    last = 0
    while True:
        page = bind.execute(
            sa.select(jobs.c.id, jobs.c.spec)
            .where(jobs.c.id > last)
            .order_by(jobs.c.id)
            .limit(PAGE)
        ).all()
        if not page:
            return
        changed = []
        for job_id, spec in page:
            training = spec.get("training") if isinstance(spec, dict) else None
            if isinstance(training, dict) and (new := change(training)) != training:
                changed.append({"job_id": job_id, "new_spec": spec | {"training": new}})
        if changed:
            bind.execute(update, changed)
        last = page[-1].id


def _summary(training: dict[str, Any]) -> dict[str, Any] | None:
    model = training.get("model")
    summary = model.get("summary") if isinstance(model, dict) else None
    return summary if isinstance(summary, dict) else None


def with_summary_counts(training: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`training` with each of `names` its `summary` model form lacks set to 0 (a
    summary without a count estimated as 0 did); other specs as they are."""
    summary = _summary(training)
    if summary is None:
        return training
    counts = {name: summary.get(name, 0) for name in names}
    return training | {"model": training["model"] | {"summary": summary | counts}}


def without_summary_counts(training: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """`training` with `names` taken out of its `summary` model form, for older code."""
    summary = _summary(training)
    if summary is None:
        return training
    kept = {name: value for name, value in summary.items() if name not in names}
    return training | {"model": training["model"] | {"summary": kept}}


def summary_counts_migration(
    names: tuple[str, ...],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """A migration's upgrade and downgrade for counts added to the `summary` form:
    stored summaries get `names` as 0 (estimated as a summary without them was), and
    lose them again for the older code."""

    def upgrade() -> None:
        rewrite_training(lambda training: with_summary_counts(training, names))

    def downgrade() -> None:
        rewrite_training(lambda training: without_summary_counts(training, names))

    return upgrade, downgrade
