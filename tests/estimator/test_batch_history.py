"""The history-batch estimate as other owners see it: what releases a configuration's
peaks to the line, what one owner cannot do to another's line, and what it is not."""

from __future__ import annotations

from estimator.estimate import Estimator, default_estimator, proven_peaks
from estimator.history import ObservationHistory
from estimator.spec import TrainingSpec

RESNET = TrainingSpec.model_validate({"model": {"catalog": "resnet50"}, "batch_size": 64})
AT = {batch: RESNET.model_copy(update={"batch_size": batch}) for batch in (16, 24, 32, 64)}
A100 = "A100-40GB"


def _estimator() -> Estimator:
    return Estimator(default_estimator().artifact, ObservationHistory())


def _seen_by(estimator: Estimator, owner: str) -> Estimator:
    return Estimator(estimator.artifact, estimator.history.seen_by(owner))


def test_peaks_released_by_corroboration_place_a_line_for_everyone() -> None:
    # a spec's peaks are kept once for both indexes: a release by corroboration
    # (another owner's run of the same spec agreed) must reach the configuration's line
    estimator = _estimator()
    estimator.observe(AT[16], A100, 4000, owner="alice")
    estimator.observe(AT[64], A100, 10000, owner="alice")
    assert not _seen_by(estimator, "carol").estimate(AT[32], A100).method.startswith("history")
    # bob's runs reached 25% and 10% less: either owner may be wrong, nothing is released
    estimator.observe(AT[16], A100, 3000, owner="bob")
    estimator.observe(AT[64], A100, 9000, owner="bob")
    assert not _seen_by(estimator, "carol").estimate(AT[32], A100).method.startswith("history")
    # dave's reached a little less (within HISTORY_MARGIN): the line is alice's
    estimator.observe(AT[16], A100, 3700, owner="dave")
    estimator.observe(AT[64], A100, 9500, owner="dave")
    line = _seen_by(estimator, "carol").estimate(AT[32], A100)
    assert (line.method, line.peak_mib) == ("history-batch", 6000)


def test_one_owner_cannot_lower_another_owners_line() -> None:
    estimator = _estimator()
    for owner in ("alice", "bob"):  # released peaks at 16 and 64
        estimator.observe(AT[16], A100, 4000, owner=owner)
        estimator.observe(AT[64], A100, 10000, owner=owner)
    # a credible but fake low run at a batch between, not corroborated: only its owner's
    estimator.observe(AT[24], A100, 500, owner="mallory")
    assert _seen_by(estimator, "carol").estimate(AT[32], A100).peak_mib == 6000
    assert _seen_by(estimator, "mallory").estimate(AT[32], A100).peak_mib < 6000
    # an honest run of batch 24 does not agree with the fake one: neither counts
    estimator.observe(AT[24], A100, 5500, owner="dave")
    assert _seen_by(estimator, "carol").estimate(AT[32], A100).peak_mib == 6000
    # a second honest one does: the line takes the peak they agree on, never the fake one
    estimator.observe(AT[24], A100, 5400, owner="erin")
    carol = _seen_by(estimator, "carol").estimate(AT[32], A100)
    assert carol.method == "history-batch"
    assert carol.peak_mib > 6000


def test_an_oom_of_the_spec_itself_raises_its_line() -> None:
    # a line is only as good as the batches it passes through: a run of the spec itself
    # that died of an OOM holding more keeps the bound above what it held
    estimator = _estimator()
    estimator.observe(AT[16], A100, 4000)
    estimator.observe(AT[64], A100, 10000)
    estimator.observe_oom(AT[32], A100, 20000)
    widened = estimator.estimate(AT[32], A100)
    assert widened.method == "history-batch+model-history"
    assert widened.peak_mib == 6000 and widened.upper_mib > 20000


def test_a_line_is_not_a_peak_the_spec_reached() -> None:
    # proven peaks let a job that fits its peak but not peak plus margin take a whole
    # GPU; a point on a line was never reached, so it proves nothing
    estimator = _estimator()
    estimator.observe(AT[16], A100, 4000)
    estimator.observe(AT[64], A100, 10000)
    line = estimator.estimate(AT[32], A100)
    assert line.method == "history-batch"
    assert proven_peaks({A100: line}) == {}


def test_a_run_on_one_gpu_model_does_not_release_a_fake_peak_on_another() -> None:
    estimator = _estimator()
    estimator.observe(AT[24], "H100", 500, owner="mallory")  # credible: above the weights
    estimator.observe(AT[24], A100, 5500, owner="dave")
    carol = _seen_by(estimator, "carol").estimate(AT[24], "H100")
    assert carol.upper_mib > 5000
