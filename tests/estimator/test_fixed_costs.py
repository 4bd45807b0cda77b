"""Any GPU, and the per-process fixed cost apart from the model-dependent terms."""

from __future__ import annotations

import pytest

from estimator.analytical.context import (
    BARE_CONTEXT_MIB,
    PROCESS_CONTEXT_MIB,
    fixed_cost,
    workspaces_mib,
)
from estimator.estimate import DOMAIN_FACTOR, FIXED_TERMS, Estimator, default_estimator
from estimator.gpus import (
    GENERIC_COMPUTE_CAPABILITY,
    GENERIC_MEMORY_MIB,
    describe,
    parse_compute_capability,
)
from estimator.offsets import MIN_OBSERVATIONS
from estimator.spec import TrainingSpec

BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"  # in no catalog of ours
CIFAR = TrainingSpec.model_validate(
    {"model": {"catalog": "resnet18"}, "batch_size": 128, "image_size": 32}
)
MODEL_TERMS = ("weights", "gradients", "optimizer", "activations", "allocator")


def fresh() -> Estimator:
    return Estimator(default_estimator().artifact)


def test_any_gpu_name_is_described_and_says_what_it_assumed() -> None:
    unknown = describe(BLACKWELL)
    assert unknown.known is None and unknown.name == BLACKWELL
    assert (unknown.memory_mib, unknown.compute_capability) == (
        GENERIC_MEMORY_MIB,
        GENERIC_COMPUTE_CAPABILITY,
    )
    assert "not in the catalog" in (unknown.note() or "")
    reported = describe(BLACKWELL, 97887, (12, 0))
    assert reported.assumed == () and reported.note() is None
    # a catalogued model brings its figures and aliases; a reported figure wins
    assert describe("h100-nvl").name == "NVIDIA H100 NVL"
    assert describe("RTX5090").memory_mib == 32607
    assert describe("A100-40GB", 40000).memory_mib == 40000
    with pytest.raises(ValueError):
        parse_compute_capability("nine")


def test_an_unknown_gpu_is_estimated() -> None:
    estimate = fresh().estimate(CIFAR, BLACKWELL)
    assert estimate.gpu_model == BLACKWELL and estimate.peak_mib > 0
    assert estimate.notes and "assuming" in estimate.notes[0]
    described = fresh().estimate(CIFAR, describe(BLACKWELL, 97887, (12, 0)))
    assert described.notes == []
    # Blackwell takes Hopper's 32 MiB cuBLAS and cuBLASLt workspaces, Ampere does not
    assert described.breakdown_mib["workspaces"] > estimate.breakdown_mib["workspaces"]


def test_current_stack_defaults_and_the_measured_context() -> None:
    a100 = describe("A100-40GB")
    assert fixed_cost(a100, False).context == PROCESS_CONTEXT_MIB["pre_hopper"]
    assert fixed_cost(describe("H100"), False).context == PROCESS_CONTEXT_MIB["hopper_on"]
    # (8,125 KiB + 4 MiB) x 2 handles on a large Ampere card; (32 + 32) MiB x 2 on Hopper
    assert workspaces_mib(a100) == pytest.approx(2 * (8320 + 4096) / 1024)
    assert workspaces_mib(describe("H100")) == 128
    assert fixed_cost(a100, True).communication > 0 == fixed_cost(a100, False).communication
    measured = describe("A100-40GB", context_mib=500)
    assert fixed_cost(measured, False).context == 500 + PROCESS_CONTEXT_MIB["pre_hopper"] - (
        BARE_CONTEXT_MIB
    )


