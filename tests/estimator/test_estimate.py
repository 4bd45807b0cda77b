"""Estimates through the packaged estimator: contract, methods, history, physics."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from estimator import estimate
from estimator.catalog import entries
from estimator.estimate import FIXED_TERMS, Estimator, default_estimator
from estimator.history import HISTORY_MARGIN, ObservationHistory, batch_line, fingerprint
from estimator.learned import measurements
from estimator.learned.train import refit
from estimator.spec import TrainingSpec

RESNET = TrainingSpec.model_validate({"model": {"catalog": "resnet50"}, "batch_size": 64})
LLAMA = {
    "model": {"catalog": "hf:meta-llama/Llama-2-7b-hf"},
    "batch_size": 1,
    "seq_len": 4096,
    "precision": "bf16",
    "optimizer": "adamw",
    "flash_attention": True,
}


def test_estimate_follows_the_contract() -> None:
    estimate = default_estimator().estimate(RESNET, "A100-40GB")
    assert estimate.gpu_model == "NVIDIA A100-SXM4-40GB"
    assert estimate.method == "analytical+learned"
    assert estimate.coverage == 0.95
    assert estimate.upper_mib >= estimate.peak_mib > 0
    assert set(estimate.breakdown_mib) == {
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "allocator",
        *FIXED_TERMS,
    }
    assert sum(estimate.breakdown_mib.values()) == estimate.peak_mib
    assert estimate.fixed_mib == sum(estimate.breakdown_mib[t] for t in FIXED_TERMS)
    assert estimate.model_version.startswith("2026.12.0+")


def test_outside_the_calibrated_domain_the_physics_answers() -> None:
    spec = TrainingSpec.model_validate({**LLAMA, "parallelism": {"dp": 8, "zero_stage": 3}})
    estimate = default_estimator().estimate(spec, "H100-80GB")
    assert estimate.method == "analytical"
    # 6.7e9 params * 16 bytes / 8 ranks = 12.6 GiB of states, plus activations
    assert 15 * 1024 < estimate.peak_mib < 60 * 1024
    alone = default_estimator().estimate(TrainingSpec.model_validate(LLAMA), "H100-80GB")
    assert alone.peak_mib > 100 * 1024  # 16 bytes per parameter cannot fit one 80 GB GPU


@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-40GB", "H100-80GB"])
def test_no_catalogued_image_model_is_estimated_lower_at_a_larger_batch(gpu: str) -> None:
    """Every image model of the catalog, its batch doubled from 8 to 1024: neither the
    estimate nor its bound may fall. Trained on runs that survived an analytical
    overestimate at their card's limit, the correction once put ViT-B at 27.1 GiB for a
    batch of 512 against 29.0 for 256 (1,157 falls over these models on the A100)."""
    estimator = default_estimator()
    falls = []
    for source in ("timm", "torchvision"):
        for name, entry in entries()[source].items():
            if not entry.activations_per_sample:
                continue
            previous = (0, 0)
            for batch in (8, 16, 32, 64, 128, 256, 512, 1024):
                body = {"model": {"catalog": f"{source}:{name}"}, "batch_size": batch}
                got = estimator.estimate(TrainingSpec.model_validate(body), gpu)
                if got.peak_mib < previous[0] or got.upper_mib < previous[1]:
                    falls.append((name, batch, previous, (got.peak_mib, got.upper_mib)))
                previous = (got.peak_mib, got.upper_mib)
    assert falls == []


def test_sharding_and_recomputation_reduce_per_gpu_memory() -> None:
    def peak(**kw: object) -> int:
        spec = TrainingSpec.model_validate({**LLAMA, **kw})
        return default_estimator().estimate(spec, "H100-80GB").peak_mib

    base = peak(parallelism={"dp": 8, "zero_stage": 1})
    assert peak(parallelism={"dp": 8, "zero_stage": 2}) < base
    assert peak(parallelism={"dp": 8, "zero_stage": 3}) < peak(
        parallelism={"dp": 8, "zero_stage": 2}
    )
    assert peak(parallelism={"tp": 8}) < peak(parallelism={"tp": 2})
    ckpt = peak(parallelism={"dp": 8, "zero_stage": 3}, activation_checkpointing="full")
    assert ckpt < peak(parallelism={"dp": 8, "zero_stage": 3})


def test_exact_history_wins_for_a_spec_seen_before() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    estimator.observe(RESNET, "NVIDIA A100-SXM4-40GB", 5000)
    estimator.observe(RESNET, "A100-40GB", 5400)
    seen = estimator.estimate(RESNET, "A100-40GB")
    assert seen.method == "history" and seen.peak_mib == 5400
    assert seen.upper_mib == pytest.approx(5400 * (1 + HISTORY_MARGIN), abs=1)
    other = RESNET.model_copy(update={"batch_size": 65})
    assert fingerprint(other) != fingerprint(RESNET)
    assert estimator.estimate(other, "A100-40GB").method == "analytical+learned"


def test_an_architecture_that_ran_above_its_estimate_gets_a_wider_bound() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    other = RESNET.model_copy(update={"batch_size": 128})
    before = estimator.estimate(other, "A100-40GB")
    modelled = estimator.estimate(RESNET, "A100-40GB").peak_mib
    estimator.observe(RESNET, "A100-40GB", round(modelled * 1.5))  # 50% above its estimate
    after = estimator.estimate(other, "A100-40GB")
    assert after.method == "analytical+learned+model-history"
    assert after.peak_mib == before.peak_mib  # the point estimate stands; the bound widens
    assert after.upper_mib == pytest.approx(before.peak_mib * 1.5 * (1 + HISTORY_MARGIN), rel=1e-3)
    assert after.upper_mib > before.upper_mib
    # a run below its estimate never narrows the calibrated bound
    quiet = Estimator(default_estimator().artifact, ObservationHistory())
    quiet.observe(RESNET, "A100-40GB", round(modelled * 0.9))
    assert quiet.estimate(other, "A100-40GB") == before
    vit = TrainingSpec.model_validate({"model": {"catalog": "vit_b_16"}, "batch_size": 32})
    assert estimator.estimate(vit, "A100-40GB").method == "analytical+learned"  # another model


def test_an_oom_widens_the_architectures_bound_but_is_no_peak() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    other = RESNET.model_copy(update={"batch_size": 128})
    before = estimator.estimate(other, "A100-40GB")
    modelled = estimator.estimate(RESNET, "A100-40GB").peak_mib
    estimator.observe_oom(RESNET, "A100-40GB", round(modelled * 1.4))  # died holding this
    after = estimator.estimate(other, "A100-40GB")
    assert after.upper_mib == pytest.approx(before.peak_mib * 1.4 * (1 + HISTORY_MARGIN), rel=1e-3)
    assert estimator.estimate(RESNET, "A100-40GB").method == "analytical+learned+model-history"
    assert estimator.observations == []  # nothing for history or a refit


def test_an_estimate_is_stale_once_its_architecture_ran_or_the_calibration_changed() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    other = RESNET.model_copy(update={"batch_size": 128})
    vit = TrainingSpec.model_validate({"model": {"catalog": "vit_b_16"}, "batch_size": 8})
    basis = estimator.basis(other)
    assert not estimator.stale(basis) and estimator.stale(None) and estimator.stale("x")
    estimator.observe(vit, "A100-40GB", 9000)  # another architecture
    assert not estimator.stale(basis)
    seen = _seen_by(estimator, "ann")  # what one owner's jobs see: the same runs
    estimator.observe_oom(RESNET, "A100-40GB", 30000)  # another batch size, same model
    assert estimator.stale(basis) and seen.stale(basis)
    assert not estimator.stale(estimator.basis(other)) and seen.basis(other) == estimator.basis(
        other
    )
    assert estimator.with_artifact(None).stale(estimator.basis(other))
    version, digest, runs, vouched = estimator.basis(other).split("|")
    assert not estimator.stale(f"{version}|{digest}|{int(runs) + 1}|{vouched}")  # knew more
    assert estimator.stale(f"{version}|{digest}|{runs}")  # a basis of before it counted both


def test_an_estimate_is_stale_once_runs_it_knew_were_vouched_for() -> None:
    """An admin's trust rebuilds the history with as many runs, more of them vouched for:
    what every owner may rely on changed."""
    owned = ObservationHistory()
    estimator = Estimator(default_estimator().artifact, owned)
    estimator.observe(RESNET, "A100-40GB", 9000, owner="ann")
    basis = estimator.basis(RESNET)
    rebuilt = replace(estimator, history=ObservationHistory())
    rebuilt.observe(RESNET, "A100-40GB", 9000, owner="ann", trusted=True)
    assert rebuilt.stale(basis) and not estimator.stale(basis)


def _seen_by(estimator: Estimator, owner: str) -> Estimator:
    return replace(estimator, history=estimator.history.seen_by(owner))


def test_one_owners_run_widens_the_architecture_for_that_owner_only() -> None:
    """A run's ratio widens its owner's bounds of the architecture at once, another
    owner's only once another owner's run of the spec on that GPU model went as far
    (within HISTORY_MARGIN)."""
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    other = RESNET.model_copy(update={"batch_size": 128})
    before = estimator.estimate(other, "A100-40GB")

    def run(spec: TrainingSpec, gpu: str, owner: str, ratio: float = 1.0) -> None:
        modelled = estimator.estimate(spec, gpu).peak_mib
        estimator.observe(spec, gpu, round(modelled * ratio), owner=owner)

    run(RESNET, "A100-40GB", "mallory", ratio=3.0)
    widened = pytest.approx(before.peak_mib * 3 * (1 + HISTORY_MARGIN), rel=1e-3)
    assert _seen_by(estimator, "mallory").estimate(other, "A100-40GB").upper_mib == widened
    assert estimator.estimate(other, "A100-40GB") == before  # no viewer: shared ones only
    run(RESNET, "H100", "carol")  # on another GPU model: it checks nothing
    run(RESNET.model_copy(update={"batch_size": 32}), "A100-40GB", "carol")  # another spec
    assert _seen_by(estimator, "carol").estimate(other, "A100-40GB") == before
    run(RESNET, "A100-40GB", "carol")  # the spec ran there for another owner, at 1x
    assert _seen_by(estimator, "dave").estimate(other, "A100-40GB") == before
    run(RESNET, "A100-40GB", "bob", ratio=2.9)  # a second owner's run went as far
    assert _seen_by(estimator, "dave").estimate(other, "A100-40GB").upper_mib == widened


def test_an_owners_oom_widens_its_next_attempt_and_others_once_corroborated() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    other = RESNET.model_copy(update={"batch_size": 128})
    before = estimator.estimate(other, "A100-40GB")
    modelled = estimator.estimate(RESNET, "A100-40GB").peak_mib

    def upper(owner: str) -> int:
        return _seen_by(estimator, owner).estimate(other, "A100-40GB").upper_mib

    estimator.observe_oom(RESNET, "A100-40GB", round(modelled * 1.4), owner="alice")
    assert upper("alice") == pytest.approx(before.peak_mib * 1.4 * (1 + HISTORY_MARGIN), rel=1e-3)
    assert upper("bob") == before.upper_mib
    # bob's run of the spec there, at its estimate, does not agree with alice's OOM
    estimator.observe(RESNET, "A100-40GB", modelled, owner="bob")
    assert upper("carol") == before.upper_mib
    # bob's OOM holding nearly as much corroborates hers
    estimator.observe_oom(RESNET, "A100-40GB", round(modelled * 1.35), owner="bob")
    assert upper("carol") == upper("alice")
    # an admin's (trusted) OOM counts for every owner at once
    estimator.observe_oom(other, "A100-40GB", round(before.peak_mib * 1.6), "root", True)
    assert upper("carol") == pytest.approx(before.peak_mib * 1.6 * (1 + HISTORY_MARGIN), rel=1e-3)


def test_one_owners_peak_far_above_anothers_raises_no_third_owners_estimate() -> None:
    """Alice ran the spec honestly, mallory held 38 GiB: each sees its own peak, carol
    neither (they disagree), until a second owner's run agrees with one of them."""
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    before = estimator.estimate(RESNET, "A100-40GB")
    estimator.observe(RESNET, "A100-40GB", 5000, owner="alice")
    estimator.observe(RESNET, "A100-40GB", 38_000, owner="mallory")
    assert _seen_by(estimator, "carol").estimate(RESNET, "A100-40GB") == before
    assert _seen_by(estimator, "mallory").estimate(RESNET, "A100-40GB").peak_mib == 38_000
    assert _seen_by(estimator, "alice").estimate(RESNET, "A100-40GB").peak_mib == 5000
    estimator.observe(RESNET, "A100-40GB", 4800, owner="bob")
    carol = _seen_by(estimator, "carol").estimate(RESNET, "A100-40GB")
    assert (carol.method, carol.peak_mib) == ("history", 5000)


