"""what an attempt that died of an OOM needed, so that retries learn the cluster's step

`attempts.needed_mib` records `oom_needed_mib` for each OOM: the retry step after an
OOM is learned from how far the cluster's jobs went on to need beyond it
(`service/scheduler/lifecycle.py`'s `retry_factor`). Attempts that ended before have
none and teach nothing.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 21:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("needed_mib", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_attempts_needed_mib"), ["needed_mib"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_needed_mib"))
        batch_op.drop_column("needed_mib")
