"""Transformer parameters and saved activations on the busiest GPU of a parallel job.

Without checkpointing, activations follow Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4: per layer and 16-bit activations,
`s*b*h*(34 + 5*a*s/h)` bytes, of which `10*s*b*h` stay replicated under tensor
parallelism unless sequence parallelism splits them too (what a matmul gathers over
the tensor-parallel ranks is whole again while its backward runs). The same terms are
counted in elements (times the activation width) and masks (1 byte), so fp32,
grouped-query attention (K and V scaled by kv_heads/heads), gated MLPs, mixtures of
experts and flash attention (no s^2 scores; Dao et al. 2022) fit in. Under
torch.autocast the model's parameters stay fp32, so the residual stream is fp32 (the
embedding's output, and each sum of it with a 16-bit sublayer output, promotes by
type), and so are the outputs of the ops on autocast's fp32 list (`layer_norm`,
`softmax`; PyTorch docs, "Automatic Mixed Precision", CUDA op reference): the norms keep
fp32 inputs and the attention probabilities are kept twice, fp32 for the softmax's
backward and the 16-bit copy the product with V casts and keeps.

Selective checkpointing is op-level, as torchtitan applies it
(torchtitan/distributed/activation_checkpoint.py, `_apply_op_sac`): inside each
checkpointed block only the outputs of ops in its save list are kept (`aten.mm` except
every second one counted from the block's start, the fused attention kernels,
`all_to_all_single`); everything else is recomputed in backward. Korthikanti's
attention-only form (drop the s^2 scores) is what this reduces to without flash
attention's fused kernel, and saves nothing more once flash attention is on. Megatron-LM's
`--recompute-granularity selective` with `--recompute-modules` recomputes whole modules
the same way. Full checkpointing keeps only each block's input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from estimator.spec import Parallelism, TransformerDims


def _mlp_matrices(dims: TransformerDims) -> int:
    return 3 if dims.gated_mlp else 2


def expert_layer_params(dims: TransformerDims) -> int:
    """Every routed expert's weights in one block (0 for a dense model)."""
    if not dims.moe:
        return 0
    return dims.experts * _mlp_matrices(dims) * dims.hidden * dims.expert_ffn


def layer_params(dims: TransformerDims) -> int:
    """Weights and biases of one block: attention, MLP (or router, experts and shared
    expert) and two norms."""
    h, q, kv_width = dims.hidden, dims.query_width, dims.kv_width
    attention = h * (q + 2 * kv_width) + q * h + (q + 2 * kv_width) + h
    if dims.moe:
        shared = _mlp_matrices(dims) * h * dims.shared_expert_ffn
        mlp = h * dims.experts + shared + expert_layer_params(dims)
    else:
        mlp = _mlp_matrices(dims) * h * dims.ffn + dims.ffn + h
    return attention + mlp + 4 * h


def embedding_params(dims: TransformerDims) -> int:
    table = dims.vocab * dims.hidden + dims.learned_positions * dims.hidden
    head = 0 if dims.tied_embeddings else dims.vocab * dims.hidden
    return table + head + 2 * dims.hidden  # plus the final norm


def total_params(dims: TransformerDims) -> int:
    return dims.layers * layer_params(dims) + embedding_params(dims)


def _stream_bytes(element_bytes: float, autocast: bool) -> float:
    """Bytes per element of the residual stream: fp32 under autocast (see above)."""
    return 4.0 if autocast else element_bytes


@dataclass(frozen=True)
class LayerActivations:
    """Saved bytes of one block for one micro-batch."""

    replicated: float  # kept whole on every tensor-parallel rank (no sequence parallel)
    sharded: float  # split over tensor-parallel ranks


def _matmul_outputs(dims: TransformerDims) -> list[float]:
    """Widths per token of a block's `aten.mm` outputs, in forward order: Q, K, V and
    the output projection, then the MLP's (w1, w3, w2 when gated), or for a mixture of
    experts the router and the shared expert's (the routed experts run as grouped
    matmuls, `aten._grouped_mm`, which torchtitan's save list leaves out)."""
    h = dims.hidden
    attention = [dims.query_width, dims.kv_width, dims.kv_width, h]
    if dims.moe:
        shared = dims.shared_expert_ffn
        mlp = [float(dims.experts)]
        if shared:
            mlp += [shared, shared, h] if dims.gated_mlp else [shared, h]
    else:
        mlp = [dims.ffn, dims.ffn, h] if dims.gated_mlp else [dims.ffn, h]
    return [*attention, *mlp]


