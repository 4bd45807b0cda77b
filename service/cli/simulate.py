"""`colloc simulate`: the trace-driven cluster simulation, every policy on one workload.

The simulator (scikit-learn, the estimator's training) is imported when the command
runs, so that other `colloc` commands, `colloc simjob` in every job among them, start
without it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from agent.cluster import ClusterFileError, load_cluster
from service.cli.errors import CliError

if TYPE_CHECKING:
    from service.simulator.cluster import SimNode


def _nodes(path: Path) -> list[SimNode]:
    from service.simulator.cluster import SimGpuSpec, SimNode

    try:
        nodes = load_cluster(path)
    except ClusterFileError as exc:
        raise CliError(f"{path}: {exc}") from exc
    return [
        SimNode(node.name, tuple(SimGpuSpec(g.model, g.memory_total_mib) for g in node.gpus))
        for node in nodes
    ]


def _policies(text: str | None) -> list[str]:
    from service.simulator.policies import POLICIES

    if text is None:
        return list(POLICIES)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        raise CliError(f"unknown policy {', '.join(unknown)!r}; known: {', '.join(POLICIES)}")
    return names


def run_simulate(args: argparse.Namespace) -> int:
    from service.simulator import traces
    from service.simulator.report import PlotsUnavailableError, plots, table
    from service.simulator.scenario import SCENARIOS, adjusted, run

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
    report = run(scenario, _policies(args.policies), nodes)
    if args.json:
        print(json.dumps(report.as_json(), sort_keys=True))
    else:
        trace = report.trace
        print(
            f"scenario {scenario.name}: {trace['jobs']} jobs from the {trace['trace']} trace "
            f"(seed {trace['seed']}, load {trace['load']}) on {trace['gpus']} GPUs"
        )
        print(table(report))
    if args.plots:
        try:
            for path in plots(report, args.plots):
                print(f"wrote {path}")
        except PlotsUnavailableError as exc:
            raise CliError(str(exc)) from exc
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError("must be between 1 and 1,000,000")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError("must be above 0 and at most 1000")
    return value


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = commands.add_parser(
        "simulate",
        help="trace-driven cluster simulation with the real scheduler core",
        description="Replay a public trace on a simulated heterogeneous cluster, once per "
        "policy, and compare OOMs, makespan, JCT, queueing and utilisation.",
    )
    sim.add_argument("--scenario", default="standard", help="standard (default) or large")
    sim.add_argument("--cluster", type=Path, help="a cluster YAML file instead of Alibaba's")
    sim.add_argument("--gpus", type=_positive_int, help="Alibaba-shaped cluster of ~N GPUs")
    sim.add_argument(
        "--trace",
        choices=("alibaba", "muri"),
        help="the job trace to replay (default: the scenario's)",
    )
    sim.add_argument("--jobs", type=_positive_int, help="jobs to replay (default: the scenario's)")
    sim.add_argument("--load", type=_positive_float, help="offered over available GPU time")
    sim.add_argument("--seed", type=int, help="random seed of the workload (same seed, same run)")
    sim.add_argument("--policies", help="comma-separated (default: every policy)")
    sim.add_argument("--json", action="store_true", help="one JSON object (the contract)")
    sim.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")
    sim.add_argument(
        "--extract", type=Path, metavar="SHARED", help="rebuild the trace tables and exit"
    )
    sim.set_defaults(run=run_simulate)
