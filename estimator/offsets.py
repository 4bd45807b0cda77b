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

- nothing is learned below `MIN_OBSERVATIONS` runs (the offset stays 0);
- the offset is the median residual of the runs with the *smaller* model-dependent
  terms (the half at or below their median): where the model's share is small, its
  relative error matters least and the residual is mostly fixed cost;
- it is clipped to [`LOWEST_OFFSET_MIB`, `HIGHEST_OFFSET_MIB`];
- it is in force only once *corroborated*: every run is tagged with who vouches for
  it (its owner, or `VOUCHED` for an admin's or admin-trusted run and for measured
  campaigns), and runs of one ordinary owner alone never set it, since an offset moves
  every owner's reservations. Each voter's deciding runs give one vote (their median):
  of two voters the higher vote counts (one cannot lower the other's), of more the
  median vote (so no one owner, however many runs it submits, decides it);
- only the newest `WINDOW` runs per environment are kept, so a driver upgrade under
  an unchanged key is followed.

A learned offset has its own spread (runs of one stack differ by tens of MiB): bounds
add `margin_mib`, a robust multiple of how far the deciding residuals scatter.

Use (e.g. a leave-one-environment-out benchmark):

    offsets = FixedCostOffsets()
    for run in first_runs_of_the_environment:
        # `estimator.fixed_cost_residual` gives both figures for a spec
        offsets.observe("campaign-x", residual_mib, model_mib)
    offsets.offset_mib("campaign-x")   # 0.0 until MIN_OBSERVATIONS runs were seen

Pure and deterministic: the same observations in the same order give the same
offsets and the same `digest()`, which versions every estimate made with them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

# Five runs: the median of the smaller half (three runs) then ignores any one of them.
MIN_OBSERVATIONS = 5
# Newest runs kept per environment (enough for a stable median, bounded storage).
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

    residuals: dict[str, list[Residual]] = field(default_factory=dict)

    def observe(
        self, key: str, residual_mib: float, model_mib: float, voter: str = VOUCHED
    ) -> None:
        """Add one run of environment `key` vouched for by `voter` (see the module
        docstring for the terms)."""
        runs = self.residuals.setdefault(key, [])
        runs.append(Residual(float(residual_mib), max(0.0, float(model_mib)), voter))
        del runs[:-WINDOW]

    def count(self, key: str) -> int:
        return len(self.residuals.get(key, ()))

    def in_force(self, key: str) -> bool:
        """Whether `key` has MIN_OBSERVATIONS runs, corroborated: one of them vouched
        for, or runs of at least two owners."""
        runs = self.residuals.get(key, [])
        voters = {run.voter for run in runs}
        return len(runs) >= MIN_OBSERVATIONS and (VOUCHED in voters or len(voters) >= 2)

    def _deciding_runs(self, key: str) -> list[Residual]:
        """The runs an offset is taken from: those with the smaller model-dependent
        terms, once the offset is in force (else none)."""
        if not self.in_force(key):
            return []
        runs = self.residuals[key]
        cut = median(run.model_mib for run in runs)
        return [run for run in runs if run.model_mib <= cut]

    def _deciding(self, key: str) -> list[float]:
        return [run.residual_mib for run in self._deciding_runs(key)]

    def offset_mib(self, key: str) -> float:
        """The learned offset of `key`: 0.0 until in force, then the clipped vote of
        the runs with the smaller model-dependent terms (module docstring)."""
        by_voter: dict[str, list[float]] = {}
        for run in self._deciding_runs(key):
            by_voter.setdefault(run.voter, []).append(run.residual_mib)
        votes = [median(residuals) for residuals in by_voter.values()]
        if not votes:
            return 0.0
        vote = max(votes) if len(votes) == 2 else median(votes)
        return min(HIGHEST_OFFSET_MIB, max(LOWEST_OFFSET_MIB, vote))

    def margin_mib(self, key: str) -> float:
        """How far above the offset a run of `key` may still go, for bounds: 0.0
        until learned, then MARGIN_SIGMAS robust standard deviations of the deciding
        residuals (at most HIGHEST_OFFSET_MIB)."""
        deciding = self._deciding(key)
        if not deciding:
            return 0.0
        centre = median(deciding)
        spread = MAD_TO_SIGMA * median(abs(r - centre) for r in deciding)
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
        estimator's version, so estimates say which offsets they were made with."""
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
        runs = [Residual(float(r), float(m), str(voter)) for r, m, voter in data]
        self.residuals[key] = runs[-WINDOW:]
