"""Known GPU models: NVML names, short aliases and memory as NVML reports it.

`memory_mib` is `nvidia-smi --query-gpu=memory.total` on a typical driver (MiB); the
scheduler always prefers what an agent actually reports for a device. Aliases let users
write `A100-40GB` or `T4` wherever a model is named (DESIGN.md, job spec). Memory
bandwidth (GB/s, vendors' spec sheets) sets a model's speed in the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as NVML names it."""

    name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    aliases: tuple[str, ...] = ()
    memory_bandwidth_gbps: int = 0


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("Tesla K80", 11441, (3, 7), ("K80",), 240),
    GpuModel("Tesla P100-PCIE-16GB", 16280, (6, 0), ("P100", "P100-16GB"), 732),
    GpuModel("Tesla V100-SXM2-16GB", 16160, (7, 0), ("V100-16GB", "V100M16"), 900),
    GpuModel("Tesla V100-SXM2-32GB", 32510, (7, 0), ("V100-32GB", "V100M32"), 900),
    GpuModel("Tesla T4", 15360, (7, 5), ("T4",), 320),
    GpuModel("NVIDIA GeForce RTX 3090", 24576, (8, 6), ("RTX3090", "RTX-3090", "3090"), 936),
    GpuModel("NVIDIA GeForce RTX 4090", 24564, (8, 9), ("RTX4090", "RTX-4090", "4090"), 1008),
    GpuModel("NVIDIA A10", 23028, (8, 6), ("A10",), 600),
    GpuModel("NVIDIA A10G", 23028, (8, 6), ("A10G",), 600),
    GpuModel("NVIDIA L4", 23034, (8, 9), ("L4",), 300),
    GpuModel("NVIDIA L40S", 46068, (8, 9), ("L40S",), 864),
    GpuModel("NVIDIA RTX A6000", 49140, (8, 6), ("A6000", "RTX-A6000"), 768),
    GpuModel("NVIDIA A100-SXM4-40GB", 40960, (8, 0), ("A100-40GB", "A100"), 1555),
    GpuModel("NVIDIA A100-PCIE-40GB", 40960, (8, 0), ("A100-PCIE-40GB",), 1555),
    GpuModel("NVIDIA A100-SXM4-80GB", 81920, (8, 0), ("A100-80GB",), 2039),
    GpuModel("NVIDIA A100 80GB PCIe", 81920, (8, 0), ("A100-80GB-PCIE",), 1935),
    GpuModel("NVIDIA H100 80GB HBM3", 81559, (9, 0), ("H100-80GB", "H100", "H100-SXM"), 3350),
    GpuModel("NVIDIA H100 PCIe", 81559, (9, 0), ("H100-PCIE",), 2000),
    GpuModel("NVIDIA H200", 143771, (9, 0), ("H200",), 4800),
)

_VENDOR_PREFIXES = ("nvidia ", "tesla ", "geforce ")


def _key(name: str) -> str:
    """Case- and vendor-prefix-insensitive form of a model name."""
    key = " ".join(name.strip().lower().split())
    stripped = True
    while stripped:
        stripped = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix) :]
                stripped = True
    return key.replace(" ", "-")


_BY_KEY: dict[str, GpuModel] = {}
for _model in GPU_MODELS:
    for _name in (_model.name, *_model.aliases):
        _BY_KEY[_key(_name)] = _model


def find_gpu_model(name: str) -> GpuModel | None:
    """The catalogued model called `name` (NVML name or alias), or None."""
    return _BY_KEY.get(_key(name))


def canonical_gpu_name(name: str, known: list[str] | tuple[str, ...] = ()) -> str | None:
    """The NVML name for `name`, looking in the catalog and then in `known` names.

    `known` holds models seen in the cluster that the catalog may not list yet (new
    hardware); they match the same way aliases do (case and vendor prefix ignored).
    """
    model = find_gpu_model(name)
    if model is not None:
        return model.name
    wanted = _key(name)
    for other in known:
        if _key(other) == wanted:
            return other
    return None


def same_gpu_model(a: str, b: str) -> bool:
    """Whether two names denote the same GPU model."""
    model_a, model_b = find_gpu_model(a), find_gpu_model(b)
    if model_a is not None or model_b is not None:
        return model_a is model_b
    return _key(a) == _key(b)
