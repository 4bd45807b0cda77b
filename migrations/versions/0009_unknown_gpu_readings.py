"""unknown GPU readings

A GPU's memory use and utilisation are NULL where its agent could not read them
(NVML could not tell, the GPU fell off the bus) instead of 0, which read as free
memory and an idle GPU. Rows already stored keep their figures.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

COLUMNS = (("memory_used_mib", sa.Integer()), ("utilization_pct", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.alter_column(name, existing_type=kind, nullable=True)


def downgrade() -> None:
    # an unknown reading becomes what the scheduler can never take as free: the GPU
    # in full use, and busy
    op.execute("UPDATE gpus SET memory_used_mib = memory_total_mib WHERE memory_used_mib IS NULL")
    op.execute("UPDATE gpus SET utilization_pct = 100 WHERE utilization_pct IS NULL")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.alter_column(name, existing_type=kind, nullable=False)
