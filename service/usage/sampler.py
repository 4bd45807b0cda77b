"""The background thread that samples usage every `usage_sample_interval_s`."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db import transaction, utcnow
from service.usage.service import prune, take_sample

log = logging.getLogger(__name__)


class UsageSampler:
    """Samples at once, then every interval; drops samples past the retention window."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = sessions
        self._interval_s = settings.usage_sample_interval_s
        self._keep = timedelta(days=settings.usage_keep_days)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="colloc-usage", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            try:
                with transaction(self._sessions) as session:
                    now = utcnow()
                    take_sample(session, now)
                    prune(session, now - self._keep)
            except Exception:  # the database may be restarting: try again next tick
                log.exception("usage sample failed")
            if self._stop.wait(self._interval_s):
                return
