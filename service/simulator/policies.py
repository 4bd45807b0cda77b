"""What each compared policy has a job reserve before it has run.

Every policy but `exclusive` runs on Colloc's scheduler and reservation rules; they
differ only in the memory figure a job starts with, so the comparison isolates the
estimate. Policies are chosen by name from `POLICIES`.

- `exclusive`: one job per GPU, on GPU models where the job fits (its user knows).
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
  family may have been measured).
- `colloc-new-family`: the same, split by architecture family, so that no model of
  the job's family was ever measured (the harder case `bench/RESULTS.md` also reports
  for the estimator alone).
- `oracle`: the true peak.
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
from estimator.learned.measurements import Measurement
from estimator.learned.train import prepare, train
from estimator.spec import TrainingSpec
from service.simulator.workload import SimJob


@dataclass(frozen=True)
class Demand:
    """A job's memory as placement will see it (see `snapshot.pending_job`)."""

    memory_mib: int | None = None  # one claim for every GPU model
    upper_mib: dict[str, int] = field(default_factory=dict)  # per GPU model
    gpu_models: frozenset[str] | None = None
    proven_mib: dict[str, int] = field(default_factory=dict)  # peaks reached before


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
        fits = {model for model, memory in models.items() if job.true_peak_mib[model] <= memory}
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


class Horus(_Static):
    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        return Demand(upper_mib={m: horus_mib(job.spec, m) for m in models})


class Analytical(_Static):
    def __init__(self) -> None:
        self._estimator = Estimator(artifact=None)

    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        return Demand(
            upper_mib={m: self._estimator.estimate(job.spec, m).upper_mib for m in models}
        )


class Oracle(_Static):
    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        return Demand(upper_mib={m: job.true_peak_mib[m] for m in models})


def held_out_estimators(
    rows: Sequence[Measurement], by: Callable[[Measurement], str], folds: int = 2
) -> dict[str, Estimator]:
    """`by(row)` -> an estimator whose calibration never saw a run with that key."""
    data = prepare(list(rows))
    keys = [by(row) for row in data.rows]
    estimators: dict[str, Estimator] = {}
    for train_idx, test_idx in GroupKFold(n_splits=folds).split(data.features, groups=keys):
        estimator = Estimator(train([data.rows[i] for i in train_idx]))
        for i in test_idx:
            estimators[keys[i]] = estimator
    return estimators


def by_model(row: Measurement) -> str:
    """The model: every batch size of it is held out together."""
    return row.model


def by_family(row: Measurement) -> str:
    """The architecture family (`resnet`, `vit`, ...): every model of it held out."""
    return row.group


class Colloc:
    def __init__(self, estimators: dict[str, Estimator], key: Callable[[SimJob], str]) -> None:
        self._estimators = estimators
        self._key = key  # the job's held-out part, as `estimators` is keyed
        self._fallback = Estimator(artifact=None)
        # estimates already made, by architecture, then configuration and GPU model,
        # until a run of that architecture is observed (it can change them all)
        self._known: dict[str, dict[tuple[str, str], Estimate]] = {}

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
        )

    def observe(self, job: SimJob, model: str, peak_mib: int) -> None:
        self._estimator(job).observe(job.spec, model, peak_mib)
        self._known.pop(architecture(job.spec), None)

    def observe_oom(self, job: SimJob, model: str, held_mib: int) -> None:
        self._estimator(job).observe_oom(job.spec, model, held_mib)
        self._known.pop(architecture(job.spec), None)


@dataclass(frozen=True)
class PolicyInputs:
    """What building a policy may need (the measured runs, for Colloc's calibration)."""

    measurements: Sequence[Measurement] = ()


POLICIES: dict[str, Callable[[PolicyInputs], Policy]] = {
    "exclusive": lambda _inputs: Exclusive(),
    "request": lambda _inputs: Request(),
    "horus": lambda _inputs: Horus(),
    "analytical": lambda _inputs: Analytical(),
    "colloc": lambda inputs: Colloc(
        held_out_estimators(inputs.measurements, by_model), lambda job: job.model
    ),
    "colloc-new-family": lambda inputs: Colloc(
        held_out_estimators(inputs.measurements, by_family), lambda job: job.group
    ),
    "oracle": lambda _inputs: Oracle(),
}
