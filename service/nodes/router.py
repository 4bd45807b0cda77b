"""`/v1/nodes`: the agents' side of the API."""

from __future__ import annotations

from fastapi import APIRouter

from agent.protocol import HeartbeatReply, NodeRegistered
from service.auth.deps import AgentDep
from service.auth.tokens import Principal
from service.deps import NodeId, SessionDep, SettingsDep
from service.errors import ApiError
from service.nodes import service
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
    return NodeRegistered(node_id=node.id, heartbeat_interval_s=settings.heartbeat_interval_s)


@router.post("/{node_id}/heartbeat", response_model=HeartbeatReply)
def node_heartbeat(
    node_id: NodeId, body: HeartbeatIn, session: SessionDep, settings: SettingsDep, caller: AgentDep
) -> HeartbeatReply:
    """GPU state and attempt progress in; assignments and cancellations out."""
    node = service.get(session=session, node_id=node_id)
    _check_node(caller, node.name)
    reply = service.heartbeat(session=session, node=node, body=body, settings=settings)
    session.commit()
    return reply
