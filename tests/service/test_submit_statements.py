"""What one job submit sends to the database, whatever the cluster's size: the cluster
make-up's key, the job and its event; nothing of the estimator for a job it does not
estimate, nothing read back after the commit. (That a job with a training spec is still
estimated with what the estimator learned is tests/service/test_fixed_cost_offsets.py's.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from tests.conftest import on_periodic_thread, register_node, submit


@contextmanager
def statements() -> Iterator[list[str]]:
    """Each statement's verb and first table, in the order sent while the block runs
    (SQLite's BEGIN, which service.db sends as a statement, left out, and what follows
    the clock rather than the request: the background workers' ticks, and the reads of
    API tokens, the load shedder's each second and the token cache's on expiry)."""
    seen: list[str] = []

    def listen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        words = statement.replace('"', "").split()
        verb = words[0].upper()
        if verb == "BEGIN" or on_periodic_thread():
            return
        upper = [w.upper() for w in words]
        key = {"SELECT": "FROM", "INSERT": "INTO"}.get(verb, verb)
        table = words[upper.index(key) + 1] if key in upper[1:] else ""
        if table != "api_tokens":
            seen.append(f"{verb} {table}")

    event.listen(Engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", listen)


def test_a_plain_submit_sends_three_statements(client: TestClient) -> None:
    for node in ("a", "b"):
        register_node(client, node, [("NVIDIA A100-SXM4-40GB", 40960)] * 4)
    submit(client, memory_mib=1000)  # the token and the cluster's make-up remembered
    with statements() as sent:
        job = submit(client, memory_mib=2000)
    assert sent == ["SELECT events", "INSERT jobs", "INSERT events"]
    assert job["state"] == "pending" and job["attempts"] == [] and job["estimates"] == []
