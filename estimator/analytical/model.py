"""The analytical estimate: peak device memory of one training process, by term.

Peak = weights + gradients + optimizer state + the larger of (activations while
backward starts, optimizer-step temporaries) + CUDA context + caching-allocator slack.
Counting all gradients beside all activations is deliberately pessimistic: backward
frees activations as it creates gradients, and the learned part corrects the excess.

Model states are sharded as ZeRO (Rajbhandari et al. 2020) and FSDP do it, over the
job's data-like ranks (`Parallelism.shard_group`); a routed expert's states over the
data-like ranks that hold the same experts (shard group / ep: torchtitan's
`dp_shard_mod_ep` mesh, Megatron-core's expert data-parallel group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from estimator.analytical.context import FixedCost, fixed_cost
from estimator.analytical.hf import dims_from_hf_config, moe_from_hf_config
from estimator.analytical.precision import (
    adafactor_state_elements,
    autocast,
    fp8_cast_bytes,
    optimizer_state_bytes,
    optimizer_step_temp_bytes,
    state_bytes,
)
from estimator.analytical.transformer import (
    eager_score_bytes,
    total_params,
    transformer_memory,
)
from estimator.catalog import UnknownModelError, lookup
from estimator.gpus import GpuDescription, GpuModel
from estimator.spec import TrainingSpec, TransformerDims, validation_problems

MIB = 1024 * 1024

# PyTorch's caching allocator rounds requests into 2 MiB / 20 MiB segments and keeps
# freed blocks cached (c10/cuda/CUDACachingAllocator.cpp: kSmallBuffer, kLargeBuffer,
# kRoundLarge); across a training step reserved memory typically runs ~10% above
# allocated memory for the short-lived tensors (PyTorch docs, "CUDA semantics: memory
# management").
ALLOCATOR_FRACTION = 0.10


class SpecError(ValueError):
    """A spec the estimator cannot work with; `problems` lists each reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ModelShape:
    """What the physics needs to know of a model, however it was named."""

    name: str
    params: int
    matrices: int
    dims: TransformerDims | None = None  # transformers
    activations_per_sample: float = 0.0  # other models: saved elements at reference input
    largest_activation_per_sample: float = 0.0  # the biggest of those tensors
    reference_size: int = 0
    activation_exponent: float = 1.0
    layer_count: int = 1
    layers: dict[str, int] = field(default_factory=dict)  # layer kind -> count
    attention_scores_per_sample: float = 0.0  # kept by eager attention only
    attention_scores_exponent: float = 2.0
    largest_attention_scores_per_sample: float = 0.0  # one attention call's
    autocast_bytes_per_sample: float = 0.0  # activations' bytes under autocast (0: unknown)
    fixed_activations: float = 0.0  # saved elements a step keeps whatever its batch
    autocast_fixed_bytes: float = 0.0  # what a step keeps once under autocast (0: unknown)
    fixed_activations_constant: float = 0.0  # of fixed_activations, what never grows


def _transformer_shape(name: str, params: int, dims: TransformerDims) -> ModelShape:
    layers = {
        "linear": dims.layers * (7 if dims.gated_mlp else 6) + 1,
        "layernorm": 2 * dims.layers + 1,
        "attention": dims.layers,
        "embedding": 1,
    }
    return ModelShape(
        name, params, layers["linear"], dims=dims, layer_count=dims.layers, layers=layers
    )


def hf_dims(config: dict[str, Any]) -> TransformerDims:
    """TransformerDims of a Hugging Face config, experts included (ValueError if it
    cannot be read)."""
    dims = dims_from_hf_config(config)
    moe = moe_from_hf_config(config)
    if not moe:
        return dims
    try:
        return TransformerDims.model_validate({**dims.model_dump(), **moe})
    except ValidationError as exc:
        raise ValueError("; ".join(validation_problems(exc))) from exc


