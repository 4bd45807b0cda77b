"""The simulated cluster: nodes of GPUs, with each GPU model's memory and speed.

Speed is relative to a V100 (the GPU the traces' run times are taken as). Gavel
measured P100 and K80 against V100 (`data/speeds.csv`: medians over its 26 job types,
0.81 and 0.25); for other models, which Gavel did not measure, speed is taken as the
ratio of memory bandwidth (`estimator/gpus.py`) to the V100's 900 GB/s, a rule that gives
Gavel's two measured ratios within 0.03 (P100 732/900 = 0.81, K80 240/900 = 0.27).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.gpus import find_gpu_model
from service.simulator.traces import NodeShape

# Alibaba 2023 GPU types as GPU models. G2 and G3 are undisclosed internal types; they
# are taken as A100-40GB and A100-80GB (8-GPU nodes, like DGX A100), an assumption.
TRACE_GPU_MODELS = {
    "G2": "NVIDIA A100-SXM4-40GB",
    "G3": "NVIDIA A100-SXM4-80GB",
    "T4": "Tesla T4",
    "P100": "Tesla P100-PCIE-16GB",
    "V100M16": "Tesla V100-SXM2-16GB",
    "V100M32": "Tesla V100-SXM2-32GB",
    "A10": "NVIDIA A10",
}

GAVEL_WORKERS = {"Tesla K80": "k80", "Tesla P100-PCIE-16GB": "p100"}

V100_BANDWIDTH_GBPS = 900


def gpu_speed(model: str, gavel: dict[str, float]) -> float:
    """Training speed of `model` relative to a V100 (1.0 for models not listed)."""
    worker = GAVEL_WORKERS.get(model)
    if worker in gavel:
        return gavel[worker]
    known = find_gpu_model(model)
    bandwidth = (known.memory_bandwidth_gbps if known else 0) or V100_BANDWIDTH_GBPS
    return bandwidth / V100_BANDWIDTH_GBPS


@dataclass(frozen=True)
class SimGpuSpec:
    model: str
    memory_mib: int


@dataclass(frozen=True)
class SimNode:
    name: str
    gpus: tuple[SimGpuSpec, ...]


def scaled_alibaba(shapes: list[NodeShape], gpus: int) -> list[SimNode]:
    """Nodes in the Alibaba 2023 cluster's proportions of (GPU type, GPUs per node),
    scaled to about `gpus` GPUs: each shape gets its share rounded down, then the shapes
    with the largest remainders one node more while GPUs are short."""
    total = sum(s.gpus * s.nodes for s in shapes)
    ideal = [s.nodes * gpus / total for s in shapes]
    counts = [int(x) for x in ideal]
    for i in sorted(range(len(shapes)), key=lambda i: (counts[i] - ideal[i], i)):
        have = sum(c * s.gpus for c, s in zip(counts, shapes, strict=True))
        if have + shapes[i].gpus <= gpus:
            counts[i] += 1
    nodes: list[SimNode] = []
    for shape, count in zip(shapes, counts, strict=True):
        model = TRACE_GPU_MODELS[shape.model]
        known = find_gpu_model(model)
        assert known is not None
        for _ in range(count):
            nodes.append(
                SimNode(
                    f"{shape.model.lower()}-{len(nodes) + 1}",
                    tuple(SimGpuSpec(known.name, known.memory_mib) for _ in range(shape.gpus)),
                )
            )
    return nodes
