"""`colloc token create|list|revoke`: API tokens, and `colloc account set|list|unset`: the
Unix accounts token names' jobs run as; both managed on the database directly.

Whoever can reach the database is an admin already; this is how the first admin token
comes to be (`colloc up` makes one for its data directory itself).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from service.auth import accounts, tokens
from service.cli.client import request
from service.cli.errors import CliError
from service.cli.output import print_table
from service.cli.server import database_errors, settings_for
from service.db import make_engine, make_sessionmaker, transaction, upgrade
from service.errors import ApiError
from service.ids import MAX_ID


@contextmanager
def _database(args: argparse.Namespace) -> Iterator[Session]:
    """A transaction on the database `--db` names; what it refuses, as a CLI error."""
    settings = settings_for(args.db)
    with database_errors():
        upgrade(settings.database_url)
        try:
            with transaction(make_sessionmaker(make_engine(settings.database_url))) as session:
                yield session
        except ApiError as exc:
            raise CliError(exc.message, 2) from exc


def _through_server(args: argparse.Namespace) -> bool:
    """Whether to manage tokens through the API (a server named) or the database (`--db`,
    which wins over a COLLOC_SERVER in the environment)."""
    if args.db:
        if args.server:
            raise CliError("name a server (--server) or a database (--db), not both", 2)
        return False
    args.server = args.server or os.environ.get("COLLOC_SERVER")
    return bool(args.server)


def _minute(at: str | None) -> str:
    """An API time (ISO 8601) as the listing shows it."""
    return at[:16].replace("T", " ") if at else ""


def run_create(args: argparse.Namespace) -> int:
    if _through_server(args):
        made = request(
            args, "POST", "/v1/admin/tokens", json={"role": args.role, "name": args.name}
        )
        token_id, role, name, raw = made["id"], made["role"], made["name"], made["token"]
    else:
        with _database(args) as session:
            token, raw = tokens.create(session, role=args.role, name=args.name)
            token_id, role, name = token.id, token.role, token.name
    print(f"created {role} token {token_id} for {name!r}; it is shown this once, keep it secret:")
    print(raw)
    return 0


def run_list(args: argparse.Namespace) -> int:
    if _through_server(args):
        rows = [
            (
                str(t["id"]),
                t["name"],
                t["role"],
                t["prefix"] + "...",
                _minute(t["created_at"]),
                _minute(t["revoked_at"]),
            )
            for t in request(args, "GET", "/v1/admin/tokens")
        ]
    else:
        with _database(args) as session:
            rows = [
                (
                    str(t.id),
                    t.name,
                    t.role,
                    t.prefix + "...",
                    t.created_at.strftime("%Y-%m-%d %H:%M"),
                    t.revoked_at.strftime("%Y-%m-%d %H:%M") if t.revoked_at else "",
                )
                for t in tokens.list_tokens(session)
            ]
    print_table(("ID", "NAME", "ROLE", "TOKEN", "CREATED", "REVOKED"), rows)
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    if not 1 <= args.id <= MAX_ID:
        raise CliError(f"no token has id {args.id}", 2)
    if _through_server(args):
        token = request(args, "DELETE", f"/v1/admin/tokens/{args.id}")
        role, name = token["role"], token["name"]
    else:
        with _database(args) as session:
            revoked = tokens.revoke(session, args.id)
            role, name = revoked.role, revoked.name
    print(f"revoked {role} token {args.id} for {name!r}")
    return 0


def run_account_set(args: argparse.Namespace) -> int:
    with _database(args) as session:
        accounts.set_account(session, args.name, args.account)
    print(f"jobs of {args.name!r} run as Unix account {args.account!r}")
    return 0


def run_account_unset(args: argparse.Namespace) -> int:
    with _database(args) as session:
        accounts.unset(session, args.name)
    print(f"jobs of {args.name!r} run as Unix account {args.name!r} again")
    return 0


def run_account_list(args: argparse.Namespace) -> int:
    with _database(args) as session:
        rows = [
            (m.name, m.account, m.updated_at.strftime("%Y-%m-%d %H:%M"))
            for m in accounts.list_accounts(session)
        ]
    print_table(("NAME", "ACCOUNT", "SET"), rows)
    return 0
