"""GPUs: the catalogued models, and the description of any GPU an agent reports.

`memory_mib` is `nvidia-smi --query-gpu=memory.total` on a typical driver (MiB) where
`memory_reported` is true, else the vendor's nominal capacity (GB x 1024 MiB, ~2%
above what NVML will say); the scheduler always prefers what an agent actually
reports for a device. Aliases let users write `A100-40GB` or `T4` wherever a model is
named (DESIGN.md, job spec). Memory bandwidth (GB/s) and compute capability are from
NVIDIA's product pages and the CUDA C++ Programming Guide's compute-capability table.

The catalog is a convenience, never a gate: `describe()` gives a `GpuDescription` for
any name, from what the agent reported (NVML memory, compute capability, driver,
measured CUDA context), from the catalog, or from stated generic defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as NVML names it."""

    name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    aliases: tuple[str, ...] = ()
    memory_bandwidth_gbps: int = 0
    memory_reported: bool = True  # False: nominal capacity, not yet seen through NVML


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
    # Turing consumer and workstation cards (compute capability 7.5)
    GpuModel("NVIDIA GeForce RTX 2080 Ti", 11264, (7, 5), ("RTX2080TI", "2080Ti"), 616),
    GpuModel("NVIDIA GeForce RTX 2080", 8192, (7, 5), ("RTX2080", "2080"), 448, False),
    GpuModel("NVIDIA TITAN RTX", 24576, (7, 5), ("TITAN-RTX",), 672, False),
    GpuModel("Quadro RTX 8000", 49152, (7, 5), ("RTX8000",), 672, False),
    # Ampere consumer and data-centre cards (8.6 except A30's 8.0)
    GpuModel("NVIDIA GeForce RTX 3060", 12288, (8, 6), ("RTX3060", "3060"), 360),
    GpuModel("NVIDIA GeForce RTX 3080", 10240, (8, 6), ("RTX3080", "3080"), 760),
    GpuModel("NVIDIA GeForce RTX 3080 Ti", 12288, (8, 6), ("RTX3080TI", "3080Ti"), 912),
    GpuModel("NVIDIA GeForce RTX 3090 Ti", 24564, (8, 6), ("RTX3090TI", "3090Ti"), 1008),
    GpuModel("NVIDIA A30", 24576, (8, 0), ("A30",), 933, False),
    GpuModel("NVIDIA A40", 46068, (8, 6), ("A40",), 696),
    # Ada Lovelace (8.9)
    GpuModel("NVIDIA GeForce RTX 4080", 16376, (8, 9), ("RTX4080", "4080"), 717),
    GpuModel("NVIDIA GeForce RTX 4070 Ti", 12282, (8, 9), ("RTX4070TI", "4070Ti"), 504),
    GpuModel("NVIDIA L40", 46068, (8, 9), ("L40",), 864),
    GpuModel("NVIDIA RTX 6000 Ada Generation", 49140, (8, 9), ("RTX6000-ADA",), 960),
    # Hopper variants (9.0): the SXM5 HBM2e part, the PCIe NVL pair card, H800, H200
    # NVL, and Grace Hopper (NVML reports the GPU's own HBM, not Grace's LPDDR5X)
    GpuModel("NVIDIA H100 80GB HBM2e", 81920, (9, 0), ("H100-HBM2E",), 2000, False),
    GpuModel("NVIDIA H100 NVL", 96256, (9, 0), ("H100-NVL",), 3900, False),
    GpuModel("NVIDIA H800", 81920, (9, 0), ("H800",), 3350, False),
    GpuModel("NVIDIA H200 NVL", 144384, (9, 0), ("H200-NVL",), 4800, False),
    GpuModel("NVIDIA GH200 480GB", 98304, (9, 0), ("GH200", "GH200-96GB"), 4000, False),
    GpuModel("NVIDIA GH200 144G HBM3e", 147456, (9, 0), ("GH200-144GB",), 4900, False),
    # Blackwell: data centre (10.0) and GeForce RTX 50 (12.0)
    GpuModel("NVIDIA B200", 184320, (10, 0), ("B200",), 8000, False),
    GpuModel("NVIDIA GB200", 190464, (10, 0), ("GB200",), 8000, False),
    GpuModel("NVIDIA GeForce RTX 5090", 32607, (12, 0), ("RTX5090", "5090"), 1792),
    GpuModel("NVIDIA GeForce RTX 5080", 16384, (12, 0), ("RTX5080", "5080"), 960, False),
)

