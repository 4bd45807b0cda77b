"""One run's surprise (a peak far above its spec's other runs) bounds the spec, and
widens its architecture, only until two of the spec's runs repeat a lower peak."""

from __future__ import annotations

import pytest

from estimator.estimate import Estimator, default_estimator
from estimator.history import HISTORY_MARGIN, RUNS_KEPT, ObservationHistory
from estimator.spec import TrainingSpec

GPU = "NVIDIA A100-SXM4-40GB"
SPEC = TrainingSpec.model_validate({"model": {"catalog": "resnet50"}, "batch_size": 64})
OTHER_BATCH = SPEC.model_copy(update={"batch_size": 128})


def _estimator() -> Estimator:
    return Estimator(default_estimator().artifact, ObservationHistory())


def test_a_surprise_bounds_its_spec_until_two_runs_repeat_a_lower_peak() -> None:
    estimator = _estimator()
    estimator.observe(SPEC, GPU, 10_000)
    estimator.observe(SPEC, GPU, 25_000)  # one run's surprise
    assert estimator.estimate(SPEC, GPU).peak_mib == 25_000  # nothing repeated yet
    estimator.observe(SPEC, GPU, 10_300)
    seen = estimator.estimate(SPEC, GPU)
    assert seen.method == "history" and seen.peak_mib == 10_300
    assert seen.upper_mib == pytest.approx(10_300 * (1 + HISTORY_MARGIN), abs=1)


def test_a_high_peak_that_repeats_holds() -> None:
    estimator = _estimator()
    for peak in (10_000, 10_100, 25_000, 24_000):  # two levels, each repeated
        estimator.observe(SPEC, GPU, peak)
    assert estimator.estimate(SPEC, GPU).peak_mib == 25_000


def test_runs_of_one_level_keep_their_largest() -> None:
    estimator = _estimator()
    for peak in (10_000, 10_900, 10_500):  # each within HISTORY_MARGIN of the next
        estimator.observe(SPEC, GPU, peak)
    assert estimator.estimate(SPEC, GPU).peak_mib == 10_900


def test_surprises_beyond_the_runs_kept_hide_no_repeated_level() -> None:
    estimator = _estimator()
    surprises = [round(12_000 * 1.2**i) for i in range(RUNS_KEPT - 1)]  # all apart
    for peak in surprises:
        estimator.observe(SPEC, GPU, peak)
    estimator.observe(SPEC, GPU, 10_000)
    estimator.observe(SPEC, GPU, 10_200)
    # the kept runs are the largest: the repeated pair fell out, so the largest holds
    assert estimator.estimate(SPEC, GPU).peak_mib == surprises[-1]


def test_an_oom_above_every_run_bounds_the_spec_until_a_run_went_beyond_it() -> None:
    estimator = _estimator()
    estimator.observe(SPEC, GPU, 10_000)
    estimator.observe(SPEC, GPU, 10_100)
    estimator.observe_oom(SPEC, GPU, 12_000)  # one run needed more
    seen = estimator.estimate(SPEC, GPU)
    assert seen.method == "history+model-history"
    assert seen.upper_mib == pytest.approx(12_000 * (1 + HISTORY_MARGIN), abs=1)
    estimator.observe(SPEC, GPU, 30_000)  # its retry showed what it needed: a surprise
    seen = estimator.estimate(SPEC, GPU)
    assert seen.method == "history" and seen.peak_mib == 10_100


def test_a_surprise_widens_its_architecture_until_its_spec_repeats_a_lower_peak() -> None:
    estimator = _estimator()
    before = estimator.estimate(OTHER_BATCH, GPU)
    modelled = estimator.estimate(SPEC, GPU).peak_mib
    estimator.observe(SPEC, GPU, round(modelled * 2.5))
    assert estimator.estimate(OTHER_BATCH, GPU).upper_mib > before.upper_mib
    estimator.observe(SPEC, GPU, round(modelled * 0.95))
    estimator.observe(SPEC, GPU, round(modelled * 0.97))
    assert estimator.estimate(OTHER_BATCH, GPU) == before


def test_an_owners_repeats_lower_no_bound_another_owner_agreed_to() -> None:
    history = ObservationHistory()
    estimator = Estimator(default_estimator().artifact, history)
    estimator.observe(SPEC, GPU, 20_000, owner="alice")
    estimator.observe(SPEC, GPU, 21_000, owner="bob")  # agreed: every owner's
    for peak in (8_000, 8_100):  # bob's repeats of a lower peak
        estimator.observe(SPEC, GPU, peak, owner="bob")
    third = Estimator(default_estimator().artifact, history.seen_by("carol"))
    assert third.estimate(SPEC, GPU).peak_mib == 21_000
    # bob's own jobs go by what bob's runs repeated, and alice's by hers
    assert (
        Estimator(default_estimator().artifact, history.seen_by("bob")).estimate(SPEC, GPU).peak_mib
        == 21_000
    )
    assert (
        Estimator(default_estimator().artifact, history.seen_by("alice"))
        .estimate(SPEC, GPU)
        .peak_mib
        == 21_000
    )
