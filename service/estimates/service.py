"""The service's estimator and its closed loop with the cluster.

Every finished attempt's observed peak is stored (jobs.observations); `sync` feeds the
credible ones of successful training jobs to the estimator, with their owners (the
exact-history path answers such a spec from then on, for whom estimator/history.py
says), and those of attempts that died of an OOM as a floor on what their
architecture needs. `refit` trains a new calibration on the packaged measurements plus
the peaks and records it as a version; `activate` switches versions (or back to the
packaged calibration), so a refit can always be undone. Replicas pick up the active
version from the database on their next cycle.

The cluster's own fixed cost per process is learned the same way: every successful
training attempt's peak, minus the estimate made without an offset on the GPU it ran
on, is a residual of its environment (GPU model and driver, `estimator/offsets.py`).
The residuals live in the database (`fixed_cost_offsets`), each row with the last
observation it took in, so that taking them in is idempotent: a sync whose
transaction is rolled back (a read-only request) leaves them for the next one, and a
restarted server goes on from the database. Every sync loads them back, with the GPU
descriptions the agents reported, into the estimator every later estimate uses.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from estimator.analytical.model import SpecError
from estimator.estimate import Estimator, default_estimator
from estimator.gpus import GpuDescription, describe, parse_compute_capability
from estimator.history import ObservationHistory
from estimator.learned import artifact, measurements
from estimator.learned.calibration import Calibration
from estimator.offsets import VOUCHED, FixedCostOffsets, environment_key
from service.db import utcnow
from service.errors import ApiError
from service.estimates.models import EstimatorVersion, FixedCostOffset
from service.events.service import record
from service.jobs.models import Attempt, Job, Observation
from service.jobs.submission import training_spec
from service.nodes.models import Gpu

PACKAGED = "packaged"
log = logging.getLogger(__name__)


class EstimatorState:
    """The current estimator, kept in step with the database."""

    def __init__(self) -> None:
        self.current = Estimator(default_estimator().artifact)  # a history of its own
        self._active: str = PACKAGED
        self._last_observation = 0
        self._refitted_with = 0  # observations the last refit of this process used
        self._trusted = 0  # trusted peaks among those learned (an admin may trust more)
        self._lock = threading.Lock()

    def sync(self, session: Session) -> Estimator:
        """Load the active version if it changed, and observations not seen yet.

        The database is read without holding the lock (another thread may hold the
        database's write lock while it waits for this one), then applied under it."""
        with self._lock:
            seen, trusted_seen = self._last_observation, self._trusted
        learnable = (
            select(Observation, Attempt, Job)
            .join(Attempt, Observation.attempt_id == Attempt.id)
            .join(Job, Attempt.job_id == Job.id)
            .where(Observation.credible.is_(True), Attempt.state.in_(("succeeded", "oom")))
        )
        trusted = session.scalar(
            select(func.count()).select_from(
                learnable.where(Observation.trusted.is_(True), Observation.id <= seen).subquery()
            )
        )
        rebuild = trusted != trusted_seen  # an admin vouched for peaks learned before
        if rebuild:
            seen = 0
        row = session.scalar(select(EstimatorVersion).where(EstimatorVersion.active))
        new = session.execute(learnable.where(Observation.id > seen).order_by(Observation.id)).all()
        with self._lock:
            wanted = row.version if row else PACKAGED
            if wanted != self._active:
                base = default_estimator().artifact if row is None else _artifact(row)
                self.current = self.current.with_artifact(base)
                self._active = wanted
            if rebuild and self._trusted == trusted_seen:  # (not done by another thread)
                fresh = ObservationHistory()
                self.current = replace(self.current, history=fresh, observations=[])
                self._last_observation, self._trusted = 0, 0
            current = self.current
        # the cluster's GPUs and fixed-cost offsets before its peaks: how far a peak lies
        # above the models' estimate is judged with them, by a restarted server as by
        # one that learned them peak by peak
        current.register_gpus(reported_gpus(session))
        current.offsets = learn_offsets(session, current)
        with self._lock:
            for observation, attempt, job in new:
                if observation.id <= self._last_observation:
                    continue  # another thread applied it meanwhile
                self._last_observation = observation.id
                self._trusted += observation.trusted
                try:
                    self._learn(observation, attempt, job)
                except Exception:  # one bad row (a spec stored before it could be refused)
                    log.exception("observation %d not learned from", observation.id)
            return self.current

    def _learn(self, observation: Observation, attempt: Attempt, job: Job) -> None:
        spec = training_spec(job)
        if spec is None:
            return
        gpu, peak = observation.gpu_model, observation.peak_mib
        # an attempt's GPUs report one run: `run` counts it once, at its largest
        learn = self.current.observe_oom if attempt.state == "oom" else self.current.observe
        learn(spec, gpu, peak, job.owner, observation.trusted, attempt.id)

    def has_new_observations(self, session: Session) -> bool:
        return len(self.sync(session).observations) > self._refitted_with

    def refit(self, session: Session) -> EstimatorVersion:
        """Train on the packaged measurements plus every observed peak; make it active.

        Commits `session` (which must hold no pending changes) before training, and
        records the new version in a transaction of its own."""
        from estimator.learned.train import refit  # scikit-learn: loaded only to train

        estimator = self.sync(session)
        if not estimator.observations:
            raise ApiError(409, "nothing_to_learn", "no observed peaks of training jobs yet")
        session.commit()  # training takes seconds: hold no lock meanwhile (SQLite's is global)
        fitted = refit(estimator, measurements.read())
        self._refitted_with = len(estimator.observations)
        assert fitted.artifact is not None
        row = session.scalar(
            select(EstimatorVersion).where(EstimatorVersion.version == fitted.version)
        )
        if row is None:
            row = EstimatorVersion(
                version=fitted.version,
                created_at=utcnow(),
                observations=len(estimator.observations),
                manifest=fitted.artifact.manifest,
                calibration=artifact.model_bytes(fitted.artifact.calibration).decode(),
            )
            session.add(row)
        self._activate(session, row)
        record(
            session=session,
            kind="estimator.refit",
            message=f"calibration {row.version} trained with {row.observations} "
            "observed peak(s) and made active",
        )
        return row

    def activate(self, session: Session, version: str) -> None:
        """Make `version` (or "packaged") the active calibration."""
        row = None
        if version != PACKAGED:
            row = session.scalar(
                select(EstimatorVersion).where(EstimatorVersion.version == version)
            )
            if row is None:
                raise ApiError(404, "not_found", f"estimator version {version} does not exist")
        self._activate(session, row)
        record(
            session=session,
            kind="estimator.activated",
            message=f"calibration {version} made active",
        )

    def _activate(self, session: Session, row: EstimatorVersion | None) -> None:
        session.execute(update(EstimatorVersion).values(active=False))
        if row is not None:
            row.active = True
        session.flush()


def describe_gpu(gpu: Gpu) -> GpuDescription:
    """A registered GPU as its agent reported it (catalog or defaults for the rest)."""
    try:
        capability = parse_compute_capability(gpu.compute_capability or "")
    except ValueError:
        capability = None  # not reported (an older agent)
    return describe(
        gpu.model,
        gpu.memory_total_mib,
        capability,
        driver_version=gpu.driver_version,
        cuda_driver_version=gpu.cuda_driver_version,
        context_mib=gpu.context_mib,
    )


def reported_gpus(session: Session) -> list[GpuDescription]:
    """Every distinct GPU description the agents reported."""
    columns = (
        Gpu.model,
        Gpu.memory_total_mib,
        Gpu.compute_capability,
        Gpu.driver_version,
        Gpu.cuda_driver_version,
        Gpu.context_mib,
    )
    rows = session.execute(select(*columns).distinct())
    return [describe_gpu(Gpu(**row._asdict())) for row in rows]


def _stored_offsets(session: Session) -> tuple[dict[str, FixedCostOffset], FixedCostOffsets]:
    rows = {row.environment: row for row in session.scalars(select(FixedCostOffset))}
    offsets = FixedCostOffsets()
    for key, stored in rows.items():
        offsets.load(key, stored.residuals)
    return rows, offsets


def learn_offsets(session: Session, estimator: Estimator) -> FixedCostOffsets:
    """Take the residuals of successful training attempts not taken in yet into their
    environments' rows (in the caller's transaction), and return every environment's
    offsets as the database then holds them.

    Two requests may take the same new runs in at once; the one that adds an
    environment's row second undoes its own part and reads what the first stored."""
    try:
        with session.begin_nested():
            return _take_in(session, estimator)
    except IntegrityError:
        return _stored_offsets(session)[1]


def _take_in(session: Session, estimator: Estimator) -> FixedCostOffsets:
    rows, offsets = _stored_offsets(session)
    through = max((stored.last_observation_id for stored in rows.values()), default=0)
    new = session.execute(
        select(Observation, Job, Gpu)
        .join(Attempt, Observation.attempt_id == Attempt.id)
        .join(Job, Attempt.job_id == Job.id)
        .join(Gpu, Observation.gpu_id == Gpu.id)
        .where(
            Observation.id > through,
            Attempt.state == "succeeded",
            Observation.credible.is_(True),
        )
        .order_by(Observation.id)
    ).all()
    now = utcnow()
    for observation, job, gpu in new:
        try:
            spec = training_spec(job)
        except ValueError:  # a spec stored before it could be refused
            continue
        if spec is None:
            continue
        described = describe_gpu(gpu)
        key = environment_key(described.name, gpu.driver_version)
        try:
            residual = estimator.fixed_cost_residual(spec, described, observation.peak_mib, key)
        except SpecError:
            continue  # a spec this calibration cannot read: nothing to learn from it
        # an offset moves every owner's reservations: it needs corroboration (offsets.py)
        voter = VOUCHED if observation.trusted else job.owner
        offsets.observe(key, residual.residual_mib, residual.model_mib, voter)
        row = rows.get(key)
        if row is None:
            row = FixedCostOffset(
                environment=key,
                gpu_model=described.name,
                driver_version=gpu.driver_version,
                observations=0,
            )
            session.add(row)
            rows[key] = row
        row.observations += 1
        row.residuals = offsets.to_json(key)
        row.offset_mib = offsets.offset_mib(key)
    if new:
        for row in rows.values():  # every observation up to here is taken in
            row.last_observation_id = new[-1][0].id
            row.updated_at = now
        session.flush()
    return offsets


def _artifact(row: EstimatorVersion) -> artifact.Artifact:
    return artifact.Artifact(Calibration.from_json(json.loads(row.calibration)), row.manifest)


def versions(session: Session) -> list[EstimatorVersion]:
    return list(session.scalars(select(EstimatorVersion).order_by(EstimatorVersion.id)))


def active_version(rows: list[EstimatorVersion]) -> str:
    """The name admins know the active calibration by ("packaged" when none is)."""
    return next((row.version for row in rows if row.active), PACKAGED)