_VENDOR_PREFIXES = ("nvidia ", "tesla ", "geforce ")


@lru_cache(maxsize=1024)  # a cluster has a few GPU names, each looked up per estimate
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
    A family name that is no model's alias (`V100`: the catalog has two) stands for the
    one model of that family in `known` (`Tesla V100-SXM2-16GB`), and for none where
    `known` holds several or none of it.
    """
    model = find_gpu_model(name)
    if model is not None:
        return model.name
    wanted = _key(name)
    for other in known:
        if _key(other) == wanted:
            return other
    family = list(dict.fromkeys(other for other in known if _key(other).startswith(f"{wanted}-")))
    return family[0] if len(family) == 1 else None


def same_gpu_model(a: str, b: str) -> bool:
    """Whether two names denote the same GPU model."""
    model_a, model_b = find_gpu_model(a), find_gpu_model(b)
    if model_a is not None or model_b is not None:
        return model_a is model_b
    return _key(a) == _key(b)


# What an unknown GPU is taken to be when nothing was reported about it. Compute
# capability 8.0 (Ampere) selects the pre-Hopper fixed costs of `context.py`; a newer
# GPU needs ~200 MiB more (Hopper's context and cuBLAS workspaces), which its
# environment's learned offset takes up. 24 GiB (a 3090/4090/A10-class card) only
# labels the description: no estimate term depends on it except cuBLASLt's workspace
# (4 MiB instead of 1 MiB on 8.x cards of 24 GiB or more).
GENERIC_COMPUTE_CAPABILITY = (8, 0)
GENERIC_MEMORY_MIB = 24576


@dataclass(frozen=True)
class GpuDescription:
    """What the estimator knows of one GPU model: reported, catalogued or assumed.

    `assumed` names the fields that are generic defaults (neither reported nor in
    the catalog), so a caller can say so. `context_mib` is the bare CUDA context an
    agent measured on it (None: not measured); `driver_version` and
    `cuda_driver_version` (e.g. 12040 for CUDA 12.4) name its software stack.
    """

    name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    known: GpuModel | None = None
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    context_mib: int | None = None
    assumed: tuple[str, ...] = ()

    @property
    def memory_bandwidth_gbps(self) -> int:
        return self.known.memory_bandwidth_gbps if self.known else 0

    def note(self) -> str | None:
        """One line saying which figures were assumed, or None."""
        if not self.assumed:
            return None
        said = {
            "memory_mib": f"{self.memory_mib} MiB",
            "compute_capability": "compute capability "
            + ".".join(map(str, self.compute_capability)),
        }
        return f"GPU {self.name!r} is not in the catalog; assuming " + " and ".join(
            said[f] for f in self.assumed
        )


def parse_compute_capability(text: str) -> tuple[int, int]:
    """`"9.0"` -> (9, 0); ValueError for anything else."""
    major, dot, minor = text.strip().partition(".")
    if not dot or not major.isdigit() or not minor.isdigit() or not 1 <= int(major) <= 99:
        raise ValueError(f"compute capability {text!r} is not MAJOR.MINOR (e.g. 9.0)")
    return int(major), int(minor)


def describe(
    name: str,
    memory_mib: int | None = None,
    compute_capability: tuple[int, int] | None = None,
    *,
    driver_version: str | None = None,
    cuda_driver_version: int | None = None,
    context_mib: int | None = None,
) -> GpuDescription:
    """The description of GPU `name`: reported figures first, then the catalog's,
    then the generic defaults (listed in `assumed`). Never fails for a name."""
    known = find_gpu_model(name)
    assumed = []
    if memory_mib is None:
        memory_mib = known.memory_mib if known else GENERIC_MEMORY_MIB
        assumed += [] if known else ["memory_mib"]
    if compute_capability is None:
        compute_capability = known.compute_capability if known else GENERIC_COMPUTE_CAPABILITY
        assumed += [] if known else ["compute_capability"]
    return GpuDescription(
        name=known.name if known else " ".join(name.split()),
        memory_mib=memory_mib,
        compute_capability=compute_capability,
        known=known,
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        context_mib=context_mib,
        assumed=tuple(assumed),
    )
