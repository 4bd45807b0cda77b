"""what an OOM needed, and how far a job that succeeded after one went on to need

`attempts.needed_mib` records `oom_needed_mib` for each OOM, and `attempts.retry_ratio`
a success's peak over its job's first OOM's need: the step a retry after an OOM takes
is learned from the latest ratios (`service/scheduler/lifecycle.py`'s `retry_factor`),
which a partial index finds without a scan of every attempt. Attempts that ended before
have neither and teach nothing.

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
        batch_op.add_column(sa.Column("retry_ratio", sa.Float(), nullable=True))
        batch_op.create_index(
            "ix_attempts_retry_ratio",
            ["id"],
            unique=False,
            postgresql_where=sa.text("retry_ratio IS NOT NULL"),
            sqlite_where=sa.text("retry_ratio IS NOT NULL"),
        )


def downgrade() -> None:
    # dropping columns rebuilds the table on SQLite: it keeps 0011's AUTOINCREMENT
    with op.batch_alter_table(
        "attempts", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_index("ix_attempts_retry_ratio")
        batch_op.drop_column("retry_ratio")
        batch_op.drop_column("needed_mib")
