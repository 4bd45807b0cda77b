"""Migration 0014 on a database with estimates stored before their basis was kept: they
keep every figure and get no basis (so a waiting job's are made again once), and a
downgrade drops the column, keeping the rows."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from service.db import alembic_config
from tests.service.test_migration_0008 import NOW, empty_database, migrated_to
from tests.service.test_migration_0011 import NEW_JOB

__all__ = ["empty_database"]  # the fixture, one per database

ESTIMATE = (
    "INSERT INTO job_estimates (job_id, gpu_model, peak_mib, upper_mib, coverage, method, "
    "model_version, breakdown_mib) VALUES (1, 'Tesla T4', 5000, 6000, 0.95, 'analytical', "
    "'analytical', '{\"weights\": 100}')"
)
FIGURES = "SELECT job_id, gpu_model, peak_mib, upper_mib, method FROM job_estimates"


def test_stored_estimates_get_no_basis_and_keep_their_figures(empty_database: str) -> None:
    url, engine = migrated_to(empty_database, "0013")
    with engine.begin() as conn:
        conn.execute(text(NEW_JOB.format("id, ", "1, ")), {"now": NOW})
        conn.execute(text(ESTIMATE))
        before = conn.execute(text(FIGURES)).all()
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        assert conn.execute(text(FIGURES)).all() == before
        assert conn.execute(text("SELECT basis FROM job_estimates")).scalar_one() is None
    command.downgrade(alembic_config(url), "0013")
    with engine.connect() as conn:
        assert conn.execute(text(FIGURES)).all() == before
    engine.dispose()
