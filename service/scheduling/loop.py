"""The scheduling loop: a cycle every `schedule_interval_s`, lease expiry, time limits,
launch timeouts and drain deadlines before each, and estimator refits beside them.

A cycle runs in one transaction: it takes the placement lock (which heartbeats, the
other writers of reservations, take too), reads a snapshot, lets the pure core place,
and writes the plan. So scheduler replicas sharing a database take turns and never
commit plans made from a stale view: no GPU is ever promised twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from estimator.estimate import Estimator
from service.config import Settings
from service.db import lock_placements, transaction, utcnow
from service.estimates.service import EstimatorState
from service.jobs.lifecycle import stop_overdue, take_back_unstarted
from service.nodes.admin import enforce_drain_deadlines
from service.nodes.service import expire_leases
from service.periodic import Periodic
from service.scheduler.placement import Scheduler
from service.scheduler.snapshot import Parked, Plan
from service.scheduling.plan_writer import write_plan
from service.scheduling.snapshot_reader import read_snapshot

log = logging.getLogger(__name__)


def run_cycle(
    session: Session,
    scheduler: Scheduler,
    estimator: Estimator | None = None,
    parked: Parked | None = None,
) -> Plan:
    """Place what can be placed now, inside the caller's transaction (`parked`: the last
    plan's, whose jobs wait unsearched while nothing they could use gained room)."""
    lock_placements(session)
    rows = read_snapshot(session, scheduler.config.headroom_mib, estimator)
    plan = scheduler.place(rows.snapshot, parked)
    write_plan(session, rows, plan)
    return plan


class SchedulerLoop:
    """Runs lease expiry and then a cycle every `schedule_interval_s` on a background
    thread, and, every `estimator_refit_interval_s` when new peaks came in, a refit on
    another one (training takes seconds; cycles go on meanwhile)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        settings: Settings,
        scheduler: Scheduler,
        estimators: EstimatorState,
        on_cycle: Callable[[float], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._settings = settings
        self._on_cycle = on_cycle  # told each successful cycle's duration in seconds
        self._scheduler = scheduler
        self._estimators = estimators
        self._loop = Periodic("scheduling cycle", settings.schedule_interval_s, self._tick)
        self._refit: threading.Thread | None = None
        self._last_refit = time.monotonic()
        self._up_since = utcnow()  # made at start-up: agents' silence counts from here
        self._parked: Parked | None = None  # a plan whose commit failed parks nothing wrong:
        # the GPUs it would have filled show more room, so its jobs are searched again

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _tick(self) -> None:
        try:
            with transaction(self._sessions) as session:  # committed whatever the cycle does
                expire_leases(session=session, settings=self._settings, up_since=self._up_since)
                stop_overdue(session=session, now=utcnow())  # time limits
                take_back_unstarted(session=session, settings=self._settings, now=utcnow())
                enforce_drain_deadlines(session=session, now=utcnow())
            started = time.perf_counter()
            with transaction(self._sessions) as session:
                estimator = self._estimators.sync(session)
                self._parked = run_cycle(session, self._scheduler, estimator, self._parked).parked
            if self._on_cycle is not None:
                self._on_cycle(time.perf_counter() - started)
        finally:  # a refit is due whether or not the cycle went through
            self._maybe_refit()

    def _maybe_refit(self) -> None:
        interval_s = self._settings.estimator_refit_interval_s
        due = time.monotonic() - self._last_refit >= interval_s
        if not interval_s or not due or (self._refit and self._refit.is_alive()):
            return
        self._last_refit = time.monotonic()
        self._refit = threading.Thread(target=self._refit_now, name="colloc-refit", daemon=True)
        self._refit.start()

    def _refit_now(self) -> None:
        try:
            with self._sessions() as session:  # refit commits as it goes
                if self._estimators.has_new_observations(session):
                    self._estimators.refit(session)
                    session.commit()
        except Exception:
            log.exception("scheduled estimator refit failed")
