"""Placement commits are serialised on PostgreSQL: a second scheduler (or a heartbeat)
waits for the first one's transaction before it reads the cluster."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from service.config import Settings
from service.db import lock_placements, transaction
from service.jobs import lifecycle
from service.jobs.models import Job
from service.nodes import service as nodes
from service.scheduling import loop, snapshot_reader
from service.scheduling.loop import run_cycle
from tests.conftest import register_node, submit
from tests.service.test_late_reports import placed_again_on_n2, second_node_beat
from tests.service.test_lifecycle import beat, cycle, exited, job_of, running


def postgres_only(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite serialises every write transaction already")


def test_a_cycle_waits_for_another_replicas_transaction(
    client: TestClient, database_url: str
) -> None:
    postgres_only(database_url)
    state = client.app.state  # type: ignore[attr-defined]
    register_node(client, "n1", [("Tesla T4", 15360)])
    submit(client, memory_mib=1000)
    order: list[str] = []
    locked = threading.Event()

    def first() -> None:
        with transaction(state.sessions) as session:
            lock_placements(session)
            locked.set()
            time.sleep(1.0)  # a long cycle in another replica
            order.append("first committed")

    def second() -> None:
        locked.wait()
        with transaction(state.sessions) as session:
            run_cycle(session, state.scheduler)
        order.append("second committed")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert order == ["first committed", "second committed"]


def test_concurrent_retries_with_one_idempotency_key_make_one_job(client: TestClient) -> None:
    register_node(client, "n1", [("Tesla T4", 15360)])
    start = threading.Barrier(12)
    answers: list[tuple[int, int]] = []

    def retry() -> None:
        start.wait()
        response = client.post(
            "/v1/jobs",
            json={"name": "x", "command": ["true"], "memory_mib": 1000},
            headers={"Idempotency-Key": "the-one"},
        )
        answers.append((response.status_code, response.json()["id"]))

    threads = [threading.Thread(target=retry) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(status for status, _id in answers) == [200] * 11 + [201]
    assert len({job_id for _status, job_id in answers}) == 1
    assert client.get("/v1/jobs").json()["total"] == 1


def test_an_attempt_withdrawn_while_a_heartbeat_reads_is_not_sent(
    client: TestClient, settings: Settings, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 lost with n1, attempt 2 placed on n2; n1 reports attempt 1 succeeded,
    withdrawing attempt 2, just after n2's heartbeat read attempt 2 as placed: n2's reply
    must not send it (its agent would run a job that already succeeded)."""
    postgres_only(database_url)
    n1, n2, job = placed_again_on_n2(client, settings)
    assert client.get(f"/v1/jobs/{job}").json()["attempts"][1]["state"] == "placed"
    read = nodes._active_attempts
    raced: list[int] = []

    def read_then_withdraw(
        session: Session, node_id: int, fresh: bool = False
    ) -> dict[tuple[int, int], Any]:
        found = read(session, node_id, fresh)
        if node_id == n2 and not raced:
            raced.append(node_id)
            beat(client, n1, [exited(job, code=0)])  # another transaction, committed
        return found

    monkeypatch.setattr(nodes, "_active_attempts", read_then_withdraw)
    reply = second_node_beat(client, n2, [])
    assert raced == [n2]
    assert reply["assignments"] == []
    done = client.get(f"/v1/jobs/{job}").json()
    assert [a["state"] for a in done["attempts"]] == ["succeeded", "cancelled"]


@pytest.mark.parametrize("action", ["hold", "cancel"])
def test_a_job_held_or_cancelled_while_a_cycle_places_it_stays_so(
    client: TestClient, database_url: str, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    """The user's hold (or cancellation) comes between a cycle's snapshot and its write:
    either it waits for the cycle (and finds the job placed) or the cycle sees it; the
    job is never placed as well as held or cancelled."""
    postgres_only(database_url)
    state = client.app.state  # type: ignore[attr-defined]
    register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000)["id"]
    answers: list[Any] = []
    asking = threading.Thread(
        target=lambda: answers.append(client.post(f"/v1/jobs/{job}/{action}"))
    )
    read = snapshot_reader.read_snapshot

    def read_then_ask(*args: Any) -> Any:
        rows = read(*args)
        asking.start()
        waiting = False
        while asking.is_alive() and not waiting:  # until it is done or waits for the lock
            with state.sessions() as probe:
                waiting = bool(
                    probe.scalar(
                        text(
                            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                            "AND NOT granted"
                        )
                    )
                )
        return rows

    monkeypatch.setattr(loop, "read_snapshot", read_then_ask)
    cycle(client)
    asking.join()
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "placed"  # the hold or cancellation waited for the cycle
    if action == "hold":
        assert answers[0].status_code == 409 and not shown["held"]
    else:
        assert answers[0].status_code == 200 and shown["cancel_requested"]


def running_job(client: TestClient) -> tuple[int, int]:
    """A node, and a job of three attempts running on it."""
    node = register_node(client, "n1", [("Tesla T4", 15360)])
    job = submit(client, memory_mib=1000, max_attempts=3)["id"]
    cycle(client)
    beat(client, node, [running(job)])
    return node, job


def test_a_job_cancelled_as_its_agent_reports_it_lost_is_cancelled(
    client: TestClient, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancellation reads the job running; its agent's report that the attempt was
    lost (the job requeued) commits before the cancellation writes: the job is
    cancelled at once, not left waiting to be placed again."""
    postgres_only(database_url)
    node, job = running_job(client)
    cancel = lifecycle.cancel

    def lost_then_cancel(*, session: Session, job: Job) -> Job:
        beat(client, node, [exited(job.id, code=1, outcome="lost")])  # committed
        return cancel(session=session, job=job)

    monkeypatch.setattr(lifecycle, "cancel", lost_then_cancel)
    answer = client.post(f"/v1/jobs/{job}/cancel")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    cycle(client)
    shown = job_of(client, job)
    assert shown["state"] == "cancelled" and [a["state"] for a in shown["attempts"]] == ["lost"]


def test_a_requeue_as_its_agent_reports_it_lost_leaves_no_stop_request(
    client: TestClient, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The requeue reads the job running; its agent's report that the attempt was lost
    (the job requeued) commits first: the requeue answers 409, and the job's next
    attempt is not told to stop as soon as it is placed."""
    postgres_only(database_url)
    node, job = running_job(client)
    requeue = lifecycle.requeue

    def lost_then_requeue(*, session: Session, job: Job, why: str) -> Job:
        beat(client, node, [exited(job.id, code=1, outcome="lost")])  # committed
        return requeue(session=session, job=job, why=why)

    monkeypatch.setattr(lifecycle, "requeue", lost_then_requeue)
    assert client.post(f"/v1/jobs/{job}/requeue").status_code == 409
    assert job_of(client, job)["state"] == "pending"
    with transaction(client.app.state.sessions) as session:  # type: ignore[attr-defined]
        assert not session.get(Job, job).preempt_requested  # type: ignore[union-attr]