def test_an_owners_oom_of_a_spec_raises_others_bounds_once_another_agrees() -> None:
    """What an OOM held bounds its owner's next run of the spec at once; another
    owner's once a second owner's OOM held about as much, or an admin's at once."""
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    estimator.observe(RESNET, "A100-40GB", 5000)  # vouched for: every owner's history

    def upper(owner: str) -> int:
        return _seen_by(estimator, owner).estimate(RESNET, "A100-40GB").upper_mib

    plain = upper("carol")
    estimator.observe_oom(RESNET, "A100-40GB", 9000, owner="alice")
    assert upper("alice") == pytest.approx(9000 * (1 + HISTORY_MARGIN), abs=1)
    assert upper("carol") == plain
    estimator.observe_oom(RESNET, "A100-40GB", 6000, owner="bob")  # far less: no agreement
    assert upper("carol") == plain
    estimator.observe_oom(RESNET, "A100-40GB", 8500, owner="dave")
    assert upper("carol") == upper("alice")
    estimator.observe_oom(RESNET, "A100-40GB", 12_000, "root", trusted=True)
    assert upper("carol") == pytest.approx(12_000 * (1 + HISTORY_MARGIN), abs=1)


def test_history_on_another_gpu_model_moves_with_the_fixed_cost() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    assert estimator.estimate(RESNET, "H100").method == "analytical+learned"
    a100_fixed = estimator.estimate(RESNET, "A100-40GB").fixed_mib
    estimator.observe(RESNET, "A100-40GB", 9400)
    estimator.observe(RESNET, "A100-80GB", 9000)
    h100 = estimator.estimate(RESNET, "H100")
    assert h100.method == "history-other-gpu"
    # the A100's fixed cost out, the H100's (a larger context and Hopper's 32 MiB cuBLAS
    # workspaces, estimator/analytical/context.py) in
    assert h100.fixed_mib > a100_fixed + 100
    assert h100.peak_mib == pytest.approx(9400 - a100_fixed + h100.fixed_mib, abs=1)
    assert h100.upper_mib == pytest.approx(h100.peak_mib * (1 + HISTORY_MARGIN), abs=2)
    assert estimator.estimate(RESNET, "A100-80GB").peak_mib == 9000  # its own history first
    gang = TrainingSpec.model_validate({**RESNET.model_dump(), "parallelism": {"dp": 2}})
    assert not estimator.estimate(gang, "H100").method.startswith("history")  # another spec


