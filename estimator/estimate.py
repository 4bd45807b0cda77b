"""The Estimate contract and the Estimator that makes estimates.

Four ways to an estimate, most trusted first: the exact history of the same spec on
the same GPU model; its history on other GPU models, with their CUDA context swapped
for this one's (the tensors a run allocates do not depend on the GPU; the context
does); the analytical model corrected by the learned calibration, where the spec lies
in the calibration's domain; the analytical model alone, with the margin it needed on
the measured runs. The bound of the last two is widened for an architecture whose
observed runs went further above their estimates than it allows (a model the
calibration misjudges tends to be misjudged at every batch size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

import numpy as np
from pydantic import BaseModel, Field

from estimator.analytical.context import context_mib
from estimator.analytical.model import Breakdown, ModelShape, breakdown, communicates, resolve
from estimator.gpus import find_gpu_model
from estimator.history import HISTORY_MARGIN, ObservationHistory
from estimator.learned.artifact import Artifact, load
from estimator.learned.features import features, model_kind
from estimator.learned.measurements import Measurement, observation
from estimator.spec import TrainingSpec

ANALYTICAL_VERSION = "analytical"
# methods whose peak is one the spec really reached (on this GPU model, or another)
HISTORY, HISTORY_OTHER_GPU = "history", "history-other-gpu"
HISTORY_METHODS = frozenset({HISTORY, HISTORY_OTHER_GPU})
# appended to a method whose bound was raised to what other runs of the architecture
# reached over their estimates
MODEL_HISTORY = "+model-history"


class Estimate(BaseModel):
    gpu_model: str
    peak_mib: int = Field(ge=0)  # never negative, however it was made
    upper_mib: int = Field(ge=0)
    coverage: float
    method: str
    breakdown_mib: dict[str, int]
    model_version: str


class _Answer(Protocol):
    peak_mib: int
    method: str


def proven_peaks(estimates: Mapping[str, _Answer]) -> dict[str, int]:
    """The peaks among `estimates` (by GPU model) that the spec really reached."""
    return {model: e.peak_mib for model, e in estimates.items() if e.method in HISTORY_METHODS}


def in_domain(spec: TrainingSpec, kind: str, domain: dict[str, list[str]]) -> bool:
    """Whether the calibration has seen jobs like this one: a calibrated model kind, a
    precision it was trained on, and a single-GPU memory layout."""
    par = spec.parallelism
    single = par.tp == par.pp == par.cp == 1 and par.zero_stage == 0
    return single and kind in domain["kinds"] and spec.precision in domain["precisions"]


def _scaled(terms: Breakdown, peak: float) -> dict[str, int]:
    """The breakdown with the non-context terms scaled so that it sums to `peak`."""
    parts = terms.as_dict()
    dynamic = terms.total - terms.context
    factor = (peak - terms.context) / dynamic if dynamic > 0 else 1.0
    scaled = {k: v if k == "context" else v * max(factor, 0.0) for k, v in parts.items()}
    rounded = {k: round(v) for k, v in scaled.items()}
    rounded["allocator"] += round(peak) - sum(rounded.values())
    return rounded


@dataclass
class Estimator:
    """Makes estimates; holds the calibration artifact and the observed history."""

    artifact: Artifact | None
    history: ObservationHistory = field(default_factory=ObservationHistory)
    observations: list[Measurement] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        return self.artifact.calibration.coverage if self.artifact else 0.95

    @property
    def version(self) -> str:
        return self.artifact.version if self.artifact else ANALYTICAL_VERSION

    def estimate(self, spec: TrainingSpec, gpu_model: str) -> Estimate:
        """The estimate of `spec` on one GPU of `gpu_model` (SpecError if `spec` is bad)."""
        gpu = find_gpu_model(gpu_model)
        name = gpu.name if gpu else gpu_model
        shape = resolve(spec)
        terms = breakdown(spec, gpu, shape)
        peaks = self.history.peaks_by_gpu(spec)
        observed = peaks.get(name)
        moved = None if observed is not None else self._moved_history(spec, peaks, terms)
        if observed is not None:
            peak, upper, method = float(observed), observed * (1 + HISTORY_MARGIN), HISTORY
        elif moved is not None:
            peak, upper, method = moved, moved * (1 + HISTORY_MARGIN), HISTORY_OTHER_GPU
        else:
            peak, upper, method = self._modelled(spec, shape, terms)
            above = self.history.model_ratio(spec)
            if above is not None and peak * above * (1 + HISTORY_MARGIN) > upper:
                upper, method = peak * above * (1 + HISTORY_MARGIN), method + MODEL_HISTORY
        peak = max(peak, 0.0)  # a tiny peak moved from a GPU of larger fixed cost is below 0
        return Estimate(
            gpu_model=name,
            peak_mib=round(peak),
            upper_mib=math.ceil(max(upper, peak)),
            coverage=self.coverage,
            method=method,
            breakdown_mib=_scaled(terms, peak),
            model_version=self.version,
        )

    def _modelled(
        self, spec: TrainingSpec, shape: ModelShape, terms: Breakdown
    ) -> tuple[float, float, str]:
        """Peak, bound and method from the models: calibrated where in domain, else the
        analytical model with the margin it needed on the measured runs."""
        kind = model_kind(spec, shape)
        if self.artifact and in_domain(spec, kind, self.artifact.manifest["domain"]):
            row = np.array([features(spec, shape, terms)])
            calibration = self.artifact.calibration
            peak = terms.total * math.exp(float(calibration.predict(row)[0]))
            upper = terms.total * math.exp(float(calibration.predict_upper(row, kind)[0]))
            return peak, upper, "analytical+learned"
        margins = self.artifact.manifest["analytical_margins"] if self.artifact else {}
        return terms.total, terms.total * math.exp(max(0.0, margins.get(kind, 0.0))), "analytical"

    def _moved_history(
        self, spec: TrainingSpec, peaks: dict[str, int], terms: Breakdown
    ) -> float | None:
        """The largest of `spec`'s `peaks` on other GPU models, with that model's CUDA
        context replaced by this one's (`terms.context`), or None if it never ran."""
        moved = [
            peak - context_mib(find_gpu_model(gpu), communicates(spec)) + terms.context
            for gpu, peak in peaks.items()
        ]
        return max(moved, default=None)

    def observe(
        self,
        spec: TrainingSpec,
        gpu_model: str,
        peak_mib: int,
        owner: str | None = None,
        trusted: bool = False,
    ) -> None:
        """Remember a credible peak a finished job of `owner` really reached, and how far
        it lay above what the models say of it; refits learn from the peaks every owner
        may rely on (history.py)."""
        name, ratio = self._above_models(spec, gpu_model, peak_mib)
        for gpu, peak in self.history.add(spec, name, peak_mib, ratio, owner, trusted):
            self.observations.append(observation(spec, gpu, peak))

    def observe_oom(self, spec: TrainingSpec, gpu_model: str, held_mib: int) -> None:
        """Remember that a run died of an OOM holding `held_mib`: it needed more, so its
        architecture lies at least that far above its estimates (not a peak: neither
        history nor refits take it)."""
        self.history.widen(spec, self._above_models(spec, gpu_model, held_mib)[1])

    def _above_models(self, spec: TrainingSpec, gpu_model: str, mib: int) -> tuple[str, float]:
        """The GPU model's name, and `mib` over the models' peak estimate on it."""
        gpu = find_gpu_model(gpu_model)
        shape = resolve(spec)
        modelled, _upper, _method = self._modelled(spec, shape, breakdown(spec, gpu, shape))
        return (gpu.name if gpu else gpu_model), mib / modelled


@cache
def default_estimator() -> Estimator:
    """The estimator with the packaged calibration artifact (loaded once)."""
    return Estimator(artifact=load())
