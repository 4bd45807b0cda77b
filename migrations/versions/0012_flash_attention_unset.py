"""stored training specs in the form that eager attention and autocast bytes added

A training spec's `flash_attention` was true or false, false by default, and false
asked for nothing a catalogued or traced model's estimate did not already count. It is
now unset by default and false charges such a model the attention scores an eager
attention keeps. A stored false is what every job that did not say true has, so it
becomes unset, which estimates as false did. The `summary` model form gained three
counts, 0 where not given (as before them); stored summaries get them as 0. So jobs
keep their estimates, their history (a spec's fingerprint) and the idempotent replay
of the submission that created them (a replay that now says false is a different
request, and is refused as one). A downgrade gives false back to an unset
`flash_attention` and drops the three counts, which the older code does not know.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 04:30:00
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

PAGE = 1000
SUMMARY_COUNTS = (
    "attention_scores_per_sample",
    "largest_attention_scores_per_sample",
    "autocast_bytes_per_sample",
)
jobs = sa.table("jobs", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()))


def _rewrite(change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
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


def _upgraded(training: dict[str, Any]) -> dict[str, Any]:
    new = dict(training)
    if new.get("flash_attention", ...) is False:
        new["flash_attention"] = None
    if (summary := _summary(training)) is not None:
        counts = {name: summary.get(name, 0) for name in SUMMARY_COUNTS}
        new["model"] = training["model"] | {"summary": summary | counts}
    return new


def _downgraded(training: dict[str, Any]) -> dict[str, Any]:
    new = dict(training)
    if "flash_attention" in new and new["flash_attention"] is None:
        new["flash_attention"] = False
    if (summary := _summary(training)) is not None:
        kept = {name: value for name, value in summary.items() if name not in SUMMARY_COUNTS}
        new["model"] = training["model"] | {"summary": kept}
    return new


def upgrade() -> None:
    _rewrite(_upgraded)


def downgrade() -> None:
    _rewrite(_downgraded)
