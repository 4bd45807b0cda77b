"""One run's surprise (a peak far above its spec's other runs) bounds the spec, and
widens its architecture, only until two of the spec's runs repeat a lower peak, or
until it is RUNS_KEPT runs old."""

from __future__ import annotations

import pytest

from estimator.estimate import Estimator, default_estimator
from estimator.history import HISTORY_MARGIN, RUNS_KEPT, ObservationHistory
from estimator.spec import TrainingSpec

GPU = "NVIDIA A100-SXM4-40GB"
SPEC = TrainingSpec.model_validate({"model": {"catalog": "resnet50"}, "batch_size": 64})
OTHER_BATCH = SPEC.model_copy(update={"batch_size": 128})


def _estimator(history: ObservationHistory | None = None) -> Estimator:
    return Estimator(default_estimator().artifact, history or ObservationHistory())


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


def test_surprises_are_forgotten_after_as_many_runs_as_are_kept() -> None:
    estimator = _estimator()
    estimator.observe(SPEC, GPU, 25_000)
    estimator.observe(SPEC, GPU, 26_000)  # two surprises that happen to agree
    for _ in range(RUNS_KEPT - 2):
        estimator.observe(SPEC, GPU, 10_000)
    assert estimator.estimate(SPEC, GPU).peak_mib == 26_000  # still among the latest
    estimator.observe(SPEC, GPU, 10_000)
    estimator.observe(SPEC, GPU, 10_000)
    assert estimator.estimate(SPEC, GPU).peak_mib == 10_000


def test_a_run_on_several_gpus_counts_once() -> None:
    estimator = _estimator()
    estimator.observe(SPEC, GPU, 10_000, run=1)
    estimator.observe(SPEC, GPU, 10_100, run=2)
    estimator.observe(SPEC, GPU, 25_000, run=3)  # one surprise, reported by each GPU
    estimator.observe(SPEC, GPU, 24_800, run=3)
    assert estimator.estimate(SPEC, GPU).peak_mib == 10_100
    unnamed = _estimator()
    for peak in (10_000, 10_100, 25_000, 24_800):
        unnamed.observe(SPEC, GPU, peak)
    assert unnamed.estimate(SPEC, GPU).peak_mib == 25_000  # four runs: a repeated level


def test_an_oom_counts_where_its_spec_ran_no_repeated_lower_peak() -> None:
    estimator = _estimator()
    estimator.observe(SPEC, GPU, 10_000)
    estimator.observe_oom(SPEC, GPU, 12_000)  # one run needed more: nothing repeated
    seen = estimator.estimate(SPEC, GPU)
    assert seen.method == "history+model-history"
    assert seen.upper_mib == pytest.approx(12_000 * (1 + HISTORY_MARGIN), abs=1)
    estimator.observe(SPEC, GPU, 10_100)  # a lower peak repeated: the OOM was one run's
    assert estimator.estimate(SPEC, GPU).method == "history"
    estimator.observe(SPEC, GPU, 30_000)  # a higher figure lowers nothing
    seen = estimator.estimate(SPEC, GPU)
    assert seen.method == "history" and seen.peak_mib == 10_100


def test_ooms_that_repeat_one_another_count() -> None:
    estimator = _estimator()
    for peak in (10_000, 10_100, 20_000):
        estimator.observe(SPEC, GPU, peak)
    estimator.observe_oom(SPEC, GPU, 16_000)
    estimator.observe_oom(SPEC, GPU, 16_500)
    seen = estimator.estimate(SPEC, GPU)
    assert seen.method == "history+model-history"
    assert seen.upper_mib == pytest.approx(16_500 * (1 + HISTORY_MARGIN), abs=1)


def test_a_surprise_widens_its_architecture_until_its_spec_repeats_a_lower_peak() -> None:
    estimator = _estimator()
    before = estimator.estimate(OTHER_BATCH, GPU)
    modelled = estimator.estimate(SPEC, GPU).peak_mib
    estimator.observe(SPEC, GPU, round(modelled * 2.5))
    assert estimator.estimate(OTHER_BATCH, GPU).upper_mib > before.upper_mib
    estimator.observe(SPEC, GPU, round(modelled * 0.95))
    estimator.observe(SPEC, GPU, round(modelled * 0.97))
    assert estimator.estimate(OTHER_BATCH, GPU) == before


def test_an_owners_repeats_lower_its_own_surprise_and_no_shared_figure() -> None:
    history = ObservationHistory()
    estimator = _estimator(history)
    for peak in (10_000, 25_000, 10_100):
        estimator.observe(SPEC, GPU, peak, owner="alice")
    assert _estimator(history.seen_by("alice")).estimate(SPEC, GPU).peak_mib == 10_100
    estimator.observe(SPEC, GPU, 20_000, owner="bob")
    estimator.observe(SPEC, GPU, 21_000, owner="carol")  # agreed: every owner's
    for peak in (8_000, 8_100):  # carol's runs then repeat a lower peak
        estimator.observe(SPEC, GPU, peak, owner="carol")
    # a shared figure only rises: carol's own jobs too go by it, and alice's
    for owner in ("alice", "carol", "dave"):
        assert _estimator(history.seen_by(owner)).estimate(SPEC, GPU).peak_mib == 21_000
