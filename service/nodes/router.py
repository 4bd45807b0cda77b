"""`/v1/nodes`: the agents' side of the API, and an admin's node controls (by name)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict

from agent.protocol import HeartbeatReply, NodeRegistered
from service.auth.deps import AgentDep, allow
from service.auth.tokens import Principal
from service.config import TimeLimitS
from service.deps import NodeId, SessionDep, SettingsDep
from service.errors import ApiError
from service.nodes import admin, service
from service.nodes.heartbeat_batch import HeartbeatBatcher
from service.nodes.schemas import HeartbeatIn, NodeRegisterIn

router = APIRouter(prefix="/nodes", tags=["nodes"])


def _check_node(caller: Principal, node_name: str) -> None:
    """An agent token speaks for the one node it was made for."""
    if caller.role == "agent" and caller.name != node_name:
        raise ApiError(
            403, "forbidden", f"this agent token is for node {caller.name!r}, not {node_name!r}"
        )


@router.post("/register", response_model=NodeRegistered)
def register_node(
    body: NodeRegisterIn, session: SessionDep, settings: SettingsDep, caller: AgentDep
) -> NodeRegistered:
    """Register (or re-register) a node and its GPUs."""
    _check_node(caller, body.name)
    node = service.register(session=session, body=body)
    session.commit()
    return NodeRegistered(
        node_id=node.id,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        lease_s=settings.node_lease_s,
    )


def _batcher(request: Request) -> HeartbeatBatcher:
    """The app's heartbeat batcher (service/app.py)."""
    batcher: HeartbeatBatcher = request.app.state.heartbeat_batcher
    return batcher


@router.post("/{node_id}/heartbeat", response_model=HeartbeatReply)
def node_heartbeat(
    node_id: NodeId,
    body: HeartbeatIn,
    session: SessionDep,
    settings: SettingsDep,
    caller: AgentDep,
    batcher: Annotated[HeartbeatBatcher, Depends(_batcher)],
) -> HeartbeatReply:
    """GPU state and attempt progress in; assignments and cancellations out, once the
    report is committed (with other heartbeats', service/nodes/heartbeat_batch.py)."""
    return batcher.beat(
        session=session,
        node_id=node_id,
        body=body,
        settings=settings,
        check=lambda node: _check_node(caller, node.name),
    )


AdminDep = Annotated[Principal, Depends(allow())]
NodeName = Annotated[str, Path(min_length=1, max_length=128)]


class NodeDrain(BaseModel):
    """How long a draining node's running jobs may go on before they are requeued."""

    model_config = ConfigDict(extra="forbid")

    deadline: TimeLimitS | None = None  # seconds or "10m"; none: they finish


class NodeControlled(BaseModel):
    """A node's admin state after a control."""

    model_config = ConfigDict(from_attributes=True)

    name: str
    state: str  # ready | lost (its agent's)
    admin_state: str  # active | cordoned | draining (an admin's)
    drain_deadline: datetime | None


@router.post("/{name}/cordon", response_model=NodeControlled)
def cordon_node(name: NodeName, session: SessionDep, caller: AdminDep) -> NodeControlled:
    """No new placements on the node; what runs there goes on (admins)."""
    node = admin.cordon(session=session, node=admin.by_name(session, name), by=caller.name)
    session.commit()
    return NodeControlled.model_validate(node)


@router.post("/{name}/drain", response_model=NodeControlled)
def drain_node(
    name: NodeName, session: SessionDep, caller: AdminDep, body: NodeDrain | None = None
) -> NodeControlled:
    """No new placements on the node; its running jobs finish, or are requeued once
    the deadline passes (admins)."""
    deadline_s = body.deadline if body is not None else None
    node = admin.drain(
        session=session, node=admin.by_name(session, name), by=caller.name, deadline_s=deadline_s
    )
    session.commit()
    return NodeControlled.model_validate(node)


@router.post("/{name}/resume", response_model=NodeControlled)
def resume_node(name: NodeName, session: SessionDep, caller: AdminDep) -> NodeControlled:
    """Placements on the node again (admins)."""
    node = admin.resume(session=session, node=admin.by_name(session, name), by=caller.name)
    session.commit()
    return NodeControlled.model_validate(node)
