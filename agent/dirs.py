"""The agent's directories, closed to the jobs it runs, and each job's own working directory.

The state directory (run records, each job's spec and environment) and the logs
directory are the agent's alone (mode 0700): a job of one user must not read another
user's spec or output, and log files are written through descriptors the agent opens.
The work directory holds one directory per attempt, owned by the job's account; its
mode (0711) lets an account reach its own attempt's directory but not list the others.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agent.accounts import JobAccount

PRIVATE = 0o700
TRAVERSE_ONLY = 0o711


class UnsafeDirectory(Exception):
    """A directory the agent will not use: another account could change what is in it."""


def own_dir(path: Path, mode: int) -> Path:
    """`path`, a directory of this process's user with `mode` (made if missing)."""
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory (a symbolic link?)")
    if info.st_uid != os.geteuid():
        raise UnsafeDirectory(f"{path} belongs to uid {info.st_uid}, not to the agent's user")
    path.chmod(mode)
    return path


def attempt_workdir(root: Path, name: str, account: JobAccount) -> Path:
    """A fresh directory `root/name` that only the job's account may use."""
    path = root / name
    path.mkdir(mode=PRIVATE, exist_ok=True)
    if account.switch:
        os.chown(path, account.uid, account.gid)
    return path
