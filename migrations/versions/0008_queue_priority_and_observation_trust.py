"""queue priority and observation trust

Observed peaks are learned from only when credible, and answer for other owners' jobs
only when trusted or corroborated. Rows recorded before these rules are kept but not
learned from (the run time and plausibility they were never checked for are unknown
here). Memory figures can never be stored negative.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("credible", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("doubt", sa.String(length=256), nullable=True))
        batch_op.add_column(
            sa.Column("trusted", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.create_check_constraint(
            op.f("ck_observations_peak_mib_not_negative"), "peak_mib >= 0"
        )
    op.execute(
        "UPDATE observations SET doubt = 'recorded before observations were checked "
        "for credibility'"
    )
    for column in ("peak_mib", "upper_mib"):  # negative ones were stored before this
        op.execute(f"UPDATE job_estimates SET {column} = 0 WHERE {column} < 0")
    with op.batch_alter_table("job_estimates", schema=None) as batch_op:
        for column in ("peak_mib", "upper_mib"):
            batch_op.create_check_constraint(
                op.f(f"ck_job_estimates_{column}_not_negative"), f"{column} >= 0"
            )


def downgrade() -> None:
    with op.batch_alter_table("job_estimates", schema=None) as batch_op:
        for column in ("upper_mib", "peak_mib"):
            batch_op.drop_constraint(op.f(f"ck_job_estimates_{column}_not_negative"), "check")
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_observations_peak_mib_not_negative"), "check")
        batch_op.drop_column("trusted")
        batch_op.drop_column("doubt")
        batch_op.drop_column("credible")
