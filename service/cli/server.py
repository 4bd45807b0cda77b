"""`colloc server` and `colloc db upgrade`."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import ssl
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError

from service.app import create_app
from service.cli.errors import CliError
from service.config import Settings
from service.db import upgrade

log = logging.getLogger(__name__)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")  # uvicorn's names


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
    upgrade(settings.database_url)
    print("database is at the newest schema")
    return 0


def add_commands(commands: Any) -> None:
    server = commands.add_parser("server", help="run the scheduler API and dashboard")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on")
    server.add_argument("--port", type=int, default=8000, help="port to listen on")
    server.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="server log level; debug also logs every request (agents' heartbeats too)",
    )
    server.add_argument("--db", help="database URL (default: COLLOC_DATABASE_URL or ./colloc.db)")
    server.add_argument("--tls-cert", type=Path, help="serve https: certificate chain (PEM)")
    server.add_argument("--tls-key", type=Path, help="the certificate's private key (PEM)")
    server.set_defaults(run=run_server)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    db_upgrade.add_argument("--db", help="database URL")
    db_upgrade.set_defaults(run=run_db_upgrade)
