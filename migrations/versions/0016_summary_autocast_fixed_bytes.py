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

from migrations.stored_specs import summary_counts_migration

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None

upgrade, downgrade = summary_counts_migration(("autocast_fixed_bytes",))
