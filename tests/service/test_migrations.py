"""The migrations are the schema: they build exactly what the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from service.db import Base, make_engine


def test_migrated_schema_matches_models(database_url: str) -> None:
    engine = make_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []
