"""The Estimate contract and the Estimator that makes estimates.

An estimate is a per-process fixed cost plus model-dependent terms. The fixed cost is
the current-stack default on the described GPU (`analytical/context.py`, with the
bare CUDA context the agent measured) plus the environment's learned offset
(`offsets.py`); the model-dependent terms come from the analytical model, corrected
by the learned calibration where the spec lies in its domain.

Six ways to an estimate, most trusted first: the exact history of the same spec on the
same GPU model, bounded by how far the cluster's repeat runs went above their spec's
earlier peaks (`ObservationHistory.repeat_margin`); its history on other GPU models,
with their fixed cost swapped for this one's (the tensors a run allocates do not
depend on the GPU; the fixed cost does); the line through its configuration's runs at
other batch sizes (`history.batch_line`), moved likewise (the bound of these three
raised above what a run of the spec held when it died of an OOM); once the fixed cost
is learned, the models' point with the bound its configuration's runs at other batch
sizes set beyond them (the largest ratio their model terms reached over the analytical
terms, applied to this spec's, plus HISTORY_MARGIN); the model-dependent terms
corrected by the learned calibration, where the spec lies in the calibration's domain
(its kind, precision and layout, and every sized feature within a factor DOMAIN_FACTOR
of what it was trained on); the analytical model alone elsewhere, with the margin it
needed on the measured runs of that kind. The bound of the last three is widened for
an architecture whose observed runs went further above their estimates than it allows,
and by the fixed cost's uncertainty: a learned offset's own spread
(`FixedCostOffsets.margin_mib`), or, in an environment whose offset is not learned
yet, how far measured stacks' fixed costs lay above the defaults (the largest training
environment's offset).

Any GPU can be named: a catalogued one adds its figures, a GPU the cluster reported
is described as reported (`register_gpus`), any other takes generic defaults and the
estimate says so in `notes`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from estimator.analytical.context import fixed_cost
from estimator.analytical.model import Breakdown, breakdown, communicates, resolve
from estimator.gpus import GpuDescription, canonical_gpu_name, describe
from estimator.history import (
    HISTORY_MARGIN,
    MIN_RATIO_BATCHES,
    ObservationHistory,
    architecture_digest,
    batch_line,
    fingerprint,
)
from estimator.learned.artifact import Artifact, load
from estimator.learned.features import NAMES, RANGED, features, model_kind
from estimator.learned.measurements import Measurement, observation
from estimator.offsets import DECIDING_MODEL_MIB, FixedCostOffsets, Residual, environment_key
from estimator.spec import TrainingSpec

ANALYTICAL_VERSION = "analytical"
# methods whose peak is one the spec really reached (on this GPU model, or another)
HISTORY, HISTORY_OTHER_GPU = "history", "history-other-gpu"
HISTORY_METHODS = frozenset({HISTORY, HISTORY_OTHER_GPU})
# the peak on the line through the configuration's runs at other batch sizes
HISTORY_BATCH = "history-batch"
# appended to a method whose bound was raised to what other runs of the architecture
# reached over their estimates
MODEL_HISTORY = "+model-history"
# the model terms bounded by how far its configuration's runs at other batch sizes went
# above the analytical terms (`_batch_ratio`), where the fixed cost is learned
HISTORY_RATIO = "history-ratio"
# The smallest analytical model terms (MiB) a run's ratio over them is learned from:
# four times those that decide an offset (`offsets.DECIDING_MODEL_MIB`). A learned
# offset is the median of one GPU model's small runs, and stacks on it differ: the
# measured timm and MLP campaigns' eager stacks lay 1,262 and 1,007 MiB above the
# defaults on the same A100 (the shipped manifest's `fixed_offsets_mib`). At 2 GiB of
# model terms such a ~250 MiB error in the fixed cost moves a ratio by at most ~12%.
RATIO_MODEL_MIB = 4 * DECIDING_MODEL_MIB
# How far beyond the range of a sized feature the calibration was trained on it is
# still trusted: one doubling. Tree ensembles extrapolate flat, so a model or batch far
# outside what they saw gets the correction of the nearest runs, which nothing tests.
DOMAIN_FACTOR = 2.0
# The breakdown's fixed-cost terms; the others are model-dependent.
FIXED_TERMS = ("context", "workspaces", "communication", "fixed_offset")
# (spec, GPU) pairs whose offset-free modelling an estimator keeps: the standard
# simulation's 10,000 jobs hold 5,398 distinct specs on 6 GPU models (32,388 pairs);
# an entry holds ~0.8 KiB (tracemalloc, CPython 3.11), so at most ~26 MiB.
MODELLED_KEPT = 32_768
_K = TypeVar("_K")
_V = TypeVar("_V")


def _kept(cache: dict[_K, _V], key: _K, compute: Callable[[], _V]) -> _V:
    """`cache[key]`, computed and kept when missing, the oldest entry going past
    MODELLED_KEPT. The service's request threads share an estimator: a race between
    them only computes a value twice or evicts one more entry, never fails a call."""
    value = cache.get(key)
    if value is None:
        value = compute()
        if len(cache) >= MODELLED_KEPT:
            # another thread may change it meanwhile (RuntimeError) or empty it
            with contextlib.suppress(RuntimeError, StopIteration):
                cache.pop(next(iter(cache)), None)
        cache[key] = value
    return value


class Estimate(BaseModel):
    gpu_model: str
    peak_mib: int = Field(ge=0)  # never negative, however it was made
    upper_mib: int = Field(ge=0)
    coverage: float
    method: str
    breakdown_mib: dict[str, int]
    model_version: str
    fixed_mib: int = 0  # the per-process fixed cost within peak_mib (FIXED_TERMS)
    notes: list[str] = Field(default_factory=list)  # e.g. GPU figures assumed


class _Answer(Protocol):
    peak_mib: int
    method: str


def proven_peaks(estimates: Mapping[str, _Answer]) -> dict[str, int]:
    """The peaks among `estimates` (by GPU model) that the spec really reached."""
    return {model: e.peak_mib for model, e in estimates.items() if e.method in HISTORY_METHODS}


def in_domain(spec: TrainingSpec, kind: str, domain: dict[str, Any], row: list[float]) -> bool:
    """Whether the calibration has seen jobs like this one: a calibrated model kind, a
    precision it was trained on, a single-GPU memory layout, and sizes (`row`, the
    features) within DOMAIN_FACTOR of the ranges it was trained on."""
    par = spec.parallelism
    single = par.tp == par.pp == par.cp == 1 and par.zero_stage == 0
    if not (single and kind in domain["kinds"] and spec.precision in domain["precisions"]):
        return False
    slack = math.log(DOMAIN_FACTOR)
    ranges = domain.get("ranges", {})
    return all(
        ranges[name][0] - slack <= row[NAMES.index(name)] <= ranges[name][1] + slack
        for name in RANGED
        if name in ranges
    )


def _scaled(terms: Breakdown, peak_mib: int, offset_mib: float) -> dict[str, int]:
    """The breakdown: the fixed-cost terms as they are, the learned offset, and the
    model-dependent terms scaled so that every term, rounded, sums to `peak_mib`
    (the allocator term takes up the rounding)."""
    fixed = {k: round(v) for k, v in terms.fixed.as_dict().items()}
    fixed["fixed_offset"] = round(offset_mib)
    model_mib = max(peak_mib - sum(fixed.values()), 0)
    factor = model_mib / terms.model_mib if terms.model_mib > 0 else 1.0
    rounded = {k: round(v * factor) for k, v in terms.model_terms().items()}
    rounded["allocator"] += model_mib - sum(rounded.values())
    return {**rounded, **fixed}


@dataclass(frozen=True)
class _Models:
    """What the models say of a spec on one GPU whatever the offsets: its breakdown,
    and the model-dependent terms' point and bound by the calibration (in domain) or
    the analytical model with its margin."""

    terms: Breakdown
    model_mib: float
    model_upper_mib: float
    method: str


@dataclass
class _Modelled:
    """What the models say of a spec on one GPU: the fixed cost (default + offset,
    and whether every environment of it has its offset learned) and the
    model-dependent terms' point and bound (the bound holds `fixed_margin_mib`, the
    fixed cost's own uncertainty)."""

    terms: Breakdown
    fixed_mib: float
    offset_mib: float
    model_mib: float
    model_upper_mib: float
    method: str
    fixed_learned: bool
    fixed_margin_mib: float

    @property
    def peak_mib(self) -> float:
        return self.fixed_mib + self.offset_mib + self.model_mib

    @property
    def upper_mib(self) -> float:
        return self.fixed_mib + self.offset_mib + self.model_upper_mib


