"""Bounds that hold where it matters: conformal claims only from enough points, and
physically implausible measurements flagged by a documented rule."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from estimator.analytical.model import breakdown
from estimator.estimate import Estimator
from estimator.gpus import describe
from estimator.learned import measurements
from estimator.learned.calibration import (
    SMALL_SAMPLE_WIDENING,
    calibrated_margin,
    conformal_quantile,
    coverage_by_group,
    min_conformal_points,
)
from estimator.learned.measurements import (
    BEYOND_TENSORS,
    FALLS,
    GROWS,
    SAME_PEAK,
    Run,
    beyond_tensors,
    implausible_runs,
)
from estimator.learned.train import environment_of, prepare, train
from estimator.spec import TrainingSpec


def test_no_conformal_claim_from_fewer_than_19_points_at_95() -> None:
    assert min_conformal_points(0.95) == 19
    assert min_conformal_points(0.9) == 9
    eighteen = np.linspace(0.0, 0.17, 18)
    with pytest.raises(ValueError, match="at least 19"):
        conformal_quantile(eighteen, 0.95)
    margin = calibrated_margin(eighteen, 0.95)
    assert not margin.conformal and margin.points == 18
    assert margin.log_ratio == pytest.approx(0.17 + math.log(1.25))
    nineteen = np.linspace(0.0, 0.18, 19)
    # ceil(20 * 0.95) = 19: the largest of 19 is the conformal quantile
    assert calibrated_margin(nineteen, 0.95).conformal
    assert calibrated_margin(nineteen, 0.95).log_ratio == pytest.approx(0.18)
    assert calibrated_margin(np.array([]), 0.95).log_ratio == SMALL_SAMPLE_WIDENING


def test_conformal_quantile_rank() -> None:
    residuals = np.arange(100, dtype=float)  # 0..99
    assert conformal_quantile(residuals, 0.95) == 95.0  # ceil(101 * 0.95) = 96th smallest


def test_coverage_is_reported_per_group() -> None:
    measured = np.array([10.0, 10.0, 10.0, 10.0])
    upper = np.array([11.0, 9.0, 12.0, 12.0])
    groups = np.array(["a", "a", "b", "b"])
    assert coverage_by_group(measured, upper, groups) == {"a": (2, 0.5), "b": (2, 0.0)}


def test_a_peak_that_falls_as_the_batch_grows_is_flagged() -> None:
    runs = [Run(8, 5000), Run(16, 7000), Run(32, 4000), Run(64, 9000)]
    # the other three grow as physics allows: the run that fell is the one left out
    # (9 GB is more than 1.1x twice its 4 GB, but within the others' bounds)
    assert implausible_runs(runs, None) == ["", "", FALLS, ""]
    # a dip inside the tolerance (cuDNN workspaces, a missed transient) is no flag
    assert implausible_runs([Run(8, 10000), Run(16, 9100)], None) == ["", ""]
    # two runs only: nothing tells which of them is wrong
    assert implausible_runs([Run(8, 10000), Run(16, 8900)], None) == [FALLS, FALLS]
    # a run at the card's limit is a floor: it judges no later run
    assert implausible_runs([Run(8, 40000, censored=True), Run(16, 20000)], None) == ["", ""]


def test_an_inflated_small_batch_is_the_run_left_out() -> None:
    # resnet26t in the shared timm sheet: 7.1 GB at batch 8, then 3.7 / 5.4 / 8.9 / 16.0
    # GB at 16-128, growing by 110 MiB a sample: the batch-8 reading is the wrong one
    runs = [Run(8, 7091), Run(16, 3677), Run(32, 5447), Run(64, 8919), Run(128, 15991)]
    assert implausible_runs(runs, None) == [FALLS, "", "", "", ""]


def test_runs_at_one_batch_size_are_judged_alike_in_either_order() -> None:
    assert implausible_runs([Run(8, 9050), Run(8, 10000)], None) == [GROWS, GROWS]
    assert implausible_runs([Run(8, 10000), Run(8, 9050)], None) == [GROWS, GROWS]
    runs = [Run(8, 10000), Run(8, 9500), Run(16, 9000)]
    assert implausible_runs(runs, None) == ["", "", ""]


def test_a_fall_is_a_crash_only_where_the_peak_could_reach_the_card(tmp_path: Path) -> None:
    series = {
        "big": [(8, 15000), (16, 30000), (32, 9000), (64, 12000)],  # 32 could need 66 GB
        "small": [(8, 7091), (16, 3677), (32, 5447), (64, 8919)],  # 16 needs 15.6 GB at most
        "full": [(8, 20000), (16, 39500), (32, 38000)],  # 16 filled the card
    }
    # each run's traced tensors as large as its reading: none is beyond them
    traced = {name: [(b, mib, mib) for b, mib in runs] for name, runs in series.items()}
    censored = _timm_censored(_timm_sheet(tmp_path, traced))
    assert [censored[("timm:big", b)] for b in (8, 16, 32, 64)] == [False, False, True, True]
    assert not any(censored[("timm:small", b)] for b in (8, 16, 32, 64))
    assert [censored[("timm:full", b)] for b in (8, 16, 32)] == [False, True, True]


def _timm_sheet(tmp_path: Path, series: dict[str, list[tuple[int, int, int]]]) -> Path:
    """A timm sheet of (batch, measured MiB, traced tensors MiB) runs by model name."""
    sheet = tmp_path / "timm.csv"
    lines = ["Filename,Batch Size,Max GPU Memory (MiB),Last Numeric Value"]
    lines += [f"{name}_{b}.out,{b},{mib},{t}" for name, rs in series.items() for b, mib, t in rs]
    sheet.write_text("\n".join(lines) + "\n")
    return sheet


def _timm_censored(sheet: Path) -> dict[tuple[str, int], bool]:
    return {
        (json.loads(r.model)["catalog"], r.batch_size): r.censored
        for r in measurements._timm_rows(sheet)
    }


def test_a_peak_far_beyond_its_traced_tensors_is_flagged() -> None:
    # the stack's fixed cost plus 4x the traced tensors is the most a step can hold
    assert not beyond_tensors(1731 + 4 * 1000, 1000, 1731)
    assert beyond_tensors(1731 + 4 * 1000 + 1, 1000, 1731)
    assert not beyond_tensors(30000, None, 1731)  # tensors not traced: never judged
    # mobilevitv2_100 in the shared timm sheet: 19.4 and 20.5 GB at batches 8 and 16,
    # 13-7x its traced 1.3 / 2.6 GB; 14.3 GB at 32 is no fall from them
    runs = [Run(8, 19435, beyond_tensors=True), Run(16, 20511, beyond_tensors=True)]
    runs.append(Run(32, 14343))
    assert implausible_runs(runs, None) == [BEYOND_TENSORS, BEYOND_TENSORS, ""]
    # a reading at the card's limit beyond its tensors is flagged too
    assert implausible_runs([Run(8, 39500, True, True)], None) == [BEYOND_TENSORS]


def test_a_fall_from_a_reading_beyond_its_tensors_is_no_crash(tmp_path: Path) -> None:
    # mobilevitv2_125 in the shared timm sheet: 30.1 GB at batch 8 (traced 1.6 GB),
    # then 8.5 and 9.4 GB at 16 and 32 (traced 3.2 and 6.5 GB), which grow as physics
    # allows; "tiny" sets the campaign's stack (its smallest reading)
    series = {"inflated": [(8, 30137, 1621), (16, 8535, 3241), (32, 9387, 6480)]}
    series["tiny"] = [(8, 1731, 10)]
    sheet = _timm_sheet(tmp_path, series)
    censored = _timm_censored(sheet)
    assert not any(censored[("timm:inflated", b)] for b in (8, 16, 32))
    flags = {
        r.batch_size: r.implausible
        for r in measurements.flag_implausible(measurements._timm_rows(sheet))
        if r.model == json.dumps({"catalog": "timm:inflated"})
    }
    assert flags == {8: BEYOND_TENSORS, 16: "", 32: ""}


def test_a_run_alone_beyond_its_tensors_is_flagged() -> None:
    row = measurements.Measurement(
        "timm", "timm:x", '{"catalog": "timm:x"}', 8, None, None, "fp32", "adam",
        measurements.A100, 30000, False, faketensor_mib=1000.0,
    )  # fmt: skip
    small = replace(row, model='{"catalog": "timm:y"}', measured_mib=2000)  # the stack
    assert [r.implausible for r in measurements.flag_implausible([row, small])] == [
        BEYOND_TENSORS,
        "",
    ]


def test_a_card_filled_beyond_its_tensors_censors_no_larger_batch(tmp_path: Path) -> None:
    # vgg13 at 32 in the shared sheet: 39.6 GB, traced 2.6 GB, between runs that
    # grow with the batch; a card filled by a reading beyond its tensors is no crash
    series = {
        "filled": [(8, 6000, 900), (16, 7500, 1600), (32, 39577, 2609), (64, 13561, 5000)],
        "tiny": [(8, 1731, 10)],
    }
    censored = _timm_censored(_timm_sheet(tmp_path, series))
    assert not any(censored[("timm:filled", b)] for b in (8, 16, 32, 64))


def test_a_crashed_run_below_a_kept_smaller_batch_is_flagged() -> None:
    # a floor (at the card's limit, or crashed) judges no run, and joins no set
    runs = [Run(8, 15549), Run(16, 16000), Run(32, 6487, censored=True)]
    assert implausible_runs(runs, None) == ["", "", FALLS]
    runs = [Run(8, 15549), Run(16, 16000), Run(32, 40321, censored=True)]
    assert implausible_runs(runs, None) == ["", "", ""]


def test_a_peak_that_grows_faster_than_the_batch_is_flagged() -> None:
    # resnetaa34d in the shared timm sheet: 2.5 / 21.7 / 22.9 / 6.3 / 16.7 GB; no three
    # of them are consistent, and several pairs are: every run is flagged
    runs = [Run(8, 2500), Run(16, 21700), Run(32, 22900), Run(64, 6300), Run(128, 16700)]
    assert implausible_runs(runs, None) == [GROWS, GROWS, GROWS, FALLS, FALLS]
    # twice the batch, a little over twice the peak (within the tolerance): no flag
    assert implausible_runs([Run(8, 5000), Run(16, 10900)], None) == ["", ""]
    assert implausible_runs([Run(8, 5000), Run(16, 11100)], None) == [GROWS, GROWS]
    runs = [Run(8, 5000), Run(16, 11100), Run(32, 9000)]
    assert implausible_runs(runs, None) == ["", GROWS, ""]
    # a run at the card's limit is a floor, never too high
    assert implausible_runs([Run(8, 5000), Run(16, 40000, censored=True)], None) == ["", ""]


def test_identical_peaks_at_4x_the_batch_are_flagged_where_activations_show() -> None:
    runs = [Run(8, 5000), Run(16, 5100), Run(32, 5000)]
    # 24 more samples at 10 MiB each cannot fit in the same memory
    assert implausible_runs(runs, [80.0, 160.0, 320.0]) == [SAME_PEAK, "", SAME_PEAK]
    # 24 samples of 0.5 MiB fit in one 20 MiB allocator segment: plausible
    assert implausible_runs(runs, [4.0, 8.0, 16.0]) == ["", "", ""]
    # the optimizer step's temporaries outweigh the activations at all three batches:
    # the batch-dependent term, and the peak, need not grow
    assert implausible_runs(runs, [900.0, 900.0, 900.0]) == ["", "", ""]
    # 2x apart, or unknown activations: not judged
    assert implausible_runs([Run(8, 5000), Run(16, 5000)], [80.0, 160.0]) == ["", ""]
    assert implausible_runs(runs, None) == ["", "", ""]
    # resnetaa50d: 38,835 MiB at batch 8 and, crashed, at batch 32; two runs at the
    # card's limit may read alike
    crashed = [Run(8, 38835), Run(16, 4489, censored=True), Run(32, 38835, censored=True)]
    assert implausible_runs(crashed, [900.0, 1800.0, 3600.0])[::2] == [SAME_PEAK, SAME_PEAK]
    at_card = [Run(8, 39500, censored=True), Run(32, 39500, censored=True)]
    assert implausible_runs(at_card, [900.0, 3600.0]) == ["", ""]


def test_the_committed_table_carries_the_rule_and_training_leaves_flagged_rows_out() -> None:
    rows = measurements.read()
    assert [r.implausible for r in measurements.flag_implausible(rows)] == [
        r.implausible for r in rows
    ]
    counts = Counter(r.implausible for r in rows if r.implausible)
    assert counts[FALLS] > 0 and counts[SAME_PEAK] > 0 and counts[BEYOND_TENSORS] > 0
    # resnetaa34d: 2.5 / 21.7 / 22.9 / 6.3 / 16.7 GB, traced 0.4 / 0.7 / 1.3 / 2.7 / 5.3
    resnetaa = {
        r.batch_size: r.implausible for r in rows if r.model == '{"catalog": "timm:resnetaa34d"}'
    }
    assert resnetaa == {8: "", 16: BEYOND_TENSORS, 32: BEYOND_TENSORS, 64: GROWS, 128: GROWS}
    # resnet26t's fall at batch 16 is no crash: its 7.1 GB at batch 8 is 8x what that
    # batch traced (0.7 GB) above the stack; the batch-8 reading is flagged, the four
    # that grow are truth
    resnet26t = [r for r in rows if r.model == '{"catalog": "timm:resnet26t"}']
    assert [(r.batch_size, r.censored, r.implausible) for r in resnet26t] == [
        (8, False, BEYOND_TENSORS),
        *((batch, False, "") for batch in (16, 32, 64, 128)),
    ]
    flagged = [r for r in rows if r.implausible and not r.censored][:50]
    assert flagged and prepare(flagged).rows == []


SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared data folder is not beside the repo")
def test_the_committed_table_is_what_extraction_gives() -> None:
    assert measurements.extract(SHARED) == measurements.read()


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared data folder is not beside the repo")
def test_lucid_imagenet_runs_are_a_plausible_held_out_campaign() -> None:
    rows = measurements.lucid_rows(SHARED)
    assert len(rows) == 12 and {r.gpu_model for r in rows} == {measurements.RTX_3090}
    assert {r.precision for r in rows} == {"fp32", "amp_fp16"}
    assert not any(r.implausible for r in measurements.flag_implausible(rows))


def test_an_analytical_margin_charges_an_unlearned_stack_once() -> None:
    """The CNN campaign's offset is never learned (no run small enough), so its runs'
    bounds carry the unlearned-stack allowance (the MLP campaign's learned offset here).
    The vision margin, from its 18 runs (no conformal claim), must then be the worst run
    over that bound's own score widened by log 1.25: the worst run sits exactly 1.25x
    under its bound's model part. Scored on the plain log-ratio, the stack was counted
    as model error too and that run sat further under (the allowance charged twice)."""
    table = measurements.read()
    cnns = [r for r in table if r.source == "cnns"]
    mlp = [r for r in table if r.source == "mlp_step1"][:300]
    trained = train([*cnns, *mlp])
    allowance = trained.manifest["fixed_offset_spread_mib"]
    assert allowance > 500 and "vision" not in trained.manifest["domain"]["kinds"]
    estimator = Estimator(trained)
    under = []
    for row in prepare(cnns).rows:
        estimate = estimator.estimate(row.spec(), row.gpu_model, environment_of(row))
        assert estimate.method == "analytical" and estimate.upper_mib >= row.measured_mib
        floor = estimate.fixed_mib + allowance
        under.append((estimate.upper_mib - floor) / (row.measured_mib - floor))
    assert min(under) == pytest.approx(math.exp(SMALL_SAMPLE_WIDENING), rel=1e-3)
    # a learned environment's own offset margin is not credited (it does not carry over)
    data = prepare([*cnns, *mlp])
    learned = np.array([r.source == "mlp_step1" for r in data.rows])
    assert np.array_equal(data.bound_log_ratio[learned], data.log_ratio[learned])
    assert np.all(data.bound_log_ratio[~learned] < data.log_ratio[~learned])


def test_runs_estimated_beyond_their_card_are_left_out_of_training() -> None:
    """A run whose analytical estimate reaches its card left a reading only because
    that estimate was too high: trained on, such survivors teach the correction that
    large jobs need less than their terms. Training leaves them out (judging keeps them)."""
    a100 = "NVIDIA A100-SXM4-40GB"

    def run(batch: int, peak_mib: int) -> measurements.Measurement:
        body = {"model": {"catalog": "timm:resnet50"}, "batch_size": batch}
        spec = TrainingSpec.model_validate(body)
        assert (breakdown(spec, describe(a100)).total >= 40960) == (batch == 1024)
        return measurements.observation(spec, a100, peak_mib)

    rows = [run(64, 7000), run(1024, 38000)]
    data = prepare(rows)
    assert [r.batch_size for r in data.rows] == [64]
    assert data.skipped == {"analytical estimate beyond the card": 1}
    assert [r.batch_size for r in prepare(rows, include_censored=True).rows] == [64, 1024]
