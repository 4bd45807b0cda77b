"""Retention: what is past its age or count limit is pruned, what is not is kept, and
nothing of an unfinished job or a peak the estimator learns from ever goes; the log cap
keeps each stream's newest bytes and the log API says how many were dropped."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from agent.protocol import LogChunk as LogChunkIn
from service.config import Settings
from service.db import make_engine, make_sessionmaker, transaction, utcnow
from service.events.models import Event
from service.jobs.models import Allocation, Attempt, Job, JobEstimate, Observation
from service.logs import service as logs
from service.logs.models import LogChunk
from service.nodes.models import Gpu, Node
from service.retention import prune_all
from service.usage.models import UsageSample
from tests.conftest import submit

DAY = timedelta(days=1)


class Cluster:
    """Rows written straight to the database: one node with one GPU, and jobs on it."""

    def __init__(self, session: Session, now: datetime) -> None:
        self.session, self.now = session, now
        self.node = Node(name="n1", state="ready", agent_version="t", registered_at=now,
                         last_heartbeat_at=now)  # fmt: skip
        self.gpu = Gpu(node=self.node, uuid="GPU-1", index=0, model="H100",
                       memory_total_mib=81559, updated_at=now)  # fmt: skip
        session.add_all([self.node, self.gpu])
        session.flush()

    def job(self, state: str, age: timedelta | None, *, learned: bool = False) -> int:
        """A job in `state` that finished `age` ago (None: not finished), with an attempt,
        an allocation, a peak (credible if `learned`), an estimate, an event and logs."""
        finished = None if age is None else self.now - age
        job = Job(name="j", owner="alice", queue="default", priority=0, state=state,
                  spec={"command": ["true"]}, gpus=1, max_attempts=3,
                  created_at=self.now - 40 * DAY, updated_at=self.now,
                  finished_at=finished)  # fmt: skip
        attempt_state = state if age is not None else "running"
        attempt = Attempt(job=job, number=1, node_id=self.node.id, state=attempt_state,
                          reserved_mib=1000, placed_at=self.now - 40 * DAY,
                          finished_at=finished)  # fmt: skip
        self.session.add_all([job, attempt])
        self.session.flush()
        self.session.add_all([
            Allocation(attempt_id=attempt.id, gpu_id=self.gpu.id, reserved_mib=1000,
                       active=age is None),
            Observation(attempt_id=attempt.id, gpu_id=self.gpu.id, gpu_model="H100",
                        peak_mib=900, created_at=self.now, credible=learned),
            JobEstimate(job_id=job.id, gpu_model="H100", peak_mib=900, upper_mib=1000,
                        coverage=0.9, method="m", model_version="v", breakdown_mib={}),
            Event(at=self.now - 40 * DAY, kind="job.submitted", job_id=job.id, message="m",
                  data={}),
            LogChunk(attempt_id=attempt.id, stream="stdout", offset=0, size=3, data=b"out"),
        ])  # fmt: skip
        self.session.flush()
        return job.id


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(settings.database_url)
    yield make_sessionmaker(engine)
    engine.dispose()


@contextmanager
def seeding(sessions: sessionmaker[Session]) -> Iterator[Cluster]:
    """A cluster to add jobs to, now; committed when the block ends."""
    with transaction(sessions) as session:
        yield Cluster(session, utcnow())


def _settings(settings: Settings, **overrides: Any) -> Settings:
    return settings.model_copy(update={"retention_batch_rows": 2, **overrides})


def _count(session: Session, model: Any, **where: Any) -> int:
    query = select(func.count()).select_from(model).filter_by(**where)
    return int(session.scalar(query) or 0)


def test_finished_jobs_past_their_age_go_whole_and_nothing_else_does(
    settings: Settings,
    sessions: sessionmaker[Session],
) -> None:
    with seeding(sessions) as cluster:
        old = [cluster.job("succeeded", 31 * DAY) for _ in range(5)]  # batches of 2
        recent = cluster.job("failed", 29 * DAY)
        running = cluster.job("running", None)
        learned = cluster.job("succeeded", 31 * DAY, learned=True)
    removed = prune_all(sessions, _settings(settings, retention_job_days=30))
    assert removed["jobs"] == 5
    with sessions() as session:
        kept = set(session.scalars(select(Job.id)))
        assert kept == {recent, running, learned}
        for job_id in old:
            assert _count(session, Event, job_id=job_id) == 0
            assert _count(session, JobEstimate, job_id=job_id) == 0
        assert _count(session, Attempt) == 3
        # the running job's rows are whole; the learned job keeps what the estimator reads
        attempt = {a.job_id: a.id for a in session.scalars(select(Attempt))}
        assert _count(session, Allocation, attempt_id=attempt[running]) == 1
        assert _count(session, LogChunk, attempt_id=attempt[running]) == 1
        assert _count(session, Observation, attempt_id=attempt[learned]) == 1
        assert _count(session, JobEstimate, job_id=learned) == 1


def test_finished_jobs_past_the_count_go_oldest_first(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    with seeding(sessions) as cluster:
        by_age = [cluster.job("succeeded", days * DAY) for days in (5, 4, 3, 2, 1)]
        running = cluster.job("running", None)
    prune_all(sessions, _settings(settings, retention_max_finished_jobs=2))
    with sessions() as session:
        assert set(session.scalars(select(Job.id))) == {by_age[3], by_age[4], running}


def test_old_logs_and_logs_past_the_total_go_but_not_a_running_attempts(
    settings: Settings,
    sessions: sessionmaker[Session],
) -> None:
    with seeding(sessions) as cluster:
        week_old = cluster.job("succeeded", 8 * DAY)
        cluster.job("succeeded", 2 * DAY)
        newer = cluster.job("failed", 1 * DAY)
        running = cluster.job("running", None)
    # 3 bytes each: 9 held after the week-old logs go; 7 allowed drops only the older
    prune_all(sessions, _settings(settings, retention_log_days=7, retention_max_log_bytes=7))
    with sessions() as session:
        held = set(session.scalars(select(Attempt.job_id).join(LogChunk)))
        assert held == {newer, running}
        assert week_old in set(session.scalars(select(Job.id)))  # the job itself stays


def test_events_past_age_or_count_go_but_an_unfinished_jobs_stay(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    now = utcnow()
    with transaction(sessions) as session:
        cluster = Cluster(session, now)  # the jobs' own events are 40 days old
        done, running = cluster.job("succeeded", DAY), cluster.job("running", None)
        session.add_all(
            [Event(at=now - age * DAY, kind="node.registered", message="m", data={})
             for age in (3, 2, 1)]
        )  # fmt: skip
    prune_all(sessions, _settings(settings, retention_event_days=30))
    with sessions() as session:
        assert _count(session, Event, job_id=done) == 0
        assert _count(session, Event, job_id=running) == 1
        assert _count(session, Event, kind="node.registered") == 3
    prune_all(sessions, _settings(settings, retention_max_events=2))
    with sessions() as session:
        ages = sorted(now - at for at in session.scalars(select(Event.at)))
        assert _count(session, Event, job_id=running) == 1  # past the count, still kept
        assert ages[:2] == [DAY, 2 * DAY] and len(ages) == 3


def test_usage_samples_past_the_count_go_oldest_first(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    now = utcnow()
    with transaction(sessions) as session:
        session.add_all(
            [UsageSample(at=now - minutes * timedelta(minutes=1), gpu_model="H100",
                         reserved_mib=minutes, used_mib=0) for minutes in range(5, 0, -1)]
        )  # fmt: skip
    prune_all(sessions, _settings(settings, retention_max_usage_samples=3))
    with sessions() as session:
        assert sorted(session.scalars(select(UsageSample.reserved_mib))) == [1, 2, 3]


def _chunk(offset: int, data: bytes) -> LogChunkIn:
    return LogChunkIn(stream="stdout", offset=offset, data=base64.b64encode(data))


def test_the_database_keeps_each_streams_newest_bytes_and_says_what_it_dropped(
    sessions: sessionmaker[Session],
) -> None:
    with transaction(sessions) as session:
        cluster = Cluster(session, utcnow())
        job_id = cluster.job("running", None)
        attempt = session.scalars(select(Attempt).where(Attempt.job_id == job_id)).one()
        attempt_id = attempt.id
        session.execute(delete(LogChunk))
        for n in range(4):  # four chunks of 10 bytes; 25 kept: the newest two whole ones
            logs.ingest(session, {attempt_id: [_chunk(10 * n, bytes([65 + n]) * 10)]}, 25)
        page = logs.read(session, attempt, "stdout", None, 1000)
    assert page.text == "C" * 10 + "D" * 10
    assert page.first_offset == 20 and page.dropped_bytes == 20


def test_the_log_api_reports_dropped_bytes(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    with transaction(sessions) as session:
        job_id = Cluster(session, utcnow()).job("running", None)
        attempt = session.scalars(select(Attempt).where(Attempt.job_id == job_id)).one()
        session.execute(delete(LogChunk))
        logs.ingest(session, {attempt.id: [_chunk(100, b"tail")]}, 1024)  # 100 skipped
    body = client.get(f"/v1/jobs/{job_id}/logs").json()
    assert body["text"] == "tail" and body["dropped_bytes"] == 100


def test_lists_carry_a_summary_of_each_job_and_the_job_itself_its_whole_spec(
    client: TestClient,
) -> None:
    command = ["python", "train.py"] + ["x" * 4096] * 200  # about 800 KiB of arguments
    training = {"model": {"catalog": "resnet18"}, "batch_size": 128, "image_size": 32}
    env = {f"VAR_{i}": "y" * 4096 for i in range(100)}
    job = submit(client, command=command, training=training, env=env, gpu_models=["H100"])
    whole = client.get(f"/v1/jobs/{job['id']}").json()
    assert whole["command"] == command and whole["spec"]["env"] == env
    assert whole["spec"]["training"]["batch_size"] == 128
    for path in ("/v1/jobs", "/v1/admin/jobs"):
        response = client.get(path)
        [entry] = response.json()["jobs"]
        assert len(response.content) < 4096
        assert not {"spec", "training", "env", "estimates"} & set(entry)
        assert entry["command"].startswith("python train.py xxx") and len(entry["command"]) == 200
        assert entry["gpu_models"] == whole["gpu_models"] and entry["gpus"] == 1
