"""The analytical model against the formulas it cites, computed by hand."""

from __future__ import annotations

import re

import pytest

from estimator.analytical.hf import dims_from_hf_config
from estimator.analytical.model import MIB, SpecError, breakdown, resolve
from estimator.analytical.transformer import layer_activation_bytes, total_params
from estimator.catalog import lookup
from estimator.gpus import find_gpu_model
from estimator.spec import Parallelism, TrainingSpec, TransformerDims
from tests.estimator.kept_once import kept_once_bytes

GPT = TransformerDims(layers=24, hidden=1024, heads=16, vocab=50257)


def test_transformer_params_match_the_real_module_count() -> None:
    for name in ("gpt2", "gpt2-xl", "bert-base-uncased"):
        entry = lookup(f"hf:{name}")
        assert entry.hf_config is not None
        formula = total_params(dims_from_hf_config(entry.hf_config))
        assert abs(formula - entry.params) / entry.params < 0.01, name


@pytest.mark.parametrize("tp, sequence_parallel", [(1, False), (4, False), (4, True)])
def test_korthikanti_per_layer_activations(tp: int, sequence_parallel: bool) -> None:
    s, b, h, a = 2048, 4, GPT.hidden, GPT.heads
    layer = layer_activation_bytes(GPT, s, b, 2.0, flash_attention=False, checkpointing="none")
    split = tp if sequence_parallel else 1
    got = layer.replicated / split + layer.sharded / tp
    if sequence_parallel:
        expected = s * b * h / tp * (34 + 5 * a * s / h)  # eq. 4
    else:
        expected = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))  # eq. 2
    assert got == pytest.approx(expected)


def test_recomputation_and_flash_attention_drop_the_right_terms() -> None:
    s, b, h = 2048, 4, GPT.hidden
    flash = layer_activation_bytes(GPT, s, b, 2.0, True, "none")
    full = layer_activation_bytes(GPT, s, b, 2.0, False, "full")
    assert flash.replicated + flash.sharded == pytest.approx(34 * s * b * h)
    assert full.replicated + full.sharded == pytest.approx(2 * s * b * h)


def test_autocast_keeps_the_residual_stream_and_the_softmax_in_fp32() -> None:
    """Korthikanti's 34 + 5as/h bytes per s*b*h, with autocast's fp32 tensors: the two
    norm inputs at 4 bytes (+4), the softmax output at 4 beside the 16-bit copy the
    product with V keeps and the mask (7 bytes a score, not 5)."""
    s, b, h, a = 2048, 4, GPT.hidden, GPT.heads
    layer = layer_activation_bytes(GPT, s, b, 2.0, False, "none", autocast=True)
    assert layer.replicated + layer.sharded == pytest.approx(s * b * h * (38 + 7 * a * s / h))
    flash = layer_activation_bytes(GPT, s, b, 2.0, True, "none", autocast=True)
    assert flash.replicated + flash.sharded == pytest.approx(38 * s * b * h)
    full = layer_activation_bytes(GPT, s, b, 2.0, False, "full", autocast=True)
    assert full.replicated == pytest.approx(4 * s * b * h)


def test_an_autocast_transformer_keeps_more_than_a_pure_16_bit_one() -> None:
    """Same 16-bit matmuls; autocast's fp32 stream and softmax are the difference."""
    spec = {"model": {"catalog": "hf:bert-large-uncased"}, "batch_size": 4, "seq_len": 512}
    amp = breakdown(TrainingSpec.model_validate(spec | {"precision": "amp_fp16"}), None)
    half = breakdown(
        TrainingSpec.model_validate(spec | {"precision": "fp16", "master_weights": False}), None
    )
    layers, sbh, scores = 24, 512 * 4 * 1024, 16 * 512 * 512 * 4  # bert-large, 16 heads
    # 2 more bytes for each norm input and each score; the embedding's output too
    expected = layers * (2 * 2 * sbh + 2 * scores) + 2 * sbh
    assert (amp.activations - half.activations) * MIB == pytest.approx(expected, rel=1e-6)


