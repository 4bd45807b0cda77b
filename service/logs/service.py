"""Storing the log chunks agents send, and reading them back a page at a time.

Offsets are byte positions in the job's own output file, so a chunk sent twice (a
lost heartbeat reply, a restarted agent) is recognised and skipped. Only the last
`keep_bytes` of each stream are kept: whole chunks are dropped from the front.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from agent.protocol import LogChunk as LogChunkIn
from service.jobs.models import Attempt
from service.logs.models import LogChunk
from service.logs.schemas import LogPage

STREAMS = ("stdout", "stderr")


def ends(session: Session, attempt_id: int) -> dict[str, int]:
    """Up to which byte each stream of the attempt is held (0 where nothing is)."""
    rows = session.execute(
        select(LogChunk.stream, func.max(LogChunk.offset + LogChunk.size))
        .where(LogChunk.attempt_id == attempt_id)
        .group_by(LogChunk.stream)
    )
    held = {stream: int(end) for stream, end in rows}
    return {stream: held.get(stream, 0) for stream in STREAMS}


def ingest(
    session: Session, attempt: Attempt, chunks: Iterable[LogChunkIn], keep_bytes: int
) -> dict[str, int]:
    """Append what is new in `chunks` (a chunk past the end leaves a gap: skipped
    output); returns up to which byte each stream is now held."""
    held = ends(session, attempt.id)
    for chunk in chunks:
        end = held[chunk.stream]
        data, offset = chunk.data, chunk.offset
        if offset + len(data) <= end:
            continue  # held already
        if offset < end:
            data, offset = data[end - offset :], end
        session.add(
            LogChunk(
                attempt_id=attempt.id,
                stream=chunk.stream,
                offset=offset,
                size=len(data),
                data=data,
            )
        )
        session.flush()
        held[chunk.stream] = offset + len(data)
        _trim(session, attempt.id, chunk.stream, keep_bytes)
    return held


def _trim(session: Session, attempt_id: int, stream: str, keep_bytes: int) -> None:
    rows = session.execute(
        select(LogChunk.id, LogChunk.size)
        .where(LogChunk.attempt_id == attempt_id, LogChunk.stream == stream)
        .order_by(LogChunk.offset.desc())
    )
    kept, drop = 0, []
    for chunk_id, size in rows:
        kept += size
        if kept > keep_bytes:
            drop.append(chunk_id)
    if drop:
        session.execute(delete(LogChunk).where(LogChunk.id.in_(drop)))


def _width(lead: int) -> int:
    """The length of the UTF-8 character that starts with byte `lead`."""
    return 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _page_end(data: bytes, limit: int) -> int:
    """Where a page of at most about `limit` bytes of `data` ends without splitting a
    UTF-8 character (a page holds at least one whole character)."""
    if len(data) <= limit:
        return len(data)
    start = limit
    while start > 0 and data[start] & 0xC0 == 0x80:  # inside a character: back to its lead
        start -= 1
    return start if start > 0 else min(len(data), _width(data[0]))


def read(
    session: Session, attempt: Attempt, stream: str, offset: int | None, limit: int
) -> LogPage:
    """Up to `limit` bytes of contiguous output from `offset` (the first kept byte if None)."""
    chunks = session.scalars(
        select(LogChunk)
        .where(LogChunk.attempt_id == attempt.id, LogChunk.stream == stream)
        .order_by(LogChunk.offset)
    ).all()
    first = chunks[0].offset if chunks else 0
    end = chunks[-1].offset + chunks[-1].size if chunks else 0
    start = max(offset if offset is not None else first, first)
    data = b""
    position = start
    for chunk in chunks:
        if chunk.offset + chunk.size <= position:
            continue
        if chunk.offset > position:
            if data:
                break  # a gap: the next page starts after it
            position = start = chunk.offset
        data += chunk.data[position - chunk.offset :]
        position = chunk.offset + chunk.size
        if len(data) > limit + 4:
            break
    data = data[: _page_end(data, limit)]
    return LogPage(
        job_id=attempt.job_id,
        attempt=attempt.number,
        stream=stream,
        attempt_state=attempt.state,
        first_offset=first,
        offset=start,
        next_offset=start + len(data),
        end_offset=end,
        text=data.decode("utf-8", errors="replace"),
    )
