"""Keeping what a heartbeat carries within what the server accepts and can store.

One value the server refuses (a reason over its length limit, a NUL that PostgreSQL
text cannot hold, a NaN that JSON cannot carry) would make it refuse the whole
heartbeat, again on every retry: the node would go `lost` over one job. So text is
cleaned and truncated with a marker, and numbers are clamped, before they are sent.

The limits are those of the server's heartbeat schema (service/nodes/schemas.py);
the agent speaks to the server only over HTTP, so they are repeated here.
"""

from __future__ import annotations

import math

REASON_CHARS = 4096  # AttemptReport.reason
TEXT_CHARS = 1024  # Text: Notice.message, GpuState.health_reason
MAX_MIB = 16 * 1024 * 1024  # MiB
INT32 = 2**31  # AttemptReport.exit_code

TRUNCATED = " [... truncated]"


def text(value: str, limit: int) -> str:
    """`value` without characters the server cannot store, at most `limit` characters."""
    # PostgreSQL text holds neither NUL nor lone surrogates (which are not UTF-8)
    clean = value.encode("utf-8", "ignore").decode("utf-8").replace("\x00", "")
    if len(clean) <= limit:
        return clean
    return clean[: limit - len(TRUNCATED)] + TRUNCATED


def optional_text(value: str | None, limit: int) -> str | None:
    return None if value is None else text(value, limit)


def mib(value: int) -> int:
    return min(max(int(value), 0), MAX_MIB)


def mib_by_gpu(values: dict[str, int]) -> dict[str, int]:
    return {uuid: mib(used) for uuid, used in values.items()}


def exit_code(value: int | None) -> int | None:
    return None if value is None else min(max(value, -INT32), INT32 - 1)


def number(value: float | None, low: float, high: float) -> float | None:
    """Within [low, high]; None where it is not a finite number."""
    if value is None or not math.isfinite(value):
        return None
    return min(max(value, low), high)
