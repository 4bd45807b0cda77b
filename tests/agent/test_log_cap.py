"""The node keeps only the newest part of a job's output: the head of the file past the
cap is freed while the job goes on appending, offsets stay, and shipping starts at the
first byte kept."""

from __future__ import annotations

import os
from pathlib import Path

from agent.job import JobProcess
from agent.logship import cap, chunks

KEEP = 64 * 1024


def _output(path: Path, size: int) -> tuple[int, bytes]:
    """A file the way a job writes it (an append descriptor), holding `size` bytes that
    tell their positions apart; returns the descriptor and the bytes."""
    data = bytes((i * 7 + i // 251) % 256 for i in range(size))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, data)
    return fd, data


def test_the_head_past_the_cap_is_freed_and_the_newest_bytes_stay(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    fd, data = _output(path, 1024 * 1024)
    try:
        dropped = cap(path, KEEP)
        stat = path.stat()
        assert len(data) - KEEP - stat.st_blksize < dropped <= len(data) - KEEP
        assert stat.st_size == len(data)  # offsets are unchanged
        assert stat.st_blocks * 512 <= KEEP + 2 * stat.st_blksize  # the disk space is freed
        with open(path, "rb") as out:
            out.seek(dropped)
            assert out.read() == data[dropped:]
        os.write(fd, b"more")  # the job appends as before
        assert path.stat().st_size == len(data) + 4
        assert cap(path, KEEP) == dropped  # the dropped part is read back from the file
    finally:
        os.close(fd)


def test_a_file_within_the_cap_is_left_whole(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    fd, data = _output(path, KEEP)
    os.close(fd)
    assert cap(path, KEEP) == 0
    assert path.read_bytes() == data


def test_shipping_starts_at_the_first_byte_the_node_kept(tmp_path: Path) -> None:
    job = JobProcess(
        job_id=1,
        attempt=1,
        gpu_uuids=[],
        run_dir=tmp_path,
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
    )
    fd, data = _output(job.stdout_path, 512 * 1024)
    os.close(fd)
    # a larger cap from the server later must not ship the freed head (read as zeros)
    dropped = cap(job.stdout_path, KEEP)
    [chunk] = chunks(job, budget=1024 * 1024, keep_bytes=4 * KEEP)
    assert chunk.offset == dropped > 0
    assert chunk.data == data[dropped : dropped + len(chunk.data)]
