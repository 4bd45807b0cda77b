"""`/v1/nodes`: the agents' side of the API."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import NodeId, SessionDep, SettingsDep
from service.nodes import service
from service.nodes.schemas import Heartbeat, HeartbeatReply, NodeRegister, NodeRegistered

router = APIRouter(prefix="/nodes", tags=["nodes"])


@router.post("/register", response_model=NodeRegistered)
def register_node(body: NodeRegister, session: SessionDep, settings: SettingsDep) -> NodeRegistered:
    """Register (or re-register) a node and its GPUs."""
    node = service.register(session=session, body=body)
    session.commit()
    return NodeRegistered(node_id=node.id, heartbeat_interval_s=settings.heartbeat_interval_s)


@router.post("/{node_id}/heartbeat", response_model=HeartbeatReply)
def node_heartbeat(
    node_id: NodeId, body: Heartbeat, session: SessionDep, settings: SettingsDep
) -> HeartbeatReply:
    """GPU state and attempt progress in; assignments and cancellations out."""
    node = service.get(session=session, node_id=node_id)
    reply = service.heartbeat(session=session, node=node, body=body, settings=settings)
    session.commit()
    return reply
