"""`colloc simulate`: the trace-driven cluster simulation, every policy on one workload."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from agent.cluster import ClusterFileError, load_cluster
from service.cli.errors import CliError
from service.simulator import traces
from service.simulator.cluster import SimGpuSpec, SimNode
from service.simulator.policies import POLICIES
from service.simulator.report import PlotsUnavailableError, plots, table
from service.simulator.scenario import SCENARIOS, adjusted, run


def _nodes(path: Path) -> list[SimNode]:
    try:
        nodes = load_cluster(path)
    except ClusterFileError as exc:
        raise CliError(f"{path}: {exc}") from exc
    return [
        SimNode(node.name, tuple(SimGpuSpec(g.model, g.memory_total_mib) for g in node.gpus))
        for node in nodes
    ]


def _policies(text: str | None) -> list[str]:
    if text is None:
        return list(POLICIES)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        raise CliError(f"unknown policy {', '.join(unknown)!r}; known: {', '.join(POLICIES)}")
    return names


def run_simulate(args: argparse.Namespace) -> int:
    if args.extract:
        if not (args.extract / "alibaba_v2023").is_dir():
            raise CliError(f"{args.extract}: not the shared data folder (no alibaba_v2023/)")
        for path in traces.extract(args.extract):
            print(path)
        return 0
    if args.scenario not in SCENARIOS:
        raise CliError(f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}")
    scenario = adjusted(
        SCENARIOS[args.scenario],
        gpus=args.gpus,
        trace=args.trace,
        jobs=args.jobs,
        load=args.load,
        seed=args.seed,
    )
    nodes = _nodes(args.cluster) if args.cluster else None
    # the policies are independent: one process each, as many at once as there are CPUs
    report = run(scenario, _policies(args.policies), nodes, workers=os.cpu_count() or 1)
    if args.json:
        print(json.dumps(report.as_json(), sort_keys=True))
    else:
        trace = report.trace
        print(
            f"scenario {scenario.name}: {trace['jobs']} jobs from the {trace['trace']} trace "
            f"(seed {trace['seed']}, load {trace['load']}) on {trace['gpus']} GPUs; truth "
            f"{trace['truth']} ({trace['implausible_rows_left_out']} implausible measured "
            "runs left out)"
        )
        print(table(report))
    if args.plots:
        try:
            for path in plots(report, args.plots):
                print(f"wrote {path}")
        except PlotsUnavailableError as exc:
            raise CliError(str(exc)) from exc
    return 0
