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


class ObservationHistory:
    """Observed peaks by spec fingerprint, then GPU model."""

    def __init__(self) -> None:
        self._peaks: dict[str, dict[str, list[int]]] = {}

    def add(self, spec: TrainingSpec, gpu_model: str, peak_mib: int) -> None:
        by_gpu = self._peaks.setdefault(fingerprint(spec), {})
        by_gpu.setdefault(_gpu_key(gpu_model), []).append(peak_mib)

    def peak_mib(self, spec: TrainingSpec, gpu_model: str) -> int | None:
        peaks = self._peaks.get(fingerprint(spec), {}).get(_gpu_key(gpu_model))
        return max(peaks) if peaks else None

    def peaks_by_gpu(self, spec: TrainingSpec) -> dict[str, int]:
        """The largest observed peak of `spec` on each GPU model it ran on."""
        return {gpu: max(peaks) for gpu, peaks in self._peaks.get(fingerprint(spec), {}).items()}
