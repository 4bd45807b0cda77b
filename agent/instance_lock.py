"""One process per directory: `colloc up` and `colloc agent` each hold an exclusive lock
on their directory for their whole life.

Two agents sharing a state directory would both adopt its jobs, report them twice and
stop each other's; two `colloc up` on one data directory would share its database and
agents' state. The lock is a `flock` on DIRECTORY/instance.lock: the kernel drops it
when the process ends, however it ends, so a stale lock never needs clearing by hand.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "instance.lock"


class DirectoryInUse(OSError):
    """Another process holds the directory's lock."""


class DirectoryLock:
    """The exclusive lock on `directory`, refused with `DirectoryInUse` while another
    process holds it; the file names its holder, for the refusal's message."""

    def __init__(self, directory: Path, holder: str, option: str) -> None:
        self.path = directory / LOCK_FILE
        # not truncated before the lock is ours: until then it names the other holder
        self._file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held for life)
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            other = self._file.read().strip() or "another process"
            self._file.close()
            raise DirectoryInUse(
                f"{directory} is in use by {other}: stop it first, "
                f"or give this {holder} another {option}"
            ) from None
        self._file.truncate(0)
        self._file.write(f"{holder} (pid {os.getpid()})\n")
        self._file.flush()

    def release(self) -> None:
        self._file.close()
