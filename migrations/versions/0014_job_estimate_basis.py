"""what each stored estimate was made on, so that a waiting job's is remade when stale

`job_estimates.basis` records `Estimator.basis`: the calibration and how many runs of
the job's architecture the history held. The scheduler remakes a waiting job's
estimates once runs of its architecture ended since (an OOM among them) or another
calibration is active. Rows stored before have none, so they are made again once.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("job_estimates", schema=None) as batch_op:
        batch_op.add_column(sa.Column("basis", sa.String(length=96), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_estimates", schema=None) as batch_op:
        batch_op.drop_column("basis")
