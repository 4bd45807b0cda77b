"""gpu descriptions and cluster offsets

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import service.db

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.add_column(sa.Column("compute_capability", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("driver_version", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("cuda_driver_version", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("context_mib", sa.Integer(), nullable=True))
    op.create_table(
        "fixed_cost_offsets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("environment", sa.String(length=256), nullable=False),
        sa.Column("gpu_model", sa.String(length=128), nullable=False),
        sa.Column("driver_version", sa.String(length=64), nullable=True),
        sa.Column("residuals", sa.JSON(), nullable=False),
        sa.Column("observations", sa.Integer(), nullable=False),
        sa.Column("offset_mib", sa.Float(), nullable=False),
        sa.Column("last_observation_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", service.db.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fixed_cost_offsets")),
        sa.UniqueConstraint("environment", name=op.f("uq_fixed_cost_offsets_environment")),
    )


def downgrade() -> None:
    op.drop_table("fixed_cost_offsets")
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.drop_column("context_mib")
        batch_op.drop_column("cuda_driver_version")
        batch_op.drop_column("driver_version")
        batch_op.drop_column("compute_capability")
