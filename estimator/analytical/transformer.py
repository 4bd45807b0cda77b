"""Transformer parameters and saved activations.

Activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models", section 4: per layer and 16-bit activations,
`s*b*h*(34 + 5*a*s/h)` bytes without parallelism, of which `10*s*b*h` stay replicated
under tensor parallelism unless sequence parallelism splits them too; selective
recomputation drops the `5*a*s/h` attention-score term, full recomputation keeps only
each layer's input. Here the same terms are counted in elements (times the activation
width) and masks (1 byte), so fp32, grouped-query attention (K and V scaled by
kv_heads/heads), gated MLPs and flash attention (no s^2 scores; Dao et al. 2022) fit in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from estimator.spec import Parallelism, TransformerDims


def layer_params(dims: TransformerDims) -> int:
    """Weights and biases of one block: attention, MLP and two norms."""
    h, kv_width = dims.hidden, dims.hidden * dims.kv // dims.heads
    attention = h * (h + 2 * kv_width) + h * h + (h + 2 * kv_width) + h
    mlp = (3 if dims.gated_mlp else 2) * h * dims.ffn + dims.ffn + h
    return attention + mlp + 4 * h


def embedding_params(dims: TransformerDims) -> int:
    table = dims.vocab * dims.hidden + dims.learned_positions * dims.hidden
    head = 0 if dims.tied_embeddings else dims.vocab * dims.hidden
    return table + head + 2 * dims.hidden  # plus the final norm


def total_params(dims: TransformerDims) -> int:
    return dims.layers * layer_params(dims) + embedding_params(dims)


@dataclass(frozen=True)
class LayerActivations:
    """Saved bytes of one block for one micro-batch."""

    replicated: float  # kept whole on every tensor-parallel rank (no sequence parallel)
    sharded: float  # split over tensor-parallel ranks


def layer_activation_bytes(
    dims: TransformerDims,
    seq_len: int,
    batch: int,
    element_bytes: float,
    flash_attention: bool,
    checkpointing: str,
) -> LayerActivations:
    """One layer's saved activations (Korthikanti et al. 2022, eq. 1-2 generalised)."""
    s, b, h, a = seq_len, batch, dims.hidden, dims.heads
    sbh = s * b * h
    if checkpointing == "full":
        return LayerActivations(replicated=sbh * element_bytes, sharded=0.0)
    mask = 1.0 if dims.dropout else 0.0
    kv_share = dims.kv / dims.heads
    # replicated: inputs of both norms, of the QKV projection and of the MLP; 2 masks
    replicated = 4 * sbh * element_bytes + 2 * sbh * mask
    # sharded: Q, K, V, attention output; the MLP intermediates (2 per ffn unit, 4 gated)
    mlp_elements = (4 if dims.gated_mlp else 2) * s * b * dims.ffn
    sharded = (2 + 2 * kv_share) * sbh * element_bytes + mlp_elements * element_bytes
    if not flash_attention and checkpointing == "none":
        scores = a * s * s * b
        # softmax output and dropout output (16-bit each) plus the dropout mask
        sharded += scores * (element_bytes * (2 if dims.dropout else 1) + mask)
    return LayerActivations(replicated=replicated, sharded=sharded)


def in_flight_microbatches(parallel: Parallelism) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once.

    1F1B holds min(p, m) (Narayanan et al. 2021, "Efficient Large-Scale Language Model
    Training on GPU Clusters"), GPipe all m (Huang et al. 2019), and the interleaved
    schedule 1F1B's times (1 + (p-1)/(p*m)) (Korthikanti et al. 2022, section 4.2.3).
    """
    p = parallel.pp
    m = parallel.microbatches or p
    if p == 1:
        return 1.0
    if parallel.pp_schedule == "gpipe":
        return float(m)
    held = float(min(p, m))
    if parallel.pp_schedule == "interleaved":
        held *= 1 + (p - 1) / (p * m)
    return held


@dataclass(frozen=True)
class TransformerMemory:
    params_local: float  # parameters held by the busiest rank before ZeRO sharding
    matrices_local: int
    activation_bytes: float


def transformer_memory(
    dims: TransformerDims,
    seq_len: int,
    batch: int,
    element_bytes: float,
    flash_attention: bool,
    checkpointing: str,
    parallel: Parallelism,
) -> TransformerMemory:
    """Parameters and activations on the busiest GPU: the worse of the first pipeline
    stage (embedding, most micro-batches in flight) and the last (the logits)."""
    t, p = parallel.tp, parallel.pp
    s_local = math.ceil(seq_len / parallel.cp)
    layers_per_stage = math.ceil(dims.layers / p)
    layer = layer_activation_bytes(
        dims, s_local, batch, element_bytes, flash_attention, checkpointing
    )
    split = t if parallel.sequence_parallel else 1
    per_layer = layer.replicated / split + layer.sharded / t
    if checkpointing == "full":
        # the recomputed layer's activations exist during its backward
        full = layer_activation_bytes(dims, s_local, batch, element_bytes, flash_attention, "none")
        recompute = full.replicated / split + full.sharded / t
    else:
        recompute = 0.0
    sbh = s_local * batch * dims.hidden
    embedding = sbh * element_bytes / split + (sbh / split if dims.dropout else 0.0)
    # logits (activation width), their fp32 upcast for the loss and its softmax: vocab
    # split over tensor-parallel ranks (Megatron's vocab-parallel cross entropy)
    logits = s_local * batch * dims.vocab / t * (element_bytes + 8)
    # backward holds the gradients of the largest tensor's input and output at once
    largest = s_local * batch * dims.ffn
    if not flash_attention and checkpointing == "none":
        largest = max(largest, dims.heads * s_local * seq_len * batch)
    transient = 2 * largest / t * element_bytes
    first = (
        layers_per_stage * per_layer * in_flight_microbatches(parallel)
        + embedding
        + recompute
        + transient
    )
    last = layers_per_stage * per_layer + logits + recompute + transient
    activations = max(first, last) if p > 1 else first + logits

    block = layer_params(dims) / t
    embed_rows = dims.vocab * dims.hidden / t + dims.learned_positions * dims.hidden
    head = 0.0 if dims.tied_embeddings and p == 1 else dims.vocab * dims.hidden / t
    stage_params = layers_per_stage * block
    params_first = stage_params + embed_rows
    params_last = stage_params + head + 2 * dims.hidden
    params_local = (
        params_first + head + 2 * dims.hidden if p == 1 else max(params_first, params_last)
    )
    matrices = layers_per_stage * (7 if dims.gated_mlp else 6) + 2
    return TransformerMemory(params_local, matrices, activations)
