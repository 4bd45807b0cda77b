"""The simulator's accounting on small traces, against figures computed by hand."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import pytest

from estimator.spec import TrainingSpec
from service.config import Settings
from service.scheduler import lifecycle
from service.scheduler.framework import SchedulerConfig
from service.scheduler.lifecycle import Decision
from service.simulator import engine
from service.simulator.cluster import SimGpuSpec, SimNode
from service.simulator.engine import SimResult, SimSettings, Simulation
from service.simulator.policies import Demand, Exclusive, Oracle, Policy, Request
from service.simulator.traces import Sharing
from service.simulator.workload import SimJob

GPU = "test-gpu"
ONE_GPU = [SimNode("n1", (SimGpuSpec(GPU, 16384),))]
SPEC = TrainingSpec.model_validate({"model": {"catalog": "timm:resnet50"}, "batch_size": 32})


def sharing(speed: float = 1.0, util_pct: float = 0.0) -> Sharing:
    return Sharing(share={0: 1.0}, gpu_util_pct={0: util_pct}, speed={(0, 0): speed})


def job(
    job_id: int,
    arrival_s: float,
    work_s: float,
    true_mib: int,
    claim_mib: int = 0,
    model: str = "m",
) -> SimJob:
    return SimJob(
        id=job_id,
        arrival_s=arrival_s,
        gpus=1,
        work_s=work_s,
        spec=SPEC,
        model=model,
        group="g",
        true_peak_mib={GPU: true_mib},
        foreseen_peak_mib={GPU: true_mib},
        claim_mib=claim_mib,
        sharing_class=0,
    )


NO_SLOWDOWN = sharing()


def simulate(
    jobs: list[SimJob], policy: Policy, shared: Sharing = NO_SLOWDOWN, max_attempts: int = 3
) -> SimResult:
    settings = SimSettings(
        cycle_s=0,
        ramp_s=60,
        max_attempts=max_attempts,
        scheduler=SchedulerConfig(headroom_mib=0),
    )
    return Simulation(ONE_GPU, jobs, policy, shared, {GPU: 1.0}, settings).run()


def test_exclusive_runs_one_job_after_the_other() -> None:
    # job 1 runs 0-100; job 2 arrives at 10, waits until 100, runs to 200
    result = simulate([job(1, 0, 100, 10240), job(2, 10, 100, 10240)], Exclusive())
    assert result.makespan_s == 200
    assert result.jct_s == [100, 190]
    assert result.mean_jct_s == 145
    assert result.p95_jct_s == pytest.approx(100 + 0.95 * 90)
    assert result.mean_queue_s == 45
    # each job holds 10 GiB from its peak (half its 100 s run) to its end: 2 x 50 s
    assert result.gpu_memory_utilization == pytest.approx(10240 * 100 / (16384 * 200))
    assert (result.oom_events, result.jobs_completed) == (0, 2)


def test_collocated_jobs_slow_each_other_as_measured() -> None:
    # job 1 alone 0-10 (10 s of work done); both at 0.8 until job 1's last 90 s of work
    # are done at 10 + 90 / 0.8 = 122.5, when job 2 has done 90 and needs 10 s alone
    result = simulate(
        [job(1, 0, 100, 6144), job(2, 10, 100, 6144)], Oracle(), sharing(0.8, util_pct=50)
    )
    assert result.makespan_s == pytest.approx(132.5)
    assert result.jct_s == pytest.approx([122.5, 122.5])
    assert result.mean_queue_s == 0
    # the GPU is half busy with one job, fully with two: (10 x 0.5 + 112.5 + 10 x 0.5) / 132.5
    assert result.sm_busy_share == pytest.approx(122.5 / 132.5)


def test_an_oom_costs_the_attempt_and_a_retry_reserves_more() -> None:
    # Both claim 4 GiB and get the 16 GiB GPU at 0; both need 10 GiB at their peak (60 s).
    # Job 1 peaks first and its reservation grows to 11264 MiB; job 2 finds 6 GiB free
    # and dies at 60 (60 GPU-s lost). Its retry reserves 1.2 x the 6144 MiB it could
    # reach = 7373 MiB, waits out 10 s of back-off and then job 1 (to 200), and runs
    # 200-400.
    result = simulate([job(1, 0, 200, 10240, 4096), job(2, 0, 200, 10240, 4096)], Request())
    assert result.oom_events == 1
    assert result.gpu_hours_lost_to_oom == pytest.approx(60 / 3600)
    assert result.makespan_s == 400
    assert result.jct_s == [200, 400]
    assert result.mean_queue_s == (0 + (200 - 60)) / 2
    assert (result.jobs_completed, result.jobs_failed, result.placements) == (2, 0, 3)


def test_an_oom_with_no_retries_left_fails_the_job() -> None:
    result = simulate(
        [job(1, 0, 200, 10240, 4096), job(2, 0, 200, 10240, 4096)], Request(), max_attempts=1
    )
    assert (result.oom_events, result.jobs_completed, result.jobs_failed) == (1, 1, 1)
    assert result.makespan_s == 200


def test_a_job_no_gpu_could_hold_is_refused_as_the_service_refuses_it() -> None:
    result = simulate([job(1, 0, 100, 1024, claim_mib=20480)], Request())
    assert (result.jobs_rejected, result.jobs_completed, result.makespan_s) == (1, 0, 0)


def test_cycles_run_on_the_interval() -> None:
    settings = SimSettings(cycle_s=30, ramp_s=60, scheduler=SchedulerConfig(headroom_mib=0))
    jobs = [job(1, 5, 100, 1024)]
    result = Simulation(ONE_GPU, jobs, Oracle(), sharing(), {GPU: 1.0}, settings).run()
    # arrives at 5, placed by the cycle at 30, done at 130
    assert result.jct_s == [125] and result.mean_queue_s == 25
    assert math.isclose(result.makespan_s, 125)


def test_the_simulation_runs_the_services_default_settings() -> None:
    settings = Settings()
    assert SimSettings().scheduler == settings.scheduler()
    assert SimSettings().rules == settings.reservation_rules()
    assert SimSettings().max_attempts == settings.default_max_attempts


class Learning(Request):
    """Users' claims, until a run of a model dies of an OOM: from then on its jobs ask
    for `learned_mib`."""

    def __init__(self, learned_mib: int) -> None:
        self.learned_mib = learned_mib
        self.oomed: set[str] = set()

    def demand(self, job: SimJob, models: Mapping[str, int]) -> Demand:
        if job.model in self.oomed:
            return Demand(memory_mib=self.learned_mib)
        return super().demand(job, models)

    def observe_oom(self, job: SimJob, model: str, held_mib: int) -> None:
        self.oomed.add(job.model)


@pytest.mark.parametrize("learned_mib", [15000, 20000])
def test_a_waiting_job_takes_what_its_models_oom_taught_where_it_could_run_by_it(
    learned_mib: int,
) -> None:
    # Job 1 (model m) and a filler of another model start at 0, reserving 4096 and
    # 10000 MiB of 16384; job 2 (model m) waits. At 60 the filler holds its 10000 and
    # job 1 dies needing 14000. Job 2 then asks for what the OOM taught, where a GPU
    # could ever give it (15000), and keeps its claim where none could (20000).
    jobs = [
        job(0, 0, 100, 10000, claim_mib=10000, model="filler"),
        job(1, 0, 200, 14000, claim_mib=4096),
        job(2, 1, 200, 14000, claim_mib=4096),
    ]
    result = simulate(jobs, Learning(learned_mib))
    assert result.jobs_rejected == 0 and result.jobs_completed + result.jobs_failed == 3
    reserved = result.reserved_over_true[2] * 14000
    assert reserved == pytest.approx(learned_mib if learned_mib <= 16384 else 4096)


def test_a_retry_after_an_oom_takes_the_step_the_latest_jobs_showed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in the service (tests/service/test_retry_step.py): jobs claiming 4000 MiB die
    filling T4s and succeed on A100s needing more; a later job's retry asks as much more
    as the latest 19 of them needed, where the configured factor alone asks 1.2 x."""
    t4, a100 = SimGpuSpec("Tesla T4", 15360), SimGpuSpec("NVIDIA A100-SXM4-40GB", 40960)
    nodes = [SimNode("n1", (t4,) * 19 + (a100,) * 19)]

    def needing(job_id: int, arrival_s: float, t4s: float) -> SimJob:
        peak = round(t4s * t4.memory_mib)
        return dataclasses.replace(
            job(job_id, arrival_s, 600, 0, claim_mib=4000),
            true_peak_mib={t4.model: peak, a100.model: peak},
            foreseen_peak_mib={t4.model: peak, a100.model: peak},
        )

    floors: list[int | None] = []

    def settle(*args: Any, **kwargs: Any) -> Decision:
        decision = lifecycle.settle(*args, **kwargs)
        floors.append(decision.floor_mib)
        return decision

    monkeypatch.setattr(engine, "settle", settle)
    monkeypatch.setattr(engine, "RETRY_RATIOS_KEPT", 19)
    settings = SimSettings(cycle_s=0, scheduler=SchedulerConfig(headroom_mib=0, max_jobs_per_gpu=1))
    speeds = {t4.model: 1.0, a100.model: 1.0}

    def last_floor(jobs: list[SimJob]) -> int | None:
        floors.clear()
        result = Simulation(nodes, jobs, Request(), NO_SLOWDOWN, speeds, settings).run()
        assert (result.oom_events, result.jobs_completed) == (len(jobs), len(jobs))
        assert floors[-2] == floors[-1]  # the last job's OOM, then its success
        return floors[-1]

    assert last_floor([needing(1, 0, 2.0)]) == 18432  # 1.2 x the T4 it filled
    older = [needing(job_id, 0, 2.5) for job_id in range(1, 20)]
    newer = [needing(job_id, 5_000, 2.0) for job_id in range(20, 39)]
    assert last_floor([*older, needing(39, 10_000, 2.0)]) == 38400  # 2.5 x
    assert last_floor([*older, *newer, needing(39, 10_000, 2.0)]) == 30720  # the latest: 2 x
