"""The usage sampler: a sample at start-up, then every `usage_sample_interval_s`."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db import transaction, utcnow
from service.periodic import Periodic
from service.usage.service import prune, take_sample


def usage_sampler(sessions: sessionmaker[Session], settings: Settings) -> Periodic:
    """Samples, and drops samples past the retention window, in one transaction."""
    keep = timedelta(days=settings.usage_keep_days)

    def sample() -> None:
        with transaction(sessions) as session:
            now = utcnow()
            take_sample(session, now)
            prune(session, now - keep)

    return Periodic("usage sample", settings.usage_sample_interval_s, sample, at_once=True)
