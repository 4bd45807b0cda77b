"""`colloc submit | show | logs | cancel`: the user's client of the REST API, and the
request every client command makes through."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agent.client import tls_verification
from estimator.files import read_yaml
from service.cli.errors import CliError
from service.cli.output import (
    gib,
    print_json,
    terminal_safe,
    watching,
)
from service.scheduler.states import ENDED_ATTEMPT_STATES, FINAL_JOB_STATES

NO_TOKEN = (
    "no API token: set COLLOC_TOKEN or pass --token "
    "(`colloc up` writes an admin token to colloc-data/admin.token; "
    "an admin makes others with `colloc token create`)"
)


def _error_message(status: int, body: Any, text: str, token: str | None) -> str:
    """One readable line (and the details that help) for an API error."""
    error = body.get("error", {}) if isinstance(body, dict) else {}
    if status == 401:
        return (
            NO_TOKEN if not token else "the API token in COLLOC_TOKEN/--token is unknown or revoked"
        )
    # the server's words may quote what a user sent (json.dumps escapes the details')
    message = terminal_safe(error.get("message") or text[:500])
    details = error.get("details")
    if error.get("code") == "unknown_gpu_model" and isinstance(details, dict):
        known = terminal_safe(", ".join(details["known"]))
        return f"{message} (HTTP {status})\n  accepted names: {known}"
    extra = f"\n  details: {json.dumps(details)}" if details else ""
    return f"{message} (HTTP {status}){extra}"


def request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    """The API's JSON answer to one call, or a CliError that says what went wrong."""
    headers = kwargs.pop("headers", {})
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    try:
        verify = tls_verification(args.ca_file)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    try:
        response = httpx.request(
            method,
            args.server.rstrip("/") + path,
            headers=headers,
            timeout=30,
            verify=verify,
            **kwargs,
        )
    except httpx.HTTPError as exc:
        hint = ""
        if "CERTIFICATE_VERIFY_FAILED" in str(exc) and args.ca_file is None:
            hint = " (a server with a certificate of its own CA: --ca-file or COLLOC_CA_FILE)"
        raise CliError(f"cannot reach Colloc at {args.server}: {exc}{hint}") from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise CliError(_error_message(response.status_code, body, response.text, args.token))
    return body


def load_job_file(path: Path) -> dict[str, Any]:
    """A job spec from YAML or JSON, or a clear error."""
    try:
        data = read_yaml(path)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold one job (a mapping with name, command, ...)", 2)
    command = data.get("command")
    if isinstance(command, str):
        try:
            as_list = json.dumps(shlex.split(command))
        except ValueError:
            as_list = '["python", "train.py", "--epochs", "3"]'
        raise CliError(
            f"{path}: `command` is a list of arguments, not a shell line; write\n"
            f"  command: {as_list}\n"
            '(for shell features: command: ["sh", "-c", "..."])',
            2,
        )
    return data


def run_submit(args: argparse.Namespace) -> int:
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    job = request(args, "POST", "/v1/jobs", json=load_job_file(args.file), headers=headers)
    if args.output == "json":
        print_json(job)
    elif args.output == "name":
        print(job["id"])
    else:
        print(f"job {job['id']} submitted ({job['state']})")
    return 0


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def print_job(job: dict[str, Any]) -> None:
    """`colloc show`'s text: one field a line, then attempts and estimates; each line
    terminal-safe (its command and reasons are what a user and their job wrote)."""
    fields: list[tuple[str, object]] = [
        ("id", job["id"]),
        ("name", job["name"]),
        ("owner", job["owner"]),
        ("queue", job["queue"]),
        ("priority", job["priority"]),
        ("state", job["state"]),
        ("reason", job["reason"]),
        ("command", shlex.join(job["command"])),
        ("gpus", job["gpus"]),
        ("gpu_models", ", ".join(job["gpu_models"]) if job["gpu_models"] else None),
        ("memory", gib(job["memory_mib"])),
        ("reservation_floor", gib(job["reservation_floor_mib"])),
        ("exit_code", job["exit_code"]),
        ("created_at", job["created_at"]),
        ("updated_at", job["updated_at"]),
        ("finished_at", job["finished_at"]),
    ]
    lines = [f"{key}: {_or_dash(value)}" for key, value in fields]
    for attempt in job["attempts"]:
        gpus = ", ".join(
            f"{g['model']} #{g['index']} ({g['uuid']})"
            + (f" using {gib(g['used_mib'])}" if g.get("used_mib") is not None else "")
            for g in attempt["gpus"]
        )
        lines.append(
            f"attempt {attempt['number']}: {attempt['state']} on {attempt['node']} [{gpus}] "
            f"reserved {gib(attempt['reserved_mib'])}/GPU, peak {gib(attempt['peak_mib'])}, "
            f"exit {_or_dash(attempt['exit_code'])}, placed {attempt['placed_at']}, "
            f"started {attempt['started_at'] or '-'}, finished {attempt['finished_at'] or '-'}"
        )
        if attempt["reason"]:
            lines.append(f"  reason: {attempt['reason']}")
    lines += [
        f"estimate on {estimate['gpu_model']}: peak {gib(estimate['peak_mib'])}, "
        f"upper {gib(estimate['upper_mib'])} ({estimate['method']})"
        for estimate in job["estimates"]
    ]
    for line in lines:
        print(terminal_safe(line))


