"""Ids users and agents hold (jobs, attempts, events) are never given again once their
rows are pruned: without AUTOINCREMENT SQLite hands out the largest id + 1, so pruning
the newest jobs would give their ids, and old references to them, to new jobs."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.config import Settings
from service.db import make_engine, make_sessionmaker, transaction, utcnow
from service.events.models import Event
from service.jobs.models import Attempt, Job
from service.retention import prune_all
from tests.conftest import submit
from tests.service.test_retention import DAY, Cluster

MODELS = (Job, Attempt, Event)


def test_the_ids_of_pruned_jobs_are_never_given_again(
    client: TestClient, settings: Settings
) -> None:
    sessions = make_sessionmaker(make_engine(settings.database_url))
    with transaction(sessions) as session:
        cluster = Cluster(session, utcnow())
        for _ in range(3):
            cluster.job("succeeded", 31 * DAY)
    with sessions() as session:
        newest = {model: session.scalars(select(func.max(model.id))).one() for model in MODELS}
    removed = prune_all(sessions, settings.model_copy(update={"retention_job_days": 30}))
    assert removed["jobs"] == 3  # the newest rows of each table went
    submitted = submit(client)
    with transaction(sessions) as session:
        cluster.session = session
        cluster.job("running", None)
    assert submitted["id"] > newest[Job]
    with sessions() as session:
        for model, old in newest.items():
            assert session.scalars(select(func.min(model.id))).one() > old, model.__name__
