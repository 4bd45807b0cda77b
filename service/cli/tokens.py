"""`colloc token create|list|revoke`: API tokens, and `colloc account set|list|unset`: the
Unix accounts token names' jobs run as; both managed on the database directly.

Whoever can reach the database is an admin already; this is how the first admin token
comes to be (`colloc up` makes one for its data directory itself).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

from service.auth import accounts, tokens
from service.cli.errors import CliError
from service.cli.output import print_table
from service.cli.server import settings_for
from service.db import make_engine, make_sessionmaker, transaction, upgrade
from service.deps import MAX_ID
from service.errors import ApiError


@contextmanager
def _database(args: argparse.Namespace) -> Iterator[Session]:
    """A transaction on the database `--db` names; what it refuses, as a CLI error."""
    settings = settings_for(args.db)
    upgrade(settings.database_url)
    try:
        with transaction(make_sessionmaker(make_engine(settings.database_url))) as session:
            yield session
    except ApiError as exc:
        raise CliError(exc.message, 2) from exc


def run_create(args: argparse.Namespace) -> int:
    with _database(args) as session:
        token, raw = tokens.create(session, role=args.role, name=args.name)
        summary = f"created {token.role} token {token.id} for {token.name!r}"
    print(f"{summary}; it is shown this once, keep it secret:")
    print(raw)
    return 0


def run_list(args: argparse.Namespace) -> int:
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
    with _database(args) as session:
        token = tokens.revoke(session, args.id)
        print(f"revoked {token.role} token {token.id} for {token.name!r}")
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


def add_commands(commands: Any) -> None:
    token = commands.add_parser("token", help="create, list and revoke API tokens")
    actions = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="make a token; its last output line is the token")
    create.add_argument("--role", required=True, choices=tokens.ROLES, help="what the token may do")
    create.add_argument("--name", required=True, help="user name, or the node an agent serves")
    create.set_defaults(run=run_create)
    listing = actions.add_parser("list", help="every token (hashes are never shown)")
    listing.set_defaults(run=run_list)
    revoke = actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id", type=int, help="the token's ID (see token list)")
    revoke.set_defaults(run=run_revoke)
    account = commands.add_parser(
        "account", help="the Unix account a token name's jobs run as, where not the name"
    )
    account_actions = account.add_subparsers(
        dest="account_command", required=True, metavar="ACTION"
    )
    account_set = account_actions.add_parser("set", help="run NAME's jobs as ACCOUNT")
    account_set.add_argument("name", help="a token's name (the owner of its jobs)")
    account_set.add_argument("account", help="a Unix user name on the nodes")
    account_set.set_defaults(run=run_account_set)
    account_unset = account_actions.add_parser(
        "unset", help="run NAME's jobs as the account called NAME again"
    )
    account_unset.add_argument("name", help="a token's name")
    account_unset.set_defaults(run=run_account_unset)
    account_list = account_actions.add_parser("list", help="every mapping")
    account_list.set_defaults(run=run_account_list)
    for parser in (create, listing, revoke, account_set, account_unset, account_list):
        parser.add_argument(
            "--db", help="database URL (default: COLLOC_DATABASE_URL or ./colloc.db)"
        )
