"""`colloc agent` and `colloc simjob`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from agent.backends.base import DeviceBackend
from agent.backends.nvml import DeviceUnavailable, NvmlBackend
from agent.backends.simulated import SimulatedBackend
from agent.client import SchedulerClient
from agent.cluster import ClusterFileError, load_cluster
from agent.daemon import Agent, AgentConfig
from agent.simjob import SimjobError, parse_peaks, run

log = logging.getLogger(__name__)


def default_sim_state() -> Path:
    return Path(tempfile.gettempdir()) / "colloc-sim"


def _fail(message: str) -> int:
    print(f"colloc: error: {message}", file=sys.stderr)
    return 2


def _simulated(args: argparse.Namespace) -> tuple[str, DeviceBackend]:
    """The node of the cluster file the arguments name, on simulated GPUs."""
    nodes = load_cluster(args.simulate)
    names = [node.name for node in nodes]
    if args.node is None and len(nodes) > 1:
        raise ValueError(f"{args.simulate} has several nodes; pick one with --node ({names})")
    node = next((n for n in nodes if args.node in (None, n.name)), None)
    if node is None:
        raise ValueError(f"no node {args.node!r} in {args.simulate} (nodes: {names})")
    return node.name, SimulatedBackend(node, args.sim_state)


def run_agent(args: argparse.Namespace) -> int:
    try:
        if args.simulate is not None:
            name, backend = _simulated(args)
        else:
            name, backend = args.node or socket.gethostname(), NvmlBackend.open()
    except (ClusterFileError, DeviceUnavailable, ValueError) as exc:
        return _fail(str(exc))
    logs_dir = args.logs_dir or Path(tempfile.gettempdir()) / "colloc-logs" / name
    agent = Agent(
        SchedulerClient(args.server, args.token),
        backend,
        AgentConfig(name=name, logs_dir=logs_dir, kill_grace_s=args.kill_grace),
    )
    stop = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    log.info("agent for node %s with %d GPU(s)", name, len(backend.devices()))
    try:
        agent.run(stop)
    finally:
        agent.shutdown()
        agent.client.close()
    return 0


def run_simjob(args: argparse.Namespace) -> int:
    try:
        return run(parse_peaks(args.peak_mib), args.seconds, args.ramp_seconds, args.sm_pct)
    except SimjobError as exc:
        return _fail(str(exc))


def add_commands(commands: Any) -> None:
    agent = commands.add_parser("agent", help="run the node agent")
    agent.add_argument("--server", default=os.environ.get("COLLOC_SERVER", "http://127.0.0.1:8000"))
    agent.add_argument("--token", default=os.environ.get("COLLOC_TOKEN"))
    agent.add_argument("--simulate", type=Path, metavar="FILE.yaml", help="simulated cluster file")
    agent.add_argument(
        "--node", help="this node's name (with --simulate: which node of the file it is)"
    )
    agent.add_argument(
        "--sim-state",
        type=Path,
        default=default_sim_state(),
        help="directory of the shared simulated GPU state",
    )
    agent.add_argument("--logs-dir", type=Path, help="where job stdout/stderr go")
    agent.add_argument(
        "--kill-grace",
        type=float,
        default=10.0,
        help="seconds between SIGTERM and SIGKILL when cancelling",
    )
    agent.set_defaults(run=run_agent)

    simjob = commands.add_parser("simjob", help="a simulated training process")
    simjob.add_argument("--peak-mib", required=True, help="N, or MODEL=N,MODEL=N")
    simjob.add_argument("--seconds", type=float, required=True)
    simjob.add_argument("--ramp-seconds", type=float, default=0.0)
    simjob.add_argument("--sm-pct", type=float, default=50.0, help="simulated SM busy share")
    simjob.set_defaults(run=run_simjob)
