"""A cluster's own fixed cost per process, learned from what its jobs really used.

The estimator charges every process a fixed cost (CUDA context, library workspaces,
NCCL buffers; `analytical/context.py`) from defaults for current software stacks.
A real environment differs by a roughly constant amount: eager module loading, a
different driver or PyTorch build, libraries a job image adds. That amount is the
environment's *offset*, learned here from the residuals of finished runs:

    residual_mib = observed peak - the estimate made without any offset

An environment is whatever key the caller chooses: the service keys by GPU model
and driver (`environment_key`), training by measurement source, a benchmark by
campaign. The statistic is robust so that one odd run cannot move it:

- only runs whose model-dependent terms are no larger than their fixed cost *decide*
  an offset. The physics: a run's residual is the offset plus the model terms' own
  error, `residual = offset + e * model_mib`, and the analytical terms miss by a
  relative error e of 10-50% that differs from one architecture to the next
  (bench/RESULTS.md). Only where the model terms are no larger than the fixed cost does
  the fixed cost dominate what is measured, so that the residual is mostly offset; a
  large model's residual is mostly its own model error, whatever its rank among the
  runs seen (the first runs of a campaign of large models would otherwise set the
  offset to their model error). A run decides if its model terms are at most
  `DECIDING_MODEL_MIB`, about a process's default fixed cost (e * model_mib <= ~250
  MiB), or at most its own residual: there the stack's cost above the defaults alone
  outweighs the model terms (an eager-loading stack, ~1-1.6 GiB above them; Lucid's
  RTX 3090 campaign learns its offset only so, bench/RESULTS.md), and the model error
  it carries is at most e / (1 - e) of the offset (11% at e = 10%, 43% at 30%). A
  run whose model terms are underestimated decides more easily: on a stack at the
  defaults, runs whose model terms measured twice their estimate or more (e >= 1)
  decide, and if they were most of the deciding runs the offset would be their model
  error. That errs only upwards (reservations too large, never an OOM), and a median
  of the deciding runs needs most of them to err so;
- nothing is learned below `MIN_OBSERVATIONS` deciding runs: until then the prior
  stays (offset 0, the current-stack defaults of `analytical/context.py`, and bounds
  keep the allowance for a stack not learned yet);
- it is in force only once *corroborated*, since an offset moves every owner's
  reservations: every run is tagged with who vouches for it (its owner, or `VOUCHED`
  for an admin's or admin-trusted run and for measured campaigns), and each voter's
  deciding runs give one vote (their median). It is in force with a vouched-for vote,
  with three voters or more, or with two ordinary owners whose votes agree (within
  `AGREEMENT_MIB`); runs of one ordinary owner alone never set it. Two owners who
  disagree leave the prior: either may be the honest one, and any value in force would
  let one of them move it alone, raising every reservation by GiBs or lowering it (and
  the bound's allowance for a stack not learned) into OOMs;
- the offset is the median vote; of an even number of votes, the median of them and
  the *fallback*, what stands without the ordinary owners: the vouched vote where there
  is one, else the prior 0 (`_consensus`). So no one voter, however many runs it
  submits, moves the offset past what the other votes and the fallback span: of a
  vouched vote and one owner's, the vouched vote; of two agreeing owners, the vote
  nearer 0 (0 where they straddle it), so neither raises the other's and one lowers it
  by at most AGREEMENT_MIB;
- it is clipped to [`LOWEST_OFFSET_MIB`, `HIGHEST_OFFSET_MIB`];
- only the newest `WINDOW` deciding runs per environment are kept (and as many of the
  others), so a driver upgrade under an unchanged key is followed and runs of large
  models never push out the few that decide.

A learned offset has its own spread (runs of one stack differ by tens of MiB): bounds
add `margin_mib`, a robust multiple of how far the deciding residuals lie from the
vote, one figure per voter combined as the votes are, so that each voter weighs the
same however many runs it submits.

Use (e.g. a leave-one-environment-out benchmark):

    offsets = FixedCostOffsets()
    for run in first_runs_of_the_environment:
        # `estimator.fixed_cost_residual` gives both figures for a spec
        offsets.observe("campaign-x", residual_mib, model_mib)
    offsets.offset_mib("campaign-x")   # 0.0 until MIN_OBSERVATIONS deciding runs

Pure and deterministic: the same observations in the same order give the same
offsets and the same `digest()`, which versions every estimate made with them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

# Five deciding runs: their median then ignores any two of them.
MIN_OBSERVATIONS = 5
# The largest model-dependent terms (MiB) a run that decides an offset may have: about
# the default fixed cost of one process on a current stack (`analytical/context.py`:
# 426 MiB context + ~18 MiB workspaces before Hopper, 534 + 128 from Hopper on), so that
# the fixed cost (that default plus the offset being learned) is at least half of what
# the run measured. At the analytical terms' typical 10-50% relative error the residual
# then carries at most ~50-250 MiB of model error, against offsets of -0.5 to +4 GiB.
DECIDING_MODEL_MIB = 512.0
# Newest deciding runs kept per environment, and as many others (enough for a stable
# median, bounded storage).
WINDOW = 200
# A negative offset can at most take back the current-stack default fixed cost
# (~0.45 GiB before Hopper, ~0.6 GiB on Hopper; `analytical/context.py`).
LOWEST_OFFSET_MIB = -512.0
# Eager module loading alone holds over 1,000 MB (PyTorch issue 107667); the eager
# stacks of `../shared/data` sat ~1.0-1.6 GiB above the lazy defaults. Twice the
# largest of these bounds what a learned offset may add.
HIGHEST_OFFSET_MIB = 4096.0
# A learned offset's margin: twice the residuals' robust standard deviation, 1.4826 x
# their median absolute deviation (the normal-consistent scale, Rousseeuw & Croux
# 1993; one run cannot inflate it): ~98% one-sided under normal noise.
MARGIN_SIGMAS = 2.0
MAD_TO_SIGMA = 1.4826
# How close (MiB) two ordinary owners' votes must lie to corroborate each other: a
# deciding run carries up to ~250 MiB of model error (DECIDING_MODEL_MIB at the
# analytical terms' 50%), so honest owners' medians on one stack lie about that close;
# it also bounds how far one of two agreeing owners can move the other's vote.
AGREEMENT_MIB = DECIDING_MODEL_MIB / 2


# Who vouches for a run an admin owns or trusts, or a measurement campaign's run.
VOUCHED = ""


def environment_key(gpu_model: str, driver_version: str | None) -> str:
    """The service's environment: one GPU model under one driver."""
    return f"{gpu_model}|driver {driver_version or 'unknown'}"


