"""A heartbeat's cost: the placement lock only when it changes a reservation or an
attempt's state, the same number of statements whatever the number of attempts it
carries, and an attempt listed twice taken once."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from service.db import lock_placements
from service.nodes import service as nodes
from tests.conftest import on_periodic_thread, register_node, submit
from tests.service.test_lifecycle import cycle

T4 = ("Tesla T4", 15360)


def node_with_jobs(client: TestClient, count: int, name: str = "n1") -> tuple[int, list[int]]:
    """A node of `count` GPUs running one job on each (a job takes most of a GPU)."""
    node = register_node(client, name, [T4] * count)
    jobs = [int(submit(client, memory_mib=12000)["id"]) for _ in range(count)]
    cycle(client)
    beat(client, node, count, [running(job) for job in jobs], name)  # each starts running
    return node, jobs


def running(job: int, offset: int = 0) -> dict[str, Any]:
    data = base64.b64encode(b"step\n").decode()
    return {
        "job_id": job,
        "attempt": 1,
        "state": "running",
        "peak_mib_by_gpu": {},
        "logs": [{"stream": "stdout", "offset": offset, "data": data}],
        "notices": [],
    }


def beat(
    client: TestClient, node: int, gpus: int, attempts: list[dict[str, Any]], name: str = "n1"
) -> dict[str, Any]:
    states = [{"uuid": f"GPU-{name}-{i}", "memory_used_mib": 500} for i in range(gpus)]
    response = client.post(
        f"/v1/nodes/{node}/heartbeat", json={"gpus": states, "attempts": attempts}
    )
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL statements every engine runs meanwhile (an executemany counts once), but
    for the background workers', whose ticks follow the clock."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if not on_periodic_thread():
            seen.append(sql)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", count)


@pytest.fixture
def locks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often heartbeats took the placement lock."""
    taken: list[int] = []

    def counted(session: Session) -> None:
        taken.append(1)
        lock_placements(session)

    monkeypatch.setattr(nodes, "lock_placements", counted)
    return taken


def test_a_heartbeat_that_changes_no_reservation_takes_no_lock(
    client: TestClient, locks: list[int]
) -> None:
    node, jobs = node_with_jobs(client, 2)
    assert locks, "the heartbeat that started the jobs changed their state"
    locks.clear()
    beat(client, node, 2, [running(job, offset=5) for job in jobs])
    assert locks == []
    # a job passing its reservation grows it: that takes the lock
    over = {**running(jobs[0], offset=10), "peak_mib_by_gpu": {"GPU-n1-0": 14000}}
    beat(client, node, 2, [over, running(jobs[1], offset=10)])
    assert locks == [1]
    shown = client.get(f"/v1/jobs/{jobs[0]}").json()
    assert shown["attempts"][0]["reserved_mib"] > 12000


def test_statements_do_not_grow_with_the_attempts_a_heartbeat_carries(
    client: TestClient,
) -> None:
    one, (job,) = node_with_jobs(client, 1, "a")
    eight, jobs = node_with_jobs(client, 8, "b")
    with statements() as few:
        beat(client, one, 1, [running(job, offset=5)], name="a")
    with statements() as many:
        beat(client, eight, 8, [running(job, offset=5) for job in jobs], name="b")
    few, many = without_token_reads(few), without_token_reads(many)
    assert len(many) == len(few), (few, many)


def without_token_reads(seen: list[str]) -> list[str]:
    """`seen` less the reads of API tokens, each its own read transaction (on SQLite a
    BEGIN that service.db sends as a statement): they follow the clock (the load
    shedder's each second, the token cache's expiry), not the request, and on a slow
    database one falls inside a block now and then."""
    reads = sum("FROM api_tokens" in sql for sql in seen)
    kept = [sql for sql in seen if "FROM api_tokens" not in sql]
    for _ in range(min(reads, kept.count("BEGIN"))):
        kept.remove("BEGIN")
    return kept


def test_an_attempt_listed_twice_is_taken_once(client: TestClient) -> None:
    node, (job,) = node_with_jobs(client, 1)
    exited = {
        **running(job, offset=5),
        "state": "exited",
        "exit_code": 0,
        "outcome": "succeeded",
        "finished_at": "2026-12-02T10:00:00+00:00",
    }
    reply = beat(client, node, 1, [running(job, offset=5), exited])
    assert reply["acknowledged"] == [{"job_id": job, "attempt": 1}]
    assert len(reply["log_offsets"]) == 1 and reply["log_offsets"][0]["stdout"] == 10
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "succeeded"
