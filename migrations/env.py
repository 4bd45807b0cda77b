"""Alembic environment: runs migrations against the URL in the Alembic config."""

from __future__ import annotations

from alembic import context

import service.auth.models
import service.estimates.models
import service.events.models
import service.jobs.models
import service.logs.models
import service.nodes.models
import service.usage.models  # noqa: F401  (register every table on the metadata)
from service.db import Base, make_engine

target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url is not None, "sqlalchemy.url must be set in the Alembic config"
    engine = make_engine(url)
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # a batch operation recreates its table, which SQLite allows for a table other
            # tables reference only with foreign keys off, set outside a transaction
            # (https://www.sqlite.org/lang_altertable.html#otheralter): before the first
            # statement begins one; the connection is discarded with the engine below
            driver = connection.connection.driver_connection
            assert driver is not None
            driver.execute("PRAGMA foreign_keys=OFF")
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
            # and then, as that page says, the references are checked before committing
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all() if sqlite else []
            if broken:
                raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
