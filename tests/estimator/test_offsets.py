"""The learned per-environment fixed-cost offset: robust, bounded, deterministic."""

from __future__ import annotations

import random

import pytest

from estimator.offsets import (
    AGREEMENT_MIB,
    DECIDING_MODEL_MIB,
    HIGHEST_OFFSET_MIB,
    MIN_OBSERVATIONS,
    VOUCHED,
    WINDOW,
    FixedCostOffsets,
    decides,
    environment_key,
)


def test_nothing_is_learned_below_the_minimum_count() -> None:
    offsets = FixedCostOffsets()
    for _ in range(MIN_OBSERVATIONS - 1):
        offsets.observe("a", 900.0, 100.0)
    assert offsets.offset_mib("a") == 0.0 and offsets.digest() == ""
    offsets.observe("a", 900.0, 100.0)
    assert offsets.offset_mib("a") == 900.0 and offsets.digest() != ""


def test_one_odd_run_cannot_move_it() -> None:
    offsets = FixedCostOffsets()
    for residual in (950.0, 1000.0, 1020.0, 980.0, 1010.0, 990.0):
        offsets.observe("a", residual, 50.0)
    before = offsets.offset_mib("a")
    offsets.observe("a", 30_000.0, 50.0)  # a job that leaked, or a foreign process
    assert abs(offsets.offset_mib("a") - before) <= 15.0


def test_runs_with_large_model_terms_do_not_decide_it() -> None:
    """Large models' relative errors would swamp the fixed cost; small ones decide."""
    offsets = FixedCostOffsets()
    for _ in range(5):
        offsets.observe("a", 800.0, 200.0)
    for _ in range(4):
        offsets.observe("a", 6000.0, 30_000.0)
    assert offsets.offset_mib("a") == 800.0


def test_bounded_and_windowed() -> None:
    offsets = FixedCostOffsets()
    for _ in range(MIN_OBSERVATIONS):
        offsets.observe("a", 50_000.0, 10.0)
    assert offsets.offset_mib("a") == HIGHEST_OFFSET_MIB
    for _ in range(WINDOW):
        offsets.observe("a", 100.0, 10.0)
    assert offsets.count("a") == WINDOW and offsets.offset_mib("a") == 100.0
    for _ in range(2 * WINDOW):  # runs of large models never push out the deciding ones
        offsets.observe("a", 5_000.0, 20 * DECIDING_MODEL_MIB)
    assert offsets.count("a") == 2 * WINDOW and offsets.offset_mib("a") == 100.0
    copy = FixedCostOffsets()
    copy.load("a", [*offsets.to_json("a"), [100.0, 10.0, VOUCHED]])
    assert copy.count("a") == 2 * WINDOW and copy.offset_mib("a") == 100.0


def test_round_trip_and_keys() -> None:
    offsets = FixedCostOffsets()
    key = environment_key("NVIDIA A100-SXM4-40GB", "550.54.15")
    for residual in range(5):
        offsets.observe(key, 700.0 + residual, 100.0)
    copy = FixedCostOffsets()
    copy.load(key, offsets.to_json(key))
    assert copy.offsets() == offsets.offsets() and copy.digest() == offsets.digest()
    assert offsets.largest([key, environment_key("NVIDIA A100-SXM4-40GB", None)]) == 702.0
    with pytest.raises(ValueError):
        copy.load(key, {"not": "a list"})


def test_the_margin_follows_the_spread_of_the_deciding_runs() -> None:
    steady = FixedCostOffsets()
    for _ in range(MIN_OBSERVATIONS):
        steady.observe("a", 800.0, 10.0)
    assert steady.margin_mib("a") == 0.0
    noisy = FixedCostOffsets()
    for residual in (760.0, 780.0, 800.0, 820.0, 840.0):
        noisy.observe("a", residual, 10.0)
    margin = noisy.margin_mib("a")
    assert 40.0 < margin < 100.0  # 2 x 1.4826 x MAD (20 MiB)
    noisy.observe("a", 30_000.0, 10.0)  # one leaking job cannot widen every bound
    assert noisy.margin_mib("a") < 2 * margin
    assert FixedCostOffsets().margin_mib("a") == 0.0
    assert noisy.largest_margin(["a", "b"]) == noisy.margin_mib("a")


def test_one_ordinary_owner_alone_never_sets_it() -> None:
    offsets = FixedCostOffsets()
    for _ in range(3 * MIN_OBSERVATIONS):
        offsets.observe("a", -400.0, 10.0, voter="mallory")
    assert not offsets.in_force("a") and offsets.offset_mib("a") == 0.0
    assert offsets.digest() == ""
    offsets.observe("a", 300.0, 10.0, voter=VOUCHED)  # an admin's run corroborates
    assert offsets.in_force("a")


