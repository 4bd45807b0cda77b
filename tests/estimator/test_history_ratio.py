"""The history-ratio bound: a configuration's runs at two batch sizes bound its
model terms at batch sizes beyond them, once the fixed cost is learned; what it needs,
and what one owner cannot do with it to another."""

from __future__ import annotations

from dataclasses import replace

from estimator.analytical.model import breakdown
from estimator.estimate import HISTORY_RATIO, Estimator, default_estimator
from estimator.gpus import describe
from estimator.history import HISTORY_MARGIN, ObservationHistory
from estimator.offsets import MIN_OBSERVATIONS, environment_key
from estimator.spec import TrainingSpec

A100 = "A100-40GB"
GPU = describe(A100)
OFFSET_MIB = 800.0
AT = {
    batch: TrainingSpec.model_validate({"model": {"catalog": "resnet50"}, "batch_size": batch})
    for batch in (8, 64, 128, 512)
}


def _learn_offset(estimator: Estimator) -> None:
    """Small runs of one stack: the offset is learned, with no spread."""
    for _ in range(MIN_OBSERVATIONS):
        estimator.offsets.observe(environment_key(GPU.name, None), OFFSET_MIB, 100.0)


def _estimator(learned: bool = True) -> Estimator:
    estimator = Estimator(default_estimator().artifact, ObservationHistory())
    if learned:
        _learn_offset(estimator)
    return estimator


def _peak(spec: TrainingSpec, ratio: float) -> int:
    """A peak whose model terms are `ratio` times the analytical ones."""
    terms = breakdown(spec, GPU)
    return round(terms.fixed.total + OFFSET_MIB + ratio * terms.model_mib)


def _seen_by(estimator: Estimator, owner: str) -> Estimator:
    return Estimator(
        estimator.artifact, estimator.history.seen_by(owner), offsets=estimator.offsets
    )


def test_two_batch_sizes_bound_a_third_by_their_largest_ratio() -> None:
    estimator = _estimator()
    calibrated = estimator.estimate(AT[512], A100)
    estimator.observe(AT[64], A100, _peak(AT[64], 0.95))
    assert not estimator.estimate(AT[512], A100).method.startswith(HISTORY_RATIO)
    estimator.observe(AT[128], A100, _peak(AT[128], 1.0))
    bounded = estimator.estimate(AT[512], A100)
    assert bounded.method == HISTORY_RATIO  # no line: 512 lies beyond the batches seen
    terms = breakdown(AT[512], GPU)
    expected = terms.fixed.total + OFFSET_MIB + terms.model_mib * 1.0 * (1 + HISTORY_MARGIN)
    assert abs(bounded.upper_mib - expected) <= 2  # peaks and bounds are whole MiB
    assert bounded.upper_mib < calibrated.upper_mib  # the calibration alone is wider here
    assert bounded.peak_mib == calibrated.peak_mib  # a bound, not a new point


def test_an_unlearned_fixed_cost_or_small_runs_give_no_ratio() -> None:
    # without a learned offset a run's model terms are not known apart from the fixed cost
    estimator = _estimator(learned=False)
    for batch in (64, 128):
        estimator.observe(AT[batch], A100, _peak(AT[batch], 0.9))
    assert not estimator.estimate(AT[512], A100).method.startswith(HISTORY_RATIO)
    # a run with small model terms (batch 8: ~1.2 GiB) gives none either: the fixed
    # cost's error would be a large share of it
    estimator = _estimator()
    estimator.observe(AT[8], A100, _peak(AT[8], 0.5))
    estimator.observe(AT[64], A100, _peak(AT[64], 0.9))
    assert not estimator.estimate(AT[512], A100).method.startswith(HISTORY_RATIO)


def test_one_owner_cannot_lower_another_owners_bound() -> None:
    estimator = _estimator()
    for batch in (64, 128):  # credible, but low and mallory's alone
        estimator.observe(AT[batch], A100, _peak(AT[batch], 0.6), owner="mallory")
    carol = _seen_by(estimator, "carol").estimate(AT[512], A100)
    mallory = _seen_by(estimator, "mallory").estimate(AT[512], A100)
    assert not carol.method.startswith(HISTORY_RATIO)
    assert mallory.method.startswith(HISTORY_RATIO) and mallory.upper_mib < carol.upper_mib


