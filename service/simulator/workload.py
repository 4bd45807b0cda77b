"""Simulated jobs: arrivals, GPU counts and run times from a public trace, each with a
real training configuration whose true peak memory comes from a measurement.

The truth is never Colloc's own estimate. A job's peak on the A100-40GB is the peak
GPUMemNet measured for its configuration (`estimator/learned/data/measurements.csv`),
raised by up to `spike` (a 1 Hz sampler misses short spikes, so a measured peak is a
lower bound: `../shared/data/README.md`, caveat 3); on another GPU model the CUDA
context differs (the floors the data shows, `estimator/analytical/context.py`) and the
rest is the same tensors. What users claim is what PyTorch reports of tensors, which
misses the context and the allocator's cache: the claim is the measured peak times a
ratio drawn from FakeTensor's tensor-only figure over the measured peak on the same
timm runs (clipped to 0.3-1.2; median 0.57), rounded up to a whole GiB, as people
write claims.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from estimator.analytical.context import fixed_cost
from estimator.gpus import find_gpu_model
from estimator.learned.measurements import A100, Measurement
from estimator.learned.train import environment_of
from estimator.spec import TrainingSpec
from service.simulator.traces import TraceJob

GIB = 1024
# Tensor-only accounting misses at least this much and never claims above the peak by
# more than this (FakeTensor's own estimate blows up on a few models).
CLAIM_RATIO_RANGE = (0.3, 1.2)


@dataclass(frozen=True)
class SimJob:
    id: int
    arrival_s: float
    gpus: int
    work_s: float  # run time alone on a V100 (the speed 1.0 reference)
    spec: TrainingSpec
    model: str  # the measured run's model (JSON), and its architecture family:
    group: str  # held-out estimators are split by one or the other
    true_peak_mib: dict[str, int]  # per GPU model of the cluster
    # the peak an oracle knows, per GPU model: the true peak but for surprises no
    # measurement shows (the `spiky` scenario's); what `oracle` and `exclusive` go by
    foreseen_peak_mib: dict[str, int]
    claim_mib: int  # what the user would write as memory_mib
    sharing_class: int  # Lucid's class: how much it slows and is slowed by neighbours
    # the measured run's campaign stack on its GPU (`train.environment_of`): the key of
    # that stack's fixed cost above the estimator's defaults
    environment: str = ""


def true_peak_mib(row: Measurement, gpu_model: str, gpus: int, spike: float) -> int:
    """The job's real peak per GPU on `gpu_model`: the measured A100 peak with that
    GPU's CUDA context instead of the A100's (and NCCL buffers when it spans GPUs)."""
    a100 = fixed_cost(find_gpu_model(A100), communicates=False).total
    here = fixed_cost(find_gpu_model(gpu_model), communicates=gpus > 1).total
    return math.ceil((row.measured_mib - a100 + here) * (1 + spike))


def plausible(row: Measurement) -> bool:
    """Whether the run's peak can be a job's truth: not flagged by the estimator's
    implausible-measurement rule (`measurements.implausible_runs`: a peak falling as the
    batch grows, growing faster than it, one value at batches 4x apart, or far beyond
    the run's traced tensors; 498 timm runs), not censored at the card's limit, and not
    below FakeTensor's tensor-only peak of the same run (a device peak holds every
    tensor, so such a run ended early; 63 timm runs the rule does not flag)."""
    return (
        not row.implausible
        and not row.censored
        and not (row.faketensor_mib and row.faketensor_mib > row.measured_mib)
    )


def claim_ratios(rows: Sequence[Measurement]) -> list[float]:
    """Tensor-only over measured peak, on the runs that have both (sorted)."""
    low, high = CLAIM_RATIO_RANGE
    return sorted(
        min(high, max(low, row.faketensor_mib / row.measured_mib))
        for row in rows
        if row.faketensor_mib and plausible(row)
    )


@dataclass(frozen=True)
class WorkloadConfig:
    jobs: int
    load: float  # offered GPU time over the cluster's GPU time, while jobs arrive
    sources: dict[str, float]  # measurement source -> share of jobs
    min_duration_s: float = 60.0
    max_duration_s: float = 4 * 3600.0
    max_gpus: int = 8  # gangs stay on one node
    spike: float = 0.05
    seed: int = 0


def build(
    config: WorkloadConfig,
    trace: Sequence[TraceJob],
    configurations: Sequence[Measurement],
    ratios: Sequence[float],
    class_share: dict[int, float],
    cluster_models: dict[str, int],
    cluster_gpus: int,
) -> list[SimJob]:
    """`config.jobs` jobs: trace records (arrival gap, GPU count, run time) drawn with
    replacement, arrivals compressed so the offered load is `config.load`; each with a
    measured configuration that fits on some GPU model of the cluster (`cluster_models`:
    model -> memory MiB), drawn by source share."""
    rng = random.Random(config.seed)
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(trace)]
    by_source: dict[str, list[Measurement]] = {}
    for row in configurations:
        if not plausible(row) or row.source not in config.sources:
            continue
        if any(
            true_peak_mib(row, model, 1, config.spike) <= memory
            for model, memory in cluster_models.items()
        ):
            by_source.setdefault(row.source, []).append(row)
    sources = sorted(by_source)
    weights = [config.sources[s] for s in sources]
    classes = sorted(class_share)
    picked = []
    for _ in range(config.jobs):
        record = trace[rng.randrange(len(trace))]
        gap = gaps[rng.randrange(len(gaps))]
        duration = min(config.max_duration_s, max(config.min_duration_s, record.duration_s))
        gpus = min(config.max_gpus, record.gpus)
        picked.append((gap, gpus, duration))
    offered = sum(gpus * duration for _gap, gpus, duration in picked)
    span = offered / (config.load * cluster_gpus)
    scale = span / max(sum(gap for gap, _g, _d in picked), 1e-9)
    jobs = []
    clock = 0.0
    for job_id, (gap, gpus, duration) in enumerate(picked, start=1):
        clock += gap * scale if job_id > 1 else 0.0
        row = rng.choice(by_source[rng.choices(sources, weights)[0]])
        while not any(
            true_peak_mib(row, m, gpus, config.spike) <= memory
            for m, memory in cluster_models.items()
        ):  # the NCCL buffers of a multi-GPU job can tip a configuration over
            row = rng.choice(by_source[rng.choices(sources, weights)[0]])
        spike = rng.uniform(0.0, config.spike)
        peaks = {model: true_peak_mib(row, model, gpus, spike) for model in cluster_models}
        spec = row.spec()
        if gpus > 1:  # data parallel: each GPU holds the single-GPU run's memory
            parallelism = spec.parallelism.model_copy(update={"dp": gpus})
            spec = spec.model_copy(update={"parallelism": parallelism})
        jobs.append(
            SimJob(
                id=job_id,
                arrival_s=round(clock, 3),
                gpus=gpus,
                work_s=duration,
                spec=spec,
                model=row.model,
                group=row.group,
                true_peak_mib=peaks,
                foreseen_peak_mib=peaks,
                claim_mib=GIB * math.ceil(row.measured_mib * rng.choice(ratios) / GIB),
                sharing_class=rng.choices(classes, [class_share[c] for c in classes])[0],
                environment=environment_of(row),
            )
        )
    return jobs
