"""Admin commands on one job: `colloc priority ID N` and `colloc trust ID`."""

from __future__ import annotations

import argparse

from service.cli.client import request


def run_priority(args: argparse.Namespace) -> int:
    job = request(args, "POST", f"/v1/jobs/{args.id}/priority", json={"priority": args.priority})
    print(f"job {job['id']}: priority {job['priority']}")
    return 0


def run_trust(args: argparse.Namespace) -> int:
    answer = request(args, "POST", f"/v1/jobs/{args.id}/trust")
    print(f"job {answer['job_id']}: {answer['trusted_peaks']} credible peak(s) trusted")
    return 0