def test_each_owner_is_one_vote_however_many_runs_it_sends() -> None:
    offsets = FixedCostOffsets()
    for _ in range(50):
        offsets.observe("a", -500.0, 10.0, voter="mallory")
    for _ in range(2):
        offsets.observe("a", 600.0, 10.0, voter="alice")
    # two owners who disagree: neither may lower (or raise) the other's vote alone
    assert not offsets.in_force("a") and offsets.offset_mib("a") == 0.0
    for _ in range(2):
        offsets.observe("a", 620.0, 10.0, voter="bob")
    assert offsets.offset_mib("a") == 600.0  # of three, the median vote
    copy = FixedCostOffsets()
    copy.load("a", offsets.to_json("a"))
    assert copy.offset_mib("a") == 600.0 and copy.digest() == offsets.digest()


def test_one_owner_cannot_move_a_vouched_offset() -> None:
    """Of a vouched vote and one owner's, the vouched one counts: one odd run, or many,
    of a second owner moves it neither up nor down."""
    offsets = FixedCostOffsets()
    for _ in range(20):
        offsets.observe("a", 100.0, 10.0, voter=VOUCHED)
    offsets.observe("a", 4000.0, 10.0, voter="mallory")  # one run, GiBs above the rest
    assert offsets.offset_mib("a") == 100.0
    for _ in range(50):
        offsets.observe("a", -500.0, 10.0, voter="mallory")
    assert offsets.offset_mib("a") == 100.0


def test_two_owners_corroborate_it_only_as_far_as_both_show() -> None:
    """Two ordinary owners put it in force only where their votes agree, at the vote
    nearer the prior: one odd job of the second owner neither sets nor raises it."""
    offsets = FixedCostOffsets()
    for _ in range(4):
        offsets.observe("a", 100.0, 10.0, voter="alice")
    offsets.observe("a", 4000.0, 10.0, voter="mallory")  # five deciding runs, two owners
    assert not offsets.in_force("a") and offsets.offset_mib("a") == 0.0
    assert offsets.digest() == ""
    agreeing = FixedCostOffsets()
    for _ in range(3):
        agreeing.observe("a", 600.0, 10.0, voter="alice")
    for _ in range(2):
        agreeing.observe("a", 600.0 - AGREEMENT_MIB, 10.0, voter="bob")
    assert agreeing.in_force("a") and agreeing.offset_mib("a") == 600.0 - AGREEMENT_MIB
    for _ in range(4):  # bob's vote, still agreeing, now above alice's: hers stands
        agreeing.observe("a", 600.0 + AGREEMENT_MIB, 10.0, voter="bob")
    assert agreeing.offset_mib("a") == 600.0
    straddling = FixedCostOffsets()
    for voter, residual in (("alice", 100.0), ("bob", -100.0)) * 3:
        straddling.observe("a", residual, 10.0, voter=voter)
    assert straddling.in_force("a") and straddling.offset_mib("a") == 0.0


def test_a_fourth_voter_never_moves_it_past_the_others() -> None:
    """Of an even number of votes the prior breaks the tie: the offset is a vote the
    others cast, however far the fourth lies on either side."""
    for odd in (-500.0, 4000.0):
        offsets = FixedCostOffsets()
        for voter, residual in (("alice", 600.0), ("bob", 620.0), ("carol", 640.0)) * 2:
            offsets.observe("a", residual, 10.0, voter=voter)
        offsets.observe("a", odd, 10.0, voter="mallory")
        assert offsets.offset_mib("a") == (600.0 if odd < 0 else 620.0)


def test_each_voter_weighs_one_in_the_margin() -> None:
    """However many runs one owner sends, exactly at the vote or scattered GiBs around
    it, the margin is a figure the other voters or the fallback give."""
    margin = 2 * 1.4826 * 20.0  # the vouched runs' median absolute deviation: 20 MiB
    for scatter in (0.0, 2000.0):
        offsets = FixedCostOffsets()
        for residual in (760.0, 780.0, 800.0, 820.0, 840.0):
            offsets.observe("a", residual, 10.0, voter=VOUCHED)
        assert offsets.margin_mib("a") == pytest.approx(margin)
        for sign in (-1, 1) * 50:
            offsets.observe("a", 800.0 + sign * scatter, 10.0, voter="mallory")
        assert offsets.offset_mib("a") == 800.0
        assert offsets.margin_mib("a") == pytest.approx(margin)
    owners = FixedCostOffsets()
    for voter, runs in (("alice", (580.0, 600.0, 620.0)), ("bob", (570.0, 600.0, 630.0))):
        for residual in runs:
            owners.observe("a", residual, 10.0, voter=voter)
    for sign in (-1, 1) * 50:
        owners.observe("a", 600.0 + sign * 3000.0, 10.0, voter="mallory")
    # of three figures (20, 30 and 3,000 MiB from the vote, 600), the median
    assert owners.margin_mib("a") == pytest.approx(2 * 1.4826 * 30.0)


def test_of_two_owners_one_cannot_narrow_the_margin() -> None:
    """Mallory's runs, all at one value within AGREEMENT_MIB below alice's vote, make
    his vote the offset and his own figure 0: the margin is alice's figure, which holds
    both her runs' scatter and the gap between their votes."""
    offsets = FixedCostOffsets()
    for residual in (980.0, 1000.0, 1020.0) * 2:
        offsets.observe("a", residual, 10.0, voter="alice")
    low = 1000.0 - AGREEMENT_MIB + 11.0
    for _ in range(6):
        offsets.observe("a", low, 10.0, voter="mallory")
    assert offsets.offset_mib("a") == low
    # alice's runs lie 245-265 MiB above it, their median 245
    assert offsets.margin_mib("a") == pytest.approx(2 * 1.4826 * (1000.0 - low))