def test_a_batch_between_two_observed_ones_lies_on_their_line() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    at = {batch: RESNET.model_copy(update={"batch_size": batch}) for batch in (16, 32, 64, 256)}
    estimator.observe(at[16], "A100-40GB", 4000)
    estimator.observe(at[64], "A100-40GB", 10000)
    between = estimator.estimate(at[32], "A100-40GB")
    assert between.method == "history-batch"
    assert between.peak_mib == 6000  # a third of the way from 16 to 64
    assert between.upper_mib == pytest.approx(6000 * (1 + HISTORY_MARGIN), abs=1)
    # on another GPU model, the line of the runs moved to its fixed cost
    h100 = estimator.estimate(at[32], "H100")
    a100_fixed = estimator.estimate(RESNET, "A100-40GB").fixed_mib
    assert h100.method == "history-batch"
    assert h100.peak_mib == pytest.approx(6000 - a100_fixed + h100.fixed_mib, abs=1)
    # beyond the batches seen the models answer; a precision never run has no line
    assert not estimator.estimate(at[256], "A100-40GB").method.startswith("history")
    bf16 = at[32].model_copy(update={"precision": "bf16"})
    assert not estimator.estimate(bf16, "A100-40GB").method.startswith("history")


def test_no_line_through_batches_far_apart_or_a_falling_pair() -> None:
    assert batch_line({16: 4000.0, 64: 10000.0}, 32) == 6000.0
    assert batch_line({8: 4000.0, 64: 10000.0}, 32) is None  # 8x apart
    assert batch_line({16: 10000.0, 64: 4000.0}, 32) is None  # falls as the batch grows
    assert batch_line({16: 4000.0, 32: 6000.0}, 64) is None  # no extrapolation
    # two batches below place a line too: the higher of the two answers
    assert batch_line({8: 1000.0, 16: 5000.0, 64: 8000.0}, 32) == 13000.0
    # ...but not beyond twice their gap: repeat runs' 5% noise between batches 31 and 32
    # would put batch 120 at 27 GB; the chord to 128 answers
    assert batch_line({31: 5000.0, 32: 5250.0, 128: 12000.0}, 120) == 11437.5
    # a falling pair below means a wrong reading: no line, not the chord through it
    assert batch_line({16: 8000.0, 32: 2000.0, 64: 10000.0}, 48) is None