def test_the_breakdown_keeps_the_fixed_cost_apart_from_the_model_terms() -> None:
    small = fresh().estimate(CIFAR, "A100-40GB")
    large = fresh().estimate(CIFAR.model_copy(update={"batch_size": 512}), "A100-40GB")
    assert small.method == large.method == "analytical+learned"
    for term in FIXED_TERMS:  # the batch moves none of the fixed cost
        assert small.breakdown_mib[term] == large.breakdown_mib[term]
    assert large.breakdown_mib["activations"] > 2 * small.breakdown_mib["activations"]
    # the learned correction acts on the model terms only: the analytical estimate of
    # the same spec has the same fixed cost
    analytical = Estimator(None).estimate(CIFAR, "A100-40GB")
    assert analytical.method == "analytical"
    assert {t: analytical.breakdown_mib[t] for t in FIXED_TERMS} == {
        t: small.breakdown_mib[t] for t in FIXED_TERMS
    }
    assert sum(small.breakdown_mib[t] for t in MODEL_TERMS) == small.peak_mib - small.fixed_mib
    # a small CIFAR job on a current stack: well under a GiB (nvidia-smi shows ~0.6 GB)
    assert small.peak_mib < 1024


def test_a_learned_offset_moves_every_later_estimate() -> None:
    estimator = fresh()
    before = estimator.estimate(CIFAR, "A100-40GB")
    # an unlearned environment's bound allows for a stack as costly as any measured one
    spread = default_estimator().artifact.manifest["fixed_offset_spread_mib"]  # type: ignore[union-attr]
    assert spread > 500 and before.upper_mib - before.peak_mib > spread
    for batch in (16, 32, 64, 128, 256):
        spec = CIFAR.model_copy(update={"batch_size": batch})
        residual = estimator.fixed_cost_residual(spec, "A100-40GB", 0)
        peak = -residual.residual_mib + 900  # this cluster's stack holds 900 MiB more
        estimator.learn_fixed_cost(spec, "A100-40GB", peak)
    after = estimator.estimate(CIFAR, "A100-40GB")
    assert after.breakdown_mib["fixed_offset"] == pytest.approx(900, abs=2)
    assert after.peak_mib == pytest.approx(before.peak_mib + 900, abs=2)
    assert after.fixed_mib == pytest.approx(before.fixed_mib + 900, abs=2)
    assert after.model_version != before.model_version and "+fc." in after.model_version
    assert after.upper_mib - after.peak_mib < spread  # learned: no allowance for it left
    # other GPUs, other drivers: their own environments, untouched
    assert fresh().estimate(CIFAR, "H100").model_version == before.model_version
    assert (
        estimator.estimate(CIFAR, describe("A100-40GB", driver_version="999.1")).breakdown_mib[
            "fixed_offset"
        ]
        == 0
    )


def test_far_outside_the_training_ranges_the_analytical_model_answers() -> None:
    estimator = fresh()
    ranges = estimator.artifact.manifest["domain"]["ranges"]  # type: ignore[union-attr]
    largest_batch = 2.718281828 ** ranges["log_batch"][1]
    inside = CIFAR.model_copy(update={"batch_size": round(largest_batch)})
    outside = CIFAR.model_copy(update={"batch_size": round(largest_batch * DOMAIN_FACTOR * 2)})
    assert estimator.estimate(inside, "A100-40GB").method == "analytical+learned"
    far = estimator.estimate(outside, "A100-40GB")
    assert far.method == "analytical"
    margin = estimator.artifact.manifest["analytical_margins"]["vision"]  # type: ignore[union-attr]
    model = far.peak_mib - far.fixed_mib
    assert far.upper_mib >= far.fixed_mib + model * 2.718281828**margin - 1


def test_residuals_count_in_their_environment_only() -> None:
    estimator = fresh()
    key = estimator.learn_fixed_cost(CIFAR, "A100-40GB", 3000, environment="campaign")
    assert key == "campaign" and estimator.offsets.count("campaign") == 1
    for _ in range(MIN_OBSERVATIONS - 1):
        estimator.learn_fixed_cost(CIFAR, "A100-40GB", 3000, environment="campaign")
    inside = estimator.estimate(CIFAR, "A100-40GB", environment="campaign")
    assert inside.peak_mib == pytest.approx(3000, abs=2)
    assert estimator.estimate(CIFAR, "A100-40GB").breakdown_mib["fixed_offset"] == 0
