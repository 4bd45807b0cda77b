"""The scenarios' truths (issue 20): clean measured peaks, spikes no policy knows, a
foreign software stack; and the users' figures (JCT, queueing) on a hand-made trace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimator.analytical.context import fixed_cost
from estimator.gpus import find_gpu_model
from estimator.learned import measurements
from service.scheduler.framework import SchedulerConfig
from service.simulator import traces, workload
from service.simulator.cluster import SimGpuSpec, SimNode
from service.simulator.engine import SimSettings, Simulation
from service.simulator.policies import Oracle
from service.simulator.scenario import (
    FOREIGN_MODEL_SCALE,
    MEASURED_STACK_MIB,
    SCENARIOS,
    SOURCES,
    SPIKE_FACTORS,
    foreign_fixed_mib,
    foreign_stack,
    spiky,
)
from service.simulator.workload import SimJob

A100, T4, V100 = "NVIDIA A100-SXM4-40GB", "Tesla T4", "Tesla V100-SXM2-16GB"
ROOM = {A100: 40960, T4: 15360, V100: 16384}


def _jobs(count: int, seed: int = 0) -> list[SimJob]:
    rows = measurements.read()
    config = workload.WorkloadConfig(jobs=count, load=2.0, sources=SOURCES, seed=seed)
    return workload.build(
        config,
        traces.read_jobs("alibaba"),
        rows,
        workload.claim_ratios(rows),
        traces.read_sharing().share,
        ROOM,
        16,
    )


JOBS = _jobs(400)


def test_implausible_measurements_are_never_a_jobs_truth() -> None:
    rows = measurements.read()
    flagged = {(r.model, r.batch_size) for r in rows if r.implausible}
    assert len(flagged) == 498  # the estimator's rule flags 498 timm runs
    assert not any(workload.plausible(r) for r in rows if r.implausible)
    picked = {(job.model, job.spec.batch_size) for job in JOBS}
    assert picked and not picked & flagged


def test_spiky_raises_one_percent_of_peaks_unforeseen_and_by_seed() -> None:
    jobs, figures = spiky(JOBS, ROOM, seed=0)
    assert jobs == spiky(JOBS, ROOM, seed=0)[0] and jobs != spiky(JOBS, ROOM, seed=1)[0]
    spiked = [(before, after) for before, after in zip(JOBS, jobs, strict=True) if before != after]
    assert len(spiked) == figures["spiked_jobs"] == 4  # 1% of 400
    low, high = SPIKE_FACTORS
    for before, after in spiked:
        assert after.foreseen_peak_mib == before.true_peak_mib  # no policy knows it
        for model, peak in before.true_peak_mib.items():
            assert peak * low <= after.true_peak_mib[model] <= math.ceil(peak * high)
        assert any(after.true_peak_mib[m] <= room for m, room in ROOM.items())


def test_foreign_stack_moves_every_peak_by_a_fixed_cost_per_gpu_and_scales_models() -> None:
    shift = foreign_fixed_mib(list(ROOM), seed=0)
    assert shift[A100] == round(-1100 / 1.048576) and shift[T4] == round(300 / 1.048576)
    assert shift[T4] >= shift[V100] >= shift[A100] and shift == foreign_fixed_mib(list(ROOM), 0)
    assert shift[V100] != foreign_fixed_mib(list(ROOM), seed=1)[V100]
    jobs, figures = foreign_stack(JOBS, ROOM, seed=0)
    assert figures == {"foreign_fixed_mib": shift}
    assert all(job.environment for job in JOBS)
    scales: dict[str, set[float]] = {}
    for before, after in zip(JOBS, jobs, strict=True):
        assert after.foreseen_peak_mib == after.true_peak_mib  # the oracle knows the stack
        for model, peak in before.true_peak_mib.items():
            default = fixed_cost(find_gpu_model(model), communicates=before.gpus > 1).total
            # the measured stack's fixed cost stays whole: only the model's part scales
            fixed = default + MEASURED_STACK_MIB.get(before.environment, 0.0)
            moved = after.true_peak_mib[model]
            if moved > default / 2 + 1 and peak > fixed:  # recover the model's scale
                scale = (moved - shift[model] - fixed) / (peak - fixed)
                assert abs(scale - 1) <= FOREIGN_MODEL_SCALE + 0.01
                scales.setdefault(before.model, set()).add(round(scale, 2))
    assert all(len(s) <= 2 for s in scales.values())  # one scale per model (give or take
    # the rounding up to a whole MiB)
    assert len({min(s) for s in scales.values()}) > 1


def test_scenarios_share_the_standard_workload_and_differ_in_truth() -> None:
    standard = SCENARIOS["standard"]
    for name in ("spiky", "foreign-stack"):
        assert SCENARIOS[name].workload == standard.workload
        assert SCENARIOS[name].truth is not standard.truth


SPEC = JOBS[0].spec


def _job(job_id: int, arrival_s: float, work_s: float, peak_mib: int) -> SimJob:
    return SimJob(
        id=job_id,
        arrival_s=arrival_s,
        gpus=1,
        work_s=work_s,
        spec=SPEC,
        model="m",
        group="g",
        true_peak_mib={"gpu": peak_mib},
        foreseen_peak_mib={"gpu": peak_mib},
        claim_mib=0,
        sharing_class=0,
    )


def test_jct_and_queueing_figures_on_a_hand_made_trace() -> None:
    # one 16 GiB GPU; 10 GiB jobs cannot share it: job 1 runs 0-100, job 2 (arrives at
    # 10) waits for it and runs 100-200; job 3 (4 GiB, arrives at 20) would fit beside
    # job 1, but the GPU is held for job 2, the queue's head, so it starts beside job 2
    # at 100 and runs to 150
    sharing = traces.Sharing(share={0: 1.0}, gpu_util_pct={0: 0.0}, speed={(0, 0): 1.0})
    jobs = [_job(1, 0, 100, 10240), _job(2, 10, 100, 10240), _job(3, 20, 50, 4096)]
    settings = SimSettings(cycle_s=0, scheduler=SchedulerConfig(headroom_mib=0))
    nodes = [SimNode("n", (SimGpuSpec("gpu", 16384),))]
    result = Simulation(nodes, jobs, Oracle(), sharing, {"gpu": 1.0}, settings).run()
    jct, queued = [100.0, 190.0, 130.0], [0.0, 90.0, 80.0]
    assert result.jct_s == sorted(jct)
    assert result.mean_jct_s == pytest.approx(np.mean(jct))
    assert result.p95_jct_s == pytest.approx(np.percentile(jct, 95))
    assert result.mean_queue_s == pytest.approx(170 / 3)
    assert result.p95_queue_s == pytest.approx(np.percentile(queued, 95))
    assert result.makespan_s == 200 and result.oom_lost_share == 0
    assert result.reserved_over_true == {1: 1.0, 2: 1.0, 3: 1.0}
    summary = result.summary()
    assert summary["p95_queue_s"] == 89.0 and summary["reserved_over_true_peak_after_200"] == 0
