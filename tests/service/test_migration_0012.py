"""Migration 0012 on a database with jobs stored when `flash_attention` was false by
default: false becomes unset, which estimates as false did, true and other specs stay
as they were, and a downgrade gives false back."""

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


def _job(flash: bool | None) -> dict[str, Any]:
    """A spec as a submit stored it (every field, the model's and the others')."""
    training = TrainingSpec.model_validate(VIT | {"flash_attention": flash})
    return {"name": "j", "command": ["train"], "training": training.model_dump(mode="json")}


def _specs(conn: Connection) -> dict[int, Any]:
    rows = conn.execute(sa.select(JOBS.c.id, JOBS.c.spec).order_by(JOBS.c.id))
    return {job_id: spec for job_id, spec in rows}


def test_a_stored_false_becomes_unset_and_back(empty_database: str) -> None:
    stored = {1: _job(False), 2: _job(True), 3: {"name": "no training"}, 4: {}}
    url, engine = migrated_to(empty_database, "0011")
    with engine.begin() as conn:
        for job_id, spec in stored.items():
            conn.execute(text(NEW_JOB.format("id, ", f"{job_id}, ")), {"now": NOW})
            conn.execute(sa.update(JOBS).where(JOBS.c.id == job_id).values(spec=spec))
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        upgraded = _specs(conn)
    assert upgraded == stored | {1: _job(None)}
    migrated = TrainingSpec.model_validate(upgraded[1]["training"])
    submitted_now = TrainingSpec.model_validate(VIT)
    assert fingerprint(migrated) == fingerprint(submitted_now)
    assert (
        breakdown(migrated, None).activations
        < breakdown(TrainingSpec.model_validate(VIT | {"flash_attention": False}), None).activations
    )
    command.downgrade(alembic_config(url), "0011")
    with engine.connect() as conn:
        assert _specs(conn) == stored
    engine.dispose()
