"""One scheduling cycle on a large heterogeneous cluster.

    .venv/bin/python bench/scheduler_cycle.py

Builds snapshots of 125 to 1,000 nodes x 8 GPUs (a mix of T4, V100-32GB, A100-40GB
and H100-80GB nodes, half their GPUs already holding a job) with 10,000 pending jobs
(per-model memory demands from 1 to 30 GiB; 5% gang jobs of 2 to 8 GPUs; 10% with a
model constraint; priorities 0-3) and times `Scheduler.place`, the pure core the
service runs each cycle: bounded (the default `max_attempts_per_cycle`), unbounded, and
the next cycle (the placed jobs hold their GPUs and left the queue) with and without the
first cycle's parked jobs handed back. The baseline, timed in the same run, is the same
pipeline without its per-model candidate limit or bound, scoring every feasible GPU for
every job.

    .venv/bin/python bench/scheduler_cycle.py --live [--pg URL]

A live cycle instead, as the service runs it on PostgreSQL (a scratch database, dropped
afterwards): 500 nodes x 8 GPUs (4,000) of the same mix, read as a snapshot, placed and
the plan written, each phase timed, inside a transaction rolled back after each repeat
(median of five; the first read, which finds no GPU view kept from an earlier one,
apart). Idle: no job anywhere. Busy: half the GPUs each hold one running job and 1,000
jobs wait (memory claims of 1 to 30 GiB, 5% gangs). Then busy with training jobs
waiting instead (20 specs: five torchvision models at four batch sizes, each job with
the packaged estimator's estimates on the four GPU models stored): first with
estimates made on the basis in force, then with every one stale (a run of each
architecture ended since), so that the read makes them again and the write stores
them; the second's cycle is printed as a ratio of the first's. pgbench's single-row
INSERT rate, measured in the same run (`bench/pg_baseline.py`), is printed beside.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import replace
from datetime import UTC, datetime

from pg_baseline import DEFAULT_PG, insert_rate, scratch_database
from sqlalchemy.orm import Session

from estimator.estimate import Estimator, default_estimator
from estimator.spec import TrainingSpec
from service.db import make_engine, make_sessionmaker, transaction, upgrade
from service.jobs.models import Allocation, Attempt, Job
from service.jobs.submission import MadeEstimates, store_estimates
from service.nodes.models import Gpu, Node
from service.scheduler.framework import SchedulerConfig
from service.scheduler.placement import Scheduler
from service.scheduler.snapshot import GpuView, NodeView, Parked, PendingJob, Plan, Snapshot
from service.scheduling.plan_writer import write_plan
from service.scheduling.snapshot_reader import read_snapshot

MODELS = {
    "Tesla T4": 15360,
    "Tesla V100-SXM2-32GB": 32510,
    "NVIDIA A100-SXM4-40GB": 40960,
    "NVIDIA H100 80GB HBM3": 81559,
}
PENDING = 10_000
LIVE_NODES = 500  # x 8 GPUs: the 4,000 GPUs of issue 19's live cycle
LIVE_PENDING = 1_000
# the waiting training jobs' specs: five torchvision models at four batch sizes
TRAINING = [
    {"model": {"catalog": model}, "batch_size": batch}
    for model in ("resnet50", "vit_b_16", "efficientnet_b0", "convnext_tiny", "mobilenet_v3_large")
    for batch in (16, 32, 64, 128)
]


def snapshot(nodes: int, seed: int = 0) -> Snapshot:
    rng = random.Random(seed)
    node_views, gpus = [], []
    for node_id in range(1, nodes + 1):
        node_views.append(NodeView(node_id, f"node-{node_id}", True))
        model = rng.choice(list(MODELS))
        for index in range(8):
            busy = rng.random() < 0.5
            reserved = rng.randint(1024, MODELS[model] // 2) if busy else 0
            gpus.append(
                GpuView(
                    id=len(gpus) + 1,
                    node_id=node_id,
                    index=index,
                    model=model,
                    memory_total_mib=MODELS[model],
                    reserved_mib=reserved,
                    used_mib=int(reserved * rng.uniform(0.6, 1.0)),
                    foreign_mib=0,
                    utilization_pct=rng.uniform(0, 80) if busy else 0.0,
                    healthy=True,
                    jobs=1 if busy else 0,
                )
            )
    pending = []
    for job_id in range(1, PENDING + 1):
        base = rng.randint(1024, 30 * 1024)
        demand = {m: int(base * rng.uniform(0.95, 1.1)) for m in MODELS}
        pending.append(
            PendingJob(
                id=job_id,
                priority=rng.randint(0, 3),
                gpus=rng.choice([2, 4, 8]) if rng.random() < 0.05 else 1,
                demand_mib=demand,
                gpu_models=frozenset(rng.sample(list(MODELS), 2)) if rng.random() < 0.1 else None,
            )
        )
    return Snapshot(tuple(node_views), tuple(gpus), tuple(pending))


def timed(
    scheduler: Scheduler, snap: Snapshot, repeats: int = 3, parked: Parked | None = None
) -> tuple[float, Plan]:
    best = float("inf")
    plan = Plan()
    for _ in range(repeats):
        started = time.perf_counter()
        plan = scheduler.place(snap, parked)
        best = min(best, time.perf_counter() - started)
    return best, plan


def after(snap: Snapshot, plan: Plan) -> Snapshot:
    """The next cycle's snapshot: `plan`'s placements hold their GPUs and left the queue."""
    gpus = {gpu.id: gpu for gpu in snap.gpus}
    for placement in plan.placements:
        for gpu_id, mib in zip(placement.gpu_ids, placement.reserved_mib, strict=True):
            gpu = gpus[gpu_id]
            gpus[gpu_id] = replace(gpu, reserved_mib=gpu.reserved_mib + mib, jobs=gpu.jobs + 1)
    placed = {placement.job_id for placement in plan.placements}
    pending = tuple(job for job in snap.pending if job.id not in placed)
    return replace(snap, gpus=tuple(gpus.values()), pending=pending)


def seed_live(
    session: Session, busy: bool, seed: int = 0, estimator: Estimator | None = None
) -> None:
    """LIVE_NODES nodes of 8 GPUs; when `busy`, half the GPUs hold a running job and
    LIVE_PENDING jobs wait: with `estimator`, training jobs (`seed_training`), else jobs
    with memory claims. Rows inserted in bulk, as they would stand in the tables."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    node_ids = session.scalars(
        Node.__table__.insert().returning(Node.__table__.c.id),
        [
            {"name": f"node-{i}", "state": "ready", "agent_version": "bench",
             "registered_at": now, "last_heartbeat_at": now}
            for i in range(LIVE_NODES)
        ],
    ).all()  # fmt: skip
    gpus = []
    for node_id in node_ids:
        model = rng.choice(list(MODELS))
        for index in range(8):
            gpus.append({"node_id": node_id, "uuid": f"GPU-{node_id}-{index}", "index": index,
                         "model": model, "memory_total_mib": MODELS[model],
                         "memory_used_mib": 0, "memory_foreign_mib": 0, "utilization_pct": 0.0,
                         "healthy": True, "updated_at": now})  # fmt: skip
    gpu_ids = session.scalars(Gpu.__table__.insert().returning(Gpu.__table__.c.id), gpus).all()
    if not busy:
        return

    def job(i: int, state: str, mib: int, gpus: int) -> dict[str, object]:
        spec = {"name": f"j{i}", "command": ["true"], "gpus": gpus, "memory_mib": mib}
        return {"name": f"j{i}", "owner": "bench", "queue": "default",
                "priority": rng.randint(0, 3), "state": state, "spec": spec, "gpus": gpus,
                "memory_mib": mib, "max_attempts": 3, "cancel_requested": False,
                "preempt_requested": False, "created_at": now, "updated_at": now}  # fmt: skip

    held = [(gpu_id, row) for gpu_id, row in zip(gpu_ids, gpus, strict=True)][::2]
    mibs = [rng.randint(1024, row["memory_total_mib"] // 2) for _id, row in held]  # type: ignore[operator]
    running = session.scalars(
        Job.__table__.insert().returning(Job.__table__.c.id),
        [job(i, "running", mib, 1) for i, mib in enumerate(mibs)],
    ).all()
    attempt_ids = session.scalars(
        Attempt.__table__.insert().returning(Attempt.__table__.c.id),
        [
            {"job_id": job_id, "number": 1, "node_id": row["node_id"], "state": "running",
             "reserved_mib": mib, "placed_at": now, "started_at": now, "notice_seq": 0}
            for job_id, (_gpu, row), mib in zip(running, held, mibs, strict=True)
        ],
    ).all()  # fmt: skip
    session.execute(
        Allocation.__table__.insert(),
        [
            {"attempt_id": attempt_id, "gpu_id": gpu_id, "reserved_mib": mib, "active": True}
            for attempt_id, (gpu_id, _row), mib in zip(attempt_ids, held, mibs, strict=True)
        ],
    )
    if estimator is not None:
        seed_training(session, estimator, now, rng)
        return
    session.execute(
        Job.__table__.insert(),
        [
            job(len(running) + i, "pending", rng.randint(1024, 30 * 1024),
                rng.choice([2, 4, 8]) if rng.random() < 0.05 else 1)
            for i in range(LIVE_PENDING)
        ],
    )  # fmt: skip


def seed_training(
    session: Session, estimator: Estimator, now: datetime, rng: random.Random
) -> None:
    """LIVE_PENDING waiting training jobs of the TRAINING specs, each with `estimator`'s
    estimates on every GPU model stored, on the basis `estimator` has now."""
    specs = [rng.choice(TRAINING) for _ in range(LIVE_PENDING)]
    job_ids = session.scalars(
        Job.__table__.insert().returning(Job.__table__.c.id),
        [
            {"name": f"t{i}", "owner": "bench", "queue": "default", "priority": 0,
             "state": "pending", "gpus": 1, "memory_mib": None, "max_attempts": 3,
             "spec": {"name": f"t{i}", "command": ["true"], "gpus": 1, "training": spec},
             "cancel_requested": False, "preempt_requested": False,
             "created_at": now, "updated_at": now}
            for i, spec in enumerate(specs)
        ],
    ).all()  # fmt: skip
    made = {}
    for job_id, raw in zip(job_ids, specs, strict=True):
        spec = TrainingSpec.model_validate(raw)
        estimates = {model: estimator.estimate(spec, model) for model in MODELS}
        made[job_id] = MadeEstimates(estimates, estimator.basis(spec))
    store_estimates(session, made)


def _ran_once(estimator: Estimator) -> None:
    """One run of each TRAINING architecture ended, at its estimate: every waiting
    training job's stored estimates are stale."""
    for raw in TRAINING[::4]:
        spec = TrainingSpec.model_validate(raw)
        estimator.observe(spec, "NVIDIA A100-SXM4-40GB", estimator.estimate(spec, "A100").peak_mib)


def live_cycle(pg: str, repeats: int = 5) -> None:
    """Snapshot read, place and plan write on 4,000 GPUs in PostgreSQL: idle, busy, and
    busy with training jobs waiting, their estimates fresh and then stale."""
    with scratch_database(pg, "colloc_bench_pgbench") as scratch:
        inserts_s = insert_rate(scratch, 1, 10)
    print(f"pgbench single-row INSERT, 1 client, 10 s: {inserts_s:.0f}/s\n")
    print(
        "| cluster | first read ms | read snapshot ms | place ms | write plan ms "
        "| read + write ms | placed | cycle ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    scheduler = Scheduler(SchedulerConfig())
    busy = f"busy: {LIVE_NODES * 4} running, {LIVE_PENDING}"
    cases = [
        ("idle", False, False, False),
        (f"{busy} pending", True, False, False),
        (f"{busy} training jobs pending, estimates fresh", True, True, False),
        (f"{busy} training jobs pending, estimates stale", True, True, True),
    ]
    cycles_s: dict[bool, float] = {}
    for label, loaded, training, stale in cases:
        estimator = Estimator(default_estimator().artifact) if training else None
        with scratch_database(pg, "colloc_bench_cycle") as scratch:
            upgrade(scratch.url)
            engine = make_engine(scratch.url)
            sessions = make_sessionmaker(engine)
            with transaction(sessions) as session:
                seed_live(session, loaded, estimator=estimator)
            if estimator is not None and stale:
                _ran_once(estimator)
            times: list[tuple[float, float, float]] = []
            placed = 0
            for _ in range(repeats):
                with sessions() as session, session.begin():
                    started = time.perf_counter()
                    rows = read_snapshot(session, scheduler.config.headroom_mib, estimator)
                    read = time.perf_counter()
                    plan = scheduler.place(rows.snapshot)
                    placed_at = time.perf_counter()
                    write_plan(session, rows, plan)
                    session.flush()
                    written = time.perf_counter()
                    session.rollback()  # every repeat starts from the same rows
                times.append((read - started, placed_at - read, written - placed_at))
                placed = len(plan.placements)
            engine.dispose()
        read_s, place_s, write_s = (statistics.median(t[i] for t in times) for i in range(3))
        cycle_s = read_s + place_s + write_s
        if estimator is not None:
            cycles_s[stale] = cycle_s
        print(
            f"| {LIVE_NODES} x 8, {label} | {times[0][0] * 1000:.0f} | {read_s * 1000:.0f} "
            f"| {place_s * 1000:.0f} "
            f"| {write_s * 1000:.0f} | {(read_s + write_s) * 1000:.0f} | {placed} "
            f"| {cycle_s * 1000:.0f} |",
            flush=True,
        )
    print(f"\nstale over fresh estimates, cycle: {cycles_s[True] / cycles_s[False]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--live", action="store_true", help="a live cycle on PostgreSQL")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    if args.live:
        live_cycle(args.pg)
        return
    pure_cycle()


def pure_cycle() -> None:
    """`Scheduler.place` alone: bounded (the default), unbounded, and the cycle after an
    unbounded one (its jobs that found no room parked), against the exhaustive baseline."""
    bounded = Scheduler(SchedulerConfig())
    unbounded = Scheduler(SchedulerConfig(max_attempts_per_cycle=None))
    limit = bounded.config.max_attempts_per_cycle
    print(
        f"| nodes x 8 GPUs | pending | placed, bounded ({limit} searches) | cycle (s) "
        "| placed, unbounded | cycle (s) | next cycle: pending | parked | cycle (s) "
        "| next cycle unparked (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for nodes in (125, 250, 500, 1000):
        snap = snapshot(nodes)
        bounded_s, bounded_plan = timed(bounded, snap)
        unbounded_s, plan = timed(unbounded, snap)
        following = after(snap, plan)
        parked_s, _ = timed(unbounded, following, parked=plan.parked)
        fresh_s, _ = timed(unbounded, following)
        print(
            f"| {nodes} x 8 | {PENDING} | {len(bounded_plan.placements)} | {bounded_s:.3f} "
            f"| {len(plan.placements)} | {unbounded_s:.3f} | {len(following.pending)} "
            f"| {len(plan.parked.jobs)} | {parked_s:.3f} | {fresh_s:.3f} |",
            flush=True,
        )
    exhaustive = Scheduler(SchedulerConfig(candidates_per_model=10**9, max_attempts_per_cycle=None))
    big = snapshot(1000)
    base_s, base_plan = timed(exhaustive, big, repeats=1)
    ours_s, ours_plan = timed(unbounded, big)
    print(
        f"\nbaseline (no candidate limit, no bound), 1000 x 8: {base_s:.3f} s, "
        f"{len(base_plan.placements)} placed; Colloc unbounded {ours_s:.3f} s, "
        f"{len(ours_plan.placements)} placed; speed-up {base_s / ours_s:.1f}x"
    )


if __name__ == "__main__":
    main()
