"""The history margin the cluster's repeat runs earn: a distribution-free tolerance
bound of how far a repeat went above its spec's earlier peaks."""

from __future__ import annotations

import pytest

from estimator.estimate import Estimator, default_estimator, proven_peaks
from estimator.history import HISTORY_MARGIN, ObservationHistory, tolerance_rank
from estimator.spec import TrainingSpec

GPU = "NVIDIA A100-SXM4-40GB"


def _spec(batch: int) -> TrainingSpec:
    return TrainingSpec.model_validate({"model": {"catalog": "resnet50"}, "batch_size": batch})


def _repeat(
    history: ObservationHistory, batch: int, ratio: float, owner: str | None = None
) -> None:
    """A spec run twice on GPU, the second run `ratio` times the first's peak."""
    history.add(_spec(batch), GPU, 10_000, 1.0, owner)
    history.add(_spec(batch), GPU, round(10_000 * ratio), 1.0, owner)


def _settled() -> ObservationHistory:
    """A history of 59 specs that read their peak again: enough for a margin of 0."""
    history = ObservationHistory()
    for batch in range(1, 60):
        _repeat(history, batch, 1.0)
    return history


def test_the_rank_is_wilks_sample_sizes() -> None:
    # the largest of 59, the second of 93, the third of 124 runs bounds 95% at 95%
    ranks = {n: tolerance_rank(n, 0.95, 0.95) for n in (1, 58, 59, 92, 93, 123, 124)}
    assert ranks == {1: None, 58: None, 59: 1, 92: 1, 93: 2, 123: 2, 124: 3}
    # many draws: close to the 5% above the quantile, less a few standard deviations
    assert 440 < (tolerance_rank(10_000, 0.95, 0.95) or 0) < 500


def test_repeats_that_read_their_peak_again_earn_a_smaller_margin() -> None:
    history = ObservationHistory()
    for batch in range(1, 59):
        _repeat(history, batch, 1.0)
    assert history.repeat_margin(0.95) == HISTORY_MARGIN  # 58: too few for a bound
    _repeat(history, 59, 1.03)
    assert history.repeat_margin(0.95) == pytest.approx(0.03)  # the largest of 59
    _repeat(history, 60, 2.0)  # more than the prior: the prior holds
    assert history.repeat_margin(0.95) == HISTORY_MARGIN

    estimator = Estimator(default_estimator().artifact, history)
    history.add(_spec(500), GPU, 30_000, 1.0)
    history.add(_spec(500), GPU, 30_000, 1.0)
    for batch in range(61, 63):
        _repeat(history, batch, 1.04)  # with 2.0 and 1.03: 4 above 1.0
    for batch in range(63, 200):
        _repeat(history, batch, 1.0)
    # 200 repeats: the 5th largest bounds them, 1.0
    assert history.repeat_margin(0.95) == 0.0
    seen = estimator.estimate(_spec(500), GPU)
    assert seen.method == "history" and seen.upper_mib == 30_000
    _repeat(history, 200, 1.02)  # the 5th largest of 201: 1.02
    assert estimator.estimate(_spec(500), GPU).upper_mib == 30_600


def test_an_oom_of_a_repeat_counts_at_what_it_held() -> None:
    history = _settled()
    assert history.repeat_margin(0.95) == 0.0
    history.add_oom(_spec(1), GPU, 10_500, 1.0)  # needed more than 1.05x the peak seen
    assert history.repeat_margin(0.95) == pytest.approx(0.05)
    history.add_oom(_spec(999), GPU, 90_000, 1.0)  # no peak of the spec before: no repeat
    for batch in range(60, 92):
        _repeat(history, batch, 1.0)
    _repeat(history, 92, 1.03)  # 92 repeats: the largest bounds them
    assert history.repeat_margin(0.95) == pytest.approx(0.05)
    history.add(_spec(93), GPU, 10_000, 1.0)
    history.add_oom(_spec(93), GPU, 4_000, 1.0)  # below its peak: a neighbour's doing
    assert history.repeat_margin(0.95) == pytest.approx(0.05)  # (a 93rd: the 2nd, 1.03)


def test_a_spec_that_died_of_an_oom_above_its_peak_is_bounded_above_that() -> None:
    history = _settled()
    estimator = Estimator(default_estimator().artifact, history)
    history.add(_spec(500), GPU, 30_000, 1.0)
    assert estimator.estimate(_spec(500), GPU).upper_mib == 30_000
    estimator.observe_oom(_spec(500), GPU, 31_000)
    seen = estimator.estimate(_spec(500), GPU)
    assert seen.method == "history+model-history"
    assert seen.upper_mib == pytest.approx(31_000 * (1 + HISTORY_MARGIN), abs=1)