def test_eager_attention_keeps_the_scores_a_catalogued_model_runs_fused() -> None:
    """PyTorch 2 runs a catalogued ViT's attention fused; `flash_attention: false` (an
    eager attention, as PyTorch before 2.0 ran timm's) keeps every score besides: under
    autocast its fp32 softmax output and the 16-bit copy the product with V keeps."""
    deit = lookup("timm:deit_base_patch16_224")
    assert deit.attention_scores_per_sample == 12 * 12 * 197 * 197  # layers x heads x s^2

    def activations(image_size: int, **kw: object) -> float:
        body = {"model": {"catalog": "timm:deit_base_patch16_224"}, "batch_size": 128}
        body |= {"image_size": image_size, "precision": "amp_fp16", **kw}
        return breakdown(TrainingSpec.model_validate(body), None).activations * MIB

    fused = activations(224)
    assert activations(224, flash_attention=True) == fused
    eager = activations(224, flash_attention=False) - fused
    assert eager == pytest.approx(deit.attention_scores_per_sample * 128 * (4 + 2))
    # global attention: twice the pixels side, 4x the tokens, 16x the scores; in
    # backward one layer's score gradients (2 bytes each) now outgrow the widest
    # activation's (the MLP's, 4x as the tokens)
    assert deit.attention_scores_exponent == pytest.approx(2.0, abs=0.02)
    scores, tokens = 4**deit.attention_scores_exponent, 4**deit.activation_exponent
    gradients = (
        2
        * 128
        * 2
        * (
            deit.largest_attention_scores_per_sample * scores
            - deit.largest_activation_per_sample * tokens
        )
    )
    assert gradients > 0
    larger = activations(448, flash_attention=False) - activations(448)
    assert larger == pytest.approx(eager * scores + gradients)


def test_what_a_step_keeps_once_is_charged_once_not_per_sample() -> None:
    """NF-Nets standardise their convolutions' weights in every forward and keep the
    copies for backward once a step, whatever its batch: the catalog keeps them apart
    from the activations per sample, so doubling the batch doubles only the latter."""
    nfnet = lookup("timm:nfnet_f0")
    assert nfnet.fixed_activations > nfnet.params / 2  # its standardised weights

    def activations(batch: int) -> float:
        body = {"model": {"catalog": "timm:nfnet_f0"}, "batch_size": batch}
        return breakdown(TrainingSpec.model_validate(body), None).activations * MIB

    assert 2 * activations(32) - activations(64) == pytest.approx(nfnet.fixed_activations * 4)
    # the summary form `--trace` writes carries them too, charged the same
    summary = {
        "params": nfnet.params,
        "activations_per_sample": nfnet.activations_per_sample,
        "largest_activation_per_sample": nfnet.largest_activation_per_sample,
        "fixed_activations": nfnet.fixed_activations,
        "layers": nfnet.layers,
    }
    traced = TrainingSpec.model_validate({"model": {"summary": summary}, "batch_size": 32})
    assert breakdown(traced, None).activations * MIB == pytest.approx(activations(32))


@pytest.mark.parametrize(
    ("precision", "autocast_fixed_bytes", "charged"),
    [
        ("amp_bf16", 2_500_000, 500_000),  # beyond the 2,000,000 bytes of weight copies
        ("amp_fp16", 1_500_000, 0),  # no fewer than the copies, charged with the weights
        ("amp_bf16", 0, 1_000_000),  # not measured: the fp32 elements at 16 bits
        ("bf16", 2_500_000, 1_000_000),  # no autocast: the elements at 16 bits
        ("fp32", 2_500_000, 2_000_000),
    ],
)
def test_what_autocast_keeps_once_is_charged_under_autocast_alone(
    precision: str, autocast_fixed_bytes: int, charged: int
) -> None:
    summary = {
        "params": 10**6,
        "activations_per_sample": 10**4,
        "fixed_activations": 500_000,
        "autocast_fixed_bytes": autocast_fixed_bytes,
        "layers": {"linear": 8},
    }

    body = {
        "model": {"summary": summary},
        "precision": precision,
        "optimizer": "sgd",  # no optimizer-step temporaries to outweigh them
    }
    assert kept_once_bytes(body) == pytest.approx(charged, abs=1e-3)


