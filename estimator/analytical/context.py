"""Memory a training process holds before its first tensor: CUDA context and libraries.

`nvidia-smi` counts, per process, the CUDA context (driver state and the loaded kernel
images of PyTorch, cuBLAS and cuDNN) plus library workspaces. The figures below are
the floors seen in measured runs where the data has them: about 1.4 GiB on the A100
(smallest GPUMemNet networks, `../shared/data/gpumemnet`) and about 2.0 GiB on the
RTX 3090 (Lucid's smallest jobs). Other architectures take the larger of these, so an
unmeasured GPU errs on the safe side; the learned part corrects what it has seen.
"""

from __future__ import annotations

from estimator.gpus import GpuModel

# compute capability -> MiB
CONTEXT_MIB = {(8, 0): 1400, (8, 6): 2000}
DEFAULT_CONTEXT_MIB = 2000

# NCCL communicators' buffers when a job talks to other GPUs (NCCL_BUFFSIZE 4 MiB per
# channel and peer; a few hundred MiB in practice for data/tensor/pipeline groups).
NCCL_MIB = 400


def context_mib(gpu: GpuModel | None, communicates: bool) -> int:
    base = (
        DEFAULT_CONTEXT_MIB
        if gpu is None
        else CONTEXT_MIB.get(gpu.compute_capability, DEFAULT_CONTEXT_MIB)
    )
    return base + (NCCL_MIB if communicates else 0)