def _kept_by_op_sac(
    dims: TransformerDims,
    tokens: int,
    element_bytes: float,
    stream_bytes: float,
    flash: bool,
    expert_parallel: bool,
) -> LayerActivations:
    """What torchtitan's op-level policy keeps of one block: its input, every other
    matmul output (the first, third, ...), the fused attention output and, under expert
    parallelism, the two all-to-all outputs (routed tokens out and back)."""
    saved = sum(_matmul_outputs(dims)[0::2])
    if flash:
        saved += dims.query_width
    if dims.moe and expert_parallel:
        saved += 2 * dims.experts_per_token * dims.hidden
    return LayerActivations(
        replicated=tokens * dims.hidden * stream_bytes, sharded=tokens * saved * element_bytes
    )


def layer_activation_bytes(
    dims: TransformerDims,
    seq_len: int,
    batch: int,
    element_bytes: float,
    flash_attention: bool,
    checkpointing: str,
    expert_parallel: bool = False,
    keys: int | None = None,
    autocast: bool = False,
) -> LayerActivations:
    """One layer's saved activations (Korthikanti et al. 2022, eq. 1-2 generalised) for
    `seq_len` query tokens that attend to `keys` (default: as many; under context
    parallelism a rank's queries attend to the whole sequence), 16-bit matmuls under
    `autocast` beside an fp32 residual stream."""
    s, b, h, a = seq_len, batch, dims.hidden, dims.heads
    tokens = s * b
    stream = _stream_bytes(element_bytes, autocast)
    if checkpointing == "full":
        return LayerActivations(replicated=tokens * h * stream, sharded=0.0)
    if checkpointing == "selective":
        return _kept_by_op_sac(
            dims, tokens, element_bytes, stream, flash_attention, expert_parallel
        )
    mask = 1.0 if dims.dropout else 0.0
    # replicated: inputs of both norms (the residual stream), of the QKV projection and
    # of the MLP; 2 masks
    replicated = 2 * tokens * h * (stream + element_bytes) + 2 * tokens * h * mask
    # sharded: Q, K, V, attention output; the MLP intermediates (2 per ffn unit, 4 gated)
    per_unit = 4 if dims.gated_mlp else 2
    if dims.moe:
        # router probabilities (fp32 softmax); per routed token the expert's input copy,
        # its intermediates and its output (kept to weight the combine); shared expert
        replicated += tokens * dims.experts * 4
        routed = dims.experts_per_token * (2 * h + per_unit * dims.expert_ffn)
        mlp_elements = tokens * (routed + per_unit * dims.shared_expert_ffn)
    else:
        mlp_elements = tokens * per_unit * dims.ffn
    # Q and the attention's output, K and V
    attention = 2 * (dims.query_width + dims.kv_width) * tokens
    sharded = (attention + mlp_elements) * element_bytes
    if not flash_attention:
        scores = a * s * (keys or s) * b
        sharded += scores * eager_score_bytes(element_bytes, autocast, dims.dropout)
    return LayerActivations(replicated=replicated, sharded=sharded)


def eager_score_bytes(element_bytes: float, autocast: bool, dropout: bool) -> float:
    """Bytes an eager (math-kernel) attention keeps for backward per score: the softmax
    output, and with dropout the dropout output and its 1-byte mask; under autocast the
    softmax runs in fp32 (autocast's fp32 list) and the product with V keeps its 16-bit
    copy of the probabilities as well."""
    mask = 1.0 if dropout else 0.0
    if autocast:
        return 4.0 + element_bytes + mask
    return element_bytes * (2 if dropout else 1) + mask


# Model chunks per rank under the interleaved schedule: torchtitan's default for its
# multi-stage schedules (two stages per rank unless a split is given). On the first
# rank, the busiest, no interleaving holds more (fewer chunks, longer warm-up; see
# below).
INTERLEAVED_CHUNKS = 2


