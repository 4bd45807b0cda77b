"""`colloc server` and `colloc db upgrade`, and what every command that opens the database
shares: its settings and its errors as one line."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
    cert, key = tls_files(args.tls_cert, args.tls_key)
    with database_errors():
        upgrade(settings.database_url)
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.log_level == "debug",  # a line per request (and heartbeat)
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    return 0


def tls_files(cert: Path | None, key: Path | None) -> tuple[str | None, str | None]:
    """`--tls-cert` and `--tls-key` for uvicorn, tried first: an unreadable file or a key
    that is not the certificate's is one line here, not a traceback once the server starts."""
    if cert is None and key is None:
        return None, None
    if cert is None or key is None:
        raise CliError("--tls-cert and --tls-key go together (a PEM certificate and its key)", 2)
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # a file that is no PEM, or a key of another certificate
        message = f"cannot serve TLS with --tls-cert {cert} and --tls-key {key}: {exc}"
        raise CliError(message, 2) from exc
    except OSError as exc:
        raise CliError(f"cannot read a TLS file: {exc}", 2) from exc
    return str(cert), str(key)


def run_db_upgrade(args: argparse.Namespace) -> int:
    settings = settings_for(args.db)
    with database_errors():
        upgrade(settings.database_url)
    print("database is at the newest schema")
    return 0