def test_no_one_owner_talks_the_margin_down() -> None:
    history = ObservationHistory()
    for batch in range(1, 200):
        _repeat(history, batch, 1.0, owner="mallory")
    assert history.repeat_margin(0.95) == HISTORY_MARGIN  # one owner alone decides nothing
    for batch in range(200, 259):  # vouched-for repeats spread over 0-8%
        _repeat(history, batch, 1.0 + 0.08 * (batch - 200) / 58)
    # pooled, mallory's 199 would put the bound at the 7th largest (1.072); without
    # them the largest of the 59 others holds
    assert history.repeat_margin(0.95) == pytest.approx(0.08)
    for batch in range(300, 359):
        _repeat(history, batch, 1.0, owner="alice")
    # each left out in turn: without mallory's, 118 repeats, bounded by their 2nd largest
    assert history.repeat_margin(0.95) == pytest.approx(0.08 * 57 / 58, abs=1e-4)


def test_no_other_owners_peak_sets_what_a_repeat_is_judged_against() -> None:
    history = ObservationHistory()
    for batch in range(1, 60):  # mallory's runs, inflated, come first
        history.add(_spec(batch), GPU, 20_000, 1.0, "mallory")
        history.add(_spec(batch), GPU, 20_000, 1.0, "mallory")
        _repeat(history, batch, 1.0 + 0.08 * (batch - 1) / 58, owner="alice")
    # alice's repeats judged against her own peaks; against mallory's they would read
    # 0.5-0.54, and the margin would be 0
    assert history.repeat_margin(0.95) == pytest.approx(0.08, abs=1e-4)


def test_a_trusted_owners_repeats_are_vouched_for() -> None:
    history = ObservationHistory()
    for batch in range(1, 60):
        history.add(_spec(batch), GPU, 10_000, 1.0, "alice", trusted=True)
        history.add(_spec(batch), GPU, 10_000, 1.0, "alice", trusted=True)
    assert history.repeat_margin(0.95) == 0.0  # not one owner's alone: never left out


def test_every_view_of_a_history_sees_its_margin_as_it_is_now() -> None:
    history = ObservationHistory()
    view = history.seen_by("alice")
    assert view.repeat_margin(0.95) == HISTORY_MARGIN
    for batch in range(1, 60):
        _repeat(history, batch, 1.02)
    assert view.repeat_margin(0.95) == pytest.approx(0.02)
    _repeat(history, 60, 1.05)
    assert view.repeat_margin(0.95) == history.repeat_margin(0.95) == pytest.approx(0.05)


def test_an_oom_below_the_peak_leaves_the_peak_proven() -> None:
    history = _settled()
    estimator = Estimator(default_estimator().artifact, history)
    history.add(_spec(500), GPU, 39_000, 1.0)
    estimator.observe_oom(_spec(500), GPU, 37_000)  # a neighbour's doing, maybe
    seen = estimator.estimate(_spec(500), GPU)
    assert seen.method == "history" and seen.upper_mib == 39_000
    assert proven_peaks({GPU: seen}) == {GPU: 39_000}  # it may have the whole GPU


def test_a_trusted_run_is_judged_against_vouched_for_peaks_only() -> None:
    history = ObservationHistory()
    for batch in range(1, 60):
        _repeat(history, batch, 1.0 + 0.08 * (batch - 1) / 58)
    for batch in range(100, 160):  # an inflated peak, then a run an admin trusts
        history.add(_spec(batch), GPU, 20_000, 1.0, "mallory")
        history.add(_spec(batch), GPU, 10_000, 1.0, "mallory", trusted=True)
    assert history.repeat_margin(0.95) == pytest.approx(0.08, abs=1e-4)


@pytest.mark.parametrize("order", [(10_000, 10_300), (10_300, 10_000)])
def test_a_run_on_several_gpus_is_judged_at_its_largest_whichever_gpu_reports_first(
    order: tuple[int, int],
) -> None:
    history = _settled()  # 59 specs that read their peak again: a margin of 0
    history.add(_spec(1), GPU, 10_000, 1.0, run="before")  # a third run of spec 1
    for peak in order:  # one run on two GPUs
        history.add(_spec(1), GPU, peak, 1.0, run="pair")
    assert history.repeat_margin(0.95) == pytest.approx(0.03)  # 10,300 over 10,000
