"""Shipping job logs to the server a slice at a time, inside heartbeats.

The server says, in each reply, up to which byte it holds each stream, and the agent
sends on from there: a lost reply or a restarted agent only re-sends bytes the server
skips. A job that writes faster than heartbeats carry skips ahead, since the server
keeps only the last `keep_bytes` of a stream anyway.
"""

from __future__ import annotations

import base64
import contextlib

from agent.job import STREAMS, JobProcess
from agent.protocol import LogChunk

CHUNK_BYTES = 128 * 1024  # per stream and attempt in one heartbeat
HEARTBEAT_BYTES = 2 * 1024 * 1024  # all logs in one heartbeat


def _size(job: JobProcess, stream: str) -> int:
    try:
        return job.log_path(stream).stat().st_size
    except OSError:
        return 0


def chunks(job: JobProcess, budget: int, keep_bytes: int) -> list[LogChunk]:
    """The next slices of the job's logs, at most `budget` bytes in all."""
    out = []
    for stream in STREAMS:
        size = _size(job, stream)
        offset = max(job.log_sent[stream], size - keep_bytes)
        length = min(size - offset, CHUNK_BYTES, budget)
        if length <= 0:
            continue
        with contextlib.suppress(OSError), open(job.log_path(stream), "rb") as log:
            log.seek(offset)
            data = log.read(length)
            out.append(LogChunk(stream=stream, offset=offset, data=base64.b64encode(data)))
            budget -= len(data)
    return out


def drained(job: JobProcess) -> bool:
    """Whether the server holds the logs up to their end."""
    return all(job.log_sent[stream] >= _size(job, stream) for stream in STREAMS)
