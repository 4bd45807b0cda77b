"""Which job a GPU process belongs to, from the Linux process tree.

Each job runs under its supervisor in a session of its own, whose id is the
supervisor's pid. A process is the job's when it is in that session, or descends from
a process that is (a child that called setsid() is still found through its parents).
Double-forked daemons stay in the session, so they are found too. Only a process that
leaves the session *and* is orphaned escapes; containing that needs cgroups.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

K = TypeVar("K")

PROC = Path("/proc")


def _parent_and_session(pid: int) -> tuple[int, int] | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[3])


def owner(pid: int, roots: Mapping[int, K]) -> K | None:
    """The key of the root whose session or subtree holds `pid`, or None."""
    seen = 0
    while pid > 1 and seen < 256:  # bounded: /proc can change under us
        if pid in roots:
            return roots[pid]
        info = _parent_and_session(pid)
        if info is None:
            return None
        parent, session = info
        if session in roots:
            return roots[session]
        pid, seen = parent, seen + 1
    return None


def members(root: int) -> set[int]:
    """Every live process of the job rooted at `root`: its session and their subtrees."""
    table: dict[int, tuple[int, int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            info = _parent_and_session(int(entry.name))
            if info is not None:
                table[int(entry.name)] = info
    children: dict[int, list[int]] = {}
    for pid, (parent, _session) in table.items():
        children.setdefault(parent, []).append(pid)
    found = {pid for pid, (_parent, session) in table.items() if session == root}
    if root in table:
        found.add(root)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
