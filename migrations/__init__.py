"""Alembic migrations: the only way Colloc's schema is created or changed."""
