"""`colloc hold|release|requeue ID` (a job's owner or an admin) and `colloc node
cordon|drain|resume NAME` (admins): the admin controls, over the API."""

from __future__ import annotations

import argparse

from service.cli.client import request
from service.cli.output import terminal_safe


def run_job_control(args: argparse.Namespace) -> int:
    """Hold, release or requeue each job named, in order; the first refusal stops."""
    for job_id in args.ids:
        job = request(args, "POST", f"/v1/jobs/{job_id}/{args.control}")
        held = " (held)" if job["held"] else ""
        line = f"job {job['id']}: {job['state']}{held}: {job['reason'] or ''}".rstrip(": ")
        print(terminal_safe(line))  # the reason may be one its job wrote
    return 0


def run_node_control(args: argparse.Namespace) -> int:
    body = {"deadline": args.deadline} if args.node_command == "drain" else None
    node = request(args, "POST", f"/v1/nodes/{args.name}/{args.node_command}", json=body)
    deadline = node["drain_deadline"]
    until = f", running jobs requeued at {deadline}" if deadline else ""
    print(terminal_safe(f"node {node['name']}: {node['admin_state']}{until}"))
    return 0
