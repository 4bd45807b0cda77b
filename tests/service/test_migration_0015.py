"""Migration 0015 on a database with attempts: they keep every column and get neither an
OOM's need nor a retry ratio (so they teach the retry step nothing), and a downgrade
drops both, keeping the rows and, on SQLite, the AUTOINCREMENT that 0011 gave."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine, text

from service.db import alembic_config
from tests.service.test_migration_0008 import (
    add_attempt_and_peak,
    add_node_and_job,
    empty_database,
    migrated_to,
)

__all__ = ["empty_database"]  # the fixture, one per database

ATTEMPTS = "SELECT id, job_id, number, node_id, state, reserved_mib FROM attempts"


def _autoincrement(engine: Engine) -> bool:
    with engine.connect() as conn:
        sql = conn.execute(
            text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'attempts'")
        ).scalar_one()
    return "AUTOINCREMENT" in sql


def test_attempts_teach_nothing_and_a_downgrade_keeps_them_and_their_ids(
    empty_database: str,
) -> None:
    url, engine = migrated_to(empty_database, "0014")
    with engine.begin() as conn:
        add_node_and_job(conn, gpu_used_mib=0, gpu_utilization_pct=0)
        add_attempt_and_peak(conn)
        before = conn.execute(text(ATTEMPTS)).all()
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        assert conn.execute(text(ATTEMPTS)).all() == before
        new = conn.execute(text("SELECT needed_mib, retry_ratio FROM attempts")).one()
        assert tuple(new) == (None, None)
    command.downgrade(alembic_config(url), "0014")
    with engine.connect() as conn:
        assert conn.execute(text(ATTEMPTS)).all() == before
    if engine.dialect.name == "sqlite":  # PostgreSQL's sequences never reuse an id
        assert _autoincrement(engine)
    engine.dispose()
