"""Which Unix account a job owner's jobs run as on the nodes.

By default a token's name is the account's name; an admin maps a name to another
account where they differ (`colloc account set`, `PUT /v1/admin/accounts/{name}`).
The assignment an agent pulls names the account; the agent refuses root and names
the node does not know.
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth.models import UnixAccount
from service.db import utcnow
from service.errors import ApiError, not_found

# shadow-utils' default check of a user name (useradd, is_valid_user_name): a lower-case
# letter or underscore, then lower-case letters, digits, '_', '-' or '.', an optional
# final '$', at most 32 characters (LOGIN_NAME_MAX on glibc is 256, utmp's ut_user 32)
ACCOUNT_PATTERN = re.compile(r"[a-z_][a-z0-9_.-]*\$?")
ACCOUNT_CHARS = 32


def accounts_for(session: Session, owners: set[str]) -> dict[str, str]:
    """The account each of `owners` runs jobs as: the mapping's, else the name itself
    (one statement for them all)."""
    mapped = session.scalars(select(UnixAccount).where(UnixAccount.name.in_(owners)))
    accounts = {mapping.name: mapping.account for mapping in mapped}
    return {owner: accounts.get(owner, owner) for owner in owners}


def set_account(session: Session, name: str, account: str) -> UnixAccount:
    if not name or len(name) > 128:
        raise ApiError(422, "invalid_name", "a token's name is 1 to 128 characters")
    if len(account) > ACCOUNT_CHARS or not ACCOUNT_PATTERN.fullmatch(account):
        raise ApiError(
            422,
            "invalid_account",
            f"{account[:64]!r} is not a Unix user name (lower-case letters, digits, "
            f"'_', '-', '.', starting with a letter or '_', at most {ACCOUNT_CHARS} characters)",
        )
    mapping = session.get(UnixAccount, name)
    if mapping is None:
        mapping = UnixAccount(name=name)
        session.add(mapping)
    mapping.account = account
    mapping.updated_at = utcnow()
    session.flush()
    return mapping


def unset(session: Session, name: str) -> None:
    """Back to the default (the account named like the token)."""
    mapping = session.get(UnixAccount, name)
    if mapping is None:
        raise not_found("account mapping", name)
    session.delete(mapping)


def list_accounts(session: Session) -> list[UnixAccount]:
    return list(session.scalars(select(UnixAccount).order_by(UnixAccount.name)))