@pytest.mark.parametrize(
    ("name", "steady_share"),
    [("timm:swinv2_cr_tiny_384", 0.0), ("timm:tiny_vit_21m_512", 0.8)],
)
def test_under_autocast_what_a_step_keeps_once_grows_as_its_constant_part_allows(
    name: str, steady_share: float
) -> None:
    """Under autocast, of what a step keeps once beyond the weights' copies, the
    constant elements (TinyViT's, all of them) take 16 bits each and stay as traced at a
    larger input; the rest (Swin-V2-CR's tables, nearly all) grows as the pixels
    squared."""
    model = lookup(name)
    rest = model.autocast_fixed_bytes - model.params * 2
    steady = min(rest, model.fixed_activations_constant * 2)
    assert steady / rest == pytest.approx(steady_share, abs=0.02)

    def once(image_size: int) -> float:
        body = {
            "model": {"catalog": name},
            "image_size": image_size,
            "precision": "amp_bf16",
            "optimizer": "sgd",  # no optimizer-step temporaries outweigh a batch of one's
        }
        return kept_once_bytes(body)

    larger = model.reference_size * 3 // 2
    assert once(model.reference_size) == pytest.approx(rest)
    assert once(larger) == pytest.approx(steady + (rest - steady) * 1.5**4)


@pytest.mark.parametrize(
    ("name", "standardised"),
    [("timm:nfnet_f0", True), ("timm:resnetv2_50x1_bit", True), ("timm:resnet50", False)],
)
def test_under_autocast_a_step_keeps_once_what_its_traced_forward_kept(
    name: str, standardised: bool
) -> None:
    """Under autocast a standardised weight's 16-bit cast stands in for autocast's copy
    of the raw weight: what NF-Nets and BiT keep once a step is about a 16-bit copy of
    every weight, as for any model (bench/RESULTS.md), not their fp32 once-kept elements
    at 16 bits beside such a copy. The catalog's traced figure is charged, the copies
    with the weights and the rest with the activations."""
    model = lookup(name)
    copies = model.params * 2
    assert model.autocast_fixed_bytes == pytest.approx(copies, rel=0.01)

    kept_once = kept_once_bytes({"model": {"catalog": name}, "precision": "amp_bf16"}, 32)
    assert kept_once == pytest.approx(max(0, model.autocast_fixed_bytes - copies), abs=1)
    # the fp32 once-kept elements: the standardised weights, about one a parameter
    assert (model.fixed_activations > model.params / 2) is standardised
    assert kept_once < model.fixed_activations * 2 / 10 or not standardised


@pytest.mark.parametrize(
    ("name", "grows"), [("timm:swinv2_cr_tiny_384", True), ("timm:nfnet_f0", False)]
)
def test_what_a_step_keeps_once_grows_where_it_does_and_checkpointing_shrinks_it(
    name: str, grows: bool
) -> None:
    """Swin-V2's continuous position bias is a table over pairs of tokens: charged as
    traced at its reference input (384 px) or a smaller one, and as the pixels squared
    above it. NF-Nets' standardised weights do not grow with the input at all: the
    catalog tells that part apart from a second, smaller input. Full checkpointing
    recomputes what a step keeps once, as it does the rest."""
    model = lookup(name)
    constant = model.fixed_activations_constant
    assert 0 <= constant <= model.fixed_activations
    assert (constant < model.fixed_activations / 100) is grows

    def once(**kw: object) -> float:
        # plain SGD: no optimizer-step temporaries outweigh a batch of one's
        body = {"model": {"catalog": model.qualified_name}, "optimizer": "sgd", **kw}
        return kept_once_bytes(body)

    traced = model.fixed_activations * 4  # fp32
    assert once() == pytest.approx(traced)
    smaller, larger = model.reference_size * 3 // 4, model.reference_size * 4 // 3
    assert once(image_size=smaller) == pytest.approx(traced)
    growth = (larger / model.reference_size) ** 4
    expected = constant * 4 + (traced - constant * 4) * growth
    assert once(image_size=larger) == pytest.approx(expected)
    assert (once(image_size=larger) > 3 * traced) is grows
    body = {"model": {"catalog": model.qualified_name}, "batch_size": 1}
    layers = resolve(TrainingSpec.model_validate(body))
    factor = min(1.0, 2 / layers.layer_count**0.5)
    assert once(activation_checkpointing="full") == pytest.approx(traced * factor)