def resolve(spec: TrainingSpec) -> ModelShape:
    """The model of `spec`, however it is named; SpecError if it cannot be found."""
    ref = spec.model
    if ref.transformer is not None:
        dims = ref.transformer
        return _transformer_shape("transformer", total_params(dims), dims)
    if ref.hf_config is not None:
        try:
            dims = hf_dims(ref.hf_config)
        except ValueError as exc:
            raise SpecError([f"model.hf_config: {exc}"]) from exc
        return _transformer_shape("hf_config", total_params(dims), dims)
    if ref.summary is not None:
        summary = ref.summary
        layers = sum(summary.layers.values()) or 1
        return ModelShape(
            "summary",
            summary.params,
            layers,
            activations_per_sample=float(summary.activations_per_sample),
            largest_activation_per_sample=float(summary.largest_activation_per_sample),
            layer_count=layers,
            layers=dict(summary.layers),
            attention_scores_per_sample=float(summary.attention_scores_per_sample),
            largest_attention_scores_per_sample=float(summary.largest_attention_scores_per_sample),
            autocast_bytes_per_sample=float(summary.autocast_bytes_per_sample),
            fixed_activations=float(summary.fixed_activations),
            autocast_fixed_bytes=float(summary.autocast_fixed_bytes),
        )
    assert ref.catalog is not None
    try:
        entry = lookup(ref.catalog)
    except UnknownModelError as exc:
        raise SpecError([f"model.catalog: {exc}"]) from exc
    if entry.hf_config is not None:
        return _transformer_shape(entry.qualified_name, entry.params, hf_dims(entry.hf_config))
    layers = sum(n for kind, n in entry.layers.items() if kind in ("conv2d", "linear")) or 1
    return ModelShape(
        entry.qualified_name,
        entry.params,
        entry.matrices,
        activations_per_sample=float(entry.activations_per_sample),
        largest_activation_per_sample=float(entry.largest_activation_per_sample),
        reference_size=entry.reference_size,
        activation_exponent=entry.activation_exponent,
        layer_count=layers,
        layers=dict(entry.layers),
        attention_scores_per_sample=float(entry.attention_scores_per_sample),
        attention_scores_exponent=entry.attention_scores_exponent,
        largest_attention_scores_per_sample=float(entry.largest_attention_scores_per_sample),
        autocast_bytes_per_sample=float(entry.autocast_bytes_per_sample),
        fixed_activations=float(entry.fixed_activations),
        autocast_fixed_bytes=float(entry.autocast_fixed_bytes),
        fixed_activations_constant=float(entry.fixed_activations_constant),
    )


def check(spec: TrainingSpec, shape: ModelShape) -> None:
    """Raise SpecError listing every way `spec` does not fit its model."""
    par = spec.parallelism
    problems = []
    if shape.dims is not None:
        dims = shape.dims
        if spec.seq_len is None:
            problems.append("seq_len is required for transformer models")
        if dims.heads % par.tp:
            problems.append(f"parallelism.tp ({par.tp}) must divide heads ({dims.heads})")
        if dims.kv != dims.heads and dims.kv % par.tp and par.tp % dims.kv:
            problems.append(f"parallelism.tp ({par.tp}) and kv_heads ({dims.kv}) must divide")
        if par.pp > dims.layers:
            problems.append(f"parallelism.pp ({par.pp}) exceeds the layers ({dims.layers})")
        if spec.seq_len is not None and spec.seq_len % par.cp:
            problems.append(f"parallelism.cp ({par.cp}) must divide seq_len ({spec.seq_len})")
        if par.ep > 1 and not dims.moe:
            problems.append(f"parallelism.ep ({par.ep}) needs a mixture-of-experts model")
        elif dims.experts % par.ep:
            problems.append(f"parallelism.ep ({par.ep}) must divide experts ({dims.experts})")
    else:
        splits = [f"{k}={getattr(par, k)}" for k in ("tp", "pp", "cp", "ep") if getattr(par, k) > 1]
        if spec.checkpoint_every is not None:
            splits.append("checkpoint_every")
        if splits or par.sequence_parallel:
            problems.append(
                f"{', '.join(splits) or 'sequence_parallel'} needs a transformer model "
                "(transformer dimensions, an hf_config or a Hugging Face catalog name)"
            )
    if par.pp == 1 and par.microbatches not in (None, 1):
        problems.append("parallelism.microbatches needs pipeline parallelism (pp > 1)")
    if problems:
        raise SpecError(problems)


@dataclass(frozen=True)
class Breakdown:
    """Peak memory by term, in MiB (floats; rounded only when reported): the
    model-dependent terms, and the process's fixed cost apart (`context.py`)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    allocator: float
    fixed: FixedCost

    @property
    def model_mib(self) -> float:
        """The terms that depend on the model and batch (all but the fixed cost)."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.allocator

    @property
    def total(self) -> float:
        return self.model_mib + self.fixed.total

    def model_terms(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "allocator": self.allocator,
        }


