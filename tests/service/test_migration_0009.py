"""Migration 0009 on a database whose GPUs other rows refer to: their readings may be
unknown (NULL) after it, and a downgrade turns an unknown reading into one the
scheduler cannot take for free memory."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from service.config import normalise_database_url
from service.db import alembic_config, make_engine
from tests.service.test_migration_0008 import NOW, empty_database

__all__ = ["empty_database"]  # the fixture, one per database


def test_gpu_readings_become_nullable_and_back(empty_database: str) -> None:
    url = normalise_database_url(empty_database)
    command.upgrade(alembic_config(url), "0008")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO nodes (id, name, state, agent_version, registered_at, "
                "last_heartbeat_at) VALUES (1, 'n', 'ready', 't', :now, :now)"
            ),
            {"now": NOW},
        )
        conn.execute(
            text(
                'INSERT INTO gpus (id, node_id, uuid, "index", model, memory_total_mib, '
                "memory_used_mib, memory_foreign_mib, utilization_pct, healthy, updated_at) "
                "VALUES (1, 1, 'g', 0, 'Tesla T4', 15360, 700, 0, 5, true, :now)"
            ),
            {"now": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, name, owner, queue, priority, state, spec, gpus, "
                "max_attempts, cancel_requested, preempt_requested, created_at, updated_at) "
                "VALUES (1, 'j', 'a', 'default', 0, 'succeeded', '{}', 1, 1, false, false, "
                ":now, :now)"
            ),
            {"now": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO attempts (id, job_id, number, node_id, state, reserved_mib, "
                "placed_at, notice_seq) VALUES (1, 1, 1, 1, 'succeeded', 1, :now, 0)"
            ),
            {"now": NOW},
        )
        conn.execute(
            text(
                "INSERT INTO observations (attempt_id, gpu_id, gpu_model, peak_mib, created_at) "
                "VALUES (1, 1, 'Tesla T4', 0, :now)"
            ),
            {"now": NOW},
        )
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