def in_flight_microbatches(parallel: Parallelism) -> tuple[float, float]:
    """Micro-batches whose activations the first and the last pipeline stage hold at
    once, in whole stages' worth.

    1F1B: the first stage min(p, m), the last one (Narayanan et al. 2021, "Efficient
    Large-Scale Language Model Training on GPU Clusters"). GPipe: every stage all m
    (Huang et al. 2019). Interleaved with v chunks of a stage's layers per rank: rank r
    runs 2(p-1-r) + (v-1)p warm-up chunk forwards before its first backward (Narayanan
    et al.'s schedule; torch.distributed.pipelining's Interleaved1F1B alike), so the
    first rank holds p + (p-1)/v stages' worth (Korthikanti et al. 2022, section 4.2.3:
    p(1 + (p-1)/(pv))) and the last ((v-1)p + 1)/v; neither more than m (torch's
    Interleaved1F1B, where p does not divide m, can hold slightly more).
    """
    p = parallel.pp
    m = float(parallel.microbatches or p)
    if p == 1:
        return 1.0, 1.0
    if parallel.pp_schedule == "gpipe":
        return m, m
    if parallel.pp_schedule == "interleaved":
        v = INTERLEAVED_CHUNKS
        return min(m, p + (p - 1) / v), min(m, ((v - 1) * p + 1) / v)
    return min(float(p), m), 1.0


@dataclass(frozen=True)
class TransformerMemory:
    """Parameters (before ZeRO sharding) and activations on the busiest rank."""

    params_local: float  # dense parameters: attention, norms, embeddings, router
    expert_params_local: float  # routed experts' parameters (this rank's 1/ep of them)
    stage_params: float  # everything this pipeline stage holds (FSDP + PP keeps it whole)
    unit_params: float  # the largest FSDP unit: one block, or the embedding table
    matrices_local: int
    activation_bytes: float


def _per_layer(layer: LayerActivations, tp: int, sequence_parallel: bool) -> float:
    split = tp if sequence_parallel else 1
    return layer.replicated / split + layer.sharded / tp


