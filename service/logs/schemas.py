"""The API view of job output."""

from __future__ import annotations

from pydantic import BaseModel


class LogPage(BaseModel):
    """`text` is bytes `offset` to `next_offset` of the stream; the server holds bytes
    `first_offset` to `end_offset` (older output is dropped past its limit), and more
    may come while the attempt runs or its agent is still sending. `dropped_bytes` of
    the output up to `end_offset` are not held: the oldest, dropped past the per-attempt
    cap on the node or the server, and any gap skipped while the agent caught up."""

    job_id: int
    attempt: int
    stream: str
    attempt_state: str
    first_offset: int
    offset: int
    next_offset: int
    end_offset: int
    dropped_bytes: int
    text: str
