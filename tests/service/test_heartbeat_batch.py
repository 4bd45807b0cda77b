"""Group commit of heartbeats (service/nodes/heartbeat_batch.py): concurrent heartbeats
that change no reservation are stored by one commit; a report that is wrong, or a write
that fails, costs no other node its report; one that takes the lock is applied alone.

The batches here close when all their heartbeats are in, never on the clock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, update

from service.db import transaction, utcnow
from service.nodes import service as nodes
from service.nodes.heartbeat_batch import HeartbeatBatcher
from service.nodes.models import Gpu, Node
from tests.conftest import on_periodic_thread, register_node, submit
from tests.service.test_heartbeat_cost import running
from tests.service.test_lifecycle import cycle

T4 = ("Tesla T4", 15360)
# a batch waits for all its heartbeats (bounded only so that a bug fails the test)
NEVER_S = 60.0


def batches_of(client: TestClient, size: int) -> None:
    """Batches close when `size` heartbeats are in."""
    state = client.app.state  # type: ignore[attr-defined]
    batcher = HeartbeatBatcher(state.settings)
    batcher.window_s, batcher.max_batch = NEVER_S, size
    state.heartbeat_batcher = batcher


def body(name: str, used_mib: int, attempts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "gpus": [{"uuid": f"GPU-{name}-0", "memory_used_mib": used_mib}],
        "attempts": attempts or [],
    }


def together(client: TestClient, beats: list[tuple[int, dict[str, Any]]]) -> list[httpx.Response]:
    """Post the heartbeats at once, each from a thread of its own."""
    with ThreadPoolExecutor(len(beats)) as pool:
        posts = [
            pool.submit(client.post, f"/v1/nodes/{node}/heartbeat", json=sent)
            for node, sent in beats
        ]
        return [post.result() for post in posts]


@contextmanager
def write_commits() -> Iterator[list[int]]:
    """Commits of transactions that wrote (authentication's read-only ones are not), but
    for the background workers' (the usage sampler's pruning), whose ticks follow the
    clock."""
    wrote: set[int] = set()  # connections that wrote since their last commit or rollback
    commits: list[int] = []
    guard = threading.Lock()

    def statement(conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE") and not on_periodic_thread():
            with guard:
                wrote.add(id(conn))

    def commit(conn: Any) -> None:
        with guard:
            if id(conn) in wrote:
                wrote.discard(id(conn))
                commits.append(1)

    def rollback(conn: Any) -> None:
        with guard:
            wrote.discard(id(conn))

    listeners: list[tuple[str, Callable[..., None]]] = [
        ("before_cursor_execute", statement),
        ("commit", commit),
        ("rollback", rollback),
    ]
    for name, listener in listeners:
        event.listen(Engine, name, listener)
    try:
        yield commits
    finally:
        for name, listener in listeners:
            event.remove(Engine, name, listener)


def gpu_used(client: TestClient, name: str) -> int | None:
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:
        gpu = session.query(Gpu).filter(Gpu.uuid == f"GPU-{name}-0").one()
        return gpu.memory_used_mib


def test_concurrent_heartbeats_are_stored_by_one_commit(client: TestClient) -> None:
    names = [f"n{i}" for i in range(6)]
    ids = [register_node(client, name, [T4]) for name in names]
    batches_of(client, len(names))
    with write_commits() as commits:
        replies = together(
            client, [(i, body(n, 100 + k)) for k, (i, n) in enumerate(zip(ids, names, strict=True))]
        )
    assert [reply.status_code for reply in replies] == [200] * len(names)
    assert len(commits) == 1
    assert [gpu_used(client, name) for name in names] == [100 + k for k in range(len(names))]


def test_lost_nodes_heartbeating_in_one_batch_are_ready_again(client: TestClient) -> None:
    names = ["a", "b", "c"]
    ids = [register_node(client, name, [T4]) for name in names]
    silent_since = utcnow() - timedelta(hours=1)
    state = client.app.state  # type: ignore[attr-defined]
    with transaction(state.sessions) as session:
        session.execute(update(Node).values(state="lost", last_heartbeat_at=silent_since))
    batches_of(client, len(names))
    before = utcnow()
    with write_commits() as commits:
        together(client, [(i, body(n, 7)) for i, n in zip(ids, names, strict=True)])
    assert len(commits) == 1
    with transaction(state.sessions) as session:
        stored = session.query(Node).order_by(Node.id).all()
        assert [(node.state, node.last_heartbeat_at >= before) for node in stored] == [
            ("ready", True)
        ] * len(names)
    recovered = client.get("/v1/admin/events", params={"kind": "node.recovered"}).json()["events"]
    assert sorted(e["node_id"] for e in recovered) == sorted(ids)


def test_a_wrong_report_costs_no_other_node_its_report(client: TestClient) -> None:
    names = ["a", "b", "c"]
    ids = [register_node(client, name, [T4]) for name in names]
    batches_of(client, len(names))
    wrong = body("b", 5)
    wrong["gpus"].append({"uuid": "GPU-nowhere", "memory_used_mib": 1})
    with write_commits() as commits:
        replies = together(
            client, [(ids[0], body("a", 11)), (ids[1], wrong), (ids[2], body("c", 13))]
        )
    assert [reply.status_code for reply in replies] == [200, 422, 200]
    assert replies[1].json()["error"]["code"] == "unknown_gpu"
    assert len(commits) == 1
    assert [gpu_used(client, name) for name in names] == [11, 0, 13]


def test_a_failed_write_is_retried_alone_and_no_report_is_lost(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["a", "b", "c"]
    ids = [register_node(client, name, [T4]) for name in names]
    batches_of(client, len(names))
    apply, failed = nodes.apply, list[int]()

    def fails_once_for_b(**kwargs: Any) -> Any:
        if kwargs["seen"].node.name == "b" and not failed:
            failed.append(1)
            raise RuntimeError("a write failed")
        return apply(**kwargs)

    monkeypatch.setattr(nodes, "apply", fails_once_for_b)
    with write_commits() as commits:
        replies = together(
            client, [(i, body(n, 20 + k)) for k, (i, n) in enumerate(zip(ids, names, strict=True))]
        )
    assert [reply.status_code for reply in replies] == [200] * 3
    assert failed == [1]
    assert len(commits) == len(names), "rolled back, then a commit each"
    assert [gpu_used(client, name) for name in names] == [20, 21, 22]


def test_a_heartbeat_that_takes_the_lock_is_applied_alone(client: TestClient) -> None:
    names = ["a", "b", "c"]
    ids = [register_node(client, name, [T4]) for name in names]
    job = int(submit(client, memory_mib=12000)["id"])
    cycle(client)
    placed_on = client.get(f"/v1/jobs/{job}").json()["attempts"][0]["node"]
    starting = names.index(placed_on)
    beats = [
        (i, body(n, 12000, [running(job)]) if k == starting else body(n, 30 + k))
        for k, (i, n) in enumerate(zip(ids, names, strict=True))
    ]
    batches_of(client, len(names))
    with write_commits() as commits:
        replies = together(client, beats)
    assert [reply.status_code for reply in replies] == [200] * 3
    assert len(commits) == 2, "the batch of two, then the one that starts the job"
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "running"
    expected = [12000 if k == starting else 30 + k for k in range(len(names))]
    assert [gpu_used(client, name) for name in names] == expected


class InterruptedWait(threading.Condition):
    """A leader's wait for its batch to fill, interrupted (KeyboardInterrupt, a bug)."""

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        raise RuntimeError("interrupted")


def test_a_leader_interrupted_while_waiting_closes_its_batch(client: TestClient) -> None:
    node = register_node(client, "n0", [T4])
    batches_of(client, 2)
    batcher = client.app.state.heartbeat_batcher  # type: ignore[attr-defined]
    batcher._changed = InterruptedWait()
    with pytest.raises(RuntimeError, match="interrupted"):
        client.post(f"/v1/nodes/{node}/heartbeat", json=body("n0", 100))
    batcher._changed, batcher.max_batch = threading.Condition(), 1
    # the next heartbeat leads a batch of its own, not joining the one left without a leader
    answers: list[int] = []
    url, sent = f"/v1/nodes/{node}/heartbeat", body("n0", 200)
    beat = threading.Thread(
        target=lambda: answers.append(client.post(url, json=sent).status_code), daemon=True
    )
    beat.start()
    beat.join(NEVER_S)  # a daemon: one left waiting for ever does not hold up the tests
    assert answers == [200]
    assert gpu_used(client, "n0") == 200
