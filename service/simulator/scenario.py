"""Scenarios: a cluster, a workload and the policies compared on it, for one seed.

`standard` is the scenario `bench/RESULTS.md` records: a busy heterogeneous cluster
with a backlog, where packing decides how fast the queue drains. `large` is the size
the simulator is timed at (10,000 jobs on 1,000 GPUs).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from estimator.learned import measurements
from service.simulator import cluster, traces, workload
from service.simulator.engine import SimResult, SimSettings, Simulation
from service.simulator.policies import POLICIES, PolicyInputs

# Jobs' configurations by measurement source: mostly timm vision models, some tiny
# MLPs, the six measured CNNs and the six measured transformer language models.
SOURCES = {"timm": 0.7, "mlp_step1": 0.1, "mlp_step2": 0.1, "cnns": 0.05, "transformers": 0.05}


@dataclass(frozen=True)
class Scenario:
    name: str
    gpus: int  # an Alibaba-shaped cluster of about this many GPUs (unless nodes are given)
    trace: str  # "alibaba" or "muri"
    workload: workload.WorkloadConfig
    settings: SimSettings = field(default_factory=SimSettings)


SCENARIOS = {
    "standard": Scenario(
        "standard",
        gpus=200,
        trace="alibaba",
        workload=workload.WorkloadConfig(
            jobs=10_000, load=4.0, sources=SOURCES, max_duration_s=1800.0
        ),
    ),
    "large": Scenario(
        "large",
        gpus=1000,
        trace="alibaba",
        workload=workload.WorkloadConfig(
            jobs=10_000, load=4.0, sources=SOURCES, max_duration_s=3600.0
        ),
    ),
}


def adjusted(
    scenario: Scenario,
    *,
    gpus: int | None = None,
    trace: str | None = None,
    jobs: int | None = None,
    load: float | None = None,
    seed: int | None = None,
) -> Scenario:
    """The scenario with the given figures changed."""
    given = scenario.workload
    return replace(
        scenario,
        gpus=gpus or scenario.gpus,
        trace=trace or scenario.trace,
        workload=replace(
            given,
            jobs=given.jobs if jobs is None else jobs,
            load=given.load if load is None else load,
            seed=given.seed if seed is None else seed,
        ),
    )


@dataclass
class Report:
    scenario: Scenario
    results: dict[str, SimResult]
    wall_s: dict[str, float]
    trace: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The simulation output contract (DESIGN.md)."""
        return {
            "policies": {name: result.summary() for name, result in self.results.items()},
            "trace": self.trace,
        }


def run(
    scenario: Scenario,
    policies: Sequence[str],
    nodes: list[cluster.SimNode] | None = None,
) -> Report:
    """Every policy on the same cluster and the same jobs."""
    nodes = nodes or cluster.scaled_alibaba(traces.read_node_shapes(), scenario.gpus)
    gpu_count = sum(len(node.gpus) for node in nodes)
    models = {gpu.model: gpu.memory_mib for node in nodes for gpu in node.gpus}
    gavel = traces.read_gavel_speeds()
    speeds = {model: cluster.gpu_speed(model, gavel) for model in models}
    sharing = traces.read_sharing()
    rows = measurements.read()
    jobs = workload.build(
        scenario.workload,
        traces.read_jobs(scenario.trace),
        rows,
        workload.claim_ratios(rows),
        sharing.share,
        models,
        gpu_count,
    )
    inputs = PolicyInputs(rows)
    results: dict[str, SimResult] = {}
    wall_s: dict[str, float] = {}
    for name in policies:
        started = time.perf_counter()
        policy = POLICIES[name](inputs)
        results[name] = Simulation(nodes, jobs, policy, sharing, speeds, scenario.settings).run()
        wall_s[name] = round(time.perf_counter() - started, 1)
    trace = {
        "scenario": scenario.name,
        "trace": scenario.trace,
        "seed": scenario.workload.seed,
        "jobs": len(jobs),
        "gpus": gpu_count,
        "nodes": len(nodes),
        "gpu_models": dict(sorted(Counter(g.model for n in nodes for g in n.gpus).items())),
        "load": scenario.workload.load,
        "arrival_span_s": round(jobs[-1].arrival_s - jobs[0].arrival_s, 1) if jobs else 0.0,
        "gpu_seconds_offered": round(sum(j.work_s * j.gpus for j in jobs), 1),
        "gang_jobs": sum(1 for j in jobs if j.gpus > 1),
        "wall_s": wall_s,
    }
    return Report(scenario, results, wall_s, trace)