def test_attention_written_out_keeps_its_scores_in_its_activations() -> None:
    """timm's Swin computes `q @ k^T` and its softmax itself (no fused kernel even on
    PyTorch 2): its scores are among its traced activations, and eager attention adds
    nothing to them."""
    swin = lookup("timm:swin_tiny_patch4_window7_224")
    assert swin.attention_scores_per_sample == 0

    def activations(**kw: object) -> float:
        body = {"model": {"catalog": "timm:swin_tiny_patch4_window7_224"}, "batch_size": 8}
        return breakdown(TrainingSpec.model_validate(body | kw), None).activations

    assert activations(flash_attention=False) == activations()


def test_a_summary_counts_its_scores_only_under_eager_attention() -> None:
    """Kept: every score (4 bytes in fp32). In backward, one attention call's score
    gradients (probabilities' and scores') when they outgrow the largest activation's."""
    summary = {"params": 10**6, "activations_per_sample": 10**6}
    summary |= {"largest_activation_per_sample": 10**3, "attention_scores_per_sample": 10**6}
    summary |= {"largest_attention_scores_per_sample": 10**5}

    def activations(**kw: object) -> float:
        body = {"model": {"summary": summary}, "batch_size": 8}
        return breakdown(TrainingSpec.model_validate(body | kw), None).activations * MIB

    assert activations(flash_attention=True) == activations()
    assert activations() == pytest.approx(8 * (10**6 + 2 * 10**3) * 4)
    eager = 8 * (10**6 * 4 + 10**6 * 4 + 2 * 10**5 * 4)
    assert activations(flash_attention=False) == pytest.approx(eager)


def test_autocast_takes_the_bytes_a_traced_autocast_forward_keeps() -> None:
    """Under `amp_*` a catalogued model's activations weigh what its forward under
    torch.autocast keeps (fp32 norms, softmax, residual sums beside 16-bit matmul
    inputs), not 16 bits an element; pure fp16 keeps 16 bits an element."""
    deit = lookup("timm:deit_base_patch16_224")
    assert 2 * deit.activations_per_sample < deit.autocast_bytes_per_sample

    def activations(precision: str) -> float:
        body = {"model": {"catalog": "timm:deit_base_patch16_224"}, "batch_size": 32}
        spec = TrainingSpec.model_validate(body | {"precision": precision})
        return breakdown(spec, None).activations * MIB

    transient = 2 * deit.largest_activation_per_sample * 32 * 2
    assert activations("amp_fp16") == pytest.approx(deit.autocast_bytes_per_sample * 32 + transient)
    assert activations("amp_bf16") == activations("amp_fp16")
    assert activations("fp16") == pytest.approx(deit.activations_per_sample * 32 * 2 + transient)


def test_a_traced_summary_s_autocast_bytes_are_charged_under_amp() -> None:
    """What `--trace` writes: under `amp_*` the autocast bytes, where the trace could
    measure them (0: it could not, and every element counts 16 bits)."""
    summary = {"params": 10**6, "activations_per_sample": 10**6}
    summary |= {"largest_activation_per_sample": 10**3}

    def activations(autocast_bytes: int) -> float:
        model = {"summary": summary | {"autocast_bytes_per_sample": autocast_bytes}}
        body = {"model": model, "batch_size": 8, "precision": "amp_bf16"}
        return breakdown(TrainingSpec.model_validate(body), None).activations * MIB

    transient = 2 * 10**3 * 8 * 2
    assert activations(3 * 10**6) == pytest.approx(3 * 10**6 * 8 + transient)
    assert activations(0) == pytest.approx(10**6 * 8 * 2 + transient)


def test_an_unset_flash_attention_keeps_a_transformer_form_s_scores() -> None:
    spec = {"model": {"transformer": GPT.model_dump()}, "batch_size": 2, "seq_len": 1024}
    unset = breakdown(TrainingSpec.model_validate(spec), None)
    eager = breakdown(TrainingSpec.model_validate(spec | {"flash_attention": False}), None)
    flash = breakdown(TrainingSpec.model_validate(spec | {"flash_attention": True}), None)
    assert unset.activations == eager.activations > flash.activations


def summary_spec(**kw: object) -> TrainingSpec:
    body: dict[str, object] = {
        "model": {"summary": {"params": 1_000_000_000, "activations_per_sample": 0}},
        "batch_size": 1,
        "optimizer": "adam",
        **kw,
    }
    return TrainingSpec.model_validate(body)


