"""The database size of a week of a busy cluster, with pruning on and off.

    .venv/bin/python bench/retention.py [--days 7] [--jobs-per-day 1000] [--pg URL]

A scratch database (a SQLite file in a temporary directory; with `--pg`, a fresh
PostgreSQL database on that server too, dropped afterwards) is filled day by day with
the rows a busy cluster writes, straight into the tables (submitting and running 7,000
jobs through the API would take hours and store the same rows). Twice: once never
pruned, once pruned at the end of each simulated day by service/retention.py's
prune_all at that day's time, with PostgreSQL then vacuumed (as its autovacuum would).
The size is printed after each day, and the ratio at the end.

The cluster (its rates, stated here and printed): 32 nodes of 8 GPUs of two models,
`--jobs-per-day` jobs (1,000 is one every 86 s), every fifth retried once, 1 to 8 GPUs;
4 events per job and 2 per attempt (submitted/placed/started/ended); a usage sample a
minute of each model and of each of 10 owners per model (the sampler's rows); a third
of the jobs hold a credible peak the estimator learns from (kept by retention); output
shipped in 128 KiB chunks (the agent's CHUNK_BYTES): 1% of jobs are chatty, reaching
the 8 MiB per-stream cap on both streams (10 chatty jobs added 164 MiB in issue 17),
the others write 40 KiB of stdout and 4 KiB of stderr. Log text is random hex (about
as compressible as real logs, for PostgreSQL's TOAST).

Retention here is shortened so a week shows its steady state: finished jobs and events
kept 2 days, logs 1 day and at most 256 MiB in all, usage samples 2 days' worth. With
the defaults (30, 30 and 7 days, 4 GiB) the plateau is reached later at the same rates:
its size is each kind's daily volume times its window.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pg_baseline import scratch_database
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db import make_engine, make_sessionmaker, transaction, upgrade
from service.events.models import Event
from service.jobs.models import Allocation, Attempt, Job, JobEstimate, Observation
from service.logs.models import LogChunk
from service.nodes.models import Gpu, Node
from service.retention import prune_all
from service.usage.models import UsageSample

NODES, GPUS_PER_NODE, MODELS = 32, 8, ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
OWNERS = 10
CHUNK = 128 * 1024  # agent/logship.py CHUNK_BYTES
CAP = 8 * 1024 * 1024  # Settings.log_keep_bytes' default
CHATTY, QUIET_OUT, QUIET_ERR = 0.01, 40 * 1024, 4 * 1024
LEARNED = 1 / 3
START = datetime(2026, 1, 5, tzinfo=UTC)
RETENTION = {
    "retention_job_days": 2.0,
    "retention_event_days": 2.0,
    "retention_log_days": 1.0,
    "retention_max_log_bytes": 256 * 1024 * 1024,
    "retention_max_usage_samples": 2 * 1440 * len(MODELS) * (1 + OWNERS),
}


def spec(rng: random.Random) -> dict[str, Any]:
    """A job spec as users submit them: a command, some environment, a training spec."""
    return {
        "name": "train",
        "command": ["python", "train.py", "--config", f"configs/run-{rng.randrange(10**6)}.yaml"],
        "env": {f"VAR_{i}": "v" * 40 for i in range(8)},
        "training": {"model": {"catalog": "resnet50"}, "batch_size": 64, "image_size": 224},
    }


def add_cluster(session: Session, now: datetime) -> list[tuple[int, int, str]]:
    """The nodes and GPUs; returns each GPU's (node id, GPU id, model)."""
    gpus = []
    for n in range(NODES):
        node = Node(name=f"node{n}", state="ready", agent_version="bench", registered_at=now,
                    last_heartbeat_at=now)  # fmt: skip
        session.add(node)
        session.flush()
        for i in range(GPUS_PER_NODE):
            model = MODELS[n % len(MODELS)]
            gpu = Gpu(node_id=node.id, uuid=f"GPU-{n}-{i}", index=i, model=model,
                      memory_total_mib=81559, updated_at=now)  # fmt: skip
            session.add(gpu)
            session.flush()
            gpus.append((node.id, gpu.id, model))
    return gpus


