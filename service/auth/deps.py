"""FastAPI dependencies that authenticate a request and check its role.

Admins may call everything. With `auth_disabled` (a development setting; `colloc
server` refuses it on anything but a loopback address) every caller is an admin named
"anonymous".

A valid token is remembered for a moment (`tokens.PrincipalCache`, the app's
`state.principals`): a request whose token was read lately needs neither the database
nor a worker thread to be authenticated.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.auth.tokens import (
    MAX_TOKEN_LENGTH,
    Principal,
    PrincipalCache,
    authenticate,
    hash_of,
)
from service.db import read_transaction
from service.deps import SettingsDep
from service.errors import ApiError

DEVELOPMENT_PRINCIPAL = Principal(name="anonymous", role="admin")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _read(sessions: sessionmaker[Session], raw: str) -> Principal | None:
    # a short read of its own, over before the handler runs: on SQLite it takes no write
    # lock, so writers never hold up authentication, nor does an authenticated request
    # hold them up while it waits for its handler
    with read_transaction(sessions) as session:
        return authenticate(session, raw)


async def _principal(request: Request, settings: SettingsDep) -> Principal:
    if settings.auth_disabled:
        return DEVELOPMENT_PRINCIPAL
    scheme, _, raw = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise ApiError(
            401,
            "unauthenticated",
            "send an API token: Authorization: Bearer TOKEN",
            None,
            _CHALLENGE,
        )
    raw = raw.strip()
    principals: PrincipalCache = request.app.state.principals
    token_hash = hash_of(raw) if len(raw) <= MAX_TOKEN_LENGTH else None
    principal = principals.get(token_hash) if token_hash else None
    if principal is None and token_hash:
        forgotten = principals.forgotten
        principal = await run_in_threadpool(_read, request.app.state.sessions, raw)
        if principal is not None:
            principals.put(token_hash, principal, forgotten)
    if principal is None:
        raise ApiError(
            401, "invalid_token", "the API token is unknown or revoked", None, _CHALLENGE
        )
    return principal


def allow(*roles: str) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    """A dependency passing callers with one of `roles` (or admin), refusing others."""

    async def check(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
        if principal.role != "admin" and principal.role not in roles:
            raise ApiError(
                403,
                "forbidden",
                f"a {principal.role} token cannot do this (needs: {', '.join(roles)})",
            )
        return principal

    return check


UserDep = Annotated[Principal, Depends(allow("user"))]
AgentDep = Annotated[Principal, Depends(allow("agent"))]
