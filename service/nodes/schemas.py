"""Bodies agents send, as the server takes them in: the agent's own messages
(`agent/protocol.py`, where every field and bound is defined) made storable."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator

from agent import protocol


def _storable(value: Any) -> Any:
    """`value` with every string and key as the database can keep it: without NUL
    characters (PostgreSQL's text holds none). A job writes what ends up in these (its
    command, its OOM line): refusing the report would refuse the node's every
    heartbeat after it."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value


class _Storable(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _without_nul(cls, data: Any) -> Any:
        return _storable(data)


class NodeRegisterIn(_Storable, protocol.NodeRegister):
    """A registration as the server takes it in."""


class HeartbeatIn(_Storable, protocol.Heartbeat):
    """A heartbeat as the server takes it in."""
