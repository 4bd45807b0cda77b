"""job owner accounts: the Unix account a token name's jobs run as, where it differs

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import service.db

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "unix_accounts",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("account", sa.String(length=32), nullable=False),
        sa.Column("updated_at", service.db.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_unix_accounts")),
    )


def downgrade() -> None:
    op.drop_table("unix_accounts")
