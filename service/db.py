"""Database plumbing: declarative base, engine, sessions and migrations.

The schema is only ever created or changed by the Alembic migrations in
`migrations/`; `upgrade()` is what `colloc db upgrade` and server start-up run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import DateTime, Engine, MetaData, create_engine, event, text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps stored as UTC and always returned timezone-aware (SQLite drops tz)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UtcDateTime column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


# Transactions that only read begin with this execution option (read_transaction).
READ_ONLY = "colloc_read_only"


def make_engine(url: str, connections: int | None = None) -> Engine:
    """An engine; SQLite gets serialised write transactions and foreign keys on.

    The server passes `connections`, its load-shedding capacity's (a pool that never
    makes a thread wait); tools that use one connection keep SQLAlchemy's default pool."""
    pool: dict[str, Any] = {}
    if connections is not None:
        pool = {"pool_size": connections, "max_overflow": 0}
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, **pool)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pool)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, issue BEGIN (see SQLAlchemy's pysqlite notes).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # IMMEDIATE takes the write lock up front, so two writers queue on the busy
        # timeout instead of failing when a read transaction upgrades to a write. A
        # read-only one begins deferred: under WAL it neither waits for nor blocks them.
        read_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


# The advisory lock's key: "coll" in ASCII, the number every Colloc version has used, so
# replicas of an older version and this one still take turns.
PLACEMENT_LOCK_ID = 0x636F6C6C


def lock_placements(session: Session) -> None:
    """Serialise reservation changes (scheduling cycles, heartbeats, lease expiry) across
    replicas, to the end of the transaction: on PostgreSQL by an advisory lock; SQLite's
    writes already are, by BEGIN IMMEDIATE."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": PLACEMENT_LOCK_ID})


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: committed if the block succeeds, rolled back otherwise."""
    with factory() as session, session.begin():
        yield session


@contextmanager
def read_transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A unit of work that only reads: on SQLite it does not take the write lock, so it
    never waits behind a writer (a write in it may fail with "database is locked")."""
    options: Any = {READ_ONLY: True}  # SQLAlchemy's type lists only its own options
    with factory() as session, session.begin():
        session.connection(execution_options=options)
        yield session


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    """Bring the database at `url` to the newest schema."""
    command.upgrade(alembic_config(url), "head")
