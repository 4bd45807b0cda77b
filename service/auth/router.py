"""`/v1/admin/accounts`: the Unix accounts job owners' jobs run as, where not their names."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from service.auth import accounts
from service.auth.deps import allow
from service.deps import SessionDep

router = APIRouter(prefix="/admin/accounts", tags=["admin"], dependencies=[Depends(allow("admin"))])

OwnerName = Annotated[str, Path(min_length=1, max_length=128)]


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