def log_rows(attempt_id: int, stream: str, size: int, text_block: bytes) -> list[dict[str, Any]]:
    return [
        {"attempt_id": attempt_id, "stream": stream, "offset": offset,
         "size": min(CHUNK, size - offset), "data": text_block[: min(CHUNK, size - offset)]}
        for offset in range(0, size, CHUNK)
    ]  # fmt: skip


def add_day(
    session: Session, day: int, jobs: int, gpus: list[tuple[int, int, str]], rng: random.Random
) -> None:
    """One day of the cluster's rows, ending at START + day + 1 days."""
    begin = START + timedelta(days=day)
    rows: dict[Any, list[dict[str, Any]]] = {
        m: [] for m in (Job, Attempt, Allocation, Observation, JobEstimate, Event, LogChunk,
                        UsageSample)
    }  # fmt: skip
    for j in range(jobs):
        submitted = begin + timedelta(seconds=86400 * j / jobs)
        width = rng.choice((1, 1, 1, 1, 2, 4, 8))
        node_id, _gpu_id, model = rng.choice(gpus)
        on = [g for g in gpus if g[0] == node_id][:width]
        finished = submitted + timedelta(minutes=rng.uniform(5, 60))
        job_id = day * jobs + j + 1
        rows[Job].append(
            {"id": job_id, "name": "train", "owner": f"user{rng.randrange(OWNERS)}",
             "queue": "default", "priority": 0, "state": "succeeded", "spec": spec(rng),
             "gpus": width, "max_attempts": 3, "created_at": submitted, "updated_at": finished,
             "finished_at": finished}
        )  # fmt: skip
        rows[JobEstimate].append(
            {"job_id": job_id, "gpu_model": model, "peak_mib": 30000, "upper_mib": 36000,
             "coverage": 0.9, "method": "analytic", "model_version": "bench",
             "breakdown_mib": {"weights": 100, "activations": 200}}
        )  # fmt: skip
        tries = 2 if j % 5 == 0 else 1
        learned = rng.random() < LEARNED
        for number in range(1, tries + 1):
            last = number == tries
            attempt_id = 2 * job_id + number
            rows[Attempt].append(
                {"id": attempt_id, "job_id": job_id, "number": number, "node_id": node_id,
                 "state": "succeeded" if last else "lost", "reserved_mib": 36000,
                 "placed_at": submitted, "started_at": submitted, "finished_at": finished,
                 "exit_code": 0 if last else None, "peak_mib": 30000}
            )  # fmt: skip
            for _n, gpu_id, _m in on:
                rows[Allocation].append(
                    {"attempt_id": attempt_id, "gpu_id": gpu_id, "reserved_mib": 36000,
                     "used_mib": 30000, "active": False}
                )  # fmt: skip
                rows[Observation].append(
                    {"attempt_id": attempt_id, "gpu_id": gpu_id, "gpu_model": model,
                     "peak_mib": 30000, "created_at": finished, "credible": learned and last}
                )  # fmt: skip
            chatty = rng.random() < CHATTY
            block = os.urandom(CHUNK // 2).hex().encode()
            rows[LogChunk] += log_rows(attempt_id, "stdout", CAP if chatty else QUIET_OUT, block)
            rows[LogChunk] += log_rows(attempt_id, "stderr", CAP if chatty else QUIET_ERR, block)
            for kind in ("job.placed", "attempt.started"):
                rows[Event].append(
                    {"at": submitted, "kind": kind, "job_id": job_id, "node_id": node_id,
                     "message": f"{kind} on node{node_id}", "data": {"attempt": number}}
                )  # fmt: skip
        for kind in ("job.submitted", "job.started", "job.succeeded", "job.finished"):
            rows[Event].append(
                {"at": finished, "kind": kind, "job_id": job_id, "node_id": None,
                 "message": f"job {job_id} {kind}", "data": {}}
            )  # fmt: skip
    for minute in range(1440):
        at = begin + timedelta(minutes=minute)
        for model in MODELS:
            for owner in [None] + [f"user{o}" for o in range(OWNERS)]:
                rows[UsageSample].append(
                    {"at": at, "gpu_model": model, "owner": owner, "gpus": 128,
                     "capacity_mib": 128 * 81559, "reserved_mib": 500000, "used_mib": 400000}
                )  # fmt: skip
    for model, values in rows.items():
        for start in range(0, len(values), 2000):
            session.execute(model.__table__.insert(), values[start : start + 2000])


def size_mib(sessions: sessionmaker[Session], url: str) -> float:
    """The database's size: SQLite's pages in use (freed pages are reused, not returned
    to the file system), PostgreSQL's pg_database_size."""
    with sessions() as session:
        if url.startswith("sqlite"):
            pages = session.scalar(text("PRAGMA page_count"))
            free = session.scalar(text("PRAGMA freelist_count"))
            page = session.scalar(text("PRAGMA page_size"))
            return float((pages - free) * page) / 2**20
        return float(session.scalar(text("SELECT pg_database_size(current_database())"))) / 2**20


def run(url: str, days: int, jobs_per_day: int, prune: bool) -> list[float]:
    upgrade(url)
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    settings = Settings(database_url=url, **RETENTION)
    rng = random.Random(17)
    sizes = []
    try:
        with transaction(sessions) as session:
            gpus = add_cluster(session, START)
        for day in range(days):
            with transaction(sessions) as session:
                add_day(session, day, jobs_per_day, gpus, rng)
            if prune:
                prune_all(sessions, settings, now=START + timedelta(days=day + 1))
                if not url.startswith("sqlite"):
                    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                        c.execute(text("VACUUM"))
            sizes.append(size_mib(sessions, url))
            print(f"  day {day + 1}: {sizes[-1]:8.1f} MiB", flush=True)
        with sessions() as session:
            held = session.scalar(select(func.count()).select_from(Job))
            print(f"  jobs held at the end: {held} of {days * jobs_per_day}", flush=True)
    finally:
        engine.dispose()
    return sizes


@contextmanager
def sqlite_url(directory: Path, name: str) -> Iterator[str]:
    yield f"sqlite:///{directory / name}.db"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--jobs-per-day", type=int, default=1000)
    parser.add_argument("--pg", help="a PostgreSQL server URL to measure on as well")
    args = parser.parse_args()
    print(f"{NODES} nodes x {GPUS_PER_NODE} GPUs, {args.jobs_per_day} jobs/day for {args.days}"
          f" days; {CHATTY:.0%} chatty (2 x {CAP >> 20} MiB), others {QUIET_OUT >> 10}+"
          f"{QUIET_ERR >> 10} KiB; {1440 * len(MODELS) * (1 + OWNERS)} usage rows/day;"
          f" retention {RETENTION}")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        backends: list[tuple[str, Any]] = [
            ("sqlite", lambda prune: sqlite_url(Path(scratch), f"ret-{prune}"))
        ]
        if args.pg:
            backends.append(("postgresql", lambda _prune: _pg_url(args.pg)))
        for backend, database in backends:
            final = {}
            for prune in (False, True):
                print(f"{backend}, pruning {'on' if prune else 'off'}:", flush=True)
                with database(prune) as url:
                    final[prune] = run(url, args.days, args.jobs_per_day, prune)[-1]
            print(f"{backend}: off {final[False]:.1f} MiB, on {final[True]:.1f} MiB, "
                  f"ratio off/on {final[False] / final[True]:.1f}")  # fmt: skip
    return 0


@contextmanager
def _pg_url(server: str) -> Iterator[str]:
    with scratch_database(server, "colloc_ret") as scratch:
        yield scratch.url


if __name__ == "__main__":
    sys.exit(main())
