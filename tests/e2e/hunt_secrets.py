"""A job looking for secrets: `python3 hunt_secrets.py DIR...` prints every byte it can
read from each place a secret could be (run by tests/e2e/test_security.py as a job of
an ordinary account; run as root it finds them, which shows that it looks).

It reads every file under the DIRs (the deployment's: token files, agent state, run
directories with other jobs' specs, logs, other jobs' working directories) and under
the paths any process names on its command line (an agent's --token-file, --state-dir),
and for every process its environment, command line, working directory and open files.
Standard library only: it runs under the system's python3 as any account.
"""

from __future__ import annotations

import os
import stat
import sys

LIMIT = 1 << 20  # bytes read from one file
SMALL = 64 * 1024  # files beside a process (token files are tiny; binaries are not)


def read(path: str, out: list[bytes]) -> None:
    try:
        with open(path, "rb") as file:
            out.append(f"\n== {path}\n".encode() + file.read(LIMIT))
    except OSError:
        pass


def walk(top: str, out: list[bytes]) -> None:
    if os.path.isfile(top):
        read(top, out)
    for parent, _dirs, files in os.walk(top):
        for name in files:
            read(os.path.join(parent, name), out)


def beside(path: str, out: list[bytes]) -> None:
    """A small file, or the small files directly in a directory."""
    names = [path]
    if os.path.isdir(path):
        try:
            names = [os.path.join(path, name) for name in os.listdir(path)]
        except OSError:
            return
    for name in names:
        try:
            small = os.path.isfile(name) and os.path.getsize(name) <= SMALL
        except OSError:
            continue
        if small:
            read(name, out)


def processes(out: list[bytes]) -> list[str]:
    """Read what /proc lets this account read of every process; the paths they name."""
    named: list[str] = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for part in ("environ", "cmdline"):
            read(f"/proc/{pid}/{part}", out)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                named += [arg.decode(errors="replace") for arg in file.read().split(b"\0")]
        except OSError:
            pass
        beside(f"/proc/{pid}/cwd", out)
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in descriptors:
            try:
                regular = stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{fd}").st_mode)
            except OSError:
                continue
            if regular:  # not a pipe, socket or device, which could block
                read(f"/proc/{pid}/fd/{fd}", out)
    return [path for path in named if path.startswith("/") and os.path.exists(path)]


def main() -> None:
    out: list[bytes] = [f"== own environment\n{dict(os.environ)!r}".encode()]
    for top in sys.argv[1:]:
        walk(top, out)
    for path in processes(out):
        if not path.startswith(("/proc", "/sys", "/dev")):
            beside(path, out)
    sys.stdout.buffer.write(b"".join(out))


if __name__ == "__main__":
    main()
