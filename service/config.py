"""Service settings, read from `COLLOC_*` environment variables."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def normalise_database_url(url: str) -> str:
    """Use the psycopg 3 driver for plain `postgresql://` URLs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Settings(BaseSettings):
    """Everything an operator can tune; unsafe values are refused at start-up."""

    model_config = SettingsConfigDict(env_prefix="COLLOC_")

    database_url: str = "sqlite:///./colloc.db"
    schedule_interval_s: float = Field(default=1.0, gt=0, le=300)
    heartbeat_interval_s: float = Field(default=2.0, gt=0, le=300)
    scheduler_enabled: bool = True
    default_max_attempts: int = Field(default=3, ge=1, le=20)
    oom_reservation_factor: float = Field(default=1.2, ge=1.0, le=4.0)

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        url = normalise_database_url(url)
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("COLLOC_DATABASE_URL must be a sqlite:// or postgresql:// URL")
        return url
