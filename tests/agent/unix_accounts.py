"""Real Unix accounts for tests of jobs running as their owners (root only: CI runs as
root; elsewhere these tests are skipped with the reason)."""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="creating Unix accounts and switching to them needs root and useradd",
)


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    extra_gid: int  # a supplementary group the account is a member of


@contextmanager
def unix_account() -> Iterator[Account]:
    """A new account with a home, its own group and one supplementary group; removed
    afterwards."""
    suffix = secrets.token_hex(3)
    name, group = f"ctu{suffix}", f"ctg{suffix}"
    subprocess.run(["groupadd", group], check=True)
    try:
        subprocess.run(
            ["useradd", "--create-home", "--user-group", "--groups", group, name], check=True
        )
        try:
            entry = pwd.getpwnam(name)
            extra = grp.getgrnam(group).gr_gid
            yield Account(name, entry.pw_uid, entry.pw_gid, entry.pw_dir, extra)
        finally:
            subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)
    finally:
        subprocess.run(["groupdel", group], check=False, capture_output=True)


@contextmanager
def open_directory() -> Iterator[Path]:
    """A directory every account can pass through (pytest's tmp_path is root's alone,
    which would hide what the agent's own modes do)."""
    path = Path(tempfile.mkdtemp(prefix="colloc-accounts-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
