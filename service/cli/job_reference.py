"""docs/job-file.md, rendered from the job schema itself: each field's type, default and
limits come from the pydantic models, so the page cannot drift from what the API takes.

Regenerate after a schema change: `python -m service.cli.job_reference > docs/job-file.md`
(tests/test_docs.py fails until then, and for a field without a description here).
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, StringConstraints
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from estimator.spec import LayerSummary, ModelRef, Parallelism, TrainingSpec, TransformerDims
from service.jobs.schemas import JobCreate

# (model, heading, what it is): the sections of the page, in order
SECTIONS: tuple[tuple[type[BaseModel], str, str], ...] = (
    (
        JobCreate,
        "Job",
        "The file `colloc submit` reads (YAML or JSON), the body of `POST /v1/jobs`.",
    ),
    (TrainingSpec, "training", "What the estimator reads to size the job's memory."),
    (ModelRef, "training.model", "Exactly one of these names the model."),
    (TransformerDims, "training.model.transformer", "A transformer by its dimensions."),
    (
        LayerSummary,
        "training.model.summary",
        "Any model by its counts (`colloc estimate --trace` writes it).",
    ),
    (
        Parallelism,
        "training.parallelism",
        "How the job is split over GPUs (per-GPU memory follows).",
    ),
)

DESCRIPTIONS: dict[str, dict[str, str]] = {
    "JobCreate": {
        "name": "a label for the job (not unique)",
        "command": "what the agent runs, an item per argument (no shell; for one: `[sh, -c, ...]`)",
        "gpus": "GPUs per job, all placed at once on one node (a gang)",
        "gpu_models": "GPU models it may run on (NVML names or aliases: `A100-40GB`, `T4`)",
        "priority": "higher runs first; users up to their queue's maximum "
        "(`COLLOC_QUEUE_MAX_PRIORITY`), admins any",
        "queue": "the queue it counts against (quotas, priority limits)",
        "memory_mib": "memory claim per GPU in MiB; none: the bound estimated from `training`",
        "max_attempts": "tries before it fails for good (OOM and lost attempts are retried); "
        "none: `COLLOC_DEFAULT_MAX_ATTEMPTS`",
        "env": "environment variables set for the command; its whole environment is these, "
        "its account's login variables (`HOME`, `USER`, `LOGNAME`, `SHELL`, `PATH`) and "
        "Colloc's (`CUDA_VISIBLE_DEVICES`, `COLLOC_JOB_ID`, `COLLOC_ATTEMPT`): nothing of "
        "the submitting shell or the agent",
        "workdir": "directory on the node the command starts in, entered as the job's "
        "account (one it may not enter fails the job); none: a fresh directory of the "
        "attempt's own (the agent's `work_dir/job-J-attempt-A`, mode 0700)",
        "training": "the training run, for the estimator; needed when `memory_mib` is absent",
        "preemptible": "may be stopped and requeued for higher-priority jobs (with preemption on)",
        "time_limit": "how long an attempt may run: seconds, or `1h30m`-style (d, h, m, s); "
        "past it the server stops it and the job ends `timeout`, not retried; none: its "
        "queue's default (`COLLOC_QUEUE_DEFAULT_TIME_LIMIT_S`), at most its queue's maximum "
        "(`COLLOC_QUEUE_MAX_TIME_LIMIT_S`)",
    },
    "TrainingSpec": {
        "model": "the model (see `training.model`)",
        "batch_size": "per-GPU micro-batch (under pipeline parallelism: one micro-batch)",
        "seq_len": "tokens per sample (text models)",
        "image_size": "pixels per side (vision models)",
        "precision": (
            "`amp_*`: torch.autocast over fp32 weights; `fp16`/`bf16`: weights in 16 bits "
            "(FSDP's `MixedPrecision(param_dtype=bf16)` is `bf16` with master weights); "
            "`fp8`: float8 matmuls, bf16 elsewhere"
        ),
        "optimizer": "sets the optimizer state per parameter",
        "activation_checkpointing": "which activations are recomputed in backward",
        "checkpoint_every": "with `selective`: checkpoint every N-th block",
        "flash_attention": (
            "`true`: attention keeps no sequence-squared scores (flash or fused SDPA "
            "kernels); `false`: it keeps them (eager attention, PyTorch before 2.0); "
            "unset: transformer forms keep them, catalogued and traced models run "
            "attention as PyTorch 2 does on a GPU (fused)"
        ),
        "master_weights": "fp16/bf16/fp8: keep fp32 master weights in the optimizer",
        "parallelism": (
            "how the job is split (see `training.parallelism`); `gpus` must divide "
            "dp x tp x pp x cp where it is over 1"
        ),
    },
    "ModelRef": {
        "catalog": "a packaged torchvision, timm or Hugging Face name (`hf:bert-base-uncased`)",
        "transformer": "dimensions of a transformer (see `training.model.transformer`)",
        "hf_config": "a Hugging Face `config.json`, as a mapping",
        "summary": "parameter and activation counts (see `training.model.summary`)",
    },
    "TransformerDims": {
        "layers": "transformer blocks",
        "hidden": "model width",
        "heads": "attention heads",
        "ffn_hidden": "MLP width; none: 4 x hidden",
        "vocab": "vocabulary size",
        "kv_heads": "key/value heads (grouped-query attention); none: heads",
        "head_dim": "width of one attention head (Qwen3, Gemma); none: hidden / heads",
        "gated_mlp": "SwiGLU-style MLP (Llama, Mistral, Qwen)",
        "tied_embeddings": "input and output embeddings shared",
        "dropout": "dropout masks kept for backward",
        "learned_positions": "rows of a learned position table (0: none)",
        "experts": "mixture of experts: expert MLPs per layer (1: dense)",
        "experts_per_token": "experts active per token",
        "expert_ffn_hidden": "width of each expert MLP; none: ffn_hidden",
        "shared_expert_ffn": "width of an always-active shared MLP (0: none)",
    },
    "LayerSummary": {
        "params": "parameters",
        "activations_per_sample": "activation elements saved for backward per sample",
        "largest_activation_per_sample": "elements of the largest single activation per sample",
        "layers": "layer counts by kind (`linear`, `conv2d`, ...)",
        "attention_scores_per_sample": (
            "attention scores per sample that fused kernels recompute (charged with "
            "`flash_attention: false`)"
        ),
        "largest_attention_scores_per_sample": "the most of those one attention call has",
        "autocast_bytes_per_sample": (
            "bytes of activations per sample under `torch.autocast` (charged with `amp_*`; "
            "0: 16 bits an element)"
        ),
        "fixed_activations": (
            "activation elements a step saves once whatever its batch (standardised "
            "weights, position tables)"
        ),
        "autocast_fixed_bytes": (
            "bytes a step saves once under `torch.autocast`, its 16-bit weight copies "
            "among them (charged with `amp_*`; 0: `fixed_activations` at 16 bits beside "
            "a copy of every weight)"
        ),
    },
    "Parallelism": {
        "dp": "data-parallel ranks",
        "tp": "tensor-parallel ranks",
        "pp": "pipeline stages",
        "cp": "context-parallel ranks",
        "ep": "expert-parallel ranks (divides dp x cp)",
        "zero_stage": "ZeRO stage (3 is FSDP over dp x cp)",
        "dp_shard": "ZeRO/FSDP shard group size (HSDP); none: dp x cp",
        "pp_schedule": "pipeline schedule",
        "microbatches": "micro-batches per step under pipeline parallelism; none: pp",
        "sequence_parallel": "activations sharded over tp between blocks",
    },
}


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None))
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_type(args[0])}s"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        section = next(heading for model, heading, _ in SECTIONS if model is annotation)
        return f"[{annotation.__name__}](#{section.replace('.', '')})"
    names = {int: "integer", str: "string", bool: "boolean", float: "number", Any: "any"}
    return names.get(annotation, str(annotation))


def _count(n: int, unit: str) -> str:
    return f"{n} {unit[:-1] if n == 1 else unit}"


def _bounds(constraints: list[Any], unit: str) -> list[str]:
    """'1 to 64', 'at most 256 items', 'pattern ...' from annotated-types/pydantic ones."""
    low = high = None
    found: list[str] = []
    for item in constraints:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Le):
            high = item.le
        elif isinstance(item, annotated_types.MinLen) and item.min_length > 0:
            found.append(f"at least {_count(item.min_length, unit)}")
        elif isinstance(item, annotated_types.MaxLen):
            found.append(f"at most {_count(item.max_length, unit)}")
        elif isinstance(item, StringConstraints):
            if item.min_length:
                found.append(f"at least {_count(item.min_length, 'chars')}")
            if item.max_length:
                found.append(f"at most {item.max_length} chars")
            if item.pattern:
                found.append(f"matches `{item.pattern}`")
    if low is not None or high is not None:
        found.insert(
            0, f"{low if low is not None else '...'} to {high if high is not None else '...'}"
        )
    return found


def _inner_constraints(annotation: Any) -> list[Any]:
    """The constraints an Annotated type (or the one inside an optional) carries."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [c for a in get_args(annotation) for c in _inner_constraints(a)]
    if get_origin(annotation) is Annotated:
        return list(get_args(annotation)[1:])
    return []


