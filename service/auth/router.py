"""`/v1/admin/accounts`: the Unix accounts job owners' jobs run as, where not their names;
`/v1/admin/tokens`: API tokens made, listed and revoked (admins only, each an event)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from service.auth import accounts, tokens
from service.auth.deps import allow
from service.auth.models import ApiToken
from service.auth.roles import ROLES
from service.auth.tokens import Principal
from service.deps import SessionDep
from service.events.service import record
from service.ids import MAX_ID

router = APIRouter(prefix="/admin/accounts", tags=["admin"], dependencies=[Depends(allow("admin"))])

tokens_router = APIRouter(prefix="/admin/tokens", tags=["admin"])
AdminDep = Annotated[Principal, Depends(allow())]
OwnerName = Annotated[str, Path(min_length=1, max_length=128)]
TokenId = Annotated[int, Path(ge=1, le=MAX_ID)]


class AccountSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str = Field(min_length=1, max_length=accounts.ACCOUNT_CHARS)


class AccountRead(BaseModel):
    name: str
    account: str
    updated_at: datetime


@router.get("", response_model=list[AccountRead])
def get_accounts(session: SessionDep) -> list[AccountRead]:
    """Every owner whose jobs run as an account not named like the owner."""
    return [
        AccountRead.model_validate(m, from_attributes=True) for m in accounts.list_accounts(session)
    ]


@router.put("/{name}", response_model=AccountRead)
def put_account(name: OwnerName, body: AccountSet, session: SessionDep) -> AccountRead:
    """Run `name`'s jobs as the Unix account `account` from their next assignment on."""
    mapping = accounts.set_account(session, name, body.account)
    read = AccountRead.model_validate(mapping, from_attributes=True)
    session.commit()
    return read


@router.delete("/{name}", status_code=204)
def delete_account(name: OwnerName, session: SessionDep) -> None:
    """Run `name`'s jobs as the account named `name` again."""
    accounts.unset(session, name)
    session.commit()


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str = Field(description=f"one of {', '.join(ROLES)}")  # tokens.create checks it
    name: str = Field(min_length=1, max_length=128)  # a user, or the node an agent serves


class TokenRead(BaseModel):
    """A token as listed: never its secret, only its first characters."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    role: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenRead):
    token: str  # the secret: shown in this answer only, never stored


@tokens_router.post("", status_code=201, response_model=TokenCreated)
def create_token(body: TokenCreate, session: SessionDep, caller: AdminDep) -> TokenCreated:
    """Make a token; its secret is in this answer and nowhere else, ever."""
    token, raw = tokens.create(session, role=body.role, name=body.name)
    record(
        session=session,
        kind="token.created",
        message=f"{token.role} token {token.id} for {token.name!r} created by {caller.name}",
        data={"token_id": token.id, "role": token.role, "name": token.name},
    )
    created = TokenCreated.model_validate(
        {**TokenRead.model_validate(token).model_dump(), "token": raw}
    )
    session.commit()
    return created


@tokens_router.get("", response_model=list[TokenRead])
def get_tokens(session: SessionDep, caller: AdminDep) -> list[TokenRead]:
    """Every token, revoked ones too (hashes and secrets are never shown)."""
    return [TokenRead.model_validate(token) for token in tokens.list_tokens(session)]


@tokens_router.delete("/{token_id}", response_model=TokenRead)
def revoke_token(
    token_id: TokenId, session: SessionDep, caller: AdminDep, request: Request
) -> TokenRead:
    """Revoke a token: from now on it authenticates nobody (other replicas, which may
    have it cached, within `tokens.PRINCIPAL_TTL_S`)."""
    before = session.get(ApiToken, token_id)
    was_live = before is not None and before.revoked_at is None
    token = tokens.revoke(session, token_id)
    if was_live:
        record(
            session=session,
            kind="token.revoked",
            message=f"{token.role} token {token.id} for {token.name!r} revoked by {caller.name}",
            data={"token_id": token.id},
        )
    read = TokenRead.model_validate(token)
    session.commit()
    request.app.state.principals.forget(token.token_hash)
    return read
