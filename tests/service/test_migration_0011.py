"""Migration 0011 on a database with jobs, attempts, peaks and events: every row and
id survives the upgrade and the downgrade, and after the upgrade SQLite no longer
gives the id of a deleted newest job to the next."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Connection, text

from service.db import alembic_config
from tests.service.test_migration_0008 import (
    NOW,
    add_attempt_and_peak,
    add_node_and_job,
    empty_database,
    migrated_to,
)

__all__ = ["empty_database"]  # the fixture, one per database

TABLES = ("jobs", "attempts", "observations", "events")
# a succeeded job with the given columns first (an id, or none for the next one)
NEW_JOB = (
    "INSERT INTO jobs ({}name, owner, queue, priority, state, spec, gpus, max_attempts, "
    "cancel_requested, preempt_requested, created_at, updated_at) "
    "VALUES ({}'j', 'a', 'default', 0, 'succeeded', '{{}}', 1, 1, false, false, :now, :now)"
)


def _rows(conn: Connection) -> dict[str, list[tuple[object, ...]]]:
    return {
        table: [tuple(row) for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY id"))]
        for table in TABLES
    }


def test_rows_survive_and_sqlite_ids_are_not_given_again(empty_database: str) -> None:
    url, engine = migrated_to(empty_database, "0010")
    with engine.begin() as conn:
        add_node_and_job(conn, gpu_used_mib=700, gpu_utilization_pct=5)
        add_attempt_and_peak(conn)
        conn.execute(text(NEW_JOB.format("id, ", "2, ")), {"now": NOW})
        conn.execute(
            text(
                "INSERT INTO events (id, at, kind, job_id, message, data) "
                "VALUES (7, :now, 'job.submitted', 1, 'm', '{}')"
            ),
            {"now": NOW},
        )
        before = _rows(conn)
    command.upgrade(alembic_config(url), "0011")  # later ones may add columns
    with engine.begin() as conn:
        assert _rows(conn) == before
        if engine.dialect.name == "sqlite":  # PostgreSQL's sequences never reused an id
            conn.execute(text("DELETE FROM jobs WHERE id = 2"))
            added = conn.execute(text(NEW_JOB.format("", "") + " RETURNING id"), {"now": NOW})
            assert added.scalar() == 3
        upgraded = _rows(conn)
    command.downgrade(alembic_config(url), "0010")
    with engine.connect() as conn:
        assert _rows(conn) == upgraded
    command.upgrade(alembic_config(url), "head")
    engine.dispose()
