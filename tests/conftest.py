"""Shared fixtures: a migrated database per backend, an app client, small factories.

Database-backed tests run on SQLite and, when `COLLOC_TEST_PG_URL` is set, on a fresh
PostgreSQL database created for this run (and dropped after it). The schema always
comes from the real Alembic migrations; between tests every table is emptied.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import make_url

from service.app import create_app
from service.auth import tokens
from service.config import Settings, normalise_database_url
from service.db import Base, make_engine, make_sessionmaker, transaction, upgrade
from service.periodic import THREAD_PREFIX

PG_URL_ENV = "COLLOC_TEST_PG_URL"


def _backends() -> list[Any]:
    pg = pytest.param(
        "postgresql",
        marks=pytest.mark.skipif(not os.environ.get(PG_URL_ENV), reason=f"{PG_URL_ENV} unset"),
    )
    return ["sqlite", pg]


@pytest.fixture(scope="session")
def _pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped afterwards."""
    base = make_url(normalise_database_url(os.environ[PG_URL_ENV]))
    name = f"colloc_test_{uuid.uuid4().hex[:12]}"
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = base.set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _sqlite_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'colloc.db'}"
    upgrade(url)
    return url


@pytest.fixture(params=_backends())
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty database on each backend."""
    postgres = request.param == "postgresql"
    url: str = request.getfixturevalue("_pg_database" if postgres else "_sqlite_database")
    engine = make_engine(url)
    with engine.begin() as conn:
        if postgres:
            names = ", ".join(t.name for t in Base.metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for table in reversed(Base.metadata.sorted_tables):
                conn.execute(table.delete())
            # ids count from 1 again, as RESTART IDENTITY makes them on PostgreSQL
            conn.execute(text("DELETE FROM sqlite_sequence"))
    engine.dispose()
    return url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, scheduler_enabled=False, oom_backoff_s=0)


def make_token(database_url: str, role: str, name: str) -> str:
    """A new API token on the test database."""
    engine = make_engine(database_url)
    try:
        with transaction(make_sessionmaker(engine)) as session:
            _token, raw = tokens.create(session, role=role, name=name)
    finally:
        engine.dispose()
    return raw


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def admin_token(database_url: str) -> str:
    return make_token(database_url, "admin", "admin")


@pytest.fixture
def client(settings: Settings, admin_token: str) -> Iterator[TestClient]:
    """The app on the test database, with the background scheduler off, called with an
    admin token (admins may call everything)."""
    with TestClient(create_app(settings), headers=bearer(admin_token)) as test_client:
        yield test_client


@pytest.fixture
def through_app(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    """The CLI's HTTP calls go to the app (at http://colloc)."""

    def answer(method: str, url: str, **kwargs: Any) -> Any:
        kwargs.pop("timeout")
        kwargs.pop("verify")
        return client.request(method, url.removeprefix("http://colloc"), **kwargs)

    monkeypatch.setattr("service.cli.client.httpx.request", answer)
    return client


@pytest.fixture
def make_client(settings: Settings, admin_token: str) -> Iterator[Any]:
    """Apps on the test database with some settings changed (e.g. the scheduler on)."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        app = create_app(settings.model_copy(update=overrides))
        client = TestClient(app, headers=bearer(admin_token))
        clients.append(client.__enter__())
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def on_periodic_thread() -> bool:
    """Whether the caller is one of the app's background workers (service/periodic.py),
    whose ticks follow the clock, not the requests a test counts statements of."""
    return threading.current_thread().name.startswith(THREAD_PREFIX)


def register_node(
    client: TestClient, name: str, gpus: list[tuple[str, int]], prefix: str | None = None
) -> int:
    """Register a node with GPUs given as (model, memory MiB); returns its id."""
    prefix = prefix or name
    body = {
        "name": name,
        "agent_version": "test",
        "gpus": [
            {"uuid": f"GPU-{prefix}-{i}", "index": i, "model": model, "memory_total_mib": mib}
            for i, (model, mib) in enumerate(gpus)
        ],
    }
    response = client.post("/v1/nodes/register", json=body)
    assert response.status_code == 200, response.text
    return int(response.json()["node_id"])


def submit(client: TestClient, **spec: Any) -> dict[str, Any]:
    body = {"name": "job", "command": ["true"], **spec}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
