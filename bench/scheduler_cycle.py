"""One scheduling cycle on a large heterogeneous cluster.

    .venv/bin/python bench/scheduler_cycle.py

Builds snapshots of 125 to 1,000 nodes x 8 GPUs (a mix of T4, V100-32GB, A100-40GB
and H100-80GB nodes, half their GPUs already holding a job) with 10,000 pending jobs
(per-model memory demands from 1 to 30 GiB; 5% gang jobs of 2 to 8 GPUs; 10% with a
model constraint; priorities 0-3) and times `Scheduler.place`, the pure core the
service runs each cycle. The baseline, timed in the same run, is the same pipeline
without its per-model candidate limit, scoring every feasible GPU for every job.
"""

from __future__ import annotations

import random
import time

from service.scheduler.framework import SchedulerConfig
from service.scheduler.placement import Scheduler
from service.scheduler.snapshot import GpuView, NodeView, PendingJob, Snapshot

MODELS = {
    "Tesla T4": 15360,
    "Tesla V100-SXM2-32GB": 32510,
    "NVIDIA A100-SXM4-40GB": 40960,
    "NVIDIA H100 80GB HBM3": 81559,
}
PENDING = 10_000


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


def timed(scheduler: Scheduler, snap: Snapshot, repeats: int = 3) -> tuple[float, int]:
    best = float("inf")
    placed = 0
    for _ in range(repeats):
        started = time.perf_counter()
        plan = scheduler.place(snap)
        best = min(best, time.perf_counter() - started)
        placed = len(plan.placements)
    return best, placed


def main() -> None:
    scheduler = Scheduler(SchedulerConfig())
    print("| nodes x 8 GPUs | pending | placed | cycle (s) | vs 125 nodes |")
    print("|---|---|---|---|---|")
    first = None
    for nodes in (125, 250, 500, 1000):
        seconds, placed = timed(scheduler, snapshot(nodes))
        first = first or seconds
        print(f"| {nodes} x 8 | {PENDING} | {placed} | {seconds:.3f} | {seconds / first:.2f}x |")
    unlimited = Scheduler(SchedulerConfig(candidates_per_model=10**9))
    big = snapshot(1000)
    base_s, base_placed = timed(unlimited, big, repeats=1)
    ours_s, ours_placed = timed(scheduler, big)
    print(
        f"\nbaseline (no candidate limit), 1000 x 8: {base_s:.3f} s, {base_placed} placed; "
        f"Colloc {ours_s:.3f} s, {ours_placed} placed; speed-up {base_s / ours_s:.1f}x"
    )


if __name__ == "__main__":
    main()