def test_only_peaks_visible_to_the_owner_place_a_line() -> None:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    at = {batch: RESNET.model_copy(update={"batch_size": batch}) for batch in (16, 32, 64)}
    estimator.observe(at[16], "A100-40GB", 4000, owner="alice")
    estimator.observe(at[64], "A100-40GB", 10000, owner="alice")
    seen_by = {
        owner: Estimator(estimator.artifact, estimator.history.seen_by(owner))
        for owner in ("alice", "bob")
    }
    assert seen_by["alice"].estimate(at[32], "A100-40GB").method == "history-batch"
    assert not seen_by["bob"].estimate(at[32], "A100-40GB").method.startswith("history")


def test_a_bigger_gpu_context_does_not_change_the_job() -> None:
    t4 = default_estimator().estimate(RESNET, "T4")
    a100 = default_estimator().estimate(RESNET, "A100-40GB")
    assert t4.breakdown_mib["weights"] == pytest.approx(a100.breakdown_mib["weights"], rel=0.2)


def test_refit_learns_from_observed_peaks_and_keeps_the_old_estimator() -> None:
    old = Estimator(default_estimator().artifact, ObservationHistory())
    bf16 = RESNET.model_copy(update={"precision": "bf16"})
    assert old.estimate(bf16, "A100-40GB").method == "analytical"
    for batch in (16, 32, 64, 128):
        spec = bf16.model_copy(update={"batch_size": batch})
        old.observe(spec, "A100-40GB", 2000 + 40 * batch)
    base = measurements.read()
    new = refit(old, base)
    assert new.version != old.version
    assert "bf16" in new.artifact.manifest["domain"]["precisions"]  # type: ignore[union-attr]
    unseen = bf16.model_copy(update={"batch_size": 8})  # below every batch observed
    # in the refitted calibration's domain now (its bound may still be widened by the
    # architecture's observed runs: model-history)
    assert new.estimate(unseen, "A100-40GB").method.startswith("analytical+learned")
    # the old calibration still answers with the analytical model (widened or not)
    assert old.estimate(unseen, "A100-40GB").method in ("analytical", "analytical+model-history")
    assert new.estimate(bf16.model_copy(update={"batch_size": 64}), "A100-40GB").method == (
        "history"
    )


