"""Migration 0012 on a database with jobs stored when `flash_attention` was false by
default and a summary had three counts fewer: false becomes unset, which estimates as
false did, a summary gets the counts as 0, other specs stay as they were, and a
downgrade gives the older form back."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import command
from sqlalchemy import Connection, text

from estimator.analytical.model import breakdown
from estimator.history import fingerprint
from estimator.spec import TrainingSpec
from service.db import alembic_config
from tests.service.test_migration_0008 import NOW, empty_database, migrated_to
from tests.service.test_migration_0011 import NEW_JOB

__all__ = ["empty_database"]  # the fixture, one per database

JOBS = sa.table("jobs", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()))
VIT = {"model": {"catalog": "timm:deit_small_patch16_224"}, "batch_size": 64}
SUMMARY = {"params": 10**6, "activations_per_sample": 10**5, "layers": {"linear": 4}}
PAGE = 1000  # the migration's
NEW_COUNTS = (
    "attention_scores_per_sample",
    "largest_attention_scores_per_sample",
    "autocast_bytes_per_sample",
    "fixed_activations",  # 0013's
    "autocast_fixed_bytes",  # 0016's
)


def _job(training: dict[str, Any]) -> dict[str, Any]:
    return {"name": "j", "command": ["train"], "training": training}


def _now(body: dict[str, Any]) -> dict[str, Any]:
    """A spec as a submit stores it now (every field)."""
    return _job(TrainingSpec.model_validate(body).model_dump(mode="json"))


def _before(body: dict[str, Any], flash: bool) -> dict[str, Any]:
    """As a submit stored it before 0012: flash_attention true or false, no new counts."""
    stored = _now(body | {"flash_attention": flash})
    summary = stored["training"]["model"].get("summary")
    if summary is not None:
        for name in NEW_COUNTS:
            del summary[name]
    return stored


def _specs(conn: Connection) -> dict[int, Any]:
    rows = conn.execute(sa.select(JOBS.c.id, JOBS.c.spec).order_by(JOBS.c.id))
    return {job_id: spec for job_id, spec in rows}


def test_stored_specs_take_the_new_form_and_back(empty_database: str) -> None:
    summary_job = {"model": {"summary": SUMMARY}, "batch_size": 8}
    stored = {
        1: _before(VIT, flash=False),
        2: _before(VIT, flash=True),
        3: {"name": "no training"},
        4: _before(summary_job, flash=False),
        # past the first page
        PAGE + 1: _before(VIT, flash=False),
    }
    url, engine = migrated_to(empty_database, "0011")
    with engine.begin() as conn:
        conn.execute(
            text(NEW_JOB.format("id, ", ":id, ")),
            [{"id": job_id, "now": NOW} for job_id in range(1, PAGE + 2)],
        )
        for job_id, spec in stored.items():
            conn.execute(sa.update(JOBS).where(JOBS.c.id == job_id).values(spec=spec))
        before = _specs(conn)
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        upgraded = _specs(conn)
    assert upgraded == before | {1: _now(VIT), 4: _now(summary_job), PAGE + 1: _now(VIT)}
    migrated = TrainingSpec.model_validate(upgraded[1]["training"])
    assert fingerprint(migrated) == fingerprint(TrainingSpec.model_validate(VIT))
    eager = TrainingSpec.model_validate(VIT | {"flash_attention": False})
    assert breakdown(migrated, None).activations < breakdown(eager, None).activations
    command.downgrade(alembic_config(url), "0011")
    with engine.connect() as conn:
        assert _specs(conn) == before
    engine.dispose()
