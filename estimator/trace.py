"""`colloc estimate --trace pkg.module:factory`: the `summary` form of a model the
catalog does not know, measured from the user's own code on the user's machine.

The factory is called with PyTorch's default device set to `meta`, so the model (and
any example input it returns) has shapes but no storage: nothing is allocated, no
weights are read, no GPU is needed. One training step's forward runs under autograd's
saved-tensor hooks, which see every tensor kept for backward (each storage counted once,
parameters excluded; attention as a GPU's fused kernels keep it, `fused_attention`, and
the scores an eager attention would keep too counted apart), and again at twice the
batch, which tells what each sample keeps (`saved_growth`); the backward pass then runs
too, so a model that cannot train fails here rather than on the cluster. Needs torch
(the `trace` extra); the server only ever receives the numbers.

The factory returns the model, or `(model, example_batch)` where the batch is a tensor,
a tuple of tensors or a dict of keyword tensors whose first dimension is the batch;
with a bare model, `input_shape` gives one sample's shape (e.g. 3,224,224).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import importlib
import logging
import os
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from unittest import mock

import torch
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensorMode

from estimator.spec import LayerSummary

TRACE_BATCH = 2  # samples per traced step: activations are reported per sample
LAYER_TYPES = {
    "Conv1d": "conv1d",
    "Conv2d": "conv2d",
    "Conv3d": "conv3d",
    "Linear": "linear",
    "BatchNorm1d": "batchnorm",
    "BatchNorm2d": "batchnorm",
    "LayerNorm": "layernorm",
    "GroupNorm": "groupnorm",
    "MultiheadAttention": "attention",
    "Attention": "attention",
    "Embedding": "embedding",
}


class TraceError(ValueError):
    """The factory could not be loaded, called or run; the message says which."""


_SDPA = torch.nn.functional.scaled_dot_product_attention


# a fused attention's log-sum-exp storage -> (that tensor, the scores it stands for)
Scores = dict[int, tuple[torch.Tensor, int]]


class _FusedAttention(torch.autograd.Function):  # type: ignore[misc, unused-ignore]
    """Scaled dot-product attention keeping for backward what CUDA's fused kernels keep
    (FlashAttention-2 and memory-efficient attention, which PyTorch picks on a GPU):
    query, key, value, the mask if one is given, the output and one float32
    log-sum-exp per query row. On the meta device PyTorch falls back to the math
    kernel, which keeps the s x s attention weights: counted, they would charge an
    attention model at 896 px (50k tokens) many times the memory it uses."""

    @staticmethod
    def forward(
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None,
        options: dict[str, Any],
        scores: Scores,
    ) -> torch.Tensor:
        output = _SDPA(query, key, value, attn_mask=mask, **options)
        rows = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)
        # the scores an eager attention would keep, by the storage that stands for them
        # (held, so that no other storage takes its address during the pass)
        scores[rows.untyped_storage()._cdata] = (rows, query.shape[:-1].numel() * key.shape[-2])
        ctx.save_for_backward(query, key, value, output, rows, *([] if mask is None else [mask]))
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Gradients of the inputs' shapes (on the meta device there are no values)."""
        query, key, value, *rest = ctx.saved_tensors
        mask_grad = torch.empty_like(rest[-1]) if ctx.needs_input_grad[3] else None
        return (*(torch.empty_like(t) for t in (query, key, value)), mask_grad, None, None)


def _fused_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scores: Scores,
    **options: Any,
) -> torch.Tensor:
    """`scaled_dot_product_attention`'s signature, through `_FusedAttention` where a GPU
    would run a fused kernel: both take only 4-d (batch, heads, sequence, features)
    inputs, and grouped-query attention with a mask only the math kernel runs (PyTorch's
    `sdp_utils.cpp` checks); windowed attention that keeps its windows as a fifth
    dimension (timm's Nest and Hiera) runs the math kernel on a GPU too. Each fused
    call notes in `scores`, by the storage of the log-sum-exp it keeps, the score
    elements it does not keep (batch x heads x queries x keys) and an eager attention
    would: counted only where that storage is kept for backward (not under `no_grad`,
    nor inside activation checkpointing)."""
    options |= {"dropout_p": dropout_p, "is_causal": is_causal}
    if query.dim() != 4 or (attn_mask is not None and options.get("enable_gqa", False)):
        return _SDPA(query, key, value, attn_mask=attn_mask, **options)
    if query.is_cuda and torch.is_autocast_enabled("cuda"):
        # autocast casts the attention's inputs (a floating mask too) before the
        # kernel, which keeps those copies; a custom Function's inputs are not cast
        half = torch.get_autocast_dtype("cuda")
        query, key, value = (tensor.to(half) for tensor in (query, key, value))
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(half)
    fused: torch.Tensor = _FusedAttention.apply(query, key, value, attn_mask, options, scores)
    return fused


