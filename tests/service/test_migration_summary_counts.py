"""Migrations 0013 and 0016 on a database with summaries stored before
`fixed_activations` or `autocast_fixed_bytes`: they get it as 0, which estimates as they
did, other specs stay as they were, and a downgrade gives the older form back."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import text

from estimator.analytical.model import MIB, breakdown
from estimator.history import fingerprint
from estimator.spec import TrainingSpec
from service.db import alembic_config
from tests.service.test_migration_0008 import NOW, empty_database, migrated_to
from tests.service.test_migration_0011 import NEW_JOB
from tests.service.test_migration_0012 import JOBS, SUMMARY, VIT, _now, _specs

__all__ = ["empty_database"]  # the fixture, one per database

# the counts a database at each revision lacks: 0013's and 0016's, then 0016's
LACKING = {"0012": ("fixed_activations", "autocast_fixed_bytes"), "0015": ("autocast_fixed_bytes",)}


def _before(body: dict[str, Any], counts: tuple[str, ...]) -> dict[str, Any]:
    """As a submit stored it before the migrations that add `counts` to a summary."""
    stored = _now(body)
    if (summary := stored["training"]["model"]["summary"]) is not None:
        for name in counts:
            del summary[name]
    return stored


@pytest.mark.parametrize("revision", sorted(LACKING))
def test_stored_summaries_take_the_new_form_and_back(empty_database: str, revision: str) -> None:
    lacking = LACKING[revision]
    # an autocast job, with what a step keeps once where its revision stored it
    fixed = 0 if "fixed_activations" in lacking else 300_000
    summary_job = {
        "model": {"summary": SUMMARY | {"fixed_activations": fixed}},
        "batch_size": 8,
        "precision": "amp_bf16",
        "optimizer": "sgd",  # no optimizer-step temporaries outweigh the activations
    }
    stored = {
        1: _before(summary_job, lacking),
        2: _before(VIT, lacking),
        3: {"name": "no training"},
    }
    url, engine = migrated_to(empty_database, revision)
    with engine.begin() as conn:
        conn.execute(
            text(NEW_JOB.format("id, ", ":id, ")),
            [{"id": job_id, "now": NOW} for job_id in stored],
        )
        for job_id, spec in stored.items():
            conn.execute(sa.update(JOBS).where(JOBS.c.id == job_id).values(spec=spec))
        before = _specs(conn)
    assert not set(lacking) & set(before[1]["training"]["model"]["summary"])
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as conn:
        upgraded = _specs(conn)
    assert upgraded == before | {1: _now(summary_job)}
    migrated = TrainingSpec.model_validate(upgraded[1]["training"])
    assert migrated.model.summary is not None
    assert all(getattr(migrated.model.summary, name) == 0 for name in lacking)
    submitted = TrainingSpec.model_validate(summary_job)
    assert fingerprint(migrated) == fingerprint(submitted)
    assert breakdown(migrated, None) == breakdown(submitted, None)
    # estimated as before the migration: every saved element at 16 bits
    per_sample = migrated.model.summary.activations_per_sample * 8
    assert breakdown(migrated, None).activations * MIB == (per_sample + fixed) * 2
    command.downgrade(alembic_config(url), revision)
    with engine.connect() as conn:
        assert _specs(conn) == before
    engine.dispose()
