"""Reads do not write: reading a snapshot and explaining a job make the estimates a job
lacks in memory and leave the database as it was; only a cycle's write phase stores
them (and fails a job whose spec it cannot use)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.db import transaction
from service.events.models import Event
from service.jobs.models import Job, JobEstimate
from service.scheduling.snapshot_reader import read_snapshot
from tests.conftest import register_node, submit
from tests.service.test_lifecycle import cycle
from tests.service.test_poison import GOOD_TRAINING, STALE_SPECS, _store_stale

T4 = "Tesla T4"


def _database(client: TestClient) -> dict[str, Any]:
    """What a read must leave as it was: estimate rows, events and every job's state."""
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        return {
            "estimates": session.scalar(select(func.count()).select_from(JobEstimate)),
            "events": session.scalar(select(func.count()).select_from(Event)),
            "jobs": session.execute(
                select(Job.id, Job.state, Job.reason, Job.updated_at).order_by(Job.id)
            ).all(),
        }


def _estimated_before_any_gpu(client: TestClient) -> tuple[int, int]:
    """A good training job and a stale one, both stored while no GPU was registered (so
    with no estimate), then a T4 node: each lacks an estimate for the T4."""
    good = submit(client, training=GOOD_TRAINING)
    assert good["estimates"] == []
    stale = _store_stale(client, STALE_SPECS[0])
    register_node(client, "n1", [(T4, 15360)])
    return good["id"], stale


def test_explain_leaves_the_database_as_it_was(client: TestClient) -> None:
    good, stale = _estimated_before_any_gpu(client)
    before = _database(client)
    explained = client.get(f"/v1/jobs/{good}/explain").json()
    assert "fits now" in explained["summary"]
    assert explained["gpus"][0]["demand_mib"] > 0  # from the estimate made for the T4
    unusable = client.get(f"/v1/jobs/{stale}/explain").json()
    assert unusable["state"] == "pending" and "cannot be scheduled" in unusable["summary"]
    assert _database(client) == before
    cycle(client)  # the write phase stores the estimate and fails the stale job
    after = _database(client)
    assert after["estimates"] == 1
    assert [(row.id, row.state) for row in after["jobs"]] == [(good, "placed"), (stale, "failed")]


def test_reading_a_snapshot_writes_nothing(client: TestClient) -> None:
    good, stale = _estimated_before_any_gpu(client)
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:
        rows = read_snapshot(session, 0, state.estimator_state.sync(session))
        assert not (session.new or session.dirty or session.deleted)
        assert session.scalar(select(func.count()).select_from(JobEstimate)) == 0
        assert list(rows.new_estimates) == [good]
        assert list(rows.new_estimates[good].by_model) == [T4]
        assert list(rows.unschedulable) == [stale] and rows.unschedulable[stale].for_good
        assert session.get(Job, stale).state == "pending"  # type: ignore[union-attr]
    assert _database(client)["estimates"] == 0
