"""`colloc submit | jobs | show | logs | cancel`: the user's client of the REST API."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from estimator.files import read_yaml
from service.cli.errors import CliError
from service.jobs.models import FINAL_JOB_STATES

DEFAULT_SERVER = "http://127.0.0.1:8000"


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    headers = kwargs.pop("headers", {})
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    try:
        response = httpx.request(
            method, args.server.rstrip("/") + path, headers=headers, timeout=30, **kwargs
        )
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach Colloc at {args.server}: {exc}") from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        message = error.get("message") or response.text[:500]
        details = error.get("details")
        extra = f"\n  details: {json.dumps(details)}" if details else ""
        raise CliError(f"{message} (HTTP {response.status_code}){extra}")
    return body


def load_job_file(path: Path) -> dict[str, Any]:
    """A job spec from YAML or JSON, or a clear error."""
    try:
        data = read_yaml(path)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold one job (a mapping with name, command, ...)", 2)
    return data


def run_submit(args: argparse.Namespace) -> int:
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    job = _request(args, "POST", "/v1/jobs", json=load_job_file(args.file), headers=headers)
    if args.json:
        print(json.dumps(job))
    else:
        print(f"job {job['id']} submitted ({job['state']})")
    return 0


def _where(job: dict[str, Any]) -> str:
    if not job["attempts"]:
        return "-"
    attempt = job["attempts"][-1]
    gpus = ",".join(str(gpu["index"]) for gpu in attempt["gpus"])
    return f"{attempt['node']}:{gpus}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value}"


def run_jobs(args: argparse.Namespace) -> int:
    params = {"limit": args.limit, **({"state": args.state} if args.state else {})}
    listing = _request(args, "GET", "/v1/jobs", params=params)
    if args.json:
        print(json.dumps(listing))
        return 0
    rows = [("ID", "NAME", "STATE", "WHERE", "RESERVED_MIB", "PEAK_MIB", "EXIT")]
    for job in listing["jobs"]:
        last = job["attempts"][-1] if job["attempts"] else None
        rows.append(
            (
                str(job["id"]),
                job["name"],
                job["state"],
                _where(job),
                _mib(last["reserved_mib"] if last else None),
                _mib(last["peak_mib"] if last else None),
                _mib(job["exit_code"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


def run_show(args: argparse.Namespace) -> int:
    job = _request(args, "GET", f"/v1/jobs/{args.id}")
    explanation = _request(args, "GET", f"/v1/jobs/{args.id}/explain") if args.explain else None
    if args.json:
        print(json.dumps({**job, "explain": explanation} if explanation else job))
        return 0
    for key in (
        "id",
        "name",
        "owner",
        "queue",
        "priority",
        "state",
        "reason",
        "command",
        "gpus",
        "gpu_models",
        "memory_mib",
        "reservation_floor_mib",
        "exit_code",
        "created_at",
        "updated_at",
        "finished_at",
    ):
        print(f"{key}: {job[key] if job[key] is not None else '-'}")
    for attempt in job["attempts"]:
        gpus = ", ".join(
            f"{g['model']} #{g['index']} ({g['uuid']})"
            + (f" using {g['used_mib']} MiB" if g.get("used_mib") is not None else "")
            for g in attempt["gpus"]
        )
        print(
            f"attempt {attempt['number']}: {attempt['state']} on {attempt['node']} [{gpus}] "
            f"reserved {attempt['reserved_mib']} MiB/GPU, peak {_mib(attempt['peak_mib'])} MiB, "
            f"exit {_mib(attempt['exit_code'])}, placed {attempt['placed_at']}, "
            f"started {attempt['started_at'] or '-'}, finished {attempt['finished_at'] or '-'}"
            + (f"\n  reason: {attempt['reason']}" if attempt["reason"] else "")
        )
    for estimate in job["estimates"]:
        print(
            f"estimate on {estimate['gpu_model']}: peak {estimate['peak_mib']} MiB, "
            f"upper {estimate['upper_mib']} MiB ({estimate['method']})"
        )
    if explanation:
        _print_explanation(explanation)
    return 0


def _print_explanation(explanation: dict[str, Any]) -> None:
    print(f"\nwhy: {explanation['summary']}")
    for gpu in explanation["gpus"]:
        where = f"  {gpu['node']} GPU {gpu['gpu_index']} ({gpu['model']}):"
        if gpu["fits"]:
            print(
                f"{where} fits, {gpu['free_mib']} MiB free for {gpu['demand_mib']} MiB, "
                f"score {gpu['score']}"
            )
        else:
            print(f"{where} " + "; ".join(gpu["reasons"]))
        if gpu["held_for_job"] is not None:
            print(f"    held for job {gpu['held_for_job']}")


ENDED_ATTEMPT_STATES = {*FINAL_JOB_STATES, "preempted"}


def run_logs(args: argparse.Namespace) -> int:
    """Print an attempt's output; with --follow, keep printing until it has all come."""
    params: dict[str, Any] = {"stream": args.stream}
    if args.attempt is not None:
        params["attempt"] = args.attempt
    offset = None
    quiet_polls = 0
    while True:
        page = _request(
            args,
            "GET",
            f"/v1/jobs/{args.id}/logs",
            params={**params, **({"offset": offset} if offset is not None else {})},
        )
        params["attempt"] = page["attempt"]  # stay on the attempt we began with
        sys.stdout.write(page["text"])
        sys.stdout.flush()
        offset = page["next_offset"]
        if offset < page["end_offset"]:
            continue
        if not args.follow:
            return 0
        # the attempt's end and its last output may arrive in different heartbeats
        quiet_polls = quiet_polls + 1 if page["attempt_state"] in ENDED_ATTEMPT_STATES else 0
        if quiet_polls >= 3:
            return 0
        time.sleep(1.0)


def run_cancel(args: argparse.Namespace) -> int:
    job = _request(args, "POST", f"/v1/jobs/{args.id}/cancel")
    done = "cancelled" if job["state"] == "cancelled" else "cancellation requested"
    print(f"job {job['id']}: {done}")
    return 0


def add_commands(commands: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=os.environ.get("COLLOC_SERVER", DEFAULT_SERVER))
    common.add_argument("--token", default=os.environ.get("COLLOC_TOKEN"))
    common.add_argument("--json", action="store_true", help="print the API's JSON")

    submit = commands.add_parser("submit", parents=[common], help="submit a job (YAML or JSON)")
    submit.add_argument("file", type=Path)
    submit.add_argument("--idempotency-key", help="resubmitting with the same key is a no-op")
    submit.set_defaults(run=run_submit)

    jobs = commands.add_parser("jobs", parents=[common], help="list jobs")
    jobs.add_argument("--state", help="only jobs in this state")
    jobs.add_argument("--limit", type=int, default=50)
    jobs.set_defaults(run=run_jobs)

    show = commands.add_parser("show", parents=[common], help="show one job")
    show.add_argument("id", type=int)
    show.add_argument("--explain", action="store_true", help="why it waits / why it is there")
    show.set_defaults(run=run_show)

    logs = commands.add_parser("logs", parents=[common], help="print a job's output")
    logs.add_argument("id", type=int)
    logs.add_argument("--attempt", type=int, help="which attempt (default: the latest)")
    logs.add_argument("--stream", choices=["stdout", "stderr"], default="stdout")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing as it comes")
    logs.set_defaults(run=run_logs)

    cancel = commands.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("id", type=int)
    cancel.set_defaults(run=run_cancel)