@dataclass(frozen=True)
class Residual:
    """One run: observed minus the offset-free estimate, and that estimate's
    model-dependent part (weights, gradients, optimizer, activations, allocator)."""

    residual_mib: float
    model_mib: float
    voter: str = ""  # the run's owner; VOUCHED for a vouched-for run


@dataclass
class FixedCostOffsets:
    """Residuals of finished runs by environment, and the offsets they give."""

    # changed through `observe` and `load` only, which keep `_small` and the window
    residuals: dict[str, list[Residual]] = field(default_factory=dict)
    # each environment's deciding runs in order, kept as runs come and go (every
    # figure is asked for after every run; filtering all runs each time was quadratic)
    _small: dict[str, list[Residual]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # each environment's figures (in force, offset, margin) as asked for, until its
    # runs change: an estimate asks for them, thousands between two runs
    _figures: dict[str, dict[str, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key, runs in list(self.residuals.items()):
            self._keep(key, runs)

    def observe(
        self, key: str, residual_mib: float, model_mib: float, voter: str = VOUCHED
    ) -> None:
        """Add one run of environment `key` vouched for by `voter` (see the module
        docstring for the terms). The window as `_windowed` keeps it: runs of either
        kind are at most WINDOW before this one, so at most its oldest of this run's
        kind goes."""
        run = Residual(float(residual_mib), max(0.0, float(model_mib)), voter)
        runs = self.residuals.setdefault(key, [])
        small = self._small.setdefault(key, [])
        self._figures.pop(key, None)
        self._digest = None
        runs.append(run)
        deciding = _decides(run)
        if deciding:
            small.append(run)
        if (len(small) if deciding else len(runs) - len(small)) > WINDOW:
            del runs[next(i for i, r in enumerate(runs) if _decides(r) == deciding)]
            if deciding:
                del small[0]

    def _keep(self, key: str, runs: list[Residual]) -> None:
        self._figures.pop(key, None)
        self._digest = None
        self.residuals[key] = _windowed(runs)
        self._small[key] = [run for run in self.residuals[key] if _decides(run)]

    def count(self, key: str) -> int:
        return len(self.residuals.get(key, ()))

    def _small_model_runs(self, key: str) -> Sequence[Residual]:
        return self._small.get(key, ())

    def _figure(self, name: str, key: str, compute: Callable[[str], float]) -> float:
        figures = self._figures.setdefault(key, {})
        if name not in figures:
            figures[name] = compute(key)
        return figures[name]

    def in_force(self, key: str) -> bool:
        """Whether `key` has MIN_OBSERVATIONS deciding runs, corroborated: one of them
        vouched for, deciding runs of three owners or more, or of two whose votes agree
        (module docstring)."""
        return bool(self._figure("in_force", key, self._in_force))

    def _in_force(self, key: str) -> bool:
        if len(self._small_model_runs(key)) < MIN_OBSERVATIONS:
            return False
        votes = self._votes(key)
        if VOUCHED in votes or len(votes) >= 3:
            return True
        return len(votes) == 2 and max(votes.values()) - min(votes.values()) <= AGREEMENT_MIB

    def _by_voter(self, key: str) -> dict[str, list[float]]:
        """The deciding runs' residuals by voter."""
        by_voter: dict[str, list[float]] = {}
        for run in self._small_model_runs(key):
            by_voter.setdefault(run.voter, []).append(run.residual_mib)
        return by_voter

    def _votes(self, key: str) -> dict[str, float]:
        """Each voter's vote: the median of its deciding runs' residuals."""
        return {voter: median(residuals) for voter, residuals in self._by_voter(key).items()}

    def offset_mib(self, key: str) -> float:
        """The learned offset of `key`: 0.0 until in force, then the clipped vote of
        the deciding runs (module docstring)."""
        return self._figure("offset", key, self._offset_mib)

    def _offset_mib(self, key: str) -> float:
        if not self.in_force(key):
            return 0.0
        return min(HIGHEST_OFFSET_MIB, max(LOWEST_OFFSET_MIB, self._vote(key)))

    def _vote(self, key: str) -> float:
        """The voters' vote (`_consensus`), unclipped."""
        return self._figure("vote", key, lambda k: _consensus(self._votes(k), 0.0))

    def margin_mib(self, key: str) -> float:
        """How far above the offset a run of `key` may still go, for bounds: 0.0
        until in force, then MARGIN_SIGMAS robust standard deviations of the deciding
        residuals, each voter weighing one (at most HIGHEST_OFFSET_MIB).

        Each voter's figure is the median distance of its deciding runs from the
        (unclipped) vote, so it counts both their scatter and how far its stack lies
        from the others'; the figures are combined as the votes are (`_consensus`), so
        no one voter, however many runs it submits, moves the margin past the other
        figures and the vouched figure: a vouched figure stands against one owner's. Of
        two ordinary owners' the larger holds: one owner may widen the other's bounds
        (costing room, as a stack not learned yet does), but never narrow them below
        what the other's runs showed (risking OOMs), and the larger figure holds the gap
        between their votes. With the vouched-for runs alone it is their median absolute
        deviation."""
        return self._figure("margin", key, self._margin_mib)

    def _margin_mib(self, key: str) -> float:
        if not self.in_force(key):
            return 0.0
        vote = self._vote(key)
        figures = {
            voter: median(abs(r - vote) for r in runs)
            for voter, runs in self._by_voter(key).items()
        }
        # of two ordinary owners' figures the larger: one may widen the other's bounds
        # (costing room), never narrow them (risking OOMs)
        spread = MAD_TO_SIGMA * _consensus(figures, max(figures.values()))
        return min(HIGHEST_OFFSET_MIB, MARGIN_SIGMAS * spread)

    def offsets(self) -> dict[str, float]:
        """Every environment's offset, learned or not (0.0), by key."""
        return {key: self.offset_mib(key) for key in sorted(self.residuals)}

    def largest(self, keys: Iterable[str]) -> float:
        """The largest offset among `keys` (0.0 for none): a GPU model run under
        several drivers is charged the most expensive of them."""
        return max((self.offset_mib(key) for key in keys), default=0.0)

    def largest_margin(self, keys: Iterable[str]) -> float:
        """The largest margin among `keys` (0.0 for none)."""
        return max((self.margin_mib(key) for key in keys), default=0.0)

    def active(self) -> dict[str, float]:
        """The environments whose offset is in force, by key."""
        return {k: v for k, v in self.offsets().items() if self.in_force(k)}

    def digest(self) -> str:
        """A short hash of the offsets in force ("" when none is): part of the
        estimator's version, so estimates say which offsets they were made with; kept
        until runs change (every estimate asks for it)."""
        if self._digest is None:
            self._digest = self._digest_of_active()
        return self._digest

    def _digest_of_active(self) -> str:
        active = self.active()
        if not active:
            return ""
        text = json.dumps({k: round(v, 1) for k, v in active.items()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def to_json(self, key: str) -> list[list[float | str]]:
        """One environment's residuals as plain JSON ([[residual, model, voter], ...])."""
        runs = self.residuals.get(key, [])
        return [[run.residual_mib, run.model_mib, run.voter] for run in runs]

    def load(self, key: str, data: Any) -> None:
        """Replace one environment's residuals with `to_json` output (ValueError if
        it is not such a list)."""
        if not isinstance(data, list):
            raise ValueError(f"residuals of {key!r} must be a list")
        self._keep(key, [Residual(float(r), float(m), str(voter)) for r, m, voter in data])


def decides(residual_mib: float, model_mib: float) -> bool:
    """Whether a run of `model_mib` model-dependent terms that lay `residual_mib` above
    its offset-free estimate may decide an offset: the fixed cost dominates what it
    measured (module docstring)."""
    return model_mib <= max(DECIDING_MODEL_MIB, residual_mib)


def _consensus(votes: dict[str, float], fallback: float) -> float:
    """The median of the voters' `votes`; of an even number, the median of them and
    the vouched vote where there is one, else `fallback`, so that one voter never moves
    it past the other votes and what stands without the ordinary owners."""
    values = list(votes.values())
    if len(values) % 2 == 0:
        values.append(votes.get(VOUCHED, fallback))
    return median(values)


def _decides(run: Residual) -> bool:
    return decides(run.residual_mib, run.model_mib)


def _windowed(runs: list[Residual]) -> list[Residual]:
    """The newest WINDOW deciding runs and the newest WINDOW others, in their order."""
    deciding = sum(map(_decides, runs))
    drop = {True: deciding - WINDOW, False: len(runs) - deciding - WINDOW}
    kept = []
    for run in runs:
        if drop[_decides(run)] > 0:
            drop[_decides(run)] -= 1
        else:
            kept.append(run)
    return kept
