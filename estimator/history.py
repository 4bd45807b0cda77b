"""Exact history: what a job with the same spec really used, by GPU model.

A spec's fingerprint is the hash of its canonical JSON, so resubmitting the same
training configuration finds the peaks observed before and needs no guessing: on the
same GPU model as they are, on another with the CUDA context swapped (`estimate.py`).
"""

from __future__ import annotations

import hashlib
import json

from estimator.gpus import canonical_gpu_name
from estimator.spec import TrainingSpec

# Repeat runs of one configuration in one environment differ by a few percent
# (cuDNN algorithm choice, allocator history); keep this much above the largest seen.
HISTORY_MARGIN = 0.10


def fingerprint(spec: TrainingSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _gpu_key(gpu_model: str) -> str:
    return canonical_gpu_name(gpu_model) or gpu_model


def architecture(spec: TrainingSpec) -> str:
    """The spec's model alone (any batch, precision or GPU count)."""
    return json.dumps(spec.model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


class ObservationHistory:
    """Observed peaks by spec fingerprint, then GPU model; and, by architecture, the
    largest ratio of an observed peak to the estimate the models made of it."""

    def __init__(self) -> None:
        self._peaks: dict[str, dict[str, list[int]]] = {}
        self._ratios: dict[str, float] = {}

    def add(self, spec: TrainingSpec, gpu_model: str, peak_mib: int, ratio: float) -> None:
        by_gpu = self._peaks.setdefault(fingerprint(spec), {})
        by_gpu.setdefault(_gpu_key(gpu_model), []).append(peak_mib)
        self.widen(spec, ratio)

    def widen(self, spec: TrainingSpec, ratio: float) -> None:
        """Note that a run of the spec's architecture went `ratio` times its estimate."""
        key = architecture(spec)
        self._ratios[key] = max(ratio, self._ratios.get(key, ratio))

    def model_ratio(self, spec: TrainingSpec) -> float | None:
        """How far above their estimates runs of this architecture went, at most."""
        return self._ratios.get(architecture(spec))

    def peaks_by_gpu(self, spec: TrainingSpec) -> dict[str, int]:
        """The largest observed peak of `spec` on each GPU model it ran on, by NVML name
        (or the name it was observed under, for a model the catalog does not know)."""
        return {gpu: max(peaks) for gpu, peaks in self._peaks.get(fingerprint(spec), {}).items()}
