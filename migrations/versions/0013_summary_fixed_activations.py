"""stored summaries in the form that counts what a step keeps once

The `summary` model form gained `fixed_activations`: the saved elements a training step
keeps once whatever its batch (weights standardised in the forward, position tables),
which `colloc estimate --trace` now tells apart from those each sample keeps. A summary
without it is charged none, as before, so stored summaries get it as 0 and keep their
estimates, fingerprints and the idempotent replay of their submissions. A downgrade
drops it again, which the older code does not know.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 12:30:00
"""

from __future__ import annotations

from migrations.stored_specs import summary_counts_migration

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

upgrade, downgrade = summary_counts_migration(("fixed_activations",))