def transformer_memory(
    dims: TransformerDims,
    seq_len: int,
    batch: int,
    element_bytes: float,
    flash_attention: bool,
    checkpointing: str,
    parallel: Parallelism,
    checkpoint_every: int | None = None,
    autocast: bool = False,
) -> TransformerMemory:
    """Parameters and activations on the busiest GPU: the worse of the first pipeline
    stage (embedding, most micro-batches in flight) and the last (the logits).

    Context parallelism splits the sequence over `cp` ranks (ring attention keeps one
    peer's K and V in flight, a block's worth at most); `checkpoint_every` is the
    layer-wise selective form: one block in n fully checkpointed, the rest keep all.
    """
    t, p, sp = parallel.tp, parallel.pp, parallel.sequence_parallel
    m = parallel.microbatches or p  # micro-batches a step runs
    s_local = math.ceil(seq_len / parallel.cp)
    layers_per_stage = math.ceil(dims.layers / p)
    ep = parallel.ep > 1

    def layer(mode: str) -> float:
        return _per_layer(
            layer_activation_bytes(
                dims,
                s_local,
                batch,
                element_bytes,
                flash_attention,
                mode,
                expert_parallel=ep,
                keys=seq_len,
                autocast=autocast,
            ),
            t,
            sp,
        )

    whole = layer("none")
    if checkpoint_every is not None:
        full_layers = layers_per_stage // checkpoint_every
        stage_layers = (layers_per_stage - full_layers) * whole + full_layers * layer("full")
        recompute = whole - layer("full") if full_layers else 0.0
    else:
        kept = layer(checkpointing)
        stage_layers = layers_per_stage * kept
        # a checkpointed block's dropped activations exist again during its backward
        recompute = whole - kept
    split = t if sp else 1
    sbh = s_local * batch * dims.hidden
    # the embedding's output, where the residual stream starts, and its dropout mask
    stream = _stream_bytes(element_bytes, autocast)
    embedding = sbh * stream / split + (sbh / split if dims.dropout else 0.0)
    # the loss: forward holds the logits (activation width), their fp32 upcast and its
    # log-softmax; backward the fp32 log-softmax output, its gradient and the input's
    # gradient (`_log_softmax_backward_data` reads the output): 12 bytes per logit at
    # least. Vocab split over tensor-parallel ranks (Megatron's vocab-parallel cross
    # entropy, torchtitan's loss_parallel)
    logit_elements = s_local * batch * dims.vocab / t
    logits = logit_elements * max(element_bytes + 8, 12)
    held_first, held_last = in_flight_microbatches(parallel)
    # micro-batches between their loss and its backward on the final stage: all of the
    # step's under GPipe, else one (interleaving's warm-up runs earlier chunks)
    losses = m if p > 1 and parallel.pp_schedule == "gpipe" else 1
    if p > 1:
        # torch.distributed.pipelining (torchtitan) keeps every micro-batch's output,
        # the logits, on the last stage until the step ends (`output_chunks`, merged
        # into the step's output), here at the activation width (a model that returns
        # them upcast to fp32, as torchtitan's Llama did in 2024, keeps twice that);
        # each earlier loss in flight keeps its fp32 log-softmax for its backward.
        # (Megatron-LM's last stage returns the loss alone: for it this errs high.)
        logits += (m - 1) * logit_elements * element_bytes
        logits += (losses - 1) * logit_elements * 4
    # backward holds the gradients of the largest tensor's input and output at once
    mlp_width = s_local * batch * (dims.expert_ffn if dims.moe else dims.ffn)
    largest = mlp_width
    if not flash_attention and checkpointing == "none":
        largest = max(largest, dims.heads * s_local * seq_len * batch)
    transient = 2 * largest / t * element_bytes
    head_input = 0.0
    if t > 1:
        # what tensor parallelism gathers whole on every rank. A column-parallel
        # matmul's backward (the MLP's first, the widest) holds, beside its output's
        # gradient, its input's gradient whole until the all-reduce (the
        # reduce-scatter under sequence parallelism) and, under sequence parallelism,
        # its input gathered whole again, where the per-block counts keep a shard as
        # Megatron-LM does (it saves the shard and gathers again in backward;
        # torchtitan's DTensor plan saves the gathered input, without checkpointing
        # 2*s*b*h*(1 - 1/t) more a block than counted here). The output projection is
        # such a matmul: its input, the final norm's output, is kept whole for its
        # weight gradient, once per loss in flight. (At t = 1 that tensor is
        # s*b*h beside the logits' 12*s*b*vocab bytes, under 1%, and left out as the
        # norms' statistics are.)
        gathered = sbh * (2 - 1 / t if sp else 1)
        transient = max(transient, (mlp_width / t + gathered) * element_bytes)
        head_input = sbh * element_bytes
    first = stage_layers * held_first + embedding + recompute + transient
    last = stage_layers * held_last + head_input * losses + logits + recompute + transient
    activations = max(first, last) if p > 1 else first + logits + head_input

    experts = expert_layer_params(dims) / (t * parallel.ep)
    block = (layer_params(dims) - expert_layer_params(dims)) / t
    embed_rows = dims.vocab * dims.hidden / t + dims.learned_positions * dims.hidden
    head = 0.0 if dims.tied_embeddings and p == 1 else dims.vocab * dims.hidden / t
    stage_params = layers_per_stage * block
    params_first = stage_params + embed_rows
    params_last = stage_params + head + 2 * dims.hidden
    params_local = (
        params_first + head + 2 * dims.hidden if p == 1 else max(params_first, params_last)
    )
    expert_local = layers_per_stage * experts
    if dims.moe:  # attention, router, this rank's experts, the shared expert
        mlps = dims.experts // parallel.ep + (1 if dims.shared_expert_ffn else 0)
        per_block = 5 + _mlp_matrices(dims) * mlps
    else:
        per_block = 4 + _mlp_matrices(dims)
    matrices = layers_per_stage * per_block + 2
    return TransformerMemory(
        params_local=params_local,
        expert_params_local=expert_local,
        stage_params=params_local + expert_local,
        unit_params=max(block + experts, dims.vocab * dims.hidden / t),
        matrices_local=matrices,
        activation_bytes=activations,
    )
