"""Storing the log chunks agents send, and reading them back a page at a time.

Offsets are byte positions in the job's own output file, so a chunk sent twice (a
lost heartbeat reply, a restarted agent) is recognised and skipped. Only the last
`keep_bytes` of each stream are kept: whole chunks are dropped from the front.
"""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from agent.protocol import LogChunk as LogChunkIn
from service.jobs.models import Attempt
from service.logs.models import LogChunk
from service.logs.schemas import LogPage

STREAMS = ("stdout", "stderr")


def ingest(
    session: Session, chunks_of: dict[int, list[LogChunkIn]], keep_bytes: int
) -> dict[int, dict[str, int]]:
    """Append what is new in each attempt's chunks (`chunks_of`, by attempt id; a
    chunk past the end leaves a gap: skipped output); returns, per attempt, up to which
    byte each stream is now held. One statement each to read the ends, insert and trim,
    however many attempts."""
    if not chunks_of:
        return {}
    rows = session.execute(
        select(LogChunk.attempt_id, LogChunk.stream, func.max(LogChunk.offset + LogChunk.size))
        .where(LogChunk.attempt_id.in_(chunks_of))
        .group_by(LogChunk.attempt_id, LogChunk.stream)
    )
    held = {attempt_id: dict.fromkeys(STREAMS, 0) for attempt_id in chunks_of}
    for attempt_id, stream, end in rows:
        held[attempt_id][stream] = int(end)
    new: list[dict[str, object]] = []
    for attempt_id, chunks in chunks_of.items():
        for chunk in chunks:
            end = held[attempt_id][chunk.stream]
            data, offset = chunk.data, chunk.offset
            if offset + len(data) <= end:
                continue  # held already
            if offset < end:
                data, offset = data[end - offset :], end
            new.append(
                {"attempt_id": attempt_id, "stream": chunk.stream, "offset": offset,
                 "size": len(data), "data": data}
            )  # fmt: skip
            held[attempt_id][chunk.stream] = offset + len(data)
    if new:
        session.execute(insert(LogChunk), new)
        _trim(session, {(row["attempt_id"], row["stream"]) for row in new}, keep_bytes)
    return held


def _trim(session: Session, streams: set[tuple[object, object]], keep_bytes: int) -> None:
    """Drop whole chunks from the front of each of `streams` ((attempt id, stream))
    until it holds at most `keep_bytes`."""
    rows = session.execute(
        select(LogChunk.id, LogChunk.attempt_id, LogChunk.stream, LogChunk.size)
        .where(LogChunk.attempt_id.in_({attempt_id for attempt_id, _s in streams}))
        .order_by(LogChunk.offset.desc())
    )
    kept: dict[tuple[object, object], int] = {}
    drop = []
    for chunk_id, attempt_id, stream, size in rows:
        key = (attempt_id, stream)
        if key not in streams:
            continue
        kept[key] = kept.get(key, 0) + size
        if kept[key] > keep_bytes:
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
    held = sum(chunk.size for chunk in chunks)
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
        dropped_bytes=end - held,
        text=data.decode("utf-8", errors="replace"),
    )
