"""Admin commands on one job: `colloc priority ID N` and `colloc trust ID`."""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.client import connection_options, job_id, request


def run_priority(args: argparse.Namespace) -> int:
    job = request(args, "POST", f"/v1/jobs/{args.id}/priority", json={"priority": args.priority})
    print(f"job {job['id']}: priority {job['priority']}")
    return 0


def run_trust(args: argparse.Namespace) -> int:
    answer = request(args, "POST", f"/v1/jobs/{args.id}/trust")
    print(f"job {answer['job_id']}: {answer['trusted_peaks']} credible peak(s) trusted")
    return 0


def add_commands(commands: Any) -> None:
    common = connection_options()
    priority = commands.add_parser(
        "priority", parents=[common], help="change a job's priority (admins)"
    )
    priority.add_argument("id", type=job_id, help="job ID")
    priority.add_argument("priority", type=int, help="the new priority (-1000..1000)")
    priority.set_defaults(run=run_priority)
    trust = commands.add_parser(
        "trust",
        parents=[common],
        help="let a job's observed peaks answer for every user's jobs (admins)",
    )
    trust.add_argument("id", type=job_id, help="job ID")
    trust.set_defaults(run=run_trust)