def test_a_campaign_of_large_models_leaves_the_prior() -> None:
    """A new environment's first runs are all of large models whose terms the analytical
    model overestimates by 20%: residual = 1000 - 0.2 x model. Their residuals measure
    model error, not fixed cost, so however many there are the offset stays at its prior
    (0) until runs whose model terms are small enough arrive; those then decide it."""
    offsets = FixedCostOffsets()
    stack_mib = 1000.0
    for model_mib in (2_700.0, 4_000.0, 6_700.0, 12_000.0, 22_800.0) * 2:
        offsets.observe("a", stack_mib - 0.2 * model_mib, model_mib)
    assert not offsets.in_force("a") and offsets.offset_mib("a") == 0.0
    assert offsets.margin_mib("a") == 0.0 and offsets.digest() == ""
    for model_mib in (20.0, 80.0, 150.0, 300.0, DECIDING_MODEL_MIB):
        offsets.observe("a", stack_mib - 0.2 * model_mib, model_mib)
    assert offsets.in_force("a")
    assert stack_mib - 0.2 * DECIDING_MODEL_MIB <= offsets.offset_mib("a") <= stack_mib
    assert offsets.offset_mib("a") == stack_mib - 0.2 * 150.0  # the deciding runs' median


def test_a_stack_that_outweighs_the_model_terms_decides_it() -> None:
    """An eager-loading stack ~1.5 GiB above the defaults, seen first through runs of
    0.6-1.3 GiB model terms that the analytical model misses by up to 10%: each
    residual is larger than its run's model terms, so those runs decide the offset,
    their median (the run the model misses by 0%) exactly the stack. A run whose
    residual is below its model terms does not decide."""
    offsets = FixedCostOffsets()
    stack_mib = 1_500.0
    offsets.observe("a", 2_400.0, 2_500.0)  # model terms above its residual
    for model_mib, error in ((700.0, 0.1), (1_300.0, -0.1), (650.0, 0.05), (1_250.0, 0.0)):
        offsets.observe("a", stack_mib + error * model_mib, model_mib)
    assert not offsets.in_force("a")
    offsets.observe("a", stack_mib - 0.05 * 340.0, 340.0)
    assert offsets.in_force("a")
    assert offsets.offset_mib("a") == stack_mib  # the median: the 1,250 MiB run's, exact
    assert not decides(2_400.0, 2_500.0) and decides(2_400.0, 2_400.0)


def test_corroboration_counts_deciding_runs_only() -> None:
    """A second owner's large-model runs cannot corroborate one owner's small ones."""
    offsets = FixedCostOffsets()
    for _ in range(MIN_OBSERVATIONS):
        offsets.observe("a", -400.0, 10.0, voter="mallory")
    offsets.observe("a", 900.0, 4 * DECIDING_MODEL_MIB, voter="alice")
    assert not offsets.in_force("a") and offsets.offset_mib("a") == 0.0


def test_runs_kept_as_they_come_match_windowing_every_run_again() -> None:
    """`observe` keeps the window and the deciding runs incrementally: after every run
    both, and every figure, are those of the plain definition (all runs so far, the
    newest WINDOW of each kind kept, the deciding ones filtered from them)."""
    rng = random.Random(19)
    offsets = FixedCostOffsets()
    seen: dict[str, list[list[float | str]]] = {}
    for step in range(8 * WINDOW):
        key = rng.choice(["a", "b"])
        # deciding and large runs in long and short streaks, from three voters (a run
        # just above DECIDING_MODEL_MIB decides when its residual is larger; 5,000 MiB
        # twice, so that most runs of the long streaks are large and never decide)
        model = rng.choice([10.0, DECIDING_MODEL_MIB, DECIDING_MODEL_MIB + 1, 5_000.0, 5_000.0])
        if step % 300 < 100:
            model = 10.0
        run: list[float | str] = [
            rng.uniform(-300.0, 900.0),
            model,
            rng.choice([VOUCHED, "u1", "u2"]),
        ]
        offsets.observe(key, float(run[0]), float(run[1]), str(run[2]))
        plain = FixedCostOffsets()
        seen[key] = [*seen.get(key, []), run]
        for each, runs in seen.items():
            plain.load(each, runs)  # all runs so far, windowed in one go
        seen[key] = plain.to_json(key)
        assert offsets.to_json(key) == seen[key]
        assert list(offsets._small_model_runs(key)) == [
            r for r in plain.residuals[key] if decides(r.residual_mib, r.model_mib)
        ]
        assert offsets.in_force(key) == plain.in_force(key)
        assert offsets.offset_mib(key) == plain.offset_mib(key)
        assert offsets.margin_mib(key) == plain.margin_mib(key)
        assert offsets.digest() == plain.digest()
    assert {offsets.count(k) for k in "ab"} == {2 * WINDOW}
