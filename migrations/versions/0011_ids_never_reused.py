"""ids never reused on SQLite

Jobs, attempts and events get AUTOINCREMENT on SQLite, which otherwise gives a deleted
newest row's id to the next row: after retention pruned the newest finished jobs, a new
job took a pruned job's id, and users' references to it, agents' attempt ids and audit
log cursors named someone else's rows. PostgreSQL's sequences never reuse an id, so
nothing changes there. SQLite counts on from the largest id each table holds now: an id
pruned above that before this migration can still be given once.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 16:30:00
"""

from __future__ import annotations

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

# referenced tables first: each is recreated while the others still refer to it by name
TABLES = ("jobs", "attempts", "events")


def _recreate(autoincrement: bool) -> None:
    """Recreate each table with or without AUTOINCREMENT (SQLite sets it only when a
    table is created), rows and ids kept."""
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _recreate(autoincrement=True)


def downgrade() -> None:
    _recreate(autoincrement=False)
