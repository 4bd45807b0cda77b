"""What the benches measure against: a scratch PostgreSQL database for each run, and
PostgreSQL's own single-row INSERT rate on this machine, measured by pgbench in the
same run (one autocommitted INSERT per transaction, as a heartbeat is one commit).

Imported by `bench/load.py` and `bench/scheduler_cycle.py` (run from the repository
root: `bench/` is their first import path).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from sqlalchemy.engine import make_url

from service.config import normalise_database_url

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
INSERT_SCRIPT = "INSERT INTO single_row (v) VALUES (:client_id);\n"


@dataclass(frozen=True)
class Scratch:
    """A scratch database: its SQLAlchemy URL and its name on the server."""

    url: str
    name: str
    host: str
    port: int
    user: str


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[Scratch]:
    """A fresh database on the server at `server_url`, dropped afterwards whatever
    happens (connections still open to it are ended)."""
    base = make_url(normalise_database_url(server_url))
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Scratch(
            url=base.set(database=name).render_as_string(hide_password=False),
            name=name,
            host=base.host or "127.0.0.1",
            port=base.port or 5432,
            user=base.username or "postgres",
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def insert_rate(scratch: Scratch, clients: int, seconds: int) -> float:
    """pgbench's transactions per second for single-row INSERTs by `clients`
    connections over `seconds` (connection set-up excluded)."""
    sqlalchemy_free = make_url(scratch.url).set(drivername="postgresql")
    dsn = sqlalchemy_free.render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS single_row")
        conn.execute("CREATE TABLE single_row (id bigserial PRIMARY KEY, v integer)")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(INSERT_SCRIPT)
        script.flush()
        done = subprocess.run(
            ["pgbench", "-n", "-f", script.name, "-c", str(clients), "-j", str(min(clients, 2)),
             "-T", str(seconds), "-h", scratch.host, "-p", str(scratch.port), "-U", scratch.user,
             scratch.name],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    found = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
    if found is None:
        raise RuntimeError(f"pgbench printed no rate:\n{done.stdout}\n{done.stderr}")
    return float(found.group(1))
