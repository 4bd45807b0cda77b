"""Simulated GPUs for an agent: the device backend over the shared state files of
`agent/backends/simulated_state.py`, which `colloc simjob` processes allocate from."""

from __future__ import annotations

from pathlib import Path

from agent.backends.base import GpuSample, ProcessMemory
from agent.backends.simulated_state import STATE_ENV, SimulatedGpuStore
from agent.cluster import SimulatedNode
from agent.protocol import GpuInfo


class SimulatedBackend:
    """The GPUs of one node of a simulated cluster."""

    def __init__(self, node: SimulatedNode, state_dir: Path) -> None:
        self._devices = list(node.gpus)
        self.store = SimulatedGpuStore(state_dir)
        for device in self._devices:
            self.store.create(device)

    def devices(self) -> list[GpuInfo]:
        return list(self._devices)

    def sample(self) -> list[GpuSample]:
        samples = []
        for device in self._devices:
            state = self.store.observe(device.uuid)
            if state["lost"]:
                samples.append(GpuSample.of_lost(device.uuid))
                continue
            processes = tuple(
                ProcessMemory(int(pid), entry["mib"]) for pid, entry in state["processes"].items()
            )
            busy = sum(entry["sm_pct"] for entry in state["processes"].values())
            samples.append(
                GpuSample(
                    uuid=device.uuid,
                    memory_used_mib=sum(entry["mib"] for entry in state["processes"].values()),
                    utilization_pct=min(100.0, busy),
                    processes=processes,
                    ecc_uncorrected=int(state["ecc_uncorrected"]),
                    xid_errors=tuple(int(x) for x in state["xids"]),
                )
            )
        return samples

    def job_environment(self) -> dict[str, str]:
        return {STATE_ENV: str(self.store.directory)}
