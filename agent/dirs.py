"""The agent's directories, closed to the jobs it runs, and each job's own working directory.

The state directory (run records, each job's spec and environment) and the logs
directory are the agent's alone (mode 0700): a job of one user must not read another
user's spec or output, and log files are written through descriptors the agent opens.
The work directory holds one directory per attempt, owned by the job's account; its
mode (0711) lets an account reach its own attempt's directory but not list the others.
No other account may be able to rename anything above these directories either: one
that could (a `/tmp/colloc-jobs` made by a user before the agent first ran) could swap
in its own tree later and have a root agent write logs or chown directories through
symbolic links of its choosing.
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


def _real_directory(path: Path) -> os.stat_result:
    """`path`'s own status, refused unless it is a directory (not a link to one)."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory (a symbolic link?)")
    return info


def _check_ancestors(path: Path) -> None:
    """Refuse a directory whose parents another account could change: each, on the path
    as written and as links resolve it, must belong to root or the agent's user and be
    writable by nobody else, unless it is sticky (as /tmp is: there only an entry's
    owner may rename it); a link on the way must belong to root or the agent's user."""
    written = path.absolute().parent
    resolved = written.resolve()
    for parent in dict.fromkeys([written, *written.parents, resolved, *resolved.parents]):
        info = parent.lstat()
        writable = bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))
        shared = writable and not stat.S_ISLNK(info.st_mode) and not info.st_mode & stat.S_ISVTX
        if info.st_uid not in (0, os.geteuid()) or shared:
            raise UnsafeDirectory(
                f"{path} lies in {parent} (uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):04o}), which other accounts can change: "
                "use a directory whose parents only root or the agent's user may write to"
            )


def own_dir(path: Path, mode: int) -> Path:
    """`path`, a directory of this process's user with `mode` (made if missing)."""
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    info = _real_directory(path)
    if info.st_uid != os.geteuid():
        raise UnsafeDirectory(f"{path} belongs to uid {info.st_uid}, not to the agent's user")
    _check_ancestors(path)
    path.chmod(mode)
    return path


def attempt_workdir(root: Path, name: str, account: JobAccount) -> Path:
    """A fresh directory `root/name` that only the job's account may use; never a link
    followed to a directory elsewhere (whose owner would change)."""
    path = root / name
    path.mkdir(mode=PRIVATE, exist_ok=True)
    _real_directory(path)
    if account.switch:
        os.chown(path, account.uid, account.gid, follow_symlinks=False)
    return path