def _kept_once_bytes(
    spec: TrainingSpec, shape: ModelShape, element_bytes: float, pixels: float
) -> float:
    """What a step keeps whatever its batch, at `pixels` times the reference input:
    weights standardised in the forward, which do not grow with the input, and position
    tables, which grow at most as the pairs of tokens do (pixels squared: Swin-V2's
    continuous position bias traces 91M, 287M and 907M elements at 288, 384 and 512
    px). The catalog tells the part that does not grow from a second input
    (`fixed_activations_constant`); the rest, all where that is not known, is charged
    the steeper growth at a larger input and what the reference input keeps at a
    smaller one.

    Under autocast a standardised weight's 16-bit cast is what its convolution keeps,
    in place of the raw weight's (NFNet-F0: 137 MiB kept once, not the 225 that the fp32
    standardised weights at 16 bits beside a copy of every weight would make;
    bench/RESULTS.md): so where the traced autocast forward measured what it keeps
    once, that is charged less autocast's 16-bit weight copies (charged with the
    weights, `_model_states`). Of that rest, the constant elements take the fewest bytes
    they can (16 bits each), so that the part charged as growing is not understated."""
    growth = max(pixels, 1.0) ** 2
    constant = min(shape.fixed_activations_constant, shape.fixed_activations)
    if autocast(spec.precision) and shape.autocast_fixed_bytes:
        copies = shape.params * state_bytes(spec.precision, spec.master_weights).autocast_cache
        rest = max(0.0, shape.autocast_fixed_bytes - copies)
        steady = min(rest, constant * 2)
        return steady + (rest - steady) * growth
    return (constant + (shape.fixed_activations - constant) * growth) * element_bytes


def _activation_bytes(spec: TrainingSpec, shape: ModelShape, element_bytes: float) -> float:
    """Saved activations (per sample, and those a step keeps once whatever its batch)
    plus the two gradient buffers of the largest one, and with `flash_attention: false`
    the attention scores an eager attention keeps too.

    While backward passes the layer with the largest saved tensor, the gradients with
    respect to its output and input (each as large) exist beside what is still saved;
    through an eager attention, those of one layer's probabilities and scores. Under
    autocast, activations take the bytes a traced autocast forward keeps, where it was
    measured (`autocast_bytes_per_sample`: fp32 norms, softmax and residual sums).
    """
    pixels = 1.0
    if spec.image_size is not None and shape.reference_size:
        pixels = (spec.image_size / shape.reference_size) ** 2
    scale: float = pixels**shape.activation_exponent
    per_sample = shape.activations_per_sample * element_bytes
    if autocast(spec.precision) and shape.autocast_bytes_per_sample:
        per_sample = shape.autocast_bytes_per_sample
    kept = per_sample * scale * spec.batch_size
    largest = shape.largest_activation_per_sample * scale * spec.batch_size
    if spec.flash_attention is False and shape.attention_scores_per_sample:
        growth: float = pixels**shape.attention_scores_exponent * spec.batch_size
        # a model's dropout on its attention is not known: none, as timm's and
        # torchvision's defaults (attn_drop 0)
        per_score = eager_score_bytes(element_bytes, autocast(spec.precision), False)
        kept += shape.attention_scores_per_sample * growth * per_score
        if spec.activation_checkpointing != "full":
            largest = max(largest, shape.largest_attention_scores_per_sample * growth)
    kept += _kept_once_bytes(spec, shape, element_bytes, pixels)
    if spec.activation_checkpointing == "full":
        # checkpoint every sqrt(n)-th layer: O(sqrt(n)) memory (Chen et al. 2016,
        # "Training Deep Nets with Sublinear Memory Cost")
        kept *= min(1.0, 2 / math.sqrt(shape.layer_count))
    return kept + 2 * largest * element_bytes


def communicates(spec: TrainingSpec) -> bool:
    """Whether the job talks to other GPUs (and so holds NCCL buffers)."""
    return spec.parallelism.ranks > 1


@dataclass(frozen=True)
class _Params:
    """Parameters on this GPU before ZeRO sharding, split by how they are sharded."""

    dense: float
    experts: float  # routed experts: sharded over the shard group / ep
    unit: float  # the largest FSDP unit, gathered whole while it computes
    stage: float  # all of this pipeline stage's parameters


