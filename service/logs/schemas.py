"""The API view of job output."""

from __future__ import annotations

from pydantic import BaseModel


class LogPage(BaseModel):
    """`text` is bytes `offset` to `next_offset` of the stream; the server holds bytes
    `first_offset` to `end_offset` (older output is dropped past its limit), and more
    may come while the attempt runs or its agent is still sending."""

    job_id: int
    attempt: int
    stream: str
    attempt_state: str
    first_offset: int
    offset: int
    next_offset: int
    end_offset: int
    text: str
