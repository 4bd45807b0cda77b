"""The TrainingSpec: what the estimator reads (DESIGN.md, job spec `training:`).

Validation collects every problem in a spec (not just the first) so a user can fix a
spec in one go; pydantic reports them together.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from estimator.config_bounds import check_hf_config

Precision = Literal["fp32", "amp_fp16", "amp_bf16", "fp16", "bf16", "fp8"]
Optimizer = Literal[
    "sgd", "sgd_momentum", "adam", "adamw", "adafactor", "lion", "adagrad", "rmsprop"
]
Checkpointing = Literal["none", "selective", "full"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransformerDims(Strict):
    """A decoder- or encoder-only transformer by its dimensions."""

    layers: int = Field(ge=1, le=1024)
    hidden: int = Field(ge=1, le=1 << 17)
    heads: int = Field(ge=1, le=4096)
    ffn_hidden: int | None = Field(default=None, ge=1, le=1 << 20)  # default 4 * hidden
    vocab: int = Field(default=32000, ge=1, le=1 << 22)
    kv_heads: int | None = Field(default=None, ge=1, le=4096)  # grouped-query attention
    # one attention head's width where a config sets its own (Qwen3, Gemma: heads x
    # head_dim need not be hidden); default hidden / heads
    head_dim: int | None = Field(default=None, ge=1, le=1 << 14)
    gated_mlp: bool = False  # SwiGLU-style MLP (Llama, Mistral, Qwen)
    tied_embeddings: bool = True
    dropout: bool = True  # dropout masks are kept for backward
    learned_positions: int = Field(default=0, ge=0, le=1 << 22)  # learned position table rows
    # mixture of experts: each MLP is `experts` expert MLPs of width `expert_ffn_hidden`
    # (default ffn_hidden), `experts_per_token` of them active per token, beside an
    # always-active shared MLP of width `shared_expert_ffn` (0: none)
    experts: int = Field(default=1, ge=1, le=4096)
    experts_per_token: int = Field(default=1, ge=1, le=4096)
    expert_ffn_hidden: int | None = Field(default=None, ge=1, le=1 << 20)
    shared_expert_ffn: int = Field(default=0, ge=0, le=1 << 20)

    @model_validator(mode="after")
    def _heads_divide(self) -> TransformerDims:
        problems = []
        if self.experts_per_token > self.experts:
            problems.append(
                f"experts_per_token ({self.experts_per_token}) exceeds experts ({self.experts})"
            )
        widths = [
            name
            for name in ("expert_ffn_hidden", "shared_expert_ffn")
            if getattr(self, name) and not self.moe
        ]
        if widths:
            problems.append(
                f"{' and '.join(widths)} {'describe' if len(widths) > 1 else 'describes'} "
                "a mixture of experts: needs experts > 1"
            )
        if self.head_dim is None and self.hidden % self.heads:
            problems.append(
                f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), "
                "or head_dim given"
            )
        if self.kv_heads is not None and self.heads % self.kv_heads:
            problems.append(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def query_width(self) -> int:
        """Width of the queries and of the attention's output."""
        return self.heads * self.head_width

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values)."""
        return self.kv * self.head_width

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def expert_ffn(self) -> int:
        return self.expert_ffn_hidden or self.ffn


class LayerSummary(Strict):
    """Any model by its parameter count and activation elements saved per sample."""

    params: int = Field(ge=1, le=10**13)
    activations_per_sample: int = Field(ge=0, le=10**13)
    largest_activation_per_sample: int = Field(default=0, ge=0, le=10**13)
    layers: dict[str, int] = Field(default_factory=dict, max_length=64)
    # attention scores per sample that fused kernels recompute and an eager attention
    # keeps (counted only with `flash_attention: false`)
    attention_scores_per_sample: int = Field(default=0, ge=0, le=10**13)
    largest_attention_scores_per_sample: int = Field(default=0, ge=0, le=10**13)  # one call's
    # bytes of activations per sample under torch.autocast (0: unknown, 16 bits an element)
    autocast_bytes_per_sample: int = Field(default=0, ge=0, le=10**14)
    # saved elements a step keeps once whatever its batch (weights standardised in the
    # forward, position tables)
    fixed_activations: int = Field(default=0, ge=0, le=10**13)
    # bytes a step keeps once under torch.autocast, autocast's 16-bit weight copies
    # among them (0: unknown, `fixed_activations` at 16 bits beside those copies)
    autocast_fixed_bytes: int = Field(default=0, ge=0, le=10**14)


class ModelRef(Strict):
    """Exactly one way of naming the model."""

    catalog: str | None = Field(default=None, min_length=1, max_length=200)
    transformer: TransformerDims | None = None
    hf_config: dict[str, Any] | None = None
    summary: LayerSummary | None = None

    @field_validator("hf_config")
    @classmethod
    def _readable_config(cls, config: dict[str, Any] | None) -> dict[str, Any] | None:
        if config is not None:
            check_hf_config(config)
        return config

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        given = [k for k in ("catalog", "transformer", "hf_config", "summary") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "model needs exactly one of catalog, transformer, hf_config, summary"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class Parallelism(Strict):
    """How one job's GPUs split the work. Data-like ranks are dp x cp: ZeRO/FSDP shards
    over all of them (torchtitan's dp_shard x cp mesh, Megatron's data-parallel group
    with context parallelism), or over groups of `dp_shard` of them (HSDP: shard within
    a group, replicate across groups). Expert parallelism (`ep`) splits a mixture of
    experts' experts over data-like ranks, as torchtitan and Megatron-core do."""

    dp: int = Field(default=1, ge=1, le=1 << 16)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    cp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=4096)
    zero_stage: int = Field(default=0, ge=0, le=3)  # FSDP = zero_stage 3 over dp x cp
    dp_shard: int | None = Field(default=None, ge=1, le=1 << 16)  # HSDP shard group size
    pp_schedule: Literal["1f1b", "gpipe", "interleaved"] = "1f1b"
    microbatches: int | None = Field(default=None, ge=1, le=1 << 16)  # default: pp
    sequence_parallel: bool = False

    @model_validator(mode="after")
    def _groups_divide(self) -> Parallelism:
        problems = []
        data_like = self.dp * self.cp
        if self.dp_shard is not None:
            if self.zero_stage == 0:
                problems.append("dp_shard needs zero_stage 1-3 (it is the ZeRO/FSDP shard group)")
            if data_like % self.dp_shard:
                problems.append(f"dp_shard ({self.dp_shard}) must divide dp x cp ({data_like})")
        if data_like % self.ep:
            problems.append(f"ep ({self.ep}) must divide dp x cp ({data_like})")
        elif self.zero_stage and self.shard_group % self.ep:
            problems.append(f"ep ({self.ep}) must divide the shard group ({self.shard_group})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def ranks(self) -> int:
        """GPUs the split spans: dp x tp x pp x cp (experts split data-like ranks)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_group(self) -> int:
        """Ranks that ZeRO/FSDP shards model states over (1 without ZeRO)."""
        if self.zero_stage == 0:
            return 1
        return self.dp_shard or self.dp * self.cp


class TrainingSpec(Strict):
    model: ModelRef
    # per-GPU micro-batch: under pipeline parallelism one micro-batch of the step, the
    # step holding `parallelism.microbatches` of them
    batch_size: int = Field(ge=1, le=1 << 20)
    seq_len: int | None = Field(default=None, ge=1, le=1 << 24)
    image_size: int | None = Field(default=None, ge=1, le=1 << 15)
    precision: Precision = "fp32"
    optimizer: Optimizer = "adamw"
    # selective: op-level selective checkpointing as torchtitan applies it (each block
    # saves its input, every other matmul output and the fused attention output, and
    # recomputes the rest); with `checkpoint_every`, torchtitan's layer-wise form instead:
    # every n-th block fully checkpointed, the others keep everything. Other models: full
    # keeps O(sqrt(layers)) of their activations; selective is counted as none
    activation_checkpointing: Checkpointing = "none"
    checkpoint_every: int | None = Field(default=None, ge=1, le=1024)
    # true: attention keeps no s^2 score tensors (flash / fused SDPA kernels); false: it
    # keeps them (eager attention); unset: transformer forms count them, catalogued and
    # traced models count attention as PyTorch 2 runs it on a GPU (fused)
    flash_attention: bool | None = None
    master_weights: bool = True  # fp16/bf16/fp8: keep fp32 master weights in the optimizer
    parallelism: Parallelism = Parallelism()

    @model_validator(mode="after")
    def _checkpoint_every_is_selective(self) -> TrainingSpec:
        if self.checkpoint_every is not None and self.activation_checkpointing != "selective":
            raise ValueError("checkpoint_every needs activation_checkpointing: selective")
        return self


def validation_problems(error: Exception) -> list[str]:
    """Each problem of a pydantic ValidationError as `where: what`."""
    if not isinstance(error, ValidationError):
        return [str(error)]
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return problems
