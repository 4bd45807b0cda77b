"""FastAPI dependencies that authenticate a request and check its role.

Admins may call everything. With `auth_disabled` (a development setting; `colloc
server` refuses it on anything but a loopback address) every caller is an admin named
"anonymous".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from service.auth.tokens import Principal, authenticate
from service.deps import SessionDep, SettingsDep
from service.errors import ApiError

DEVELOPMENT_PRINCIPAL = Principal(name="anonymous", role="admin")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _principal(request: Request, session: SessionDep, settings: SettingsDep) -> Principal:
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
    principal = authenticate(session, raw.strip())
    if principal is None:
        raise ApiError(
            401, "invalid_token", "the API token is unknown or revoked", None, _CHALLENGE
        )
    return principal


def allow(*roles: str) -> Callable[[Principal], Principal]:
    """A dependency passing callers with one of `roles` (or admin), refusing others."""

    def check(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
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
