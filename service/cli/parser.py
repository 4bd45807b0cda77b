"""The service's commands as argparse sees them: every argument and help text, with each
command's handler named as "module:function" rather than imported.

`colloc --help`, completion and argument errors need only this, so it imports no handler
module: a command pays for its own imports (the server's FastAPI and SQLAlchemy among
them) when it runs, and no other command does.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from service.auth.roles import ROLES
from service.cli.output import add_output_option, add_watch_option
from service.durations import MAX_DURATION_S, parse_duration_s
from service.ids import MAX_ID
from service.scheduler.states import JobState

DEFAULT_SERVER = "http://127.0.0.1:8000"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")  # uvicorn's names
JOB_STATES = tuple(JobState)


def connection_options(*, server_default: str | None = DEFAULT_SERVER) -> argparse.ArgumentParser:
    """--server, --token and --ca-file, from COLLOC_SERVER, COLLOC_TOKEN and COLLOC_CA_FILE."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        default=os.environ.get("COLLOC_SERVER", server_default),
        help=f"the scheduler's URL (default: COLLOC_SERVER or {server_default or 'none'})",
    )
    common.add_argument(
        "--token",
        default=os.environ.get("COLLOC_TOKEN"),
        help="API token (default: COLLOC_TOKEN)",
    )
    common.add_argument(
        "--ca-file",
        type=Path,
        default=os.environ.get("COLLOC_CA_FILE"),
        help="CA certificate (PEM) an https server is checked against "
        "(default: COLLOC_CA_FILE, else the system's CAs)",
    )
    return common


def job_id(text: str) -> int:
    """A job ID argument: a positive integer the API can hold."""
    if not text.isdecimal() or not 1 <= int(text) <= MAX_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job ID (a positive number)")
    return int(text)


def _states(text: str) -> list[str]:
    """`--state running,pending` (the option may also repeat)."""
    states = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in states if s not in JOB_STATES]
    if unknown or not states:
        raise argparse.ArgumentTypeError(
            f"unknown state {', '.join(unknown) or repr(text)}; states: {', '.join(JOB_STATES)}"
        )
    return states


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


def _listen_options(parser: argparse.ArgumentParser) -> None:
    """Where the server listens and how much it logs: `colloc server` and `colloc up`."""
    parser.add_argument("--host", default="127.0.0.1", help="address the server listens on")
    parser.add_argument("--port", type=int, default=8000, help="port the server listens on")
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="the server's log level; debug also logs every request (agents' heartbeats too)",
    )


def _server_commands(commands: Any) -> None:
    """`colloc server`, `colloc db upgrade` and `colloc up`."""
    server = commands.add_parser("server", help="run the scheduler API and dashboard")
    _listen_options(server)
    server.add_argument("--db", help="database URL (default: COLLOC_DATABASE_URL or ./colloc.db)")
    server.add_argument("--tls-cert", type=Path, help="serve https: certificate chain (PEM)")
    server.add_argument("--tls-key", type=Path, help="the certificate's private key (PEM)")
    server.set_defaults(run="service.cli.server:run_server")

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    db_upgrade.add_argument("--db", help="database URL")
    db_upgrade.set_defaults(run="service.cli.server:run_db_upgrade")

    up = commands.add_parser("up", help="scheduler plus simulated agents on this machine")
    _listen_options(up)
    up.add_argument(
        "--data-dir",
        type=Path,
        default=Path("colloc-data"),
        help="database, tokens, job output (default ./colloc-data)",
    )
    # no default: agent.cluster, which holds the packaged file's path, loads the agent's
    # protocol models (pydantic); the handler falls back to that file
    up.add_argument(
        "--cluster",
        type=Path,
        help="simulated cluster file (default: a packaged mixed-GPU example)",
    )
    up.set_defaults(run="service.cli.up:run_up")


