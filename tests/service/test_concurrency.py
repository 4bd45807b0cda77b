"""Placement commits are serialised on PostgreSQL: a second scheduler (or a heartbeat)
waits for the first one's transaction before it reads the cluster."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from service.db import lock_placements, transaction
from service.scheduling.loop import run_cycle
from tests.conftest import register_node, submit


def test_a_cycle_waits_for_another_replicas_transaction(
    client: TestClient, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite serialises every write transaction already")
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
