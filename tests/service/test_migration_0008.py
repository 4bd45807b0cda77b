"""Migration 0008 on a database that holds what the rules it adds forbid: negative
estimates (stored before estimates were clamped) and peaks never checked."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url

from service.config import normalise_database_url
from service.db import alembic_config, make_engine
from tests.conftest import PG_URL_ENV

NOW = "2026-01-01 00:00:00"


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/old.db"
        return
    if not os.environ.get(PG_URL_ENV):
        pytest.skip(f"{PG_URL_ENV} unset")
    base = make_url(normalise_database_url(os.environ[PG_URL_ENV]))
    name = f"colloc_mig_{uuid.uuid4().hex[:12]}"
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def add_node_and_job(conn: Connection, *, gpu_used_mib: int, gpu_utilization_pct: int) -> None:
    """A node with one T4 reading as given, and a succeeded job (id 1 each)."""
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
            "VALUES (1, 1, 'g', 0, 'Tesla T4', 15360, :used, 0, :util, true, :now)"
        ),
        {"now": NOW, "used": gpu_used_mib, "util": gpu_utilization_pct},
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


def add_attempt_and_peak(conn: Connection) -> None:
    """Job 1's succeeded attempt on GPU 1, and its observed peak (0 MiB)."""
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


def migrated_to(database: str, revision: str) -> tuple[str, Engine]:
    """`database`'s URL, and an engine on it, once migrated up to `revision`."""
    url = normalise_database_url(database)
    command.upgrade(alembic_config(url), revision)
    return url, make_engine(url)


def test_old_rows_are_made_to_fit_the_new_rules(empty_database: str) -> None:
    url, engine = migrated_to(empty_database, "0007")
    with engine.begin() as conn:
        add_node_and_job(conn, gpu_used_mib=0, gpu_utilization_pct=0)
        conn.execute(
            text(
                "INSERT INTO job_estimates (job_id, gpu_model, peak_mib, upper_mib, coverage, "
                "method, model_version, breakdown_mib) "
                "VALUES (1, 'Tesla T4', -500, -450, 0.9, 'history', 'x', '{}')"
            )
        )
        add_attempt_and_peak(conn)
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        estimate = conn.execute(text("SELECT peak_mib, upper_mib FROM job_estimates")).one()
        observation = conn.execute(text("SELECT credible, trusted, doubt FROM observations")).one()
    assert tuple(estimate) == (0, 0)
    assert not observation.credible and not observation.trusted
    assert "before observations were checked" in observation.doubt
    command.downgrade(alembic_config(url), "0007")
    command.upgrade(alembic_config(url), "head")
    engine.dispose()
