"""The supervisor between the agent and a job: `python -m agent.shim RUN_DIR`.

It starts the job's command (from RUN_DIR/spec.json) in its own session, waits for
it, and writes the exit status to RUN_DIR/exit.json, so the status survives the agent
(which may be restarted, or killed, while jobs run). For as long as it lives it holds
the lock on RUN_DIR/lock that the agent took for it before starting it: a lock nobody
holds means no supervisor is alive, which cannot be fooled by a reused pid. SIGTERM
sent to the job's process group reaches the job; the supervisor outlives it to record
how it ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write a file whole or not at all (rename over the old one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(data, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def _keep_running(_signum: int, _frame: FrameType | None) -> None:
    """A handler, not SIG_IGN: the job's command gets the default dispositions back."""


def _start(spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    """The job's command as its account, entering its working directory as that account
    (so a directory the account may not enter is refused, not entered as root)."""
    account, workdir = spec["account"], spec["workdir"]
    identity: dict[str, Any] = {}
    if account["switch"]:  # uid, gid and supplementary groups, as initgroups(3) sets them
        identity = {
            "user": account["uid"],
            "group": account["gid"],
            "extra_groups": account["groups"],
        }
    # no check of the directory here, as root: it would tell a job's owner which paths
    # exist in directories the account may not read
    try:
        return subprocess.Popen(
            spec["command"],
            env=spec["env"],  # the whole environment: nothing of the agent's
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: os.chdir(workdir),  # after the switch; this process has no threads
            **identity,
        )
    except ValueError as exc:  # a NUL where the kernel takes C strings
        raise OSError(f"its command, environment or working directory holds {exc}") from exc
    except subprocess.SubprocessError as exc:  # raised when the preexec_fn failed
        raise OSError(
            f"account {account['name']} cannot enter {workdir!r} "
            "(no such directory, or not one the account may enter)"
        ) from exc


def supervise(run_dir: Path) -> int:
    (run_dir / "pid").write_text(str(os.getpid()), encoding="utf-8")
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _keep_running)
    spec = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
    error = None
    try:
        child = _start(spec)
    except OSError as exc:
        error = f"cannot start {spec['command'][0]!r}: {exc.strerror or exc}"
        print(error, file=sys.stderr, flush=True)
        exit_code = 127
    else:
        exit_code = child.wait()
    finished_at = datetime.now(UTC).isoformat()
    write_json(
        run_dir / "exit.json", {"exit_code": exit_code, "finished_at": finished_at, "error": error}
    )
    return 0


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