def fused_attention(
    scores: Scores | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """Within it, `scaled_dot_product_attention` keeps what the fused kernels keep (and
    notes in `scores` what they leave out). The module's attribute is patched: what
    models and `F.multi_head_attention_forward` call. The backward pass needs it too:
    activation checkpointing recomputes the forward there, and its saved tensors must
    match the first pass's."""
    sdpa = functools.partial(_fused_sdpa, scores={} if scores is None else scores)
    return mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", sdpa)


class SavedActivations(NamedTuple):
    """What one forward pass keeps for backward (parameters excluded)."""

    # each saved storage's elements, counted once (attention as the fused kernels keep it)
    sizes: tuple[int, ...]
    nbytes: int  # the same storages' bytes, in the dtypes the pass ran in
    scores: int  # attention scores the fused kernels recompute and an eager attention keeps
    largest_scores: int  # the most of them one attention call has
    output: Any  # the forward's output

    @property
    def elements(self) -> int:
        return sum(self.sizes)

    @property
    def largest(self) -> int:
        """The biggest single storage, in elements."""
        return max(self.sizes, default=0)


@dataclass
class _Saved:
    """A storage autograd saved: its elements and bytes, and the saved tensors that
    hold it, weakly: it stays kept while any of them lives."""

    elements: int
    nbytes: int
    holders: list[weakref.ref[torch.Tensor]] = field(default_factory=list)

    def kept(self) -> bool:
        return any(holder() is not None for holder in self.holders)


def saved_activations(model: torch.nn.Module, *args: Any, **kwargs: Any) -> SavedActivations:
    """What autograd keeps for backward in one forward pass of `model`: the storages
    still saved once the forward ends. What a branch saved whose graph the forward
    dropped (a value computed and discarded) is freed then, as it would be on a GPU,
    and its storage's address can be a later storage's: storages are told apart by
    address only while a saved tensor holds them."""
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, _Saved] = {}  # by storage address
    scores: Scores = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in params:
            entry = saved.get(storage._cdata)
            if entry is None or not entry.kept():  # new, or an address freed and reused
                nbytes = storage.nbytes()
                entry = _Saved(nbytes // max(tensor.element_size(), 1), nbytes)
                saved[storage._cdata] = entry
            # autograd holds what is returned until its graph is dropped: detached, so
            # that a saved output holds no graph (as autograd's own saving does not)
            tensor = tensor.detach()
            entry.holders.append(weakref.ref(tensor))
        return tensor

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
    with hooks, fused_attention(scores):
        output = model(*args, **kwargs)
    # a dropped graph that the model's own code left in a reference cycle (a custom
    # Function keeping its output on `ctx`) is freed now, not when the collector runs
    gc.collect()
    kept = {storage: entry for storage, entry in saved.items() if entry.kept()}
    kept_scores = [count for storage, (_, count) in scores.items() if storage in kept]
    return SavedActivations(
        tuple(entry.elements for entry in kept.values()),
        sum(entry.nbytes for entry in kept.values()),
        sum(kept_scores),
        max(kept_scores, default=0),
        output,
    )


class Growth(NamedTuple):
    """How what a forward keeps for backward grows with the batch, in elements."""

    per_sample: int  # kept for each sample
    fixed: int  # kept once a step whatever the batch
    largest: int  # the biggest storage that grows with the batch, per sample


def saved_growth(
    model: torch.nn.Module, *args: Any, **kwargs: Any
) -> tuple[SavedActivations, Growth]:
    """What a forward at the example batch keeps for backward, and how that grows: a
    second forward at twice the batch (batch-first inputs doubled) tells what each added
    sample keeps from what a step keeps once whatever its batch: weights standardised
    in the forward (NF-Nets, BiT's ResNetV2), position tables, attention masks, norm
    statistics. Counted per sample, those would be charged once per sample (NFNet-F0
    keeps 46.6M elements once a step: 23.3M a sample at a batch of 2, beside the 20.9M
    each sample keeps). Growth is taken to be linear in the batch. Where nothing grows
    (no batch-first input), or the model takes no doubled batch (a recurrent state whose
    batch is not its first dimension), all of it is taken per sample, as an upper bound."""
    samples = _batch_size(args, kwargs)
    one = saved_activations(model, *args, **kwargs)
    alone = Growth(one.elements // samples, 0, one.largest // samples)
    doubled, named = _batched(args, kwargs, samples, 2, "meta")
    try:
        twice = saved_activations(model, *doubled, **named)
    except Exception:  # the model's own code refused the doubled inputs
        return one, alone
    if twice.elements <= one.elements:
        return one, alone
    per_sample = (twice.elements - one.elements) // samples
    grown = Counter(twice.sizes) - Counter(one.sizes)
    return one, Growth(
        per_sample,
        max(one.elements - per_sample * samples, 0),
        max(grown, default=2 * one.largest) // (2 * samples),
    )


def _fake_cuda_copy(model: torch.nn.Module, mode: FakeTensorMode) -> torch.nn.Module:
    """A copy of the meta-device `model` whose parameters and buffers are fake CUDA
    tensors: shapes and dtypes, no storage (tied weights stay tied)."""
    model = copy.deepcopy(model)
    fakes: dict[int, torch.Tensor] = {}

    def fake(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in fakes:
            with mode:
                made = torch.empty_like(tensor, device="cuda")
            if isinstance(tensor, torch.nn.Parameter):
                made = torch.nn.Parameter(made, requires_grad=tensor.requires_grad)
            fakes[id(tensor)] = made
        return fakes[id(tensor)]

    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, tensor in table.items():
                if tensor is not None:
                    table[name] = fake(tensor)
    return model


def _batched(
    args: tuple[Any, ...], kwargs: dict[str, Any], samples: int, copies: int, device: str
) -> tuple[list[Any], dict[str, Any]]:
    """Inputs like `args` and `kwargs` on `device`, with `copies` times the batch where a
    tensor's first dimension is the batch (other tensors, a mask say, as they are;
    non-tensors as given)."""

    def like(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        shape = value.shape
        if value.dim() and shape[0] == samples:
            shape = torch.Size((samples * copies, *shape[1:]))
        return torch.empty(shape, dtype=value.dtype, device=device)

    return [like(value) for value in args], {key: like(v) for key, v in kwargs.items()}


@contextlib.contextmanager
def _fake_gpu() -> Iterator[tuple[FakeTensorMode, Any]]:
    """A fake tensor mode for CUDA tensors that never touches a real GPU, and autocast
    for them. Where a GPU is present, fake CUDA tensors would open a CUDA context on it
    (`init_gpu_context`, which only backward needs) and ops without a fake kernel would
    run there for real: both are turned off, so every host measures alike. Autocast
    refuses CUDA where no GPU is seen, so it is made while one is. The fake tensor
    module's log of an op it cannot run is silenced: the caller falls back."""
    mode = FakeTensorMode(allow_non_fake_inputs=True, allow_fallback_kernels=False)
    with mock.patch.object(torch.cuda, "is_available", return_value=True):
        cast = torch.autocast("cuda", dtype=torch.float16)
    log = logging.getLogger(fake_tensor.__name__)
    quiet = log.disabled
    log.disabled = True
    try:
        with mock.patch.object(fake_tensor, "init_gpu_context", lambda device: None):
            yield mode, cast
    finally:
        log.disabled = quiet
        FakeTensorMode.cache_clear()  # one cache for the process: a catalog build's thousands


class AutocastBytes(NamedTuple):
    """What a forward keeps for backward under `torch.autocast`, in bytes."""

    per_sample: int  # kept for each sample
    fixed: int  # kept once a step whatever the batch: the 16-bit weight copies among it


def autocast_bytes(model: torch.nn.Module, *args: Any, **kwargs: Any) -> AutocastBytes:
    """Bytes a forward keeps under `torch.autocast` (float16; bfloat16 is as wide) on a
    GPU: matmuls and convolutions save 16-bit tensors, while layer norm, softmax and
    sums with fp32 parameters (a residual stream beside a position embedding) save fp32
    ones (PyTorch's autocast op lists). Autocast acts on CUDA tensors only, so the
    forward runs on fake ones (`_fake_gpu`), at the example batch and at twice it: the
    difference is what each added sample keeps, the rest what a step keeps once. That
    part is autocast's 16-bit copy of each weight a matmul or convolution takes, or of
    the weight a model standardises in its forward in place of the raw one (NF-Nets,
    BiT), so it tells whether the fp32 `fixed_activations` have a 16-bit copy of their
    own or stand in for the weights' (`analytical/model.py`)."""
    samples = _batch_size(args, kwargs)
    totals = []
    with _fake_gpu() as (mode, cast):
        fake = _fake_cuda_copy(model, mode)
        for copies in (1, 2):
            with mode:
                batch, named = _batched(args, kwargs, samples, copies, "cuda")
            with mode, cast:
                totals.append(saved_activations(fake, *batch, **named).nbytes)
    if totals[1] <= totals[0]:
        raise ValueError("the activations did not grow with the batch")
    grown = totals[1] - totals[0]
    return AutocastBytes(grown // samples, max(0, totals[0] - grown))


def autocast_bytes_where_it_runs(
    model: torch.nn.Module, *args: Any, **kwargs: Any
) -> AutocastBytes:
    """`autocast_bytes`, or zeros (unknown: `amp_*` is then estimated at 16 bits an
    element) where a model cannot run on fake CUDA tensors (an LSTM's cuDNN kernel, an
    input that is not batch-first)."""
    try:
        return autocast_bytes(model, *args, **kwargs)
    except Exception:
        return AutocastBytes(0, 0)


def layer_kind(module: torch.nn.Module) -> str | None:
    """The kind of layer a module is, by the nearest class in its ancestry that
    `LAYER_TYPES` names: libraries subclass torch's layers (timm's `BatchNormAct2d`,
    `ScaledStdConv2d`, `LayerNorm2d`; torch's own `NonDynamicallyQuantizableLinear`), and
    the same layer must count alike whichever library built the model."""
    for cls in type(module).__mro__:
        if cls.__name__ in LAYER_TYPES:
            return LAYER_TYPES[cls.__name__]
    return None


def describe(model: torch.nn.Module) -> dict[str, Any]:
    """Parameters, weight matrices and layers by kind. `nn.MultiheadAttention` also
    counts its input projections as linear layers (matmuls with no module of their
    own): one packed query/key/value weight, as timm's attention has it in one
    `nn.Linear`, or three where the key and value widths differ."""
    layers = Counter(kind for m in model.modules() if (kind := layer_kind(m)) is not None)
    layers["linear"] += sum(
        getattr(m, weight, None) is not None
        for m in model.modules()
        if isinstance(m, torch.nn.MultiheadAttention)
        for weight in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")
    )
    layers = +layers  # drop a zero count
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "matrices": sum(1 for p in model.parameters() if p.dim() >= 2),
        "layers": dict(sorted(layers.items())),
    }


def load_factory(target: str) -> Callable[[], Any]:
    """`pkg.module:factory` as a callable, importing from the working directory too."""
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise TraceError(f"--trace wants pkg.module:factory, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise TraceError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    factory: Any = module
    for part in attribute.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise TraceError(f"{module_name} has no {attribute}")
    if not callable(factory):
        raise TraceError(f"{target} is not callable")
    return factory  # type: ignore[no-any-return]


def _call_args(batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(batch, torch.Tensor):
        return (batch,), {}
    if isinstance(batch, dict):
        return (), dict(batch)
    if isinstance(batch, tuple | list):
        return tuple(batch), {}
    raise TraceError(f"the example batch is a {type(batch).__name__}, not tensors")


def _batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    raise TraceError("the example batch holds no tensor with a batch dimension")


def _loss(output: Any) -> torch.Tensor | None:
    """A scalar from every floating output that needs gradients (logits, losses)."""
    if isinstance(output, torch.Tensor):
        found = [output]
    elif isinstance(output, dict):
        found = [v for v in output.values() if isinstance(v, torch.Tensor)]
    elif isinstance(output, tuple | list):
        found = [v for v in output if isinstance(v, torch.Tensor)]
    else:
        found = [v for v in vars(output).values() if isinstance(v, torch.Tensor)]
    parts = [t.float().sum() for t in found if t.is_floating_point() and t.requires_grad]
    return torch.stack(parts).sum() if parts else None


def trace(target: str, input_shape: tuple[int, ...] | None = None) -> LayerSummary:
    """The summary form of the model `target` builds (TraceError if it cannot)."""
    factory = load_factory(target)
    try:
        with torch.device("meta"):
            made = factory()
            if isinstance(made, tuple) and len(made) == 2:
                model, batch = made
            else:
                if input_shape is None:
                    raise TraceError(
                        f"{target} returned only a model: give --input-shape (one sample's "
                        "shape, e.g. 3,224,224) or return (model, example_batch)"
                    )
                model, batch = made, torch.empty(TRACE_BATCH, *input_shape)
        if not isinstance(model, torch.nn.Module):
            raise TraceError(f"{target} returned a {type(model).__name__}, not a torch module")
        model = model.to("meta").train()
        args, kwargs = _call_args(batch)
        args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        samples = _batch_size(args, kwargs)
        saved, growth = saved_growth(model, *args, **kwargs)
        loss = _loss(saved.output)
        if loss is not None:
            with fused_attention():
                torch.autograd.backward(loss)  # the step's backward: fails if it cannot train
    except TraceError:
        raise
    except Exception as exc:
        raise TraceError(f"tracing {target} failed: {type(exc).__name__}: {exc}") from exc
    shape = describe(model)
    autocast = autocast_bytes_where_it_runs(model, *args, **kwargs)
    return LayerSummary(
        params=shape["params"],
        activations_per_sample=growth.per_sample,
        largest_activation_per_sample=growth.largest,
        attention_scores_per_sample=saved.scores // samples,
        largest_attention_scores_per_sample=saved.largest_scores // samples,
        autocast_bytes_per_sample=autocast.per_sample,
        fixed_activations=growth.fixed,
        autocast_fixed_bytes=autocast.fixed,
        layers=shape["layers"],
    )
