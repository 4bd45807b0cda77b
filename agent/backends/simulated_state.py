"""Simulated GPUs whose memory is shared, with locking, by separate processes.

Each GPU is a JSON file in a state directory holding the memory every process has
allocated on it. Agents read it; `colloc simjob` processes allocate from it and hit
a CUDA OOM when an allocation would exceed the GPU's capacity. Entries of processes
that have died are dropped on every access, as the driver frees a dead process's
memory. Faults are injected into the same files (`set_lost`, `inject_xid`,
`add_ecc_errors`) so tests see them exactly as an agent would.

A module apart from the backend so that `colloc simjob`, started in every simulated
job, imports none of the agent's protocol models (pydantic) to use it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.protocol import GpuInfo

STATE_ENV = "COLLOC_SIM_STATE"


class SimulatedOutOfMemory(Exception):
    """An allocation that the simulated GPU cannot hold."""

    def __init__(self, requested_mib: int, total_mib: int, free_mib: int, own_mib: int) -> None:
        super().__init__(f"cannot allocate {requested_mib} MiB")
        self.requested_mib = requested_mib
        self.total_mib = total_mib
        self.free_mib = free_mib
        self.own_mib = own_mib


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SimulatedGpuStore:
    """The shared state directory of simulated GPUs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, uuid: str) -> Path:
        return self.directory / f"{uuid}.json"

    @contextmanager
    def _locked(self, uuid: str) -> Iterator[dict[str, Any]]:
        """The GPU's state under an exclusive lock; changes are written back atomically."""
        path = self._path(uuid)
        if not path.exists():
            raise KeyError(f"no simulated GPU {uuid} in {self.directory}")
        with open(path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            before = json.dumps(state, sort_keys=True)
            for key, empty in (("lost", False), ("xids", []), ("ecc_uncorrected", 0)):
                state.setdefault(key, empty)  # files written before faults were simulated
            state["processes"] = {
                pid: entry for pid, entry in state["processes"].items() if _alive(int(pid))
            }
            yield state
            if json.dumps(state, sort_keys=True) != before:
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(state), encoding="utf-8")
                os.replace(tmp, path)

    def create(self, gpu: GpuInfo) -> None:
        """Make the GPU's state file if it does not exist yet (keeps running processes)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(gpu.uuid)
        if path.exists():
            return
        state = {
            "uuid": gpu.uuid,
            "model": gpu.model,
            "memory_total_mib": gpu.memory_total_mib,
            "lost": False,
            "xids": [],
            "ecc_uncorrected": 0,
            "processes": {},
        }
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, path)

    def read(self, uuid: str) -> dict[str, Any]:
        with self._locked(uuid) as state:
            return state

    def model(self, uuid: str) -> str:
        return str(self.read(uuid)["model"])

    def set_usage(self, uuid: str, pid: int, used_mib: int, sm_pct: float = 0.0) -> None:
        """Set what process `pid` holds on the GPU; raises on exceeding its capacity."""
        with self._locked(uuid) as state:
            processes = state["processes"]
            own = processes.get(str(pid), {}).get("mib", 0)
            others = sum(entry["mib"] for key, entry in processes.items() if key != str(pid))
            total = state["memory_total_mib"]
            if others + used_mib > total:
                raise SimulatedOutOfMemory(used_mib - own, total, total - others - own, own)
            processes[str(pid)] = {"mib": used_mib, "sm_pct": sm_pct}

    def release(self, uuid: str, pid: int) -> None:
        with self._locked(uuid) as state:
            state["processes"].pop(str(pid), None)

    def observe(self, uuid: str) -> dict[str, Any]:
        """The GPU's state for its agent; XIDs pending since the last look are consumed."""
        with self._locked(uuid) as state:
            seen = {**state, "xids": list(state["xids"])}
            state["xids"] = []
            return seen

    def set_lost(self, uuid: str, lost: bool) -> None:
        """Make the GPU stop answering (fall off the bus), or come back."""
        with self._locked(uuid) as state:
            state["lost"] = lost

    def inject_xid(self, uuid: str, xid: int) -> None:
        """Raise a critical XID event, as the driver does on a GPU fault."""
        with self._locked(uuid) as state:
            state["xids"].append(xid)

    def add_ecc_errors(self, uuid: str, count: int) -> None:
        """Count `count` more uncorrected (volatile) ECC errors."""
        with self._locked(uuid) as state:
            state["ecc_uncorrected"] += count
