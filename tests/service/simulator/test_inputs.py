"""What the simulator is fed: derived trace tables, the cluster, jobs and policies."""

from __future__ import annotations

import filecmp
import math
from dataclasses import replace
from pathlib import Path

import pytest

from estimator.analytical.context import fixed_cost
from estimator.estimate import Estimator
from estimator.gpus import find_gpu_model
from estimator.learned import measurements
from estimator.spec import TrainingSpec
from service.simulator import cluster, traces, workload
from service.simulator.policies import (
    Colloc,
    Exclusive,
    Oracle,
    Request,
    horus_bytes,
    horus_mib,
)
from service.simulator.scenario import SCENARIOS, SOURCES

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared data folder is not beside the repo")
def test_committed_tables_are_what_extraction_makes(tmp_path: Path) -> None:
    for made in traces.extract(SHARED, tmp_path):
        assert filecmp.cmp(made, traces.DATA / made.name, shallow=False), made.name


def test_tables_read() -> None:
    assert len(traces.read_jobs("alibaba")) == 2054 and len(traces.read_jobs("muri")) == 1494
    assert traces.read_gavel_speeds() == {"k80": 0.2469, "p100": 0.813}
    sharing = traces.read_sharing()
    assert sum(sharing.share.values()) == pytest.approx(1.0, abs=1e-3)
    assert sharing.speed[(2, 2)] < sharing.speed[(0, 0)] <= 1.0


def test_alibaba_cluster_scales_with_its_mix() -> None:
    nodes = cluster.scaled_alibaba(traces.read_node_shapes(), 1000)
    gpus = [gpu for node in nodes for gpu in node.gpus]
    assert 990 <= len(gpus) <= 1000
    share = sum(1 for g in gpus if g.model == "NVIDIA A100-SXM4-40GB") / len(gpus)
    assert share == pytest.approx(4392 / 6212, abs=0.02)  # G2's share of the trace


def test_speeds_are_gavels_where_measured_and_bandwidth_elsewhere() -> None:
    gavel = traces.read_gavel_speeds()
    assert cluster.gpu_speed("Tesla P100-PCIE-16GB", gavel) == 0.813
    assert cluster.gpu_speed("Tesla T4", gavel) == pytest.approx(320 / 900)
    assert cluster.gpu_speed("some new GPU", gavel) == 1.0


@pytest.mark.parametrize(
    ("neurons", "layers", "horus_gb"),
    [(1, 1, 0.000100273638963699), (201, 191, 0.972587380558252), (800, 651, 51.3449842110276)],
)
def test_horus_formula_matches_gpumemnets_recorded_figures(
    neurons: int, layers: int, horus_gb: float
) -> None:
    """Rows of gpumemnet/mlp_mnist_horus.csv: an MNIST MLP, batch 32, GB = 2^30 bytes."""
    weights = 784 * neurons + (layers - 1) * neurons**2 + 10 * neurons
    biases = neurons * layers + 10
    assert horus_bytes(weights + biases, 32, biases) / 2**30 == pytest.approx(horus_gb)


def _jobs(count: int, seed: int = 0) -> list[workload.SimJob]:
    rows = measurements.read()
    models = {"NVIDIA A100-SXM4-40GB": 40960, "Tesla T4": 15360}
    config = workload.WorkloadConfig(jobs=count, load=2.0, sources=SOURCES, seed=seed)
    return workload.build(
        config,
        traces.read_jobs("alibaba"),
        rows,
        workload.claim_ratios(rows),
        traces.read_sharing().share,
        models,
        16,
    )


def test_workload_is_deterministic_and_grounded_in_measurements() -> None:
    jobs = _jobs(300)
    assert jobs == _jobs(300) and jobs != _jobs(300, seed=1)
    # the image size tells the cnns sheet's legacy_xception runs from timm's
    measured = {(r.model, r.batch_size, r.image_size): r.measured_mib for r in measurements.read()}
    for job in jobs:
        assert job.arrival_s >= 0 and 60 <= job.work_s <= 4 * 3600 and 1 <= job.gpus <= 8
        a100 = job.true_peak_mib["NVIDIA A100-SXM4-40GB"]
        base = measured[(job.model, job.spec.batch_size, job.spec.image_size)]
        if job.gpus == 1:  # the measured peak, raised by at most the sampling gap
            assert base <= a100 <= base * 1.05 + 1
        assert min(job.true_peak_mib.values()) <= 40960
        assert job.claim_mib % 1024 == 0
    assert [j.arrival_s for j in jobs] == sorted(j.arrival_s for j in jobs)


