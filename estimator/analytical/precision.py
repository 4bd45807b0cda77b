"""Bytes per parameter and per activation element, by precision and optimizer.

Model states follow Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", section 3.1: mixed-precision Adam keeps 2 bytes of
fp16 weights, 2 of fp16 gradients and K = 12 bytes of fp32 master weights, momentum
and variance per parameter. bf16 training with master weights accumulates gradients in
fp32 instead (4 bytes): Megatron-LM's main grads (`accumulate_allreduce_grads_in_fp32`
is on for bf16; Megatron Core docs, "Distributed Optimizer": 18 bytes per parameter,
6 + 12/d distributed), torchtitan's FSDP2 (fp32 parameters, `reduce_dtype` fp32) and
DeepSpeed's bf16 optimizer. torch.autocast (`amp_*`) keeps fp32 parameters and
gradients and casts weights to 16 bits inside the forward pass (the cast copies are
cached until autocast exits; PyTorch docs, "Automatic Mixed Precision").
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.spec import Optimizer, Precision


@dataclass(frozen=True)
class StateBytes:
    weights: float  # per parameter, as stored for compute
    gradients: float
    master: float  # fp32 master copy held by the optimizer, if any
    autocast_cache: float  # 16-bit weight copies made during an autocast forward
    activation: float  # per saved activation element


def autocast(precision: Precision) -> bool:
    """Whether the forward pass runs under torch.autocast (fp32 model, 16-bit matmuls)."""
    return precision in ("amp_fp16", "amp_bf16")


def state_bytes(precision: Precision, master_weights: bool) -> StateBytes:
    if precision == "fp32":
        return StateBytes(4, 4, 0, 0, 4)
    if autocast(precision):
        return StateBytes(4, 4, 0, 2, 2)
    if not master_weights:
        return StateBytes(2, 2, 0, 0, 2)  # pure 16-bit training
    if precision == "fp16":
        return StateBytes(2, 2, 4, 0, 2)  # ZeRO's mixed-precision layout
    # bf16, and fp8 as torchao's Float8Linear trains it: bf16 weights and activations,
    # each matmul casting its input and weight to float8 on the fly and saving the bf16
    # input for backward (torchao float8_linear.py, `matmul_with_hp_or_float8_args`;
    # the casts are transient, `fp8_cast_bytes`)
    return StateBytes(2, 4, 4, 0, 2)


def fp8_cast_bytes(precision: Precision, block_params: float, matmul_input: float) -> float:
    """Float8 copies alive while one block computes: its weights and the largest matmul
    input, one byte each (torchao Float8Linear casts per matmul and keeps no copy)."""
    return block_params + matmul_input if precision == "fp8" else 0.0


def optimizer_state_bytes(
    optimizer: Optimizer, precision: Precision, master_weights: bool
) -> float:
    """Optimizer moments per parameter (fp32, or 16-bit in pure half-precision training).

    Adam/AdamW: two moments (Kingma & Ba 2015); SGD with momentum, Lion (Chen et al.
    2023), Adagrad and RMSprop: one; plain SGD: none. Adafactor (Shazeer & Stern 2018)
    factors the second moment into row and column sums: `factored_fraction` below.
    """
    moments = {
        "sgd": 0.0,
        "sgd_momentum": 1.0,
        "adam": 2.0,
        "adamw": 2.0,
        "lion": 1.0,
        "adagrad": 1.0,
        "rmsprop": 1.0,
        "adafactor": 0.0,
    }[optimizer]
    half_states = precision in ("fp16", "bf16", "fp8") and not master_weights
    return moments * (2.0 if half_states else 4.0)


def adafactor_state_elements(params: int, matrices: int) -> float:
    """Adafactor's factored second moment: rows + columns per weight matrix.

    With only a parameter count and a matrix count, each matrix is taken as square
    (rows + cols = 2 * sqrt(size)), which bounds the true figure from above for the
    usual wide-and-short shapes' sum of sides.
    """
    if matrices <= 0:
        return 0.0
    return float(2 * matrices * (params / matrices) ** 0.5)


def optimizer_step_temp_bytes(optimizer: Optimizer) -> float:
    """Transient bytes per parameter while `optimizer.step()` runs.

    PyTorch's default multi-tensor ("foreach") Adam, AdamW, Adagrad and RMSprop build
    intermediate tensors as large as the parameters they update (torch/optim/adam.py,
    `_multi_tensor_adam`: the denominators); SGD updates in place.
    """
    return 4.0 if optimizer in ("adam", "adamw", "adagrad", "rmsprop", "lion") else 0.0
