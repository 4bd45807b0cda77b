"""stored summaries in the form that counts what a step keeps once under autocast

The `summary` model form gained `autocast_fixed_bytes`: the bytes a training step keeps
once under `torch.autocast` whatever its batch, autocast's 16-bit weight copies among
them, which `colloc estimate --trace` now measures. A summary without it is charged as
before (its `fixed_activations` at 16 bits beside a copy of every weight), so stored
summaries get it as 0 and keep their estimates, fingerprints and the idempotent replay
of their submissions. A downgrade drops it again, which the older code does not know.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-08 02:45:00
"""

from __future__ import annotations

from typing import Any

from migrations.stored_specs import rewrite_training, with_summary_counts, without_summary_counts

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None

COUNTS = ("autocast_fixed_bytes",)


def _upgraded(training: dict[str, Any]) -> dict[str, Any]:
    return with_summary_counts(training, COUNTS)


def _downgraded(training: dict[str, Any]) -> dict[str, Any]:
    return without_summary_counts(training, COUNTS)


def upgrade() -> None:
    rewrite_training(_upgraded)


def downgrade() -> None:
    rewrite_training(_downgraded)
