"""Authentication only reads: on SQLite a writer holding the write lock does not hold it
up (it used to take the write lock itself, so every request queued behind writers)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from tests.conftest import bearer, make_token


@contextmanager
def write_lock_held(database_url: str) -> Iterator[None]:
    """Another connection holding SQLite's write lock, as a long write would."""
    writer = sqlite3.connect(str(make_url(database_url).database), isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        yield
        writer.execute("ROLLBACK")
    finally:
        writer.close()


def test_tokens_are_checked_while_another_connection_writes(
    client: TestClient, database_url: str
) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's readers never wait for writers")
    user = bearer(make_token(database_url, "user", "ana"))
    unknown = bearer("colloc_" + "x" * 43)
    with write_lock_held(database_url):
        # both answers need the token looked up and nothing written
        forbidden = client.get("/v1/admin/jobs", headers=user)
        refused = client.get("/v1/admin/jobs", headers=unknown)
    assert forbidden.status_code == 403, forbidden.text
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "invalid_token"
