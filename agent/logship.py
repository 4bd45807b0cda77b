"""Shipping job logs to the server a slice at a time, inside heartbeats.

The server says, in each reply, up to which byte it holds each stream, and the agent
sends on from there: a lost reply or a restarted agent only re-sends bytes the server
skips. A job that writes faster than heartbeats carry skips ahead, since the server
keeps only the last `keep_bytes` of a stream anyway.

The node keeps no more than the server: before each slice, the head of an output file
past its newest `keep_bytes` is freed by punching a hole in it (fallocate(2)). The job
goes on appending to its own descriptor and every byte keeps its offset, so shipping
is unchanged; the file's first data byte (SEEK_DATA) says how much was dropped.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import logging
import os
from pathlib import Path

from agent.job import STREAMS, JobProcess
from agent.protocol import LogChunk

log = logging.getLogger(__name__)

CHUNK_BYTES = 128 * 1024  # per stream and attempt in one heartbeat
HEARTBEAT_BYTES = 2 * 1024 * 1024  # all logs in one heartbeat

# fallocate(2) modes (linux/falloc.h): free a range's blocks, leaving the size as it is
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
_fallocate = getattr(ctypes.CDLL(None, use_errno=True), "fallocate", None)  # glibc's
if _fallocate is not None:
    _fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def cap(path: Path, keep_bytes: int) -> int:
    """Free the head of the file at `path` up to the block where its newest `keep_bytes`
    start; returns how many bytes from its start are dropped (0 where holes cannot be
    punched: that file system keeps the whole output)."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return 0
    try:
        stat = os.fstat(fd)
        end = (stat.st_size - keep_bytes) // stat.st_blksize * stat.st_blksize
        try:
            dropped = os.lseek(fd, 0, os.SEEK_DATA)
        except OSError:  # ENXIO: no data at all
            dropped = 0
        if _fallocate is None or end <= dropped:
            return dropped
        if _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, end) != 0:
            return dropped  # EOPNOTSUPP: the file system cannot
        log.info("%s: dropped the oldest %d bytes, keeping the newest %d", path, end, keep_bytes)
        return end
    finally:
        os.close(fd)


def _size(job: JobProcess, stream: str) -> int:
    try:
        return job.log_path(stream).stat().st_size
    except OSError:
        return 0


def chunks(job: JobProcess, budget: int, keep_bytes: int) -> list[LogChunk]:
    """The next slices of the job's logs, at most `budget` bytes in all."""
    out = []
    for stream in STREAMS:
        dropped = cap(job.log_path(stream), keep_bytes)
        size = _size(job, stream)
        offset = max(job.log_sent[stream], size - keep_bytes, dropped)
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
