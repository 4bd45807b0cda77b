"""Keeping ended jobs' output files on the node for a while, within a size.

Once the server holds a job's exit and all of its output (or will take no more of it),
the agent moves the job's files into `logs_dir/ended` (a rename: the same directory
tree) and stamps them with that moment. `sweep` removes the files there older than the
age limit and then, oldest first, those past the size limit. Only files moved there are
ever removed: a running job's, or those of another agent sharing `logs_dir`, never are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

ENDED = "ended"  # the subdirectory of logs_dir that holds ended jobs' files
# The server's own defaults for logs (service/config.py: retention_log_days,
# retention_max_log_bytes): a node keeps ended jobs' output no longer, and no more in
# all, than the server keeps for the whole cluster.
DEFAULT_KEEP_S = 7 * 86400.0
DEFAULT_MAX_BYTES = 4 * 1024**3


def retire(paths: Iterable[Path], ended_dir: Path, now: float) -> None:
    """Move these files into `ended_dir`, aged from `now` (wall clock); a file that is
    missing (a job that failed before it wrote) or cannot be moved is left alone."""
    for path in paths:
        target = ended_dir / path.name
        try:
            os.replace(path, target)
            os.utime(target, (now, now))
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("%s stays where it is: %s", path, exc)


def sweep(ended_dir: Path, keep_s: float, max_bytes: int, now: float) -> int:
    """Remove the files in `ended_dir` moved there over `keep_s` before `now`, then the
    oldest while all of them hold more than `max_bytes` on disk (blocks, not sizes: the
    heads of long outputs were freed while they were shipped); returns how many went."""
    files = []
    with os.scandir(ended_dir) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                files.append((info.st_mtime, entry.name, info.st_blocks * 512))
    files.sort()
    held = sum(size for _at, _name, size in files)
    removed = 0
    for at, name, size in files:
        if at > now - keep_s and held <= max_bytes:
            break
        (ended_dir / name).unlink(missing_ok=True)
        held -= size
        removed += 1
    return removed