def test_runs_that_ended_before_their_peak_are_no_truth() -> None:
    for row in measurements.read():
        if row.faketensor_mib is not None and not row.censored and not row.implausible:
            assert workload.plausible(row) == (row.faketensor_mib <= row.measured_mib)
    crashed = [r for r in measurements.read() if r.model.endswith('cait_m48_448"}')]
    assert crashed and not any(workload.plausible(r) for r in crashed)


def test_policies_demands() -> None:
    job = _jobs(1)[0]
    models = {"NVIDIA A100-SXM4-40GB": 40960, "Tesla T4": 15360}
    assert Oracle().demand(job, models).upper_mib == job.foreseen_peak_mib == job.true_peak_mib
    assert Request().demand(job, models).memory_mib == job.claim_mib
    fits = Exclusive().demand(job, models).gpu_models
    assert fits == frozenset(m for m, memory in models.items() if job.true_peak_mib[m] <= memory)
    assert horus_mib(job.spec, "Tesla T4") > 0


def test_standard_scenario_is_documented() -> None:
    results = (Path(__file__).resolve().parents[3] / "bench" / "RESULTS.md").read_text()
    standard = SCENARIOS["standard"]
    assert "colloc simulate --scenario standard" in results
    assert f"{standard.workload.jobs:,} jobs" in results and f"{standard.gpus} GPUs" in results


def test_colloc_answers_as_its_estimator_and_learns_from_observed_peaks() -> None:
    estimator = Estimator(artifact=None)
    colloc = Colloc({"m": estimator}, lambda job: job.model, estimator.offsets)
    first = replace(_jobs(1)[0], model="m")
    other = replace(first, spec=first.spec.model_copy(update={"image_size": 299}))
    models = {"Tesla T4": 15360, "NVIDIA A100-SXM4-40GB": 40960}
    for job in (first, other, first):  # the same model and batch, two specs
        expected = {m: estimator.estimate(job.spec, m).upper_mib for m in models}
        assert colloc.demand(job, models).upper_mib == expected
    colloc.observe(first, "Tesla T4", 5000)
    # history + 10%; on the A100 with its fixed cost (context, workspaces) for the T4's
    t4, a100 = (fixed_cost(find_gpu_model(m), communicates=False).total for m in models)
    assert colloc.demand(first, models).upper_mib == {
        "Tesla T4": 5500,
        "NVIDIA A100-SXM4-40GB": math.ceil((5000 - t4 + a100) * 1.1),
    }
    assert colloc.demand(first, models).proven_mib == {
        "Tesla T4": 5000,
        "NVIDIA A100-SXM4-40GB": round(5000 - t4 + a100),
    }
    # an OOM of another spec of the architecture widens the bound the next one gets
    bigger = replace(first, spec=first.spec.model_copy(update={"batch_size": 512}))
    before = colloc.demand(bigger, models).upper_mib["Tesla T4"]
    colloc.observe_oom(other, "Tesla T4", 3 * estimator.estimate(other.spec, "Tesla T4").peak_mib)
    assert colloc.demand(bigger, models).upper_mib["Tesla T4"] > before


def test_colloc_forgets_every_estimate_when_the_repeats_change_the_margin() -> None:
    estimator = Estimator(artifact=None)
    colloc = Colloc({"m": estimator}, lambda job: job.model, estimator.offsets)
    first = replace(_jobs(1)[0], model="m")
    models = {"Tesla T4": 15360}
    colloc.observe(first, "Tesla T4", 5000)
    assert colloc.demand(first, models).upper_mib == {"Tesla T4": 5500}  # 10%, kept
    for batch in range(1, 60):  # another architecture's specs read their peak again
        spec = TrainingSpec.model_validate({"model": {"catalog": "resnet18"}, "batch_size": batch})
        colloc.observe(replace(first, spec=spec), "Tesla T4", 3000)
        colloc.observe(replace(first, spec=spec), "Tesla T4", 3000)
    assert estimator.history.repeat_margin(estimator.coverage) == 0.0
    assert colloc.demand(first, models).upper_mib == {"Tesla T4": 5000}
