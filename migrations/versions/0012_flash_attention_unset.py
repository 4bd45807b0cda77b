"""stored training specs in the form that eager attention and autocast bytes added

A training spec's `flash_attention` was true or false, false by default, and false
asked for nothing a catalogued or traced model's estimate did not already count. It is
now unset by default and false charges such a model the attention scores an eager
attention keeps. A stored false is what every job that did not say true has, so it
becomes unset, which estimates as false did. The `summary` model form gained three
counts, 0 where not given (as before them); stored summaries get them as 0. So jobs
keep their estimates, their history (a spec's fingerprint) and the idempotent replay
of the submission that created them (a replay that now says false is a different
request, and is refused as one). A downgrade gives false back to an unset
`flash_attention` and drops the three counts, which the older code does not know.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 04:30:00
"""

from __future__ import annotations

from typing import Any

from migrations.stored_specs import rewrite_training, with_summary_counts, without_summary_counts

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

SUMMARY_COUNTS = (
    "attention_scores_per_sample",
    "largest_attention_scores_per_sample",
    "autocast_bytes_per_sample",
)


def _upgraded(training: dict[str, Any]) -> dict[str, Any]:
    new = dict(training)
    if new.get("flash_attention", ...) is False:
        new["flash_attention"] = None
    return with_summary_counts(new, SUMMARY_COUNTS)


def _downgraded(training: dict[str, Any]) -> dict[str, Any]:
    new = dict(training)
    if "flash_attention" in new and new["flash_attention"] is None:
        new["flash_attention"] = False
    return without_summary_counts(new, SUMMARY_COUNTS)


def upgrade() -> None:
    rewrite_training(_upgraded)


def downgrade() -> None:
    rewrite_training(_downgraded)
