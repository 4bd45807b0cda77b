"""Creating, listing, revoking and checking API tokens.

Tokens are 256 random bits, so a plain SHA-256 of each is enough to store: nobody can
guess a token from its hash, and a lookup is one indexed query per request.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
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


# How long a replica goes on accepting a token revoked elsewhere (by another replica, or
# `colloc token revoke --db` on the database), and how often a client that keeps
# calling costs a token read: a submit cost one read transaction and a pool pre-ping
# per request (issue 19, PostgreSQL 16 on a 2-core machine).
PRINCIPAL_TTL_S = 2.0
# Tokens remembered at once: at 2 s, every agent of a 10,000-node cluster (the issue's
# goal) and its users with room to spare; an entry is a hash and a Principal (~0.3 KiB).
PRINCIPAL_CACHE_SIZE = 16_384


class PrincipalCache:
    """Recently authenticated tokens by hash, each for `ttl_s`, so that a busy client
    costs one token read per `ttl_s` rather than a transaction per request. Only valid
    tokens are kept (an unknown token is read each time: one made a moment ago works at
    once); revoking through this process's API forgets the token at once, revoking
    anywhere else takes effect here within `ttl_s`."""

    def __init__(
        self,
        ttl_s: float = PRINCIPAL_TTL_S,
        size: int = PRINCIPAL_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s, self._size, self._clock = ttl_s, size, clock
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()
        self._forgotten = 0

    def get(self, token_hash: str) -> Principal | None:
        with self._lock:
            entry = self._entries.get(token_hash)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._entries[token_hash]
                return None
            return entry[1]

    @property
    def forgotten(self) -> int:
        """How many tokens were forgotten so far: read it before a token's read, and pass
        it to `put`."""
        return self._forgotten

    def put(self, token_hash: str, principal: Principal, forgotten: int) -> None:
        """Remember a token read valid while `forgotten` tokens had been forgotten; not if
        one was forgotten since (its read may predate that revocation)."""
        with self._lock:
            if forgotten != self._forgotten:
                return
            now = self._clock()
            if len(self._entries) >= self._size:
                self._entries = {h: e for h, e in self._entries.items() if e[0] > now}
                if len(self._entries) >= self._size:  # all live: drop the oldest
                    del self._entries[next(iter(self._entries))]
            self._entries.pop(token_hash, None)  # re-added last: insertion order is age
            self._entries[token_hash] = (now + self._ttl_s, principal)

    def forget(self, token_hash: str) -> None:
        with self._lock:
            self._forgotten += 1
            self._entries.pop(token_hash, None)