def _job_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """`colloc submit | show | logs | cancel`."""
    submit = commands.add_parser("submit", parents=[common], help="submit a job (YAML or JSON)")
    submit.add_argument("file", type=Path, help="the job file (see docs/job-file.md)")
    submit.add_argument("--idempotency-key", help="resubmitting with the same key is a no-op")
    add_output_option(submit, ["json", "name"])
    submit.set_defaults(run="service.cli.client:run_submit")

    show = commands.add_parser("show", parents=[common], help="show one job")
    show.add_argument("id", type=job_id, help="job ID")
    show.add_argument("--explain", action="store_true", help="why it waits / why it is there")
    add_output_option(show, ["json", "name"])
    add_watch_option(show)
    show.set_defaults(run="service.cli.client:run_show")

    logs = commands.add_parser("logs", parents=[common], help="print a job's output")
    logs.add_argument("id", type=job_id, help="job ID")
    logs.add_argument("--attempt", type=int, help="which attempt (default: the latest)")
    logs.add_argument(
        "--stream", choices=["stdout", "stderr"], default="stdout", help="default stdout"
    )
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing as it comes")
    logs.set_defaults(run="service.cli.client:run_logs")

    cancel = commands.add_parser("cancel", parents=[common], help="cancel one or more jobs")
    cancel.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="job IDs")
    add_output_option(cancel, ["json", "name"])
    cancel.set_defaults(run="service.cli.client:run_cancel")


def _view_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """`colloc jobs` and `colloc nodes`."""
    jobs = commands.add_parser("jobs", parents=[common], help="list jobs, newest first")
    jobs.add_argument(
        "--state",
        type=_states,
        action="append",
        metavar="STATE[,STATE]",
        help=f"only jobs in these states (repeatable): {', '.join(JOB_STATES)}",
    )
    jobs.add_argument("--user", "-u", help="only this user's jobs (admins see every user's)")
    jobs.add_argument("--queue", "-q", help="only jobs of this queue")
    jobs.add_argument("--limit", type=int, default=50, help="show at most N jobs (default 50)")
    add_output_option(jobs, ["wide", "json", "name"])
    add_watch_option(jobs)
    jobs.set_defaults(run="service.cli.views:run_jobs")

    nodes = commands.add_parser(
        "nodes",
        parents=[common],
        help="the cluster: nodes, GPUs, memory, running jobs (-o wide: admin)",
    )
    add_output_option(nodes, ["wide", "json", "name"])
    add_watch_option(nodes)
    nodes.set_defaults(run="service.cli.views:run_nodes")


def _admin_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """`colloc priority` and `colloc trust`: an admin's commands on one job."""
    priority = commands.add_parser(
        "priority", parents=[common], help="change a job's priority (admins)"
    )
    priority.add_argument("id", type=job_id, help="job ID")
    priority.add_argument("priority", type=int, help="the new priority (-1000..1000)")
    priority.set_defaults(run="service.cli.priority:run_priority")

    trust = commands.add_parser(
        "trust",
        parents=[common],
        help="let a job's observed peaks answer for every user's jobs (admins)",
    )
    trust.add_argument("id", type=job_id, help="job ID")
    trust.set_defaults(run="service.cli.priority:run_trust")


def _duration(text: str) -> int:
    """`--deadline 10m`: seconds, or numbers with d, h, m, s."""
    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    assert isinstance(seconds, int)
    if not 1 <= seconds <= MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be between 1 s and {MAX_DURATION_S} s")
    return seconds


def _control_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """`colloc hold | release | requeue` and `colloc node cordon | drain | resume`."""
    helps = {
        "hold": "keep pending jobs from being scheduled until released (owner or admin)",
        "release": "let held jobs be scheduled again (owner or admin)",
        "requeue": "stop placed or running jobs' attempts; they wait again (owner or admin)",
    }
    for control, text in helps.items():
        job = commands.add_parser(control, parents=[common], help=text)
        job.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="job IDs")
        job.set_defaults(run="service.cli.controls:run_job_control", control=control)

    node = commands.add_parser("node", help="cordon, drain or resume a node (admins)")
    actions = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    cordon = actions.add_parser("cordon", parents=[common], help="no new jobs on it")
    drain = actions.add_parser(
        "drain", parents=[common], help="no new jobs on it; running ones finish (or --deadline)"
    )
    drain.add_argument(
        "--deadline",
        type=_duration,
        help="requeue the jobs still running after this long (10m, 1h30m, seconds)",
    )
    resume = actions.add_parser("resume", parents=[common], help="new jobs on it again")
    for action in (cordon, drain, resume):
        action.add_argument("name", help="the node's name (see colloc nodes)")
        action.set_defaults(run="service.cli.controls:run_node_control")


