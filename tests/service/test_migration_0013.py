"""Migration 0013 on a database with summaries stored before `fixed_activations`: they
get it as 0, which estimates as they did, other specs stay as they were, and a downgrade
gives the older form back."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import command
from sqlalchemy import text

from estimator.analytical.model import breakdown
from estimator.history import fingerprint
from estimator.spec import TrainingSpec
from service.db import alembic_config
from tests.service.test_migration_0008 import NOW, empty_database, migrated_to
from tests.service.test_migration_0011 import NEW_JOB
from tests.service.test_migration_0012 import JOBS, SUMMARY, VIT, _now, _specs

__all__ = ["empty_database"]  # the fixture, one per database


def _before(body: dict[str, Any]) -> dict[str, Any]:
    """As a submit stored it before 0013: no `fixed_activations` in a summary."""
    stored = _now(body)
    if (summary := stored["training"]["model"]["summary"]) is not None:
        del summary["fixed_activations"]
    return stored


def test_stored_summaries_take_the_new_form_and_back(empty_database: str) -> None:
    summary_job = {"model": {"summary": SUMMARY}, "batch_size": 8}
    stored = {1: _before(summary_job), 2: _before(VIT), 3: {"name": "no training"}}
    url, engine = migrated_to(empty_database, "0012")
    with engine.begin() as conn:
        conn.execute(
            text(NEW_JOB.format("id, ", ":id, ")),
            [{"id": job_id, "now": NOW} for job_id in stored],
        )
        for job_id, spec in stored.items():
            conn.execute(sa.update(JOBS).where(JOBS.c.id == job_id).values(spec=spec))
        before = _specs(conn)
    assert "fixed_activations" not in before[1]["training"]["model"]["summary"]
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        upgraded = _specs(conn)
    assert upgraded == before | {1: _now(summary_job)}
    migrated = TrainingSpec.model_validate(upgraded[1]["training"])
    assert migrated.model.summary is not None and migrated.model.summary.fixed_activations == 0
    submitted = TrainingSpec.model_validate(summary_job)
    assert fingerprint(migrated) == fingerprint(submitted)
    assert breakdown(migrated, None) == breakdown(submitted, None)
    command.downgrade(alembic_config(url), "0012")
    with engine.connect() as conn:
        assert _specs(conn) == before
    engine.dispose()
