"""What each compared policy has a job reserve before it has run.

Every policy but `exclusive` runs on Colloc's scheduler and reservation rules; they
differ only in the memory figure a job starts with, so the comparison isolates the
estimate. Policies are chosen by name from `POLICIES`.

- `exclusive`: one job per GPU, on GPU models where the job fits (its user knows what
  measurements show, not the `spiky` scenario's surprises).
- `request`: the user's claim (`SimJob.claim_mib`: tensor-only figures, optimistic).
- `horus`: the Horus formula (Yeung et al., TPDS 2022), as GPUMemNet's recorded
  figures pin it down: 4 bytes x ((1 + B) x P + B x A) for P parameters, batch B and
  A activation elements per sample. Written so, it reproduces all 429 of their MNIST
  rows (`../shared/data/gpumemnet/mlp_mnist_horus.csv`, B = 32, to 1e-7); here
  4 x B x A is Colloc's analytical activation term. No CUDA context, no optimizer.
- `analytical`: Colloc's analytical model alone (no learned part, no margin).
- `colloc`: Colloc's estimator, the calibrated `upper_mib`, learning from finished
  jobs' peaks and from OOMs as the service does (history on every GPU model, bounds
  widened for architectures that ran above their estimates, a whole GPU for a peak
  that fits it while peak plus margin does not). Its calibration never saw the model
  it estimates, at any batch size: the measured models are split in two and each half
  is estimated by a calibration trained on the other half (a user's model is new; its
  family may have been measured). Both halves learn the cluster's own fixed cost per
  GPU model from every finished job, through the estimator's offsets as the service
  learns them (`estimator/offsets.py`): they start from the shipped calibration's
  defaults, which a cluster of another software stack (`foreign-stack`) contradicts.
- `colloc-new-family`: the same, split by architecture family, so that no model of
  the job's family was ever measured (the harder case `bench/RESULTS.md` also reports
  for the estimator alone).
- `oracle`: the true peak, but for surprises no measurement shows (`spiky`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sklearn.model_selection import GroupKFold

from estimator.analytical.model import MIB, breakdown, resolve
from estimator.estimate import Estimate, Estimator, proven_peaks
from estimator.gpus import find_gpu_model
from estimator.history import architecture, fingerprint
from estimator.learned.artifact import Artifact
from estimator.learned.measurements import Measurement
from estimator.learned.train import prepare, train
from estimator.offsets import FixedCostOffsets
from estimator.spec import TrainingSpec
from service.simulator.workload import SimJob


@dataclass(frozen=True)
class Demand:
    """A job's memory as placement will see it (see `snapshot.pending_job`)."""

    memory_mib: int | None = None  # one claim for every GPU model
    upper_mib: dict[str, int] = field(default_factory=dict)  # per GPU model
    gpu_models: frozenset[str] | None = None
    proven_mib: dict[str, int] = field(default_factory=dict)  # peaks reached before
    peak_mib: dict[str, int] = field(default_factory=dict)  # point estimates


class Policy(Protocol):
    """`models` maps each GPU model of the cluster to its memory, MiB."""

    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand: ...

    def observe(self, job: SimJob, model: str, peak_mib: int) -> None:
        """A finished job's real peak on `model` (what agents report)."""
        ...

    def observe_oom(self, job: SimJob, model: str, held_mib: int) -> None:
        """A job died of an OOM on `model` holding `held_mib` (it needed more)."""
        ...


class _Static:
    """A policy whose figures never learn."""

    def observe(self, job: SimJob, model: str, peak_mib: int) -> None:
        return None

    def observe_oom(self, job: SimJob, model: str, held_mib: int) -> None:
        return None


class Exclusive(_Static):
    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        fits = {m for m, memory in models.items() if job.foreseen_peak_mib[m] <= memory}
        if not fits:  # its user states what it needs, and the service refuses it
            return Demand(memory_mib=min(job.foreseen_peak_mib.values()))
        return Demand(gpu_models=frozenset(fits))


class Request(_Static):
    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        return Demand(memory_mib=job.claim_mib)


def horus_bytes(params: float, batch: int, activations_per_sample: float) -> float:
    """The Horus formula (see the module docstring)."""
    return 4 * ((1 + batch) * params + batch * activations_per_sample)


def horus_mib(spec: TrainingSpec, gpu_model: str) -> int:
    """Horus for a TrainingSpec, with activations from Colloc's analytical term."""
    shape = resolve(spec)
    activations_mib = breakdown(spec, find_gpu_model(gpu_model), shape).activations
    per_sample = activations_mib * MIB / (4 * spec.batch_size)
    return round(horus_bytes(shape.params, spec.batch_size, per_sample) / MIB)


