"""flash_attention false stored before it could be unset

A training spec's `flash_attention` was true or false, false by default, and false
asked for nothing a catalogued or traced model's estimate did not already count. It is
now unset by default and false charges such a model the attention scores an eager
attention keeps. A stored false is what every job that did not say true has, so it
becomes unset, which estimates as false did; jobs keep their estimates, their history
(a spec's fingerprint) and their idempotent replays. A downgrade turns unset back into
false, its old meaning.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 04:30:00
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

PAGE = 1000
jobs = sa.table("jobs", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()))


def _rewrite(old: bool | None, new: bool | None) -> None:
    """Set every stored `training.flash_attention` that is `old` to `new`, a page of
    jobs at a time (by id: no cursor stays open across the updates)."""
    bind = op.get_bind()
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
        for job_id, spec in page:
            training: Any = spec.get("training") if isinstance(spec, dict) else None
            if isinstance(training, dict) and training.get("flash_attention", ...) is old:
                changed = spec | {"training": training | {"flash_attention": new}}
                bind.execute(sa.update(jobs).where(jobs.c.id == job_id).values(spec=changed))
        last = page[-1].id


def upgrade() -> None:
    _rewrite(False, None)


def downgrade() -> None:
    _rewrite(None, False)