@dataclass
class Estimator:
    """Makes estimates; holds the calibration artifact, the observed history, the
    learned fixed-cost offsets and the descriptions of the GPUs the cluster reported."""

    artifact: Artifact | None
    history: ObservationHistory = field(default_factory=ObservationHistory)
    observations: list[Measurement] = field(default_factory=list)
    offsets: FixedCostOffsets = field(default_factory=FixedCostOffsets)
    gpus: dict[str, GpuDescription] = field(default_factory=dict)  # reported, by name
    environments: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> keys
    # `_models` by (spec fingerprint, GPU), for the artifact they were made with (oldest
    # out first; a spec may hold lists, so it is no key itself)
    _models_kept: dict[tuple[str, GpuDescription], _Models] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _models_artifact: Artifact | None = field(default=None, init=False, repr=False, compare=False)
    # the calibration's (point, bound) log-ratios by (features, kind), as `_models_kept`:
    # a spec's features are the same on every GPU model the simulator has (they leave
    # the fixed cost out), so one prediction serves all six
    _predicted: dict[tuple[tuple[float, ...], str], tuple[float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def coverage(self) -> float:
        return self.artifact.calibration.coverage if self.artifact else 0.95

    @property
    def calibration_version(self) -> str:
        return self.artifact.version if self.artifact else ANALYTICAL_VERSION

    @property
    def version(self) -> str:
        """The calibration's version, and the digest of the offsets in force."""
        digest = self.offsets.digest()
        return f"{self.calibration_version}+fc.{digest}" if digest else self.calibration_version

    def basis(self, spec: TrainingSpec) -> str:
        """What an estimate of `spec` made now rests on: the calibration, and the runs of
        its architecture the history took in and how many of them were vouched for
        (every figure the history gives an estimate is the architecture's). An estimate
        kept with it is remade once `stale` says so. The offsets and the repeat margin
        are left out: they move with every finished job of the cluster, by a little, and
        remaking every waiting job's estimate at each would cost the scheduler what it
        saves; its own architecture's runs are what can show a job needs far more than
        its estimate."""
        digest = architecture_digest(spec)
        runs, vouched = self.history.runs_of(digest)
        return f"{self.calibration_version}|{digest}|{runs}|{vouched}"

    def stale(self, basis: str | None) -> bool:
        """Whether an estimate made on `basis` (None: not recorded) may differ from one
        made now, as far as `basis` tells: another calibration, or more runs of its
        architecture than it knew, or more of them vouched for. Fewer is not stale: a
        server that has not taken in every run another one did (a replica, one
        restarted) does not undo its work."""
        parts = (basis or "").split("|")  # version|digest|runs|vouched
        if len(parts) != 4 or parts[0] != self.calibration_version:
            return True
        if not (parts[2].isdigit() and parts[3].isdigit()):
            return True
        runs, vouched = self.history.runs_of(parts[1])
        return int(parts[2]) < runs or int(parts[3]) < vouched

    def with_artifact(self, artifact: Artifact | None) -> Estimator:
        """This estimator with another calibration; what it observed and learned of
        the cluster (history, observations, offsets, GPUs) is shared, not copied."""
        return Estimator(
            artifact,
            self.history,
            list(self.observations),
            self.offsets,
            self.gpus,
            self.environments,
        )

    def register_gpus(self, reported: list[GpuDescription]) -> None:
        """Describe GPU models as the cluster's agents reported them. A model seen with
        several descriptions keeps the largest measured context and every driver's
        environment (it is charged the largest of their offsets)."""
        gpus: dict[str, GpuDescription] = {}
        environments: dict[str, set[str]] = {}
        for gpu in reported:
            kept = gpus.get(gpu.name)
            if kept is None or (gpu.context_mib or 0) > (kept.context_mib or 0):
                gpus[gpu.name] = gpu
            environments.setdefault(gpu.name, set()).add(
                environment_key(gpu.name, gpu.driver_version)
            )
        self.gpus = gpus
        self.environments = {name: tuple(sorted(keys)) for name, keys in environments.items()}

    def describe(self, gpu: str | GpuDescription) -> GpuDescription:
        """`gpu` as given, as the cluster reported it, or from the catalog/defaults."""
        if isinstance(gpu, GpuDescription):
            return gpu
        reported = canonical_gpu_name(gpu, tuple(self.gpus))
        return self.gpus[reported] if reported in self.gpus else describe(gpu)

    def estimate(
        self, spec: TrainingSpec, gpu: str | GpuDescription, environment: str | None = None
    ) -> Estimate:
        """The estimate of `spec` on one GPU (a name or a description) in `environment`
        (an offsets key; default: the GPU's model and driver). SpecError if `spec` is bad."""
        described = self.describe(gpu)
        name = described.name
        modelled = self._modelled(spec, described, environment)
        peaks = self.history.peaks_by_gpu(spec)
        observed = peaks.get(name)
        moved = None if observed is not None else self._moved_history(spec, peaks, modelled)
        by_batch = {} if peaks else self.history.peaks_by_batch(spec)
        line = batch_line(self._batch_peaks(spec, by_batch, modelled), spec.batch_size)
        ways = ((observed, HISTORY), (moved, HISTORY_OTHER_GPU), (line, HISTORY_BATCH))
        found = [(mib, way) for mib, way in ways if mib is not None]
        if found:
            base, method = found[0]
            margin = (
                self.history.repeat_margin(self.coverage) if method == HISTORY else HISTORY_MARGIN
            )
            peak, upper = float(base), base * (1 + margin)
            # the spec itself died of an OOM holding more than that: it needs more (one
            # below it may have died of a neighbour's memory, and says nothing)
            held = self._moved_history(spec, self.history.ooms_by_gpu(spec), modelled)
            if held is not None and held > base:
                upper, method = held * (1 + HISTORY_MARGIN), method + MODEL_HISTORY
        else:
            peak, upper, method = modelled.peak_mib, modelled.upper_mib, modelled.method
            seen = None
            if modelled.fixed_learned:
                seen = self._batch_ratio(spec, by_batch, name, environment)
            if seen is not None:
                # the configuration's runs bound its model terms, the fixed cost known
                terms_upper = modelled.terms.model_mib * seen * (1 + HISTORY_MARGIN)
                fixed = modelled.fixed_mib + modelled.offset_mib + modelled.fixed_margin_mib
                upper, method = fixed + terms_upper, HISTORY_RATIO
            above = self.history.model_ratio(spec)
            if above is not None and peak * above * (1 + HISTORY_MARGIN) > upper:
                upper, method = peak * above * (1 + HISTORY_MARGIN), method + MODEL_HISTORY
        peak = max(peak, 0.0)  # a tiny peak moved from a GPU of larger fixed cost is below 0
        parts = _scaled(modelled.terms, round(peak), modelled.offset_mib)
        note = described.note()
        return Estimate(
            gpu_model=name,
            peak_mib=round(peak),
            upper_mib=math.ceil(max(upper, peak)),
            coverage=self.coverage,
            method=method,
            breakdown_mib=parts,
            model_version=self.version,
            fixed_mib=sum(parts[t] for t in FIXED_TERMS),
            notes=[note] if note else [],
        )

    def _environments(self, gpu: GpuDescription, environment: str | None) -> tuple[str, ...]:
        if environment is not None:
            return (environment,)
        return self.environments.get(gpu.name) or (environment_key(gpu.name, gpu.driver_version),)

    def _models(self, spec: TrainingSpec, gpu: GpuDescription, key: str | None = None) -> _Models:
        """The models' terms of `spec` on `gpu`, worked out once per pair: they depend
        on neither the history nor the offsets, only on the calibration. `key`: the
        spec's fingerprint, where the caller has it."""
        if self._models_artifact is not self.artifact:
            self._models_kept.clear()
            self._predicted.clear()
            self._models_artifact = self.artifact
        kept = (key or fingerprint(spec), gpu)
        return _kept(self._models_kept, kept, lambda: self._model_terms(spec, gpu))

    def _model_terms(self, spec: TrainingSpec, gpu: GpuDescription) -> _Models:
        """Calibrated where in domain, else the analytical terms with the margin they
        needed on the measured runs of the kind (the largest kind's for a kind never
        measured)."""
        shape = resolve(spec)
        terms = breakdown(spec, gpu, shape)
        manifest = self.artifact.manifest if self.artifact else {}
        kind = model_kind(spec, shape)
        row = features(spec, shape, terms)
        model = terms.model_mib
        if self.artifact and in_domain(spec, kind, manifest["domain"], row):
            point_log, upper_log = self._predictions(self.artifact, row, kind)
            point, upper = model * math.exp(point_log), model * math.exp(upper_log)
            method = "analytical+learned"
        else:
            margins = manifest.get("analytical_margins", {})
            margin = margins.get(kind, max(margins.values(), default=0.0))
            point, upper, method = model, model * math.exp(max(0.0, margin)), "analytical"
        return _Models(terms, point, upper, method)

    def _predictions(self, artifact: Artifact, row: list[float], kind: str) -> tuple[float, float]:
        """The calibration's point and bound log-ratios for one row of features."""

        def predict() -> tuple[float, float]:
            x = np.array([row])
            return (
                float(artifact.calibration.predict(x)[0]),
                float(artifact.calibration.predict_upper(x, kind)[0]),
            )

        return _kept(self._predicted, (tuple(row), kind), predict)

    def _modelled(
        self,
        spec: TrainingSpec,
        gpu: GpuDescription,
        environment: str | None,
        offset: bool = True,
    ) -> _Modelled:
        """Fixed cost and model-dependent terms (`_models`), the bound widened by the
        fixed cost's uncertainty. Without `offset`, the estimate an environment's
        residuals are measured against."""
        keys = self._environments(gpu, environment)
        learned = any(self.offsets.in_force(k) for k in keys)
        offset_mib = self.offsets.largest(keys) if offset else 0.0
        manifest = self.artifact.manifest if self.artifact else {}
        # the fixed cost's own uncertainty, for the bound: a learned offset's spread, or,
        # an environment not learned yet, a stack as costly as any measured one
        if not offset:
            fixed_margin = 0.0
        elif learned:
            fixed_margin = self.offsets.largest_margin(keys)
        else:
            fixed_margin = manifest.get("fixed_offset_spread_mib", 0.0)
        models = self._models(spec, gpu)
        return _Modelled(
            models.terms,
            models.terms.fixed.total,
            offset_mib,
            models.model_mib,
            models.model_upper_mib + fixed_margin,
            models.method,
            offset and all(self.offsets.in_force(k) for k in keys),
            fixed_margin,
        )

    def _batch_peaks(
        self, spec: TrainingSpec, by_batch: dict[int, dict[str, int]], modelled: _Modelled
    ) -> dict[int, float]:
        """The peaks of `spec`'s configuration at other batch sizes (`by_batch`, from
        `history.peaks_by_batch`), each the largest on any GPU model moved to this one's
        fixed cost, by batch size."""
        moved = {batch: self._moved_history(spec, p, modelled) for batch, p in by_batch.items()}
        return {batch: mib for batch, mib in moved.items() if mib is not None}

    def _moved_history(
        self, spec: TrainingSpec, peaks: dict[str, int], modelled: _Modelled
    ) -> float | None:
        """The largest of `peaks` (a run of `spec`, or of its configuration, on GPU
        models, maybe this one) with that model's fixed cost (default and offset)
        replaced by this one's, or None if it never ran."""
        here = modelled.fixed_mib + modelled.offset_mib
        moved = []
        for gpu, peak in peaks.items():
            other = self.describe(gpu)
            there = fixed_cost(other, communicates(spec)).total
            there += self.offsets.largest(self._environments(other, None))
            moved.append(peak - there + here)
        return max(moved, default=None)

    def fixed_cost_residual(
        self,
        spec: TrainingSpec,
        gpu: str | GpuDescription,
        peak_mib: float,
        environment: str | None = None,
    ) -> Residual:
        """How far an observed peak lay above the estimate made without any offset, and
        that estimate's model-dependent part: what `FixedCostOffsets.observe` takes."""
        modelled = self._modelled(spec, self.describe(gpu), environment, offset=False)
        return Residual(peak_mib - modelled.peak_mib, modelled.model_mib)

    def learn_fixed_cost(
        self,
        spec: TrainingSpec,
        gpu: str | GpuDescription,
        peak_mib: float,
        environment: str | None = None,
    ) -> str:
        """Feed one finished run's peak to its environment's offset; returns the key."""
        described = self.describe(gpu)
        key = environment or environment_key(described.name, described.driver_version)
        residual = self.fixed_cost_residual(spec, described, peak_mib, key)
        self.offsets.observe(key, residual.residual_mib, residual.model_mib)
        return key

    def observe(
        self,
        spec: TrainingSpec,
        gpu_model: str,
        peak_mib: int,
        owner: str | None = None,
        trusted: bool = False,
        run: object = None,
    ) -> None:
        """Remember a credible peak a finished job of `owner` really reached (on one GPU
        of `run`, its attempt; None: a run of its own), and how far it lay above what
        the models say of it; refits learn from the peaks every owner may rely on
        (history.py)."""
        name, ratio = self._above_models(spec, gpu_model, peak_mib)
        for gpu, peak in self.history.add(spec, name, peak_mib, ratio, owner, trusted, run):
            self.observations.append(observation(spec, gpu, peak))

    def observe_oom(
        self,
        spec: TrainingSpec,
        gpu_model: str,
        held_mib: int,
        owner: str | None = None,
        trusted: bool = False,
        run: object = None,
    ) -> None:
        """Remember that a run of `owner` (`run`, as `observe` takes it) died of an OOM
        holding `held_mib`: it needed more, so the spec needs more than that on that GPU
        model and its architecture lies at least that far above its estimates (for
        `owner`'s jobs at once, every owner's once trusted or corroborated: history.py);
        not a peak, so neither history nor refits take it."""
        name, ratio = self._above_models(spec, gpu_model, held_mib)
        self.history.add_oom(spec, name, held_mib, ratio, owner, trusted, run)

    def _batch_ratio(
        self,
        spec: TrainingSpec,
        by_batch: dict[int, dict[str, int]],
        gpu_model: str,
        environment: str | None,
    ) -> float | None:
        """The largest ratio of model terms to the analytical ones among the runs of
        `spec`'s configuration at other batch sizes (`by_batch`: the visible peak of each,
        by GPU model), worked out with the offsets in force now (`environment`
        for runs on `gpu_model`, the estimate's own); None where fewer than
        MIN_RATIO_BATCHES batch sizes give one."""
        ratios = []
        for batch, peaks in by_batch.items():
            other = spec.model_copy(update={"batch_size": batch})
            key = fingerprint(other)
            found = [
                self._terms_ratio(other, key, gpu, peak, environment if gpu == gpu_model else None)
                for gpu, peak in peaks.items()
            ]
            known = [ratio for ratio in found if ratio is not None]
            if known:
                ratios.append(max(known))
        return max(ratios) if len(ratios) >= MIN_RATIO_BATCHES else None

    def _terms_ratio(
        self, spec: TrainingSpec, key: str, gpu_model: str, peak_mib: int, environment: str | None
    ) -> float | None:
        """A run's model terms (its peak less the fixed cost) over the analytical ones,
        where they are known: the analytical terms are at least RATIO_MODEL_MIB, and
        every environment of the GPU model has its offset in force (the run's driver is
        not recorded: the smallest offset is taken, so the ratio is never understated).
        None elsewhere, and for a peak that does not exceed its fixed cost. `key`: the
        spec's fingerprint."""
        gpu = self.describe(gpu_model)
        keys = self._environments(gpu, environment)
        analytical = self._models(spec, gpu, key).terms
        if analytical.model_mib < RATIO_MODEL_MIB or not all(map(self.offsets.in_force, keys)):
            return None
        fixed = analytical.fixed.total + min(map(self.offsets.offset_mib, keys))
        return (peak_mib - fixed) / analytical.model_mib if peak_mib > fixed else None

    def _above_models(self, spec: TrainingSpec, gpu_model: str, mib: int) -> tuple[str, float]:
        """The GPU model's name, and `mib` over the models' peak estimate on it."""
        gpu = self.describe(gpu_model)
        modelled = self._modelled(spec, gpu, None)
        return gpu.name, mib / modelled.peak_mib


@cache
def default_estimator() -> Estimator:
    """The estimator with the packaged calibration artifact (loaded once)."""
    return Estimator(artifact=load())
