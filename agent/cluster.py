"""Simulated cluster files (`colloc up --cluster`, `colloc agent --simulate`).

```yaml
nodes:
  - name: node-a
    gpus: [{model: NVIDIA A100-SXM4-40GB, memory_mib: 40960, count: 1}]
```
`memory_mib` may be left out for GPU models the estimator's catalog knows. What a real
agent reads from NVML and measures may be given too: `compute_capability` ("9.0"; the
catalog's by default), `driver_version`, `cuda_driver_version` (12040 for CUDA 12.4)
and `context_mib` (the bare CUDA context; unmeasured by default). An entry is a
`GpuKind` of the agent's protocol (`memory_mib` is its `memory_total_mib`), held to
the bounds the server holds registrations to.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from agent.protocol import GpuInfo, GpuKind, NodeName
from estimator.files import read_yaml
from estimator.gpus import find_gpu_model, parse_compute_capability

PACKAGED_CLUSTER = Path(__file__).with_name("clusters") / "example.yaml"

_SIM_NAMESPACE = uuid.UUID("6f1c0c1e-3b5e-4c61-9a59-6c6f6c6c6f63")


class ClusterFileError(ValueError):
    """A cluster file that cannot be used, with what is wrong in it."""


@dataclass(frozen=True)
class SimulatedNode:
    name: str
    gpus: tuple[GpuInfo, ...]  # as its agent registers them


def simulated_gpu_uuid(node: str, index: int) -> str:
    """A stable NVML-style UUID for a simulated GPU (same node and index, same UUID)."""
    return f"GPU-{uuid.uuid5(_SIM_NAMESPACE, f'{node}/{index}')}"


REPORTED = ("driver_version", "cuda_driver_version", "context_mib")
_NODE_NAME: TypeAdapter[str] = TypeAdapter(NodeName)


def _kind(node_name: str, entry: dict[str, Any], model: str, memory: int) -> GpuKind:
    """The reported figures of a GPU entry, the catalog's compute capability by default."""
    known = find_gpu_model(model)
    capability = known.compute_capability if known else None
    if entry.get("compute_capability") is not None:
        try:
            capability = parse_compute_capability(str(entry["compute_capability"]))
        except ValueError as exc:
            raise ClusterFileError(f"node {node_name}: {exc}") from exc
    try:
        return GpuKind.model_validate(
            {
                "model": model,
                "memory_total_mib": memory,
                "compute_capability": ".".join(map(str, capability)) if capability else None,
                **{key: entry[key] for key in REPORTED if key in entry},
            },
            strict=True,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{e['loc'][0]!r}: {e['msg']}" for e in exc.errors())
        raise ClusterFileError(f"node {node_name}: GPU {model!r}: {problems}") from exc


def _gpu_groups(node_name: str, raw: Any) -> list[tuple[GpuKind, int]]:
    if not isinstance(raw, list) or not raw:
        raise ClusterFileError(f"node {node_name}: 'gpus' must be a non-empty list")
    groups = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise ClusterFileError(f"node {node_name}: each GPU entry needs a 'model' name")
        known = find_gpu_model(entry["model"])
        model = known.name if known else entry["model"]
        memory = entry.get("memory_mib", known.memory_mib if known else None)
        count = entry.get("count", 1)
        if not isinstance(memory, int) or memory <= 0:
            raise ClusterFileError(
                f"node {node_name}: GPU {model!r} needs a positive integer 'memory_mib'"
            )
        if not isinstance(count, int) or not 1 <= count <= 64:
            raise ClusterFileError(f"node {node_name}: 'count' must be an integer from 1 to 64")
        groups.append((_kind(node_name, entry, model, memory), count))
    return groups


def parse_cluster(data: Any) -> list[SimulatedNode]:
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        raise ClusterFileError("a cluster file needs a non-empty 'nodes' list")
    nodes: list[SimulatedNode] = []
    for raw in data["nodes"]:
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str) or not name:
            raise ClusterFileError("each node needs a 'name'")
        try:
            _NODE_NAME.validate_python(name)
        except ValidationError as exc:
            raise ClusterFileError(
                f"node name {name!r}: at most 128 letters, digits, '.', '_' or '-' "
                "(as the server registers nodes)"
            ) from exc
        if any(node.name == name for node in nodes):
            raise ClusterFileError(f"node {name} is listed twice")
        gpus: list[GpuInfo] = []
        for kind, count in _gpu_groups(name, raw.get("gpus")):
            for _ in range(count):
                index = len(gpus)
                uuid = simulated_gpu_uuid(name, index)
                gpus.append(GpuInfo(uuid=uuid, index=index, **kind.model_dump()))
        nodes.append(SimulatedNode(name, tuple(gpus)))
    return nodes


def load_cluster(path: Path) -> list[SimulatedNode]:
    """The nodes of a cluster file; `ClusterFileError` says what is wrong."""
    try:
        data = read_yaml(path)
    except ValueError as exc:
        raise ClusterFileError(f"cluster file: {exc}") from exc
    return parse_cluster(data)
