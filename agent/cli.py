"""`colloc agent`: the node daemon, set up from its config file, environment and flags."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from agent import context_probe
from agent.backends.base import DeviceBackend
from agent.backends.nvml import DeviceUnavailable, NvmlBackend
from agent.backends.simulated import SimulatedBackend
from agent.client import SchedulerClient, tls_verification
from agent.cluster import ClusterFileError, load_cluster
from agent.config import AgentConfigError, AgentSettings, load_settings
from agent.daemon import Agent, AgentConfig
from agent.dirs import UnsafeDirectory

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
                self_fencing=settings.self_fencing,
                ended_logs_keep_s=settings.ended_logs_keep_s,
                ended_logs_max_bytes=settings.ended_logs_max_bytes,
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
