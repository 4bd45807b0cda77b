"""Keeping what a heartbeat carries within what the server accepts and can store.

One value the server refuses (a NUL that PostgreSQL text cannot hold, a NaN that JSON
cannot carry, a figure past the protocol's bounds) would make it refuse the whole
heartbeat, again on every retry: the node would go `lost` over one job. So text is
cleaned and numbers are clamped to the bounds of `agent.protocol` before messages are
built from them (over-long text the messages cut themselves).
"""

from __future__ import annotations

import math

from agent.protocol import INT32, MAX_MIB


def text(value: str) -> str:
    """`value` without characters the server cannot store."""
    # PostgreSQL text holds neither NUL nor lone surrogates (which are not UTF-8)
    return value.encode("utf-8", "ignore").decode("utf-8").replace("\x00", "")


def optional_text(value: str | None) -> str | None:
    return None if value is None else text(value)


def mib(value: int) -> int:
    return min(max(int(value), 0), MAX_MIB)


def optional_mib(value: int | None) -> int | None:
    """A figure that may be unknown (None), clamped where it is known."""
    return None if value is None else mib(value)


def mib_by_gpu(values: dict[str, int]) -> dict[str, int]:
    return {uuid: mib(used) for uuid, used in values.items()}


def exit_code(value: int | None) -> int | None:
    return None if value is None else min(max(value, -INT32), INT32 - 1)


def number(value: float | None, low: float, high: float) -> float | None:
    """Within [low, high]; None where it is not a finite number."""
    if value is None or not math.isfinite(value):
        return None
    return min(max(value, low), high)