class _PerSpec(_Static):
    """A static figure per spec and GPU model, worked out once: a workload draws its
    thousands of jobs from a few hundred measured specs."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], int] = {}

    def figure_mib(self, spec: TrainingSpec, model: str) -> int:
        raise NotImplementedError

    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        spec = fingerprint(job.spec)
        for model in models:
            if (spec, model) not in self._known:
                self._known[(spec, model)] = self.figure_mib(job.spec, model)
        return Demand(upper_mib={m: self._known[(spec, m)] for m in models})


class Horus(_PerSpec):
    def figure_mib(self, spec: TrainingSpec, model: str) -> int:
        return horus_mib(spec, model)


class Analytical(_PerSpec):
    def __init__(self) -> None:
        super().__init__()
        self._estimator = Estimator(artifact=None)

    def figure_mib(self, spec: TrainingSpec, model: str) -> int:
        return self._estimator.estimate(spec, model).upper_mib


class Oracle(_Static):
    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        return Demand(upper_mib={m: job.foreseen_peak_mib[m] for m in models})


def held_out_calibrations(
    rows: Sequence[Measurement], by: Callable[[Measurement], str], folds: int = 2
) -> dict[str, Artifact]:
    """`by(row)` -> a calibration that never saw a run with that key."""
    data = prepare(list(rows))
    keys = [by(row) for row in data.rows]
    calibrations: dict[str, Artifact] = {}
    for train_idx, test_idx in GroupKFold(n_splits=folds).split(data.features, groups=keys):
        calibration = train([data.rows[i] for i in train_idx])
        for i in test_idx:
            calibrations[keys[i]] = calibration
    return calibrations


def by_model(row: Measurement) -> str:
    """The model: every batch size of it is held out together."""
    return row.model


def by_family(row: Measurement) -> str:
    """The architecture family (`resnet`, `vit`, ...): every model of it held out."""
    return row.group


class Colloc:
    def __init__(
        self,
        estimators: dict[str, Estimator],
        key: Callable[[SimJob], str],
        offsets: FixedCostOffsets,
    ) -> None:
        self._estimators = estimators
        self._key = key  # the job's held-out part, as `estimators` is keyed
        self._offsets = offsets  # the cluster's, shared by every estimator here
        self._fallback = Estimator(artifact=None, offsets=offsets)
        # estimates already made, by architecture, then configuration and GPU model,
        # until a run of that architecture is observed (it can change them all) or what
        # moves every estimate changes (`_in_force`)
        self._known: dict[str, dict[tuple[str, str], Estimate]] = {}
        # one estimator per history and coverage: the estimators of held-out parts share
        # one history (`Estimator.with_artifact`), so one margin answers for them all
        everyone = [*estimators.values(), self._fallback]
        self._margined = list({(id(e.history), e.coverage): e for e in everyone}.values())
        self._forces = self._in_force()

    def _in_force(self) -> tuple[object, ...]:
        """What moves every estimate: the offsets, and each history's repeat margin."""
        margins = (e.history.repeat_margin(e.coverage) for e in self._margined)
        return (self._offsets.digest(), *margins)

    def _forget(self, job: SimJob) -> None:
        """Drop the estimates an observation of `job` may have changed."""
        self._known.pop(architecture(job.spec), None)
        forces = self._in_force()
        if forces != self._forces:
            self._known.clear()
            self._forces = forces

    def _estimator(self, job: SimJob) -> Estimator:
        return self._estimators.get(self._key(job), self._fallback)

    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        estimator = self._estimator(job)
        known = self._known.setdefault(architecture(job.spec), {})
        spec = fingerprint(job.spec)
        estimates = {}
        for model in models:
            if (spec, model) not in known:
                known[(spec, model)] = estimator.estimate(job.spec, model)
            estimates[model] = known[(spec, model)]
        return Demand(
            upper_mib={model: e.upper_mib for model, e in estimates.items()},
            proven_mib=proven_peaks(estimates),
            peak_mib={model: e.peak_mib for model, e in estimates.items()},
        )

    def observe(self, job: SimJob, model: str, peak_mib: int) -> None:
        """As the service's sync does: the peak into the history, and its residual into
        its environment's offset (the simulator has no owners: every run is taken as
        vouched for, so an offset is in force after `offsets.MIN_OBSERVATIONS` runs)."""
        estimator = self._estimator(job)
        estimator.observe(job.spec, model, peak_mib)
        estimator.learn_fixed_cost(job.spec, model, peak_mib)
        self._forget(job)

    def observe_oom(self, job: SimJob, model: str, held_mib: int) -> None:
        self._estimator(job).observe_oom(job.spec, model, held_mib)
        self._forget(job)


@dataclass(frozen=True)
class PolicyInputs:
    """What building a policy may need: the measured runs, for Colloc's calibrations,
    which are trained once per split (`held_out`) and shared by every simulation given
    these inputs (a calibration is read-only; what a policy learns is its own)."""

    measurements: Sequence[Measurement] = ()
    trained: dict[str, dict[str, Artifact]] = field(default_factory=dict)

    def held_out(self, by: Callable[[Measurement], str]) -> dict[str, Artifact]:
        if by.__name__ not in self.trained:
            self.trained[by.__name__] = held_out_calibrations(self.measurements, by)
        return self.trained[by.__name__]


def colloc(
    inputs: PolicyInputs, by: Callable[[Measurement], str], key: Callable[[SimJob], str]
) -> Colloc:
    """Colloc with calibrations held out by `by` (a job's `key` is its row's), each
    estimator with a history of its own, all learning one cluster's offsets from none."""
    offsets = FixedCostOffsets()
    made: dict[int, Estimator] = {}  # one estimator per calibration
    estimators = {}
    for held_out, calibration in inputs.held_out(by).items():
        if id(calibration) not in made:
            made[id(calibration)] = Estimator(calibration, offsets=offsets)
        estimators[held_out] = made[id(calibration)]
    return Colloc(estimators, key, offsets)


POLICIES: dict[str, Callable[[PolicyInputs], Policy]] = {
    "exclusive": lambda _inputs: Exclusive(),
    "request": lambda _inputs: Request(),
    "horus": lambda _inputs: Horus(),
    "analytical": lambda _inputs: Analytical(),
    "colloc": lambda inputs: colloc(inputs, by_model, lambda job: job.model),
    "colloc-new-family": lambda inputs: colloc(inputs, by_family, lambda job: job.group),
    "oracle": lambda _inputs: Oracle(),
}