def test_a_low_run_hides_no_higher_one() -> None:
    # alice's runs came before the offset was learned; mallory's low runs of the same
    # specs agree with no one's, so release nothing; bob's, a little lower than alice's,
    # do: the ratio is worked out now, from the largest peak each spec may be relied on
    # for, so alice's runs set it for everyone
    estimator = _estimator(learned=False)
    for batch in (64, 128):
        estimator.observe(AT[batch], A100, _peak(AT[batch], 1.2), owner="alice")
    _learn_offset(estimator)
    before = _seen_by(estimator, "dave").estimate(AT[512], A100)
    for batch in (64, 128):
        estimator.observe(AT[batch], A100, _peak(AT[batch], 0.3), owner="mallory")
    assert _seen_by(estimator, "dave").estimate(AT[512], A100) == before
    for batch in (64, 128):
        estimator.observe(AT[batch], A100, _peak(AT[batch], 1.15), owner="bob")
    dave = _seen_by(estimator, "dave").estimate(AT[512], A100)
    terms = breakdown(AT[512], GPU)
    assert dave.method.startswith(HISTORY_RATIO)  # maybe raised further by the runs' ratio
    assert dave.upper_mib >= terms.fixed.total + OFFSET_MIB + terms.model_mib * 1.2 * 1.1 - 2


def test_an_oom_of_the_architecture_still_raises_the_bound() -> None:
    estimator = _estimator()
    for batch in (64, 128):
        estimator.observe(AT[batch], A100, _peak(AT[batch], 0.9))
    bounded = estimator.estimate(AT[512], A100)
    estimator.observe_oom(AT[128], A100, _peak(AT[128], 1.5))  # it needed more than that
    raised = estimator.estimate(AT[512], A100)
    assert raised.method == HISTORY_RATIO + "+model-history"
    assert raised.upper_mib > bounded.upper_mib


def test_every_driver_of_the_gpu_model_needs_its_offset_learned() -> None:
    # the run's driver is not recorded, nor is the job's yet: under a driver whose
    # stack is not learned, its fixed cost (and so the runs' model terms) is unknown
    estimator = _estimator(learned=False)
    estimator.register_gpus([replace(GPU, driver_version=v) for v in ("550", "560")])
    for _ in range(MIN_OBSERVATIONS):  # 550's stack is learned, 560's not yet
        estimator.offsets.observe(environment_key(GPU.name, "550"), OFFSET_MIB, 100.0)
    for batch in (64, 128):
        estimator.observe(AT[batch], A100, _peak(AT[batch], 0.9))
    assert not estimator.estimate(AT[512], A100).method.startswith(HISTORY_RATIO)
    for _ in range(MIN_OBSERVATIONS):  # 560's stack holds 300 MiB more
        estimator.offsets.observe(environment_key(GPU.name, "560"), OFFSET_MIB + 300, 100.0)
    bounded = estimator.estimate(AT[512], A100)
    assert bounded.method == HISTORY_RATIO
    # the runs' model terms are taken with the smaller offset (the ratio never
    # understated), the bound's fixed cost with the larger
    terms = breakdown(AT[512], GPU)
    expected = terms.fixed.total + OFFSET_MIB + 300 + terms.model_mib * 0.9 * 1.1
    assert bounded.upper_mib >= expected - 2


def test_runs_on_another_gpu_model_bound_this_one() -> None:
    # model terms do not depend on the GPU: V100 runs bound the A100's, each taken
    # with its own GPU model's fixed cost, once both offsets are learned
    estimator = _estimator()
    v100 = describe("V100-32GB")
    for _ in range(MIN_OBSERVATIONS):
        estimator.offsets.observe(environment_key(v100.name, None), OFFSET_MIB, 100.0)
    for batch in (64, 128):
        terms = breakdown(AT[batch], v100)
        peak = round(terms.fixed.total + OFFSET_MIB + 1.05 * terms.model_mib)
        estimator.observe(AT[batch], "V100-32GB", peak)
    bounded = estimator.estimate(AT[512], A100)
    terms = breakdown(AT[512], GPU)
    expected = terms.fixed.total + OFFSET_MIB + terms.model_mib * 1.05 * 1.1
    assert bounded.method == HISTORY_RATIO and abs(bounded.upper_mib - expected) <= 3


def test_a_peak_within_its_fixed_cost_gives_no_ratio() -> None:
    estimator = _estimator()
    fixed = breakdown(AT[64], GPU).fixed.total + OFFSET_MIB
    estimator.observe(AT[64], A100, round(fixed))  # credible: above its weights
    estimator.observe(AT[128], A100, _peak(AT[128], 0.9))
    assert not estimator.estimate(AT[512], A100).method.startswith(HISTORY_RATIO)
