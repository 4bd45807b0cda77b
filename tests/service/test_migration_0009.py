"""Migration 0009 on a database whose GPUs other rows refer to: their readings may be
unknown (NULL) after it, and a downgrade turns an unknown reading into one the
scheduler cannot take for free memory."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from service.db import alembic_config
from tests.service.test_migration_0008 import (
    add_attempt_and_peak,
    add_node_and_job,
    empty_database,
    migrated_to,
)

__all__ = ["empty_database"]  # the fixture, one per database


def test_gpu_readings_become_nullable_and_back(empty_database: str) -> None:
    url, engine = migrated_to(empty_database, "0008")
    with engine.begin() as conn:
        add_node_and_job(conn, gpu_used_mib=700, gpu_utilization_pct=5)
        add_attempt_and_peak(conn)
    command.upgrade(alembic_config(url), "head")
    with engine.begin() as conn:
        kept = conn.execute(text("SELECT memory_used_mib, utilization_pct FROM gpus")).one()
        conn.execute(text("UPDATE gpus SET memory_used_mib = NULL, utilization_pct = NULL"))
    assert tuple(kept) == (700, 5)
    command.downgrade(alembic_config(url), "0008")
    with engine.connect() as conn:
        back = conn.execute(text("SELECT memory_used_mib, utilization_pct FROM gpus")).one()
        assert conn.execute(text("SELECT count(*) FROM observations")).scalar() == 1
    assert tuple(back) == (15360, 100)
    engine.dispose()
