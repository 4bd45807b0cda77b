"""`colloc server` and `colloc db upgrade`, and what every command that opens the database
shares: its settings and its errors as one line."""

from __future__ import annotations

import argparse
import ipaddress
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from service.app import create_app
from service.cli.errors import CliError
from service.config import Settings
from service.db import upgrade

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # another host name: it may resolve anywhere
        return False


def settings_for(db: str | None) -> Settings:
    """Settings from the environment (and config file), with `--db` over them."""
    try:
        return Settings(database_url=db) if db else Settings()
    except ValidationError as exc:
        raise CliError(f"invalid settings: {exc.errors()[0]['msg']}", 2) from exc


@contextmanager
def database_errors() -> Iterator[None]:
    """What the database refuses (a missing directory, a wrong password), as one line."""
    try:
        yield
    except SQLAlchemyError as exc:
        reason = getattr(exc, "orig", None) or exc
        raise CliError(f"cannot use the database (--db, COLLOC_DATABASE_URL): {reason}") from exc


def run_server(args: argparse.Namespace) -> int:
    settings = settings_for(args.db)
    if settings.auth_disabled:
        if not is_loopback(args.host):
            raise CliError(
                "COLLOC_AUTH_DISABLED is a development setting: it only binds to a loopback "
                f"address (127.0.0.1, ::1, localhost), not {args.host}",
                2,
            )
        log.warning("authentication is OFF (COLLOC_AUTH_DISABLED): every caller is an admin")
    with database_errors():
        upgrade(settings.database_url)
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.log_level == "debug",  # a line per request (and heartbeat)
    )
    return 0


def run_db_upgrade(args: argparse.Namespace) -> int:
    settings = settings_for(args.db)
    with database_errors():
        upgrade(settings.database_url)
    print("database is at the newest schema")
    return 0
