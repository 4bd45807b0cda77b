"""What a training process holds on a GPU whatever its model: the fixed cost.

Three parts, each from current software stacks (CUDA >= 11.7 with lazy module loading,
the default since PyTorch 1.13; CUDA 12.3+ makes it the driver default):

- **context**: the CUDA context as `nvidia-smi` counts it for a PyTorch process: the
  driver's bare context (which each agent measures per GPU at start-up, see
  `agent/context_probe.py`) plus the CUDA runtime's state and the kernel images a
  training step loads on first use.
- **workspaces**: PyTorch's cuBLAS and cuBLASLt workspaces, allocated once per handle
  and kept for the life of the process.
- **communication**: NCCL's buffers, for jobs that talk to other GPUs.

cuDNN's convolution workspaces are per call and sized by the model's layers, so they
belong to the model-dependent terms (activations, allocator), not here.

A cluster whose stack differs (eager loading, a driver that holds more) is corrected by
its learned per-environment offset (`estimator/offsets.py`), never by these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.gpus import GpuDescription, GpuModel, describe

# A PyTorch process's context after its first CUDA work, with lazy loading, by
# architecture (compute capability major >= 9: Hopper and later):
#   - 426 MiB before Hopper: RTX 6000 Ada, PyTorch 2.10 / CUDA 13.0, nvidia-smi after
#     torch.cuda.mem_get_info (unsloth-zoo PR 1053, 2026). Older lazy stacks measured
#     less: 274 MiB (287,047,680 B; PyTorch PR 86509, CUDA 11.7), ~300 MB (PyTorch
#     issue 107667), ~400 MB (issue 109888); the newest and largest is taken.
#   - 534 MiB from Hopper on: an H100 PyTorch rank's primary context (meta-pytorch/
#     torchcomms PR 777, 2026). Blackwell is taken to be like Hopper until measured.
PROCESS_CONTEXT_MIB = {"pre_hopper": 426, "hopper_on": 534}
# The driver's bare context within those (cuInit + cuDevicePrimaryCtxRetain, no
# kernels loaded): 256 MiB, InvokeAI issue 9413 (RTX 3090, driver 610, PyTorch 2.7.1,
# a process that created its context and loaded nothing). What a process holds above
# its bare context (runtime state, lazily loaded kernels) is taken to be the same on
# every GPU, so an agent's measured bare context replaces only this part.
BARE_CONTEXT_MIB = 256

# cuBLAS workspaces (PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp): the default
# CUBLAS_WORKSPACE_CONFIG is ":4096:2:16:8" = 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB,
# ":4096:8" = 32 MiB on compute capability 9.x/10.x (the cuBLAS guide's recommendation
# for Hopper, cublasSetWorkspace). cuBLASLt (CUBLASLT_WORKSPACE_SIZE, PyTorch PR 120925):
# 1 MiB, 4 MiB on 8.x cards of >= 24 GB, 32 MiB from 9.0 on.
CUBLAS_WORKSPACE_KIB = {"pre_hopper": 4096 * 2 + 16 * 8, "hopper_on": 4096 * 8}
CUBLASLT_WORKSPACE_KIB = {"small": 1024, "ampere_24gb": 4096, "hopper_on": 32768}
# One cuBLAS handle per thread and device, each with its own workspace: the forward
# runs on the Python thread, backward on autograd's device thread.
BLAS_HANDLES = 2

# NCCL communicators' buffers when a job talks to other GPUs (NCCL_BUFFSIZE 4 MiB per
# channel and peer; a few hundred MiB in practice for data/tensor/pipeline groups).
NCCL_MIB = 400
# The name a GPU nothing is known of is described under (generic defaults).
UNKNOWN_GPU = "unknown GPU"


@dataclass(frozen=True)
class FixedCost:
    """A process's fixed cost on one GPU, in MiB, by part."""

    context: float
    workspaces: float
    communication: float

    @property
    def total(self) -> float:
        return self.context + self.workspaces + self.communication

    def as_dict(self) -> dict[str, float]:
        return {
            "context": self.context,
            "workspaces": self.workspaces,
            "communication": self.communication,
        }


def _hopper_on(gpu: GpuDescription) -> bool:
    return gpu.compute_capability[0] >= 9


def context_mib(gpu: GpuDescription) -> float:
    """The context of a PyTorch training process: the measured bare context plus what
    a process adds to it where the agent measured one, else the default."""
    process = PROCESS_CONTEXT_MIB["hopper_on" if _hopper_on(gpu) else "pre_hopper"]
    if gpu.context_mib is None:
        return float(process)
    return float(gpu.context_mib + process - BARE_CONTEXT_MIB)


def workspaces_mib(gpu: GpuDescription) -> float:
    """PyTorch's cuBLAS and cuBLASLt workspaces on this GPU."""
    if _hopper_on(gpu):
        blas, lt = CUBLAS_WORKSPACE_KIB["hopper_on"], CUBLASLT_WORKSPACE_KIB["hopper_on"]
    else:
        # PyTorch tests totalGlobalMem >= 24 GiB; NVML's total stands in for it
        large_ampere = gpu.compute_capability[0] == 8 and gpu.memory_mib >= 24 * 1024
        blas = CUBLAS_WORKSPACE_KIB["pre_hopper"]
        lt = CUBLASLT_WORKSPACE_KIB["ampere_24gb" if large_ampere else "small"]
    return BLAS_HANDLES * (blas + lt) / 1024


def fixed_cost(gpu: GpuDescription | GpuModel | None, communicates: bool) -> FixedCost:
    """The fixed cost of one training process on `gpu` (a catalogued model is taken
    as catalogued; None as a GPU nothing is known of)."""
    if not isinstance(gpu, GpuDescription):
        gpu = describe(gpu.name if gpu else UNKNOWN_GPU)
    return FixedCost(
        context=context_mib(gpu),
        workspaces=workspaces_mib(gpu),
        communication=float(NCCL_MIB if communicates else 0),
    )
