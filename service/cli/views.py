"""`colloc jobs` and `colloc nodes`: the queue and the cluster, the way `squeue`/`sinfo`
and `kubectl get` show them."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from service.cli.client import request
from service.cli.errors import CliError
from service.cli.output import (
    age,
    clip,
    gib,
    print_listing,
    print_table,
    short_gpu,
    terminal_safe,
    watching,
)

# Width the REASON column is cut to in the default table (`-o wide` shows it whole):
# with the other columns it keeps a row within a 160-column terminal.
REASON_WIDTH = 60


def _gpus(job: dict[str, Any]) -> str:
    """`2xT4` where it runs or ran; what it asks for while it waits (`1xany`)."""
    if job["attempts"]:
        models = Counter(short_gpu(g["model"]) for g in job["attempts"][-1]["gpus"])
        return ",".join(f"{count}x{model}" for model, count in models.items())
    wanted = "|".join(short_gpu(m) for m in job["gpu_models"]) if job["gpu_models"] else "any"
    return f"{job['gpus']}x{wanted}"


def _job_row(job: dict[str, Any], wide: bool) -> list[str]:
    last = job["attempts"][-1] if job["attempts"] else None
    reason = job["reason"] or ""
    row = [
        str(job["id"]),
        job["name"],
        job["owner"],
        job["state"],
        _gpus(job),
        gib(last["reserved_mib"]) if last else "-",
        age(job["created_at"]),
    ]
    if wide:
        where = (
            f"{last['node']}:" + ",".join(str(g["index"]) for g in last["gpus"]) if last else "-"
        )
        peak = gib(last["peak_mib"]) if last else "-"
        exit_code = "-" if job["exit_code"] is None else str(job["exit_code"])
        row += [job["queue"], str(job["priority"]), where, peak, exit_code, reason]
    else:
        row.append(clip(terminal_safe(reason), REASON_WIDTH))  # cut as it is shown
    return row


JOB_HEADER = ["ID", "NAME", "OWNER", "STATE", "GPUS", "RESERVED", "AGE"]
WIDE_HEADER = ["QUEUE", "PRIO", "WHERE", "PEAK", "EXIT", "REASON"]


def run_jobs(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.state:
        params["state"] = [s for group in args.state for s in group]
    if args.user:
        params["owner"] = args.user
    if args.queue:
        params["queue"] = args.queue

    def render() -> int:
        listing = request(args, "GET", "/v1/jobs", params=params)
        jobs = listing["jobs"]

        def table(wide: bool) -> None:
            header = JOB_HEADER + (WIDE_HEADER if wide else ["REASON"])
            print_table(header, [_job_row(job, wide) for job in jobs])
            if listing["total"] > len(jobs):
                print(f"showing {len(jobs)} of {listing['total']} jobs (--limit N shows more)")
            elif not jobs:
                print("no jobs match")

        print_listing(args.output, listing, [job["id"] for job in jobs], table)
        return 0

    return watching(args, render)


def _node_row(node: dict[str, Any], wide: bool) -> list[str]:
    """One node of `/v1/cluster` (or, wide, of the admins' `/v1/admin/cluster`)."""
    gpus = node["gpus"]
    models = Counter(short_gpu(g["model"]) for g in gpus)
    unhealthy = sum(1 for g in gpus if not g["healthy"])
    jobs = {a["job_id"] for g in gpus for a in g["allocations"]} if wide else set()
    admin = node["admin_state"] if wide else "active"  # or cordoned, draining
    row = [
        node["name"],
        node["state"]
        + ("" if admin == "active" else f", {admin}")
        + (f" ({unhealthy} GPU unhealthy)" if unhealthy else ""),
        ",".join(f"{count}x{model}" for model, count in models.items()),
        gib(sum(g["memory_free_mib"] for g in gpus)),
        gib(sum(g["memory_reserved_mib"] for g in gpus)),
        gib(sum(g["memory_total_mib"] for g in gpus)),
        str(len(jobs) if wide else node["running_jobs"]),
    ]
    if wide:
        used = [g["memory_used_mib"] for g in gpus]
        row += [
            gib(None if None in used else sum(used)),  # None: a GPU's use is unreadable
            " ".join(
                "?" if g["utilization_pct"] is None else f"{g['utilization_pct']:.0f}%"
                for g in gpus
            ),
            ",".join(str(j) for j in sorted(jobs)) or "-",
            node["agent_version"],
            age(node["last_heartbeat_at"]),
        ]
    return row


NODE_HEADER = ["NODE", "STATE", "GPUS", "FREE", "RESERVED", "TOTAL", "JOBS"]
NODE_WIDE_HEADER = ["USED", "UTIL", "JOB_IDS", "AGENT", "HEARTBEAT"]


def run_nodes(args: argparse.Namespace) -> int:
    """Every user reads `/v1/cluster`; `-o wide` reads the admins' view with job ids,
    observed use and agent details."""
    wide = args.output == "wide"

    def render() -> int:
        try:
            cluster = request(args, "GET", "/v1/admin/cluster" if wide else "/v1/cluster")
        except CliError as exc:
            if wide and "HTTP 403" in str(exc):
                raise CliError(f"colloc nodes -o wide needs an admin token: {exc}") from exc
            raise
        nodes = cluster["nodes"]

        def table(wide: bool) -> None:
            print_table(
                NODE_HEADER + (NODE_WIDE_HEADER if wide else []),
                [_node_row(node, wide) for node in nodes],
            )
            if not nodes:
                print("no nodes have registered")

        print_listing(args.output, cluster, [node["name"] for node in nodes], table)
        return 0

    return watching(args, render)