def _print_explanation(explanation: dict[str, Any]) -> None:
    """`colloc show --explain`'s lines, terminal-safe (they name nodes and GPU models
    as agents reported them)."""
    lines = ["", f"why: {explanation['summary']}"]
    for gpu in explanation["gpus"]:
        where = f"  {gpu['node']} GPU {gpu['gpu_index']} ({gpu['model']}):"
        if gpu["fits"]:
            lines.append(
                f"{where} fits, {gib(gpu['free_mib'])} free for {gib(gpu['demand_mib'])}, "
                f"score {gpu['score']}"
            )
        else:
            lines.append(f"{where} " + "; ".join(gpu["reasons"]))
        if gpu["held_for_job"] is not None:
            lines.append(f"    held for job {gpu['held_for_job']}")
    for line in lines:
        print(terminal_safe(line))


def run_show(args: argparse.Namespace) -> int:
    state = ""

    def render() -> int:
        nonlocal state
        job = request(args, "GET", f"/v1/jobs/{args.id}")
        state = job["state"]
        explanation = request(args, "GET", f"/v1/jobs/{args.id}/explain") if args.explain else None
        if args.output == "json":
            print_json({**job, "explain": explanation} if explanation else job)
        elif args.output == "name":
            print(job["id"])
        else:
            print_job(job)
            if explanation:
                _print_explanation(explanation)
        return 0

    return watching(args, render, ended=lambda: state in FINAL_JOB_STATES)


def _log_page(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    page: dict[str, Any] = request(args, "GET", f"/v1/jobs/{args.id}/logs", params=params)
    return page


def _say_why_nothing(args: argparse.Namespace, page: dict[str, Any]) -> None:
    """On stderr, when a stream printed nothing: whether the other one holds output."""
    other = "stderr" if args.stream == "stdout" else "stdout"
    other_page = _log_page(args, {"attempt": page["attempt"], "stream": other, "limit": 1})
    if other_page["end_offset"] > 0:
        print(
            f"(no {args.stream}; attempt {page['attempt']} wrote {other_page['end_offset']} "
            f"bytes to {other}: colloc logs {args.id} --stream {other})",
            file=sys.stderr,
        )
    elif page["attempt_state"] in ENDED_ATTEMPT_STATES:
        print(f"(attempt {page['attempt']} ended with no output at all)", file=sys.stderr)
    else:
        print(
            f"(no output yet: attempt {page['attempt']} is {page['attempt_state']})",
            file=sys.stderr,
        )


def run_logs(args: argparse.Namespace) -> int:
    """Print an attempt's output; with --follow, keep printing until it has all come.

    The output is written as the job wrote it, control characters and all (as `kubectl
    logs` and `docker logs` do): its colours and progress bars are what it is read for,
    and a redirect keeps its bytes. Whoever reads a stranger's job's output on a terminal
    pipes it through `cat -v` or `less`."""
    params: dict[str, Any] = {"stream": args.stream}
    if args.attempt is not None:
        params["attempt"] = args.attempt
    offset = None
    quiet_polls = 0
    printed = False
    while True:
        page = _log_page(args, {**params, **({"offset": offset} if offset is not None else {})})
        params["attempt"] = page["attempt"]  # stay on the attempt we began with
        sys.stdout.write(page["text"])
        sys.stdout.flush()
        printed = printed or bool(page["text"])
        offset = page["next_offset"]
        if offset < page["end_offset"]:
            continue
        # the attempt's end and its last output may arrive in different heartbeats
        quiet_polls = quiet_polls + 1 if page["attempt_state"] in ENDED_ATTEMPT_STATES else 0
        if not args.follow or quiet_polls >= 3:
            if not printed:
                _say_why_nothing(args, page)
            return 0
        time.sleep(1.0)


def run_cancel(args: argparse.Namespace) -> int:
    """Cancel each job named; every one is tried, and the status says whether all were."""
    cancelled: list[dict[str, Any]] = []
    failures = 0
    for job_id in args.ids:
        try:
            job = request(args, "POST", f"/v1/jobs/{job_id}/cancel")
        except CliError as exc:
            message = str(exc)  # the API's own messages name the job already
            if not message.startswith(f"job {job_id} "):
                message = f"job {job_id}: {message}"
            print(f"colloc: error: {message}", file=sys.stderr)
            failures += 1
            continue
        cancelled.append(job)
        if args.output == "name":
            print(job["id"])
        elif args.output == "table":
            done = "cancelled" if job["state"] == "cancelled" else "cancellation requested"
            print(f"job {job['id']}: {done}")
    if args.output == "json":
        print_json(cancelled)
    return 1 if failures else 0