def _model_states(
    spec: TrainingSpec, params: _Params, matrices: int
) -> tuple[float, float, float, float]:
    """Weights, gradients, optimizer state and optimizer-step temporaries, in bytes.

    ZeRO stage 1 shards optimizer states, 2 gradients too, 3 (= FSDP) the parameters,
    gathering a unit at a time and prefetching the next (2 units of weights), while the
    finished unit's gradients wait to be reduce-scattered (one unit, in compute and in
    reduce precision). FSDP2 keeps the fp32 master copy as the sharded parameter
    itself (torchtitan: fp32 parameters, bf16 `param_dtype`). Combined with pipeline
    parallelism a stage's parameters stay gathered and its gradients unsharded through
    the whole micro-batch loop: torch.distributed.pipelining syncs and reshards FSDP
    gradients only on the last micro-batch's backward (`set_requires_gradient_sync`,
    `set_reshard_after_backward`) and torchtitan turns `reshard_after_forward` off
    under PP; ZeRO-2's gradient shards likewise wait for the last micro-batch.
    """
    par, stage = spec.parallelism, spec.parallelism.zero_stage
    sizes = state_bytes(spec.precision, spec.master_weights)
    shard = par.shard_group
    expert_shard = max(1, shard // par.ep)

    def sharded(per_param: float, from_stage: int) -> float:
        if stage < from_stage:
            return (params.dense + params.experts) * per_param
        return params.dense * per_param / shard + params.experts * per_param / expert_shard

    total = params.dense + params.experts
    moments = optimizer_state_bytes(spec.optimizer, spec.precision, spec.master_weights)
    fsdp = stage >= 3 and shard > 1
    pipelined = par.pp > 1
    if stage >= 3:
        # the sharded parameter is the master copy where there is one
        weights = sharded(sizes.master or sizes.weights, 3)
        optimizer = sharded(moments, 1)
    else:
        weights = total * sizes.weights
        optimizer = sharded(moments + sizes.master, 1)
    weights += total * sizes.autocast_cache
    gradients = sharded(sizes.gradients, 2 if not (pipelined and stage == 2) else 4)
    if fsdp and pipelined:
        weights += params.stage * sizes.weights
        gradients += params.stage * sizes.gradients
    elif fsdp:
        weights += 2 * params.unit * sizes.weights
        gradients += params.unit * (sizes.weights + sizes.gradients)
    if spec.optimizer == "adafactor":
        optimizer += adafactor_state_elements(int(total), matrices) * 4 / max(1, shard)
    step_temp = sharded(optimizer_step_temp_bytes(spec.optimizer), 1)
    return weights, gradients, optimizer, step_temp


def breakdown(
    spec: TrainingSpec, gpu: GpuDescription | GpuModel | None, shape: ModelShape | None = None
) -> Breakdown:
    """The analytical peak of `spec` on one GPU described by `gpu` (None: unknown)."""
    shape = shape or resolve(spec)
    check(spec, shape)
    sizes = state_bytes(spec.precision, spec.master_weights)
    if shape.dims is not None:
        assert spec.seq_len is not None
        dims, par = shape.dims, spec.parallelism
        memory = transformer_memory(
            dims,
            spec.seq_len,
            spec.batch_size,
            sizes.activation,
            spec.flash_attention is True,
            spec.activation_checkpointing,
            par,
            spec.checkpoint_every,
            autocast(spec.precision),
        )
        # the catalog's exact count (from the real module) scales the formula's split
        scale = shape.params / total_params(dims)
        params = _Params(
            memory.params_local * scale,
            memory.expert_params_local * scale,
            memory.unit_params * scale,
            memory.stage_params * scale,
        )
        matrices = memory.matrices_local
        tokens = math.ceil(spec.seq_len / par.cp) * spec.batch_size
        widest = max(dims.hidden, dims.query_width, dims.expert_ffn if dims.moe else dims.ffn)
        casts = fp8_cast_bytes(spec.precision, params.unit, tokens * widest / par.tp)
        activations = memory.activation_bytes + casts
    else:
        total = float(shape.params)
        unit = total / max(shape.layer_count, 1)
        params = _Params(total, 0.0, unit, total)
        matrices = shape.matrices
        activations = _activation_bytes(spec, shape, sizes.activation)
    weights, gradients, optimizer, step_temp = _model_states(spec, params, matrices)
    dynamic = max(activations, step_temp)
    allocator = ALLOCATOR_FRACTION * (dynamic + gradients)
    return Breakdown(
        weights=weights / MIB,
        gradients=gradients / MIB,
        optimizer=optimizer / MIB,
        activations=dynamic / MIB,
        allocator=allocator / MIB,
        fixed=fixed_cost(gpu, communicates(spec)),
    )
