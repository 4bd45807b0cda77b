"""`colloc server` and `colloc db upgrade`."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from pydantic import ValidationError

from service.app import create_app
from service.cli.errors import CliError
from service.config import Settings
from service.db import upgrade


def _settings(db: str | None) -> Settings:
    try:
        return Settings(database_url=db) if db else Settings()
    except ValidationError as exc:
        raise CliError(f"invalid settings: {exc.errors()[0]['msg']}", 2) from exc


def run_server(args: argparse.Namespace) -> int:
    settings = _settings(args.db)
    upgrade(settings.database_url)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info")
    return 0


def run_db_upgrade(args: argparse.Namespace) -> int:
    settings = _settings(args.db)
    upgrade(settings.database_url)
    print("database is at the newest schema")
    return 0


def add_commands(commands: Any) -> None:
    server = commands.add_parser("server", help="run the scheduler API and dashboard")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--db", help="database URL (default: COLLOC_DATABASE_URL or ./colloc.db)")
    server.set_defaults(run=run_server)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    db_upgrade.add_argument("--db", help="database URL")
    db_upgrade.set_defaults(run=run_db_upgrade)