def _token_commands(commands: Any) -> None:
    """`colloc token create|list|revoke` and `colloc account set|unset|list`."""
    token = commands.add_parser("token", help="create, list and revoke API tokens")
    actions = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    # through the API when a server is named (an admin token), else on the database
    # (--db): how the first admin token comes to be. COLLOC_SERVER is read only when no
    # --db is given (service/cli/tokens.py): a database named on the line wins over the
    # environment
    common = connection_options(server_default=None)
    common.set_defaults(server=None)
    create = actions.add_parser(
        "create", parents=[common], help="make a token; its last output line is the token"
    )
    create.add_argument("--role", required=True, choices=ROLES, help="what the token may do")
    create.add_argument("--name", required=True, help="user name, or the node an agent serves")
    create.set_defaults(run="service.cli.tokens:run_create")
    listing = actions.add_parser(
        "list", parents=[common], help="every token (hashes are never shown)"
    )
    listing.set_defaults(run="service.cli.tokens:run_list")
    revoke = actions.add_parser("revoke", parents=[common], help="revoke a token by id")
    revoke.add_argument("id", type=int, help="the token's ID (see token list)")
    revoke.set_defaults(run="service.cli.tokens:run_revoke")
    account = commands.add_parser(
        "account", help="the Unix account a token name's jobs run as, where not the name"
    )
    account_actions = account.add_subparsers(
        dest="account_command", required=True, metavar="ACTION"
    )
    account_set = account_actions.add_parser("set", help="run NAME's jobs as ACCOUNT")
    account_set.add_argument("name", help="a token's name (the owner of its jobs)")
    account_set.add_argument("account", help="a Unix user name on the nodes")
    account_set.set_defaults(run="service.cli.tokens:run_account_set")
    account_unset = account_actions.add_parser(
        "unset", help="run NAME's jobs as the account called NAME again"
    )
    account_unset.add_argument("name", help="a token's name")
    account_unset.set_defaults(run="service.cli.tokens:run_account_unset")
    account_list = account_actions.add_parser("list", help="every mapping")
    account_list.set_defaults(run="service.cli.tokens:run_account_list")
    for parser in (create, listing, revoke, account_set, account_unset, account_list):
        parser.add_argument(
            "--db", help="database URL (default: COLLOC_DATABASE_URL or ./colloc.db)"
        )


def _simulate_command(commands: Any) -> None:
    sim = commands.add_parser(
        "simulate",
        help="trace-driven cluster simulation with the real scheduler core",
        description="Replay a public trace on a simulated heterogeneous cluster, once per "
        "policy, and compare OOMs, makespan, JCT, queueing and utilisation.",
    )
    sim.add_argument(
        "--scenario", default="standard", help="standard (default), spiky, foreign-stack or large"
    )
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
    sim.set_defaults(run="service.cli.simulate:run_simulate")


def add_commands(commands: Any) -> None:
    """The service's commands, in the order `colloc --help` lists them."""
    common = connection_options()
    _server_commands(commands)
    _job_commands(commands, common)
    _view_commands(commands, common)
    _admin_commands(commands, common)
    _control_commands(commands, common)
    _token_commands(commands)
    _simulate_command(commands)


def add_completion_command(commands: Any) -> None:
    """`colloc completion`, which lists every other command: the last in the help."""
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script: source <(colloc completion bash)",
    )
    completion.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    completion.set_defaults(run="service.cli.completion:run")