def _limits(field: FieldInfo) -> str:
    annotation = field.annotation
    container = next(
        (a for a in (annotation, *get_args(annotation)) if get_origin(a) in (list, dict)), None
    )
    unit = "chars" if container is None else "items"
    found = _bounds([*field.metadata, *_inner_constraints(annotation)], unit)
    labels = ("each",) if get_origin(container) is list else ("names", "values")
    for label, arg in zip(labels, get_args(container), strict=False):
        item = _bounds(_inner_constraints(arg), "chars")
        if item:
            found.append(f"{label}: " + ", ".join(item))
    return "; ".join(found) or "-"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == {}:
        return "empty"
    return f"`{value}`"


def render() -> str:
    """The whole page, Markdown."""
    lines = [
        "# The job file",
        "",
        "Every field `colloc submit` and `POST /v1/jobs` accept, with its type, default and",
        "limits, as the API checks them; anything else in the file is refused. Memory is in",
        "MiB (1 GiB = 1024 MiB). Generated from the schema by `service/cli/job_reference.py`.",
        "",
        "```yaml",
        "name: bert-finetune",
        'command: ["python", "train.py", "--bs", "32"]',
        "gpus: 1",
        "gpu_models: [A100-40GB, T4]",
        "queue: default",
        "env: {HF_HOME: /data/hf}",
        "workdir: /home/ana/bert",
        "max_attempts: 3",
        "training:",
        '  model: {catalog: "hf:bert-base-uncased"}',
        "  batch_size: 32",
        "  seq_len: 512",
        "  precision: amp_bf16",
        "  optimizer: adamw",
        "```",
    ]
    for model, heading, what in SECTIONS:
        descriptions = DESCRIPTIONS[model.__name__]
        lines += ["", f"## {heading}", "", what, "", "| field | type | default | limits | what |"]
        lines.append("|---|---|---|---|---|")
        for name, field in model.model_fields.items():
            lines.append(
                f"| `{name}` | {_type(field.annotation)} | {_default(field)} | "
                f"{_limits(field)} | {descriptions[name]} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
