"""admin controls: node cordon and drain, job hold and time limits

Nodes get an admin state (active, cordoned, draining) and a drain deadline; jobs a
held flag, a time limit in seconds and whether the server stopped them at it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import service.db

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("admin_state", sa.String(16), nullable=False, server_default="active")
        )
        batch_op.add_column(sa.Column("drain_deadline", service.db.UtcDateTime(timezone=True)))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("held", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("time_limit_s", sa.Integer()))
        batch_op.add_column(
            sa.Column("timed_out", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    # a timeout is a failure to code that does not know the state
    op.execute("UPDATE jobs SET state = 'failed' WHERE state = 'timeout'")
    op.execute("UPDATE attempts SET state = 'failed' WHERE state = 'timeout'")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for name in ("timed_out", "time_limit_s", "held"):
            batch_op.drop_column(name)
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        for name in ("drain_deadline", "admin_state"):
            batch_op.drop_column(name)