@pytest.mark.parametrize(
    "precision, stage, dp, bytes_per_param",
    [
        ("fp32", 0, 1, 4 + 4 + 8),
        ("fp16", 0, 8, 2 + 2 + 12),  # ZeRO paper: 16 bytes per parameter
        ("fp16", 2, 8, 2 + 14 / 8),
        # bf16 keeps fp32 main gradients (Megatron Core, "Distributed Optimizer": 18
        # bytes per parameter, 6 + 12/d with the distributed optimizer)
        ("bf16", 0, 8, 18),
        ("bf16", 1, 8, 6 + 12 / 8),
        ("bf16", 2, 8, 2 + 16 / 8),
        ("bf16", 3, 8, 16 / 8),  # FSDP2: fp32 sharded parameter, gradient, 2 moments
        ("amp_bf16", 0, 1, 4 + 2 + 4 + 8),  # fp32 params + autocast copies
    ],
)
def test_model_states_follow_zero(
    precision: str, stage: int, dp: int, bytes_per_param: float
) -> None:
    spec = summary_spec(precision=precision, parallelism={"dp": dp, "zero_stage": stage})
    terms = breakdown(spec, find_gpu_model("A100-80GB"))
    states = terms.weights + terms.gradients + terms.optimizer
    if stage == 3:  # plus the gathered unit and its prefetch, the unit's unsharded grads
        states -= (2 * 2 + 2 + 4) * 1e9 / MIB
    assert states == pytest.approx(1e9 * bytes_per_param / MIB)


def test_pure_bf16_without_master_weights_and_other_optimizers() -> None:
    def states(**kw: object) -> float:
        terms = breakdown(summary_spec(**kw), None)
        return (terms.weights + terms.gradients + terms.optimizer) * MIB / 1e9

    assert states(precision="bf16", master_weights=False) == pytest.approx(2 + 2 + 4)
    assert states(optimizer="sgd") == pytest.approx(8)
    assert states(optimizer="sgd_momentum") == pytest.approx(12)


def test_pipeline_first_stage_holds_more_micro_batches() -> None:
    base = {
        "model": {"transformer": GPT.model_dump()},
        "batch_size": 1,
        "seq_len": 2048,
        "precision": "bf16",
    }

    def activations(**parallel: object) -> float:
        spec = TrainingSpec.model_validate({**base, "parallelism": parallel})
        return breakdown(spec, None).activations

    one = activations(pp=4, microbatches=8)
    gpipe = activations(pp=4, microbatches=8, pp_schedule="gpipe")
    assert gpipe > one > activations(pp=4, microbatches=1)


def test_bigger_inputs_and_batches_need_more_memory() -> None:
    def total(**kw: object) -> float:
        spec = TrainingSpec.model_validate(
            {"model": {"catalog": "resnet50"}, "batch_size": 32, **kw}
        )
        return breakdown(spec, find_gpu_model("T4")).total

    assert total(batch_size=64) > total() > total(batch_size=16)
    assert total(image_size=320) > total() > total(image_size=160)
    assert total(precision="amp_fp16") < total()
    assert total(activation_checkpointing="full") < total()


@pytest.mark.parametrize(
    "spec, problem",
    [
        ({"model": {"transformer": GPT.model_dump()}, "batch_size": 1}, "seq_len is required"),
        (
            {
                "model": {"transformer": GPT.model_dump()},
                "batch_size": 1,
                "seq_len": 8,
                "parallelism": {"tp": 3},
            },
            "tp (3) must divide heads",
        ),
        (
            {"model": {"catalog": "resnet50"}, "batch_size": 1, "parallelism": {"tp": 2}},
            "needs a transformer",
        ),
        ({"model": {"catalog": "resnet5O"}, "batch_size": 1}, "did you mean"),
        (
            {
                "model": {"transformer": GPT.model_dump()},
                "batch_size": 1,
                "seq_len": 8,
                "parallelism": {"pp": 64},
            },
            "exceeds the layers",
        ),
    ],
)
def test_specs_that_do_not_fit_their_model(spec: dict[str, object], problem: str) -> None:
    with pytest.raises(SpecError, match=re.escape(problem)):
        breakdown(TrainingSpec.model_validate(spec), None)


def test_parallelism_defaults_are_single_gpu() -> None:
    assert Parallelism() == Parallelism(dp=1, tp=1, pp=1, cp=1, zero_stage=0)
