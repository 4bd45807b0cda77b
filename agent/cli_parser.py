"""`colloc agent` and `colloc simjob` as argparse sees them, with each handler named as
"module:function": `colloc simjob`, in every simulated job, imports only agent.simjob, and
`colloc agent --help` none of the daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
    agent.set_defaults(run="agent.cli:run_agent")

    simjob = commands.add_parser("simjob", help="a simulated training process")
    simjob.add_argument("--peak-mib", required=True, help="N, or MODEL=N,MODEL=N")
    simjob.add_argument("--seconds", type=float, required=True, help="how long it runs")
    simjob.add_argument(
        "--ramp-seconds", type=float, default=0.0, help="seconds to reach the peak (default 0)"
    )
    simjob.add_argument("--sm-pct", type=float, default=50.0, help="simulated SM busy share")
    simjob.set_defaults(run="agent.simjob:run_simjob")