def test_kept_model_terms_give_the_estimates_made_afresh() -> None:
    """An estimator keeps each (spec, GPU)'s model terms; as offsets and history move
    and its calibration changes, its estimates stay those of an estimator that works
    everything out anew with the same history and offsets."""
    rows = measurements.read()
    specs = [rows[i].spec() for i in range(0, len(rows), len(rows) // 40)]
    gpus = ["A100-40GB", "T4", "H100-80GB", "V100-32GB"]
    kept = Estimator(default_estimator().artifact)

    def afresh() -> Estimator:
        return Estimator(kept.artifact, kept.history, [], kept.offsets, kept.gpus)

    for round_ in range(3):
        for i, spec in enumerate(specs):
            for gpu in gpus:
                assert kept.estimate(spec, gpu) == afresh().estimate(spec, gpu)
            peak = kept.estimate(spec, gpus[i % 4]).peak_mib
            kept.learn_fixed_cost(spec, gpus[i % 4], peak + 700.0)
            if i % 5 == round_:
                kept.observe(spec, gpus[i % 4], int(peak * 1.3))
        kept.artifact = None if round_ == 0 else default_estimator().artifact
    assert len(kept._models_kept) == len(specs) * len(gpus)


def test_kept_values_are_bounded_and_shared_by_threads_without_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service's request threads share an estimator's caches (estimate._kept)."""
    monkeypatch.setattr(estimate, "MODELLED_KEPT", 8)
    cache: dict[int, int] = {}

    def fill(start: int) -> list[int]:
        def double(key: int) -> Callable[[], int]:
            return lambda: 2 * key

        return [estimate._kept(cache, key, double(key)) for key in range(start, start + 5000)]

    with ThreadPoolExecutor(4) as pool:
        filled = list(pool.map(fill, range(0, 20000, 5000)))
    assert [values[-1] for values in filled] == [2 * (s + 4999) for s in range(0, 20000, 5000)]
    assert len(cache) <= 8 + 4  # each thread may add one past the bound in a race
