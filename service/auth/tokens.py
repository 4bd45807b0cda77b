"""Creating, listing, revoking and checking API tokens.

Tokens are 256 random bits, so a plain SHA-256 of each is enough to store: nobody can
guess a token from its hash, and a lookup is one indexed query per request.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth.models import ApiToken
from service.auth.roles import ROLES
from service.db import utcnow
from service.errors import ApiError, not_found

TOKEN_PREFIX = "colloc_"
MAX_TOKEN_LENGTH = 256


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user, an admin, or the agent of the node called `name`."""

    name: str
    role: str


def hash_of(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def create(session: Session, *, role: str, name: str) -> tuple[ApiToken, str]:
    """A new token; the raw value is returned once and never stored."""
    if role not in ROLES:
        raise ApiError(422, "invalid_role", f"role must be one of {', '.join(ROLES)}")
    if not name or len(name) > 128:
        raise ApiError(422, "invalid_name", "a token's name is 1 to 128 characters")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name,
        role=role,
        token_hash=hash_of(raw),
        prefix=raw[: len(TOKEN_PREFIX) + 6],
        created_at=utcnow(),
        revoked_at=None,
    )
    session.add(token)
    session.flush()
    return token, raw


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def revoke(session: Session, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise not_found("token", token_id)
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


def is_valid(session: Session, raw: str) -> bool:
    """Whether `raw` is a token that has not been revoked."""
    return authenticate(session, raw) is not None


def agent_slot_hashes(session: Session) -> frozenset[str]:
    """The hashes of unrevoked tokens that may take the agents' request slots
    (service/load_shedding.py): agents' and admins'."""
    rows = session.scalars(
        select(ApiToken.token_hash).where(
            ApiToken.revoked_at.is_(None), ApiToken.role.in_(("agent", "admin"))
        )
    )
    return frozenset(rows)


def authenticate(session: Session, raw: str) -> Principal | None:
    """The holder of a valid, unrevoked token, or None."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > MAX_TOKEN_LENGTH:
        return None
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_of(raw)))
    if token is None or token.revoked_at is not None:
        return None
    return Principal(name=token.name, role=token.role)
