"""`colloc agent` and `colloc simjob`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from agent import context_probe
from agent.backends.base import DeviceBackend
from agent.backends.nvml import DeviceUnavailable, NvmlBackend
from agent.backends.simulated import SimulatedBackend
from agent.client import SchedulerClient, tls_verification
from agent.cluster import ClusterFileError, load_cluster
from agent.config import AgentConfigError, AgentSettings, load_settings
from agent.daemon import Agent, AgentConfig
from agent.dirs import UnsafeDirectory
from agent.simjob import SimjobError, parse_peaks, run

log = logging.getLogger(__name__)


def _fail(message: str) -> int:
    print(f"colloc: error: {message}", file=sys.stderr)
    return 2


def _simulated(settings: AgentSettings) -> tuple[str, DeviceBackend]:
    """The node of the cluster file the settings name, on simulated GPUs."""
    assert settings.simulate is not None
    nodes = load_cluster(settings.simulate)
    names = [node.name for node in nodes]
    if settings.node is None and len(nodes) > 1:
        raise ValueError(f"{settings.simulate} has several nodes; pick one with --node ({names})")
    node = next((n for n in nodes if settings.node in (None, n.name)), None)
    if node is None:
        raise ValueError(f"no node {settings.node!r} in {settings.simulate} (nodes: {names})")
    return node.name, SimulatedBackend(node, settings.sim_state)


FLAGS = (
    "server",
    "token_file",
    "ca_file",
    "node",
    "simulate",
    "sim_state",
    "state_dir",
    "logs_dir",
    "sample_interval_s",
    "kill_grace_s",
    "max_backoff_s",
    "enforcement",
    "enforcement_tolerance",
    "xid_quarantine_s",
    "stop_jobs_on_exit",
    "stop_adopted_jobs_on_exit",
    "run_jobs_as",
    "allow_root_jobs",
    "min_job_uid",
    "work_dir",
    "gpu_confinement",
)


class _NodeTagged(logging.Formatter):
    """Prefixes each line with the node: `colloc up` runs every agent in one terminal."""

    def __init__(self, node: str, inner: logging.Formatter) -> None:
        super().__init__()
        self.node, self.inner = node, inner

    def format(self, record: logging.LogRecord) -> str:
        return f"[{self.node}] {self.inner.format(record)}"


def _tag_log_lines(node: str) -> None:
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_NodeTagged(node, handler.formatter or logging.Formatter()))


def run_agent(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config, {key: getattr(args, key) for key in FLAGS})
        token = settings.resolved_token()
        identity = settings.identity()
        if settings.simulate is not None:
            name, backend = _simulated(settings)
        else:
            name, backend = settings.node_name(), NvmlBackend.open(probe=context_probe.measure)
        agent = Agent(
            SchedulerClient(settings.server, token, verify=tls_verification(settings.ca_file)),
            backend,
            AgentConfig(
                name=name,
                state_dir=settings.state_path(name),
                logs_dir=settings.logs_path(name),
                sample_interval_s=settings.sample_interval_s,
                kill_grace_s=settings.kill_grace_s,
                max_backoff_s=settings.max_backoff_s,
                enforcement=settings.enforcement_rules(),
                xid_quarantine_s=settings.xid_quarantine_s,
                stop_jobs_on_exit=settings.stop_jobs_on_exit,
                stop_adopted_jobs_on_exit=settings.stop_adopted_jobs_on_exit,
                identity=identity,
                work_dir=settings.work_path(name),
                gpu_confinement=settings.gpu_confinement,
            ),
        )
    except (
        AgentConfigError,
        ClusterFileError,
        DeviceUnavailable,
        UnsafeDirectory,
        OSError,
        ValueError,
    ) as exc:
        return _fail(str(exc))
    stop = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    _tag_log_lines(name)
    log.info(
        "agent for node %s with %d GPU(s); %s", name, len(backend.devices()), identity.describe()
    )
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
    # every option defaults to None so that the config file and environment show through
    # no abbreviations: `--token T` must not pass for `--token-file T`
    agent = commands.add_parser("agent", help="run the node agent", allow_abbrev=False)
    agent.add_argument("--config", type=Path, metavar="FILE.yaml", help="agent config file")
    agent.add_argument("--server", help="the scheduler's URL (COLLOC_SERVER)")
    # no --token: a command line is readable by every process on the node (/proc/PID/cmdline)
    agent.add_argument(
        "--token-file", type=Path, help="a file holding the node token, mode 0600 (or COLLOC_TOKEN)"
    )
    agent.add_argument(
        "--ca-file",
        type=Path,
        help="CA certificate (PEM) an https server is checked against (or COLLOC_CA_FILE; "
        "default: the system's CAs)",
    )
    agent.add_argument("--simulate", type=Path, metavar="FILE.yaml", help="simulated cluster file")
    agent.add_argument(
        "--node", help="this node's name (with --simulate: which node of the file it is)"
    )
    agent.add_argument("--sim-state", type=Path, help="directory of the shared simulated GPU state")
    agent.add_argument(
        "--state-dir", type=Path, help="where running jobs are recorded across agent restarts"
    )
    agent.add_argument("--logs-dir", type=Path, help="where job stdout/stderr go")
    agent.add_argument(
        "--sample-interval",
        dest="sample_interval_s",
        type=float,
        help="seconds between GPU samples (at most 0.5)",
    )
    agent.add_argument(
        "--kill-grace",
        dest="kill_grace_s",
        type=float,
        help="seconds between SIGTERM and SIGKILL when cancelling",
    )
    agent.add_argument(
        "--max-backoff",
        dest="max_backoff_s",
        type=float,
        help="longest wait between heartbeats while the server is unreachable",
    )
    agent.add_argument(
        "--enforcement",
        choices=["warn", "kill"],
        help="what to do with a job over its reservation (default warn)",
    )
    agent.add_argument(
        "--enforcement-tolerance",
        type=float,
        help="share of the reservation a job may exceed it by (default 0.1)",
    )
    agent.add_argument(
        "--xid-quarantine",
        dest="xid_quarantine_s",
        type=float,
        help="seconds a GPU stays unhealthy after a critical XID or ECC error",
    )
    agent.add_argument(
        "--stop-jobs-on-exit",
        action="store_true",
        default=None,
        help="stop the jobs this agent started when it stops, to be run again "
        "(default: they keep running)",
    )
    agent.add_argument(
        "--stop-adopted-jobs-on-exit",
        action="store_true",
        default=None,
        help="also stop the jobs it took over from an earlier agent process "
        "(default: they keep running)",
    )
    agent.add_argument(
        "--run-jobs-as",
        choices=["owner", "agent"],
        help="owner (default; needs root): each job as its owner's Unix account; "
        "agent: every job as the agent's own account (single-user deployments)",
    )
    agent.add_argument(
        "--allow-root-jobs",
        action="store_true",
        default=None,
        help="let jobs run as root (refused by default)",
    )
    agent.add_argument(
        "--min-job-uid",
        type=int,
        help="owner mode: refuse accounts below this uid, i.e. system accounts (default 1000)",
    )
    agent.add_argument(
        "--work-dir", type=Path, help="where each attempt gets a directory of its account's"
    )
    agent.add_argument(
        "--gpu-confinement",
        choices=["report", "stop"],
        help="what to do with a job using a GPU it was not given (default stop)",
    )
    agent.set_defaults(run=run_agent)

    simjob = commands.add_parser("simjob", help="a simulated training process")
    simjob.add_argument("--peak-mib", required=True, help="N, or MODEL=N,MODEL=N")
    simjob.add_argument("--seconds", type=float, required=True, help="how long it runs")
    simjob.add_argument(
        "--ramp-seconds", type=float, default=0.0, help="seconds to reach the peak (default 0)"
    )
    simjob.add_argument("--sm-pct", type=float, default=50.0, help="simulated SM busy share")
    simjob.set_defaults(run=run_simjob)
